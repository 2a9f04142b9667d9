package gateway_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
)

// TestE2ESpawnOwnAgentAndThinkingChain: an agent whose allowAgents lists
// only another agent may still spawn its own agent; the child inherits the
// caller agent's thinking; an invalid thinking is skipped with a warning
// instead of failing the spawn.
func TestE2ESpawnOwnAgentAndThinkingChain(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, `{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m", maxTokens: 8192 }] } } },
  agents: {
    defaults: { model: "anthropic/m" },
    list: [ { id: "main", thinking: "high", subagents: { allowAgents: ["researcher"] } }, { id: "researcher" } ],
  },
}`, func(c llmtest.Call) llmtest.Reply {
		last := c.Messages[len(c.Messages)-1]
		if strings.Contains(c.System, "Sub-agent context") {
			if strings.Contains(last.Text, "Announce step") {
				return llmtest.Reply{Text: "Result:\ndone\n\nNotes:\n(none)"}
			}
			return llmtest.Reply{Text: "child work"}
		}
		if len(last.ToolResults) > 0 {
			return llmtest.Reply{Text: "spawn said: " + last.ToolResults[0].Content}
		}
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn",
			Args: json.RawMessage(`{"task":"look into it","label":"own","thinking":"extreme"}`)}}}
	})
	seq := webPost(t, tg.URL, "chain", "spawn one of your own")
	got := waitWeb(t, tg, "chain", seq, "assistant", func(s string) bool { return strings.HasPrefix(s, "spawn said: ") })
	var res struct {
		Status, Warning string
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(got.Text, "spawn said: ")), &res); err != nil {
		t.Fatalf("spawn result %q: %v", got.Text, err)
	}
	if res.Status != "accepted" {
		t.Fatalf("spawning its own agent: %+v, want accepted (the own agent is always allowed)", res)
	}
	if !strings.Contains(res.Warning, `thinking "extreme"`) || !strings.Contains(res.Warning, "using high") {
		t.Errorf("warning %q, want the invalid thinking named and the caller's level used", res.Warning)
	}
	waitText(t, tg, "chain", "Status: success")
	for _, c := range tg.LLM.Requests() {
		if strings.Contains(c.System, "Sub-agent context") && !strings.Contains(c.LastUser(), "Announce step") {
			if c.ThinkingBudget == 0 {
				t.Errorf("the child's model call has no thinking; want the caller agent's (high)")
			}
		}
	}
}
