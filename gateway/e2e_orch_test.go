package gateway_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
)

// orchConfig is a gateway with a fake Anthropic model and the web chat.
const orchConfig = `{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m", maxTokens: 8192 }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [{ id: "main" }] },
  channels: { web: { enabled: true } },
}`

// resultsSeen lists, sorted, the labels of the "[sub-agent result]"
// messages of a call's history, once per message.
func resultsSeen(c llmtest.Call) []string {
	var labels []string
	for _, m := range c.Messages {
		if m.Role != agent.RoleUser {
			continue
		}
		for _, part := range strings.Split(m.Text, "[sub-agent result] ")[1:] {
			label, _, _ := strings.Cut(part, " · run ")
			labels = append(labels, label)
		}
	}
	slices.Sort(labels)
	return labels
}

// orchModel spawns the children a message names ("spawn alpha beta") and
// says so; a child waits for its label's gate, works, and answers its
// announce step; any other message is answered with the sub-agent results
// the history holds ("seen: alpha,beta").
func orchModel(gates map[string]*gate) llmtest.Handler {
	return func(c llmtest.Call) llmtest.Reply {
		last := c.LastUser()
		if strings.Contains(c.System, "Sub-agent context") {
			task := "?"
			if i := strings.Index(c.System, "- Task: "); i >= 0 {
				task, _, _ = strings.Cut(c.System[i+len("- Task: "):], "\n")
			}
			if strings.Contains(last, "Announce step") {
				return llmtest.Reply{Text: "Result:\nfindings of " + task + "\n\nNotes:\n(none)"}
			}
			if g := gates[task]; g != nil {
				g.wait()
			}
			return llmtest.Reply{Text: "worked on " + task}
		}
		if n := len(c.Messages); n > 0 && c.Messages[n-1].Role == agent.RoleTool {
			return llmtest.Reply{Text: "started"}
		}
		if rest, ok := strings.CutPrefix(last, "spawn "); ok {
			var calls []agent.ToolCall
			for _, label := range strings.Fields(rest) {
				calls = append(calls, agent.ToolCall{Name: "sessions_spawn",
					Args: json.RawMessage(fmt.Sprintf(`{"task":%q,"label":%q}`, label, label))})
			}
			return llmtest.Reply{ToolCalls: calls}
		}
		if !strings.Contains(c.System, "[sub-agent result]") {
			return llmtest.Reply{Text: "the system prompt does not say how results arrive"}
		}
		return llmtest.Reply{Text: "seen: " + strings.Join(resultsSeen(c), ",")}
	}
}

// askSeen posts text and returns the model's "seen: …" answer to it.
func askSeen(t *testing.T, tg *testGW, client, text string) string {
	t.Helper()
	seq := webPost(t, tg.URL, client, text)
	return waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return strings.HasPrefix(s, "seen:") || strings.Contains(s, "system prompt") }).Text
}

// TestE2EResultsReachParent: two children end (announced in the chat as
// before); the parent's next turn holds both results, once each, and the
// turn after holds them still once; a conversation started again with /new
// takes no old result, also not of a child of the old session that ends
// after the /new.
func TestE2EResultsReachParent(t *testing.T) {
	late := newGate(t)
	tg := newTestGateway(t, orchConfig, orchModel(map[string]*gate{"gamma": late}))
	const client = "orch"
	seq := webPost(t, tg.URL, client, "spawn alpha beta")
	waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return s == "started" })
	for _, label := range []string{"alpha", "beta"} {
		waitText(t, tg, client, "Task: "+label)
	}
	if got := askSeen(t, tg, client, "which of them disagreed?"); got != "seen: alpha,beta" {
		t.Fatalf("the next turn after both children ended saw %q, want both results once", got)
	}
	if got := askSeen(t, tg, client, "and now?"); got != "seen: alpha,beta" {
		t.Errorf("a later turn saw %q, want the two results still once", got)
	}

	seq = webPost(t, tg.URL, client, "spawn gamma")
	waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return s == "started" })
	seq = webPost(t, tg.URL, client, "/new")
	waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.Contains(s, "New session") })
	late.open()
	waitText(t, tg, client, "Task: gamma")
	if got := askSeen(t, tg, client, "anything new?"); got != "seen: " {
		t.Errorf("the new session's first turn saw %q, want no result of the old session", got)
	}
}

// TestE2EResultsSurviveRestart: the children end, the gateway stops before
// the parent's next turn, and the next turn on a new gateway on the same
// state holds both results once.
func TestE2EResultsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	h := orchModel(nil)
	tg := newTestGatewayIn(t, dir, orchConfig, h)
	const client = "orch-restart"
	seq := webPost(t, tg.URL, client, "spawn alpha beta")
	waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return s == "started" })
	for _, label := range []string{"alpha", "beta"} {
		waitText(t, tg, client, "Task: "+label)
	}
	tg.Stop()

	tg = newTestGatewayIn(t, dir, orchConfig, h)
	got := askSeen(t, tg, client, "what did they find?")
	if got != "seen: alpha,beta" {
		t.Fatalf("the first turn after the restart saw %q, want both results once", got)
	}
}
