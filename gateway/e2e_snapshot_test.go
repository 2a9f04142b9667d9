package gateway_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/config"
)

// snapshotConfig: the web chat and two models; %[1]s is the main agent's
// model, %[2]q its system prompt, %[3]s its allowedTools and %[4]s the
// tool policy's per-tool entries.
const snapshotConfig = `{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k",
    models: [{ id: "first" }, { id: "second" }] } } },
  agents: { list: [{ id: "main", model: "anthropic/%[1]s", systemPrompt: %[2]q, allowedTools: [%[3]s] }] },
  security: { toolPolicy: { default: "allow", tools: { %[4]s } } },
  channels: { web: { enabled: true } },
}`

// TestE2EReloadMidTurnKeepsTheTurnsSnapshot reloads the config while a
// turn waits on its first model call. The reload changes the agent's
// model, system prompt and allowedTools, and denies list_files. The turn
// then calls list_files and asks the model again: both of its calls use the
// old model, prompt and tool set (one snapshot, taken at its start), while
// the tool policy — read on every tool call, so a tightening applies at
// once — already denies the call. The next turn runs wholly on the new
// config.
func TestE2EReloadMidTurnKeepsTheTurnsSnapshot(t *testing.T) {
	t.Parallel()
	hold := newGate(t)
	entered := make(chan struct{}, 1)
	type seen struct {
		model, system string
		tools         []string
		denied        bool // the last tool result says the policy denied it
	}
	var mu sync.Mutex
	calls := map[string][]seen{} // user text → the model calls of its turn
	cfgText := func(model, prompt, allowed, policy string) string {
		return fmt.Sprintf(snapshotConfig, model, prompt, allowed, policy)
	}
	tg := newTestGateway(t, cfgText("first", "You are agent A.", `"list_files", "read_file"`, ""), func(c llmtest.Call) llmtest.Reply {
		last := c.LastUser()
		s := seen{model: c.Model, system: c.System, tools: slices.Sorted(slices.Values(c.Tools))}
		if m := c.Messages[len(c.Messages)-1]; m.Role == agent.RoleTool && len(m.ToolResults) > 0 {
			s.denied = strings.Contains(m.ToolResults[0].Content, "denied by the tool policy")
		}
		mu.Lock()
		calls[last] = append(calls[last], s)
		n := len(calls[last])
		mu.Unlock()
		if last == "slow question" && n == 1 {
			entered <- struct{}{}
			hold.wait()
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "list_files", Args: []byte(`{}`)}}}
		}
		return llmtest.Reply{Text: "answer to " + last + " from " + c.Model}
	})

	webPost(t, tg.URL, "ann", "slow question")
	<-entered // the turn took its snapshot and waits on its first model call
	next := strings.ReplaceAll(cfgText("second", "You are agent B.", `"list_files", "read_file", "write_file"`, `list_files: "deny"`), "{{llm}}", tg.LLM.URL)
	res := tg.G.Reload(context.Background(), func() (*config.Config, error) {
		cfg, err := config.Parse("reloaded.json5", []byte(next), func(string) (string, bool) { return "", false })
		if err != nil {
			return nil, err
		}
		return cfg, cfg.Validate()
	})
	if res.Result != "ok" || !slices.Contains(res.Changed, "agents") || !slices.Contains(res.Changed, "security") {
		t.Fatalf("reload = %+v, want ok with agents and security changed", res)
	}
	hold.open()
	waitWebReply(t, tg, "ann", "answer to slow question from first")
	webPost(t, tg.URL, "bob", "after the reload")
	waitWebReply(t, tg, "bob", "answer to after the reload from second")

	mu.Lock()
	defer mu.Unlock()
	slow, after := calls["slow question"], calls["after the reload"]
	if len(slow) != 2 || len(after) != 1 {
		t.Fatalf("model calls: %d for the slow turn, %d for the next; want 2 and 1", len(slow), len(after))
	}
	oldTools := []string{"list_files", "read_file"}
	for i, c := range slow {
		if c.model != "first" || !strings.HasPrefix(c.system, "You are agent A.") || !slices.Equal(c.tools, oldTools) {
			t.Errorf("slow turn, call %d: model %q, tools %v, system %.20q; want first, %v, agent A's prompt (the turn's own snapshot)",
				i+1, c.model, c.tools, c.system, oldTools)
		}
	}
	if !slow[1].denied {
		t.Errorf("the slow turn's list_files call was not denied: the reloaded tool policy applies to the next tool call")
	}
	newTools := []string{"list_files", "read_file", "write_file"}
	if c := after[0]; c.model != "second" || !strings.HasPrefix(c.system, "You are agent B.") || !slices.Equal(c.tools, newTools) {
		t.Errorf("next turn: model %q, tools %v, system %.20q; want second, %v, agent B's prompt", c.model, c.tools, c.system, newTools)
	}
}
