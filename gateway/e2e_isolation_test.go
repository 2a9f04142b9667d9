package gateway_test

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
)

// isolationAgents is a config with three agents: main may spawn and
// delegate only to "helper"; main's allowedTools leave out exec and
// sessions_spawn; "admin" and "helper" may use every tool.
const isolationAgents = `{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: {
    defaults: { model: "anthropic/m" },
    list: [
      { id: "main", systemPrompt: "MAIN", subagents: { allowAgents: ["helper"] },
        allowedTools: ["read_file", "write_file", "list_files", "delegate", "agents_list", "sessions_list"] },
      { id: "admin", systemPrompt: "ADMIN" },
      { id: "helper", systemPrompt: "HELPER" },
    ],
  },
  security: { toolPolicy: { default: "allow" } },
}`

// TestE2EDelegateHonoursAllowAgentsAndAllowedTools: delegate to an agent
// the caller's subagents.allowAgents does not list is refused before that
// agent's model is asked anything; delegate to an allowed one runs it with
// no tool the caller lacks; and the caller's own turn has only the session
// tools its allowedTools name.
func TestE2EDelegateHonoursAllowAgentsAndAllowedTools(t *testing.T) {
	var mu sync.Mutex
	var mainTools, helperTools []string
	var adminAsked bool
	tg := newTestGateway(t, isolationAgents, func(c llmtest.Call) llmtest.Reply {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.HasPrefix(c.System, "ADMIN"):
			adminAsked = true
			return llmtest.Reply{Text: "admin did it"}
		case strings.HasPrefix(c.System, "HELPER"):
			helperTools = c.Tools
			return llmtest.Reply{Text: "helper did it"}
		}
		mainTools = c.Tools
		last := c.Messages[len(c.Messages)-1]
		if len(last.ToolResults) > 0 {
			return llmtest.Reply{Text: "delegate said: " + last.ToolResults[0].Content}
		}
		target := "admin"
		if strings.Contains(c.LastUser(), "helper") {
			target = "helper"
		}
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "delegate",
			Args: json.RawMessage(`{"agent":"` + target + `","task":"print every secret"}`)}}}
	})

	seq := webPost(t, tg.URL, "deleg", "ask admin")
	got := waitWeb(t, tg, "deleg", seq, "assistant", func(s string) bool { return strings.HasPrefix(s, "delegate said: ") })
	var res struct{ Status, Error, Result string }
	if err := json.Unmarshal([]byte(strings.TrimPrefix(got.Text, "delegate said: ")), &res); err != nil {
		t.Fatalf("delegate result %q: %v", got.Text, err)
	}
	if res.Status != "forbidden" || !strings.Contains(res.Error, `agent "admin" is not allowed`) {
		t.Errorf("delegate to admin = %+v, want forbidden naming the agent", res)
	}
	mu.Lock()
	if adminAsked {
		t.Errorf("the forbidden agent's model was called")
	}
	for _, name := range []string{"sessions_spawn", "sessions_send", "sessions_history", "exec"} {
		if slices.Contains(mainTools, name) {
			t.Errorf("main's turn offers %s although its allowedTools leave it out: %v", name, mainTools)
		}
	}
	if !slices.Contains(mainTools, "sessions_list") {
		t.Errorf("main's turn lacks sessions_list, which its allowedTools name: %v", mainTools)
	}
	mu.Unlock()

	seq = webPost(t, tg.URL, "deleg", "ask helper")
	got = waitWeb(t, tg, "deleg", seq, "assistant", func(s string) bool { return strings.HasPrefix(s, "delegate said: ") })
	if !strings.Contains(got.Text, "helper did it") {
		t.Errorf("delegate to the allowed helper: %q", got.Text)
	}
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(helperTools, "exec") || slices.Contains(helperTools, "web_fetch") {
		t.Errorf("the delegate was given tools its caller may not use: %v", helperTools)
	}
	if !slices.Contains(helperTools, "read_file") {
		t.Errorf("the delegate lacks read_file, which both agents have: %v", helperTools)
	}
}
