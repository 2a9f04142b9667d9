package command

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent"
)

// caller is the top-level turn of a conversation, as the gateway runs it.
func caller(session string) agent.CallContext {
	return agent.CallContext{SessionKey: session, RootKey: session, AgentID: "main",
		Origin: channels.Origin{Channel: "slack", ChatID: "C1", ChatType: "group"},
		Model:  "anthropic/claude-test", Tools: []string{"read_file", "sessions_spawn"}}
}

func (h *harness) spawn(session, task, label string) subagent.SpawnResult {
	h.t.Helper()
	res := h.m.Spawn(context.Background(), caller(session), subagent.SpawnParams{Task: task, Label: label})
	if res.Status != "accepted" {
		h.t.Fatalf("spawn %q: %+v", task, res)
	}
	return res
}

// waitRunning waits until the runs are running.
func (h *harness) waitRunning(ids ...string) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, id := range ids {
		for {
			r, err := h.db.GetRun(context.Background(), id)
			if err == nil && r.Status == store.StatusRunning {
				break
			}
			if time.Now().After(deadline) {
				h.t.Fatalf("run %s is not running: %+v, %v", id, r, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func (h *harness) status(id string) string {
	h.t.Helper()
	r, err := h.db.GetRun(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return subagent.DisplayStatus(r)
}

// TestConversationsAreIsolated: conversation A cannot list, log, inspect,
// stop or steer conversation B's runs by any id, and A's /stop and
// "/subagents stop all" leave B's runs running.
func TestConversationsAreIsolated(t *testing.T) {
	h := newHarness(t, "", slowOrEcho)
	h.fixtures()
	h.transcript(store.Run{ChildKey: key("b"), ChildSessionID: sid("b"), AgentID: "main", RequesterKey: sessB, CreatedAt: h.now},
		msg("user", "conversation B's work"), msg("assistant", "B's secret result"))
	aLive := h.spawn(sessA, "slow a", "a-live")
	bLive := h.spawn(sessB, "slow b", "b-live")
	h.waitRunning(aLive.RunID, bLive.RunID)

	list := h.do(sessA, "/subagents list")
	for _, leak := range []string{runB, runB[:8], key("b"), "b-secret", bLive.RunID[:8], bLive.ChildSessionKey, "b-live"} {
		if strings.Contains(list, leak) {
			t.Errorf("A's list shows B's %q:\n%s", leak, list)
		}
	}
	if !strings.Contains(list, "a-live") {
		t.Errorf("A's list lacks its own live run:\n%s", list)
	}

	bIDs := []string{runB, runB[:8], key("b"), "b-secret", bLive.RunID, bLive.RunID[:8], bLive.ChildSessionKey, "b-live"}
	for _, id := range bIDs {
		for _, cmd := range []string{"info %s", "log %s tools", "stop %s", "send %s hello from A", "kill %s", "steer %s hi"} {
			text := "/subagents " + fmt.Sprintf(cmd, id)
			want := fmt.Sprintf("⚠️ No subagent matches %q.", id)
			if got := h.do(sessA, text); got != want {
				t.Errorf("A typed %q:\n got %q\nwant %q", text, got, want)
			}
		}
	}
	for _, c := range h.llm.Requests() {
		if last := c.LastUser(); strings.Contains(last, "from A") || last == "hi" {
			t.Errorf("A's message reached a sub-agent: %q", c.LastUser())
		}
	}

	if got, want := h.do(sessA, "/subagents stop all"), "⚙️ Stopped 1 subagent."; got != want {
		t.Errorf("A stop all = %q, want %q", got, want)
	}
	if got, want := h.do(sessA, "/stop"), "⚙️ Agent was aborted. Stopped 0 sub-agents."; got != want {
		t.Errorf("A /stop = %q, want %q", got, want)
	}
	if miss := h.waitOutcome([]string{aLive.RunID}, store.OutcomeStopped, 10*time.Second); len(miss) > 0 {
		t.Errorf("A's run did not stop")
	}
	if s := h.status(bLive.RunID); s != store.StatusRunning {
		t.Errorf("B's live run is %q after A's stops, want running", s)
	}

	// B sees and controls its own runs.
	bList := h.do(sessB, "/subagents list")
	if !strings.Contains(bList, "1) running · b-live · ") || !strings.Contains(bList, "2) success · b-secret · 10s · run b7000000 · "+key("b")) {
		t.Errorf("B's list:\n%s", bList)
	}
	if got, want := h.do(sessB, "/subagents log b-secret"), "📜 Subagent log: b-secret\nUser: conversation B's work\nAssistant: B's secret result"; got != want {
		t.Errorf("B's log:\n%s\nwant:\n%s", got, want)
	}
	if got, want := h.do(sessB, "/subagents stop b-live"), "⚙️ Stop requested for b-live."; got != want {
		t.Errorf("B stop = %q, want %q", got, want)
	}
	if miss := h.waitOutcome([]string{bLive.RunID}, store.OutcomeStopped, 10*time.Second); len(miss) > 0 {
		t.Errorf("B's run did not stop")
	}
}

// TestStopCascades: /stop aborts the turn and stops a child, its grandchild
// and its great-grandchild, each blocked in a slow model reply; every run
// reaches outcome stopped long before that reply would come.
func TestStopCascades(t *testing.T) {
	var mu sync.Mutex
	spawned := map[string]bool{}
	deepest := make(chan struct{}, 1) // the level-3 run is in its model call
	h := newHarness(t, "maxDepth: 3", func(c llmtest.Call) llmtest.Reply {
		task := ""
		for _, line := range strings.Split(c.System, "\n") {
			if v, ok := strings.CutPrefix(line, "- Task: "); ok {
				task = v
			}
		}
		next := map[string]string{"level 1": "level 2", "level 2": "level 3"}[task]
		mu.Lock()
		first := next != "" && !spawned[task]
		spawned[task] = true
		mu.Unlock()
		if first {
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn", Args: []byte(`{"task":"` + next + `"}`)}}}
		}
		if task == "level 3" {
			select {
			case deepest <- struct{}{}:
			default:
			}
		}
		return llmtest.Reply{Text: "still thinking", Delay: time.Minute}
	})
	top := h.spawn(sessA, "level 1", "")
	runs := h.waitRuns(sessA, 3)
	// The level-3 run in its model call, so live in the manager: this test
	// is about the cascade; a stop that comes while a run is being spawned
	// has its own test (subagent TestStopWhileSpawnEachRecordsRuns).
	select {
	case <-deepest:
	case <-time.After(20 * time.Second):
		t.Fatal("the level-3 run never called the model")
	}
	ids := []string{}
	for _, r := range runs {
		ids = append(ids, r.ID)
	}
	if runs[2].ID != top.RunID || runs[1].Depth != 2 || runs[0].Depth != 3 {
		t.Fatalf("unexpected tree: %+v", runs)
	}

	env := h.env()
	var aborted []string
	env.AbortTurn = func(key string) bool { aborted = append(aborted, key); return true }
	got := h.doEnv(env, sessA, "/stop")
	if want := "⚙️ Agent was aborted. Stopped 3 sub-agents."; got != want {
		t.Errorf("/stop = %q, want %q", got, want)
	}
	if len(aborted) != 1 || aborted[0] != sessA {
		t.Errorf("AbortTurn called with %q, want [%s]", aborted, sessA)
	}
	// 10 s, not the minute the model holds each reply: the calls were
	// cancelled, not answered (a tighter bound fails on a loaded machine).
	if miss := h.waitOutcome(ids, store.OutcomeStopped, 10*time.Second); len(miss) > 0 {
		t.Errorf("runs %v did not reach outcome stopped within 10 s of /stop", miss)
	}
	items, err := h.db.PendingOutbox(context.Background(), 10)
	if err != nil || len(items) != 0 {
		t.Errorf("stopped runs announced: %d items, %v", len(items), err)
	}
	list := h.do(sessA, "/subagents list")
	if !strings.HasPrefix(list, "🧭 Subagents (current session)\nActive: 0 · Done: 3\n1) stopped · level 3 · ") {
		t.Errorf("list after /stop:\n%s", list)
	}
}

// TestStopOneStopsItsDescendants: stopping a child by number stops what it
// spawned too, and leaves its sibling running.
func TestStopOneStopsItsDescendants(t *testing.T) {
	var once sync.Once
	h := newHarness(t, "maxDepth: 2", func(c llmtest.Call) llmtest.Reply {
		spawn := false
		if strings.Contains(c.System, "- Task: parent") {
			once.Do(func() { spawn = true })
		}
		if spawn {
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn", Args: []byte(`{"task":"child of parent","label":"kid"}`)}}}
		}
		return llmtest.Reply{Text: "still thinking", Delay: time.Minute}
	})
	sibling := h.spawn(sessA, "sibling", "sib")
	parent := h.spawn(sessA, "parent", "par")
	runs := h.waitRuns(sessA, 3)
	if runs[0].Label != "kid" {
		t.Fatalf("newest run is %+v, want the grandchild", runs[0])
	}
	if got, want := h.do(sessA, "/subagents stop par"), "⚙️ Stop requested for par."; got != want {
		t.Errorf("stop = %q, want %q", got, want)
	}
	if miss := h.waitOutcome([]string{parent.RunID, runs[0].ID}, store.OutcomeStopped, 10*time.Second); len(miss) > 0 {
		t.Errorf("runs %v did not stop", miss)
	}
	if s := h.status(sibling.RunID); s != store.StatusRunning {
		t.Errorf("sibling is %q, want running", s)
	}
	if got, want := h.do(sessA, "/subagents stop sib"), "⚙️ Stop requested for sib."; got != want {
		t.Errorf("stop = %q, want %q", got, want)
	}
	if miss := h.waitOutcome([]string{sibling.RunID}, store.OutcomeStopped, 10*time.Second); len(miss) > 0 {
		t.Errorf("sibling did not stop")
	}
}

// Two runs with the same label: a command naming the label says it is
// ambiguous (told by the ErrAmbiguous sentinel, not by matching text).
func TestAmbiguousTarget(t *testing.T) {
	h := newHarness(t, "", slowOrEcho)
	h.fixtures()
	one := h.spawn(sessA, "slow one", "twin")
	two := h.spawn(sessA, "slow two", "twin")
	h.waitRunning(one.RunID, two.RunID)
	if got, want := h.do(sessA, "/subagents info twin"), `⚠️ "twin" matches more than one subagent; use its number from /subagents list.`; got != want {
		t.Errorf("info twin = %q, want %q", got, want)
	}
}
