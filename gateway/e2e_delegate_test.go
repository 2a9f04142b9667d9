package gateway_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
)

// TestE2EDelegateUsesDefaults: a delegate call runs the named agent with
// agents.defaults.thinking and agents.defaults.maxIterations when the agent
// sets neither, like a top-level turn of that agent would.
func TestE2EDelegateUsesDefaults(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, `{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m", maxTokens: 8192 }] } } },
  agents: {
    defaults: { model: "anthropic/m", thinking: "low", maxIterations: 2 },
    list: [ { id: "main", systemPrompt: "MAIN", subagents: { allowAgents: ["researcher"] } }, { id: "researcher", systemPrompt: "RESEARCHER" } ],
  },
  security: { toolPolicy: { default: "allow" } },
}`, func(c llmtest.Call) llmtest.Reply {
		last := c.Messages[len(c.Messages)-1]
		if strings.HasPrefix(c.System, "RESEARCHER") {
			// Never done: keeps listing files until the iteration limit.
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "list_files", Args: json.RawMessage(`{}`)}}}
		}
		if len(last.ToolResults) > 0 {
			return llmtest.Reply{Text: "delegate said: " + last.ToolResults[0].Content}
		}
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "delegate", Args: json.RawMessage(`{"agent":"researcher","task":"dig"}`)}}}
	})
	seq := webPost(t, tg.URL, "d1", "ask the researcher")
	got := waitWeb(t, tg, "d1", seq, "assistant", func(s string) bool { return strings.HasPrefix(s, "delegate said: ") })
	if !strings.Contains(got.Text, "(2)") {
		t.Errorf("delegate result %q, want it stopped at agents.defaults.maxIterations (2)", got.Text)
	}
	var researcherCalls int
	for _, c := range tg.LLM.Requests() {
		if strings.HasPrefix(c.System, "RESEARCHER") {
			researcherCalls++
			// The first call of the turn: later ones continue tool calls whose
			// thinking blocks the fake did not return, so the provider leaves
			// thinking off there (as the API requires).
			if researcherCalls == 1 && c.ThinkingBudget == 0 {
				t.Errorf("the delegate's model call has no thinking; want agents.defaults.thinking (low)")
			}
		}
	}
	if researcherCalls != 2 {
		t.Errorf("researcher made %d model calls, want 2 (agents.defaults.maxIterations)", researcherCalls)
	}
}
