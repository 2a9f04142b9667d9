package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/store"
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
	t.Parallel()
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
	t.Parallel()
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

// orchDepth2Config allows sub-agents to spawn workers (maxDepth 2).
const orchDepth2Config = `{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m", maxTokens: 8192 }] } } },
  agents: { defaults: { model: "anthropic/m", subagents: { maxDepth: 2 } }, list: [{ id: "main" }] },
  channels: { web: { enabled: true } },
}`

// wakeModel is orchModel with announce "parent": "spawn parent a b"
// spawns them so, and a wake (a turn whose history holds results) is
// answered "woken: a,b" — after its gate, if any, opens. A sub-agent
// whose task starts with "orchestrate" spawns workers w1 and w2 (announce
// parent by default at depth 2), then answers with the results it holds.
func wakeModel(gates map[string]*gate, wakeGate *gate) llmtest.Handler {
	base := orchModel(gates)
	return func(c llmtest.Call) llmtest.Reply {
		last := c.LastUser()
		if strings.Contains(c.System, "Sub-agent context") && strings.Contains(c.System, "- Task: orchestrate") {
			switch {
			case strings.Contains(last, "Announce step"):
				return llmtest.Reply{Text: "Result:\n" + agent.LastAssistantText(c.Messages) + "\n\nNotes:\n(none)"}
			case strings.HasPrefix(last, "[sub-agent result]"):
				return llmtest.Reply{Text: "combined: " + strings.Join(resultsSeen(c), ",")}
			case len(c.Messages) > 0 && c.Messages[len(c.Messages)-1].Role == agent.RoleTool:
				return llmtest.Reply{Text: "workers started"}
			}
			return llmtest.Reply{ToolCalls: []agent.ToolCall{
				{Name: "sessions_spawn", Args: json.RawMessage(`{"task":"w1","label":"w1"}`)},
				{Name: "sessions_spawn", Args: json.RawMessage(`{"task":"w2","label":"w2"}`)}}}
		}
		if strings.Contains(c.System, "Sub-agent context") {
			return base(c)
		}
		if n := len(c.Messages); n > 0 && c.Messages[n-1].Role == agent.RoleTool {
			return llmtest.Reply{Text: "started"}
		}
		if rest, ok := strings.CutPrefix(last, "spawn parent "); ok {
			var calls []agent.ToolCall
			for _, label := range strings.Fields(rest) {
				calls = append(calls, agent.ToolCall{Name: "sessions_spawn",
					Args: json.RawMessage(fmt.Sprintf(`{"task":%q,"label":%q,"announce":"parent"}`, label, label))})
			}
			return llmtest.Reply{ToolCalls: calls}
		}
		if strings.HasPrefix(last, "[sub-agent result]") {
			if wakeGate != nil {
				wakeGate.wait()
			}
			return llmtest.Reply{Text: "woken: " + strings.Join(resultsSeen(c), ",")}
		}
		return base(c)
	}
}

// countWeb counts a conversation's web messages of role that start with
// prefix.
func countWeb(t *testing.T, tg *testGW, client, role, prefix string) int {
	t.Helper()
	n := 0
	for _, m := range webMessages(t, tg.URL, client, 0) {
		if m.Role == role && strings.HasPrefix(m.Text, prefix) {
			n++
		}
	}
	return n
}

// TestE2EParentAnnounceWakesOnce: three children spawned with announce
// "parent" post nothing; when the last ends the conversation is woken
// once and answers in its own voice with all three results; /subagents
// list showed the conversation waiting meanwhile.
func TestE2EParentAnnounceWakesOnce(t *testing.T) {
	gates := map[string]*gate{"alpha": newGate(t), "beta": newGate(t), "gamma": newGate(t)}
	tg := newTestGateway(t, orchConfig, wakeModel(gates, nil))
	const client = "orch-wake"
	seq := webPost(t, tg.URL, client, "spawn parent alpha beta gamma")
	waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return s == "started" })
	seq = webPost(t, tg.URL, client, "/subagents list")
	waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.Contains(s, "This conversation: waiting (3 children)") })
	for _, label := range []string{"gamma", "alpha", "beta"} {
		gates[label].open()
		run := waitRunDone(t, tg, "agent:main:web:dm:"+client, label)
		if run.Announce != "parent" {
			t.Errorf("run %s announce %q, want parent", label, run.Announce)
		}
	}
	got := waitWeb(t, tg, client, 0, "assistant", func(s string) bool { return strings.HasPrefix(s, "woken:") })
	if got.Text != "woken: alpha,beta,gamma" {
		t.Errorf("the wake answered %q, want all three results once", got.Text)
	}
	if n := countWeb(t, tg, client, "announce", ""); n != 0 {
		t.Errorf("%d announces were posted; children with announce parent post none", n)
	}
	if n := countWeb(t, tg, client, "assistant", "woken:"); n != 1 {
		t.Errorf("%d wake answers, want one", n)
	}
}

// waitRunDone waits until the run of requester labelled label has ended.
func waitRunDone(t *testing.T, tg *testGW, requester, label string) store.Run {
	t.Helper()
	var found store.Run
	if !waitFor(e2eWait, func() bool {
		for _, r := range tg.runsOf(t, requester) {
			if r.Label == label && r.Status == store.StatusDone {
				found = r
				return true
			}
		}
		return false
	}) {
		t.Fatalf("run %s of %s never ended", label, requester)
	}
	return found
}

// TestE2EOrchestratorCarriesWorkers: a sub-agent at depth 1 spawns two
// workers (announce parent by default at depth 2); it waits for them
// instead of announcing, takes their results in, and its one announce in
// the chat carries both; no worker announce reaches the chat.
func TestE2EOrchestratorCarriesWorkers(t *testing.T) {
	gates := map[string]*gate{"w1": newGate(t), "w2": newGate(t)}
	tg := newTestGateway(t, orchDepth2Config, wakeModel(gates, nil))
	const client = "orch-depth2"
	seq := webPost(t, tg.URL, client, "spawn orchestrate")
	waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return s == "started" })
	orch := waitRunLabel(t, tg, "agent:main:web:dm:"+client, "orchestrate")
	if !waitFor(e2eWait, func() bool { return len(tg.runsOf(t, orch.ChildKey)) == 2 }) {
		t.Fatal("the orchestrator never spawned its two workers")
	}
	// The orchestrator waits once its own turn has answered.
	if !waitFor(e2eWait, func() bool {
		seq := webPost(t, tg.URL, client, "/subagents list")
		return strings.Contains(waitWeb(t, tg, client, seq, "system", func(string) bool { return true }).Text, "waiting (2 children) · orchestrate")
	}) {
		t.Fatal("/subagents list never showed the orchestrator waiting for its two workers")
	}
	gates["w2"].open()
	gates["w1"].open()
	ann := waitWeb(t, tg, client, 0, "announce", func(s string) bool { return strings.Contains(s, "Task: orchestrate") })
	if !strings.Contains(ann.Text, "combined: w1,w2") {
		t.Errorf("the orchestrator's announce does not carry both workers' results:\n%s", ann.Text)
	}
	for _, w := range []string{"w1", "w2"} {
		if r := waitRunDone(t, tg, orch.ChildKey, w); r.Announce != "parent" {
			t.Errorf("worker %s announce %q, want parent (the default at depth 2)", w, r.Announce)
		}
	}
	if n := countWeb(t, tg, client, "announce", ""); n != 1 {
		t.Errorf("%d announces in the chat, want only the orchestrator's", n)
	}
}

// waitRunLabel waits until requester has a run labelled label.
func waitRunLabel(t *testing.T, tg *testGW, requester, label string) store.Run {
	t.Helper()
	var found store.Run
	if !waitFor(e2eWait, func() bool {
		for _, r := range tg.runsOf(t, requester) {
			if r.Label == label {
				found = r
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no run %s of %s", label, requester)
	}
	return found
}

// TestE2EStoppedChildWakesNoOne: /stop stops a child spawned with
// announce parent; its end adds no wake and nothing is posted for it.
func TestE2EStoppedChildWakesNoOne(t *testing.T) {
	gates := map[string]*gate{"slow": newGate(t)}
	tg := newTestGateway(t, orchConfig, wakeModel(gates, nil))
	const client = "orch-stop"
	seq := webPost(t, tg.URL, client, "spawn parent slow")
	waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return s == "started" })
	key := "agent:main:web:dm:" + client
	if !waitFor(e2eWait, func() bool {
		runs := tg.runsOf(t, key)
		return len(runs) == 1 && runs[0].Status == store.StatusRunning
	}) {
		t.Fatal("the child never started")
	}
	seq = webPost(t, tg.URL, client, "/stop")
	waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.Contains(s, "Stopped 1 sub-agent") })
	if r := waitRunDone(t, tg, key, "slow"); r.Outcome != store.OutcomeStopped {
		t.Fatalf("outcome %q, want stopped", r.Outcome)
	}
	gates["slow"].open() // the fake's handler of the cancelled call returns
	// A wake would have been written with the run's end.
	owed, err := tg.G.Store().OwedIntake(context.Background())
	if err != nil || len(owed) != 0 {
		t.Errorf("owed turns after the stopped child's end: %+v, %v; want none", owed, err)
	}
	if got := askSeen(t, tg, client, "what happened?"); got != "seen: slow" {
		t.Errorf("the next turn saw %q, want the stopped child's result", got)
	}
}

// TestE2EWakeSurvivesRestart: the gateway stops while the wake's turn is
// running; after the restart the wake runs once and answers once.
func TestE2EWakeSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	hold := newGate(t)
	cfg := strings.Replace(orchConfig, "shutdownGraceSeconds: 5", "shutdownGraceSeconds: 1", 1)
	tg := newTestGatewayIn(t, dir, cfg, wakeModel(nil, hold))
	const client = "orch-wake-restart"
	seq := webPost(t, tg.URL, client, "spawn parent alpha beta")
	waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return s == "started" })
	key := "agent:main:web:dm:" + client
	waitRunDone(t, tg, key, "alpha")
	waitRunDone(t, tg, key, "beta")
	if !waitFor(e2eWait, func() bool {
		for _, c := range tg.LLM.Requests() {
			if strings.HasPrefix(c.LastUser(), "[sub-agent result]") && !strings.Contains(c.System, "Sub-agent context") {
				return true
			}
		}
		return false
	}) {
		t.Fatal("the wake never reached the model")
	}
	tg.Stop() // the wake's model call is held: its turn is cut and stays owed
	hold.open()

	tg = newTestGatewayIn(t, dir, cfg, wakeModel(nil, nil))
	got := waitWeb(t, tg, client, 0, "assistant", func(s string) bool { return strings.HasPrefix(s, "woken:") })
	if got.Text != "woken: alpha,beta" {
		t.Errorf("the wake after the restart answered %q, want both results once", got.Text)
	}
	if n := countWeb(t, tg, client, "assistant", "woken:"); n != 1 {
		t.Errorf("%d wake answers, want one", n)
	}
}
