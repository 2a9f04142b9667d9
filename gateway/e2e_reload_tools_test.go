package gateway_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/config"
)

// TestE2EReloadRemakesBuiltinTools: the built-in tools are made once for
// the options in force and shared by the turns after (gateway
// builtinTools); a reload that changes their options gives the next turn
// tools made of the new ones: the model sees exec's new time limit in its
// description, and the same tools as before.
func TestE2EReloadRemakesBuiltinTools(t *testing.T) {
	t.Parallel()
	cfgText := func(execSeconds int) string {
		return fmt.Sprintf(`{
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [{ id: "main" }] },
  tools: { exec: { timeoutSeconds: %d } },
  channels: { web: { enabled: true } },
}`, execSeconds)
	}
	var mu sync.Mutex
	bodies := map[string]string{} // user text → request body
	tools := map[string]string{}  // user text → tool names
	tg := newTestGateway(t, cfgText(45), func(c llmtest.Call) llmtest.Reply {
		mu.Lock()
		bodies[c.LastUser()], tools[c.LastUser()] = string(c.Body), strings.Join(c.Tools, ",")
		mu.Unlock()
		return llmtest.Reply{Text: "answer to " + c.LastUser()}
	})
	ask := func(text string) (body, names string) {
		t.Helper()
		webPost(t, tg.URL, "rt", text)
		waitWebReply(t, tg, "rt", "answer to "+text)
		mu.Lock()
		defer mu.Unlock()
		return bodies[text], tools[text]
	}
	first, firstTools := ask("one")
	second, secondTools := ask("two")
	if !strings.Contains(first, "after 45 seconds") || !strings.Contains(second, "after 45 seconds") || firstTools != secondTools || !strings.Contains(firstTools, "exec") {
		t.Fatalf("before the reload the model saw tools %q then %q; want exec killed after 45 seconds both times", firstTools, secondTools)
	}
	res := tg.G.Reload(context.Background(), func() (*config.Config, error) {
		cfg, err := config.Parse("reloaded.json5", []byte(strings.ReplaceAll(cfgText(15), "{{llm}}", tg.LLM.URL)), func(string) (string, bool) { return "", false })
		if err != nil {
			return nil, err
		}
		return cfg, cfg.Validate()
	})
	if res.Result != "ok" {
		t.Fatalf("reload = %+v", res)
	}
	third, thirdTools := ask("three")
	if !strings.Contains(third, "after 15 seconds") || strings.Contains(third, "after 45 seconds") || thirdTools != firstTools {
		t.Fatalf("after the reload the model saw tools %q (before: %q); want the same tools, exec killed after 15 seconds", thirdTools, firstTools)
	}
}

// TestE2ETurnToolsStayTheTurns: a turn's and a run's tool registries are
// copies of one made with the built-in tools (gateway agentTools),
// so what a top-level turn adds (the session tools, schedule) does not
// reach a sub-agent it spawns, and every turn sees the same tools.
func TestE2ETurnToolsStayTheTurns(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, `{
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [{ id: "main" }] },
  channels: { web: { enabled: true } },
}`, researchModel(nil))
	seq := webPost(t, tg.URL, "tt", "research this")
	for _, label := range []string{"alpha", "beta"} {
		waitWeb(t, tg, "tt", seq, "announce", func(text string) bool { return strings.Contains(text, "findings for "+label) })
	}
	webPost(t, tg.URL, "tt", "and a plain question")
	waitWebReply(t, tg, "tt", "plain answer to: and a plain question")
	var top []string
	children := 0
	for _, c := range tg.LLM.Requests() {
		tools := strings.Join(c.Tools, ",")
		if strings.Contains(c.System, "Sub-agent context") {
			if strings.Contains(c.LastUser(), "Announce step") {
				continue // no tools by design
			}
			children++
			if slices.Contains(c.Tools, "schedule") || !slices.Contains(c.Tools, "read_file") {
				t.Errorf("a sub-agent's call had tools %s: want the built-in ones, no schedule", tools)
			}
			continue
		}
		top = append(top, tools)
	}
	if children == 0 || len(top) < 3 {
		t.Fatalf("%d sub-agent calls and top-level calls %q", children, top)
	}
	for _, tools := range top {
		if tools != top[0] || !strings.Contains(tools, "schedule") || !strings.Contains(tools, "sessions_spawn") {
			t.Errorf("top-level calls saw tools %q: want the same, with schedule and sessions_spawn, each time", top)
			break
		}
	}
}
