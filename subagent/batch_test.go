package subagent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/store"
)

// tasksOf is a tasks argument from JSON elements.
func tasksOf(elems ...string) []json.RawMessage {
	out := []json.RawMessage{}
	for _, e := range elems {
		out = append(out, json.RawMessage(e))
	}
	return out
}

// TestBatchRefusesBadInput: every malformed batch is refused with
// {status:"error"} naming the field, and nothing of it is spawned.
func TestBatchRefusesBadInput(t *testing.T) {
	h := newHarness(t, "maxChildrenPerSession: 3", "", standard)
	ctx := context.Background()
	ok := `{"task":"fine","label":"ok"}`
	for _, c := range []struct {
		name string
		p    SpawnParams
		want string
	}{
		{"empty", SpawnParams{Tasks: tasksOf()}, "tasks is empty"},
		{"with task", SpawnParams{Task: "one", Tasks: tasksOf(ok)}, "either task (one sub-agent) or tasks (a batch), not both"},
		{"over the limit", SpawnParams{Tasks: tasksOf(ok, `{"task":"b"}`, `{"task":"c"}`, `{"task":"d"}`)}, "tasks has 4 tasks; a batch may have at most maxChildrenPerSession (3)"},
		{"label type", SpawnParams{Tasks: tasksOf(ok, `{"task":"b"}`, `{"task":"c","label":7}`)}, "tasks[2].label must be a string"},
		{"unknown field", SpawnParams{Tasks: tasksOf(ok, `{"task":"b","thread":true}`)}, "tasks[1].thread is not a field of a task"},
		{"not an object", SpawnParams{Tasks: tasksOf(`"just do it"`)}, "tasks[0] must be an object"},
		{"no task", SpawnParams{Tasks: tasksOf(ok, `{"label":"b"}`)}, "tasks[1].task is required"},
		{"same label", SpawnParams{Tasks: tasksOf(ok, `{"task":"b","label":"ok"}`)}, `tasks[1].label "ok" is the label of tasks[0] too`},
		{"bad schema", SpawnParams{Tasks: tasksOf(ok, `{"task":"b","outputSchema":{"type":"nope"}}`)}, "tasks[1]: outputSchema is not a valid JSON Schema"},
		{"unknown agent", SpawnParams{Tasks: tasksOf(`{"task":"b","agentId":"ghost"}`)}, `tasks[0]: unknown agentId "ghost"`},
		{"one label for all", SpawnParams{Label: "all", Tasks: tasksOf(ok)}, "with tasks give each its own tasks[i].label"},
		{"bad announce", SpawnParams{Announce: "loud", Tasks: tasksOf(ok)}, `tasks[0]: announce must be "chat", "parent" or "silent"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := h.m.Spawn(ctx, caller("1"), c.p)
			if res.Status != "error" || !strings.Contains(res.Error, c.want) || len(res.Runs) != 0 {
				t.Errorf("spawn = %+v, want an error containing %q", res, c.want)
			}
		})
	}
	if runs, _ := h.db.ListRuns(ctx, store.RunFilter{}); len(runs) != 0 {
		t.Errorf("%d runs spawned from bad input", len(runs))
	}
}

// TestBatchBoundedWithoutChildLimit: with maxChildrenPerSession 0 (no
// limit) a batch is still bounded — by maxTotalSpawns, or by
// MaxBatchTasks when that is 0 too — and refused naming tasks and the
// limit before any child is built or stored.
func TestBatchBoundedWithoutChildLimit(t *testing.T) {
	ctx := context.Background()
	tasks := func(n int) []json.RawMessage {
		out := make([]json.RawMessage, n)
		for i := range out {
			out[i] = json.RawMessage(fmt.Sprintf(`{"task":"t%d"}`, i))
		}
		return out
	}
	for _, c := range []struct {
		limits string
		n      int
		want   string
	}{
		{"maxChildrenPerSession: 0, maxTotalSpawns: 4", 5, "tasks has 5 tasks; a batch may have at most maxTotalSpawns (4)"},
		{"maxChildrenPerSession: 0, maxTotalSpawns: 0", MaxBatchTasks + 1, fmt.Sprintf("tasks has %d tasks; a batch may have at most %d (maxChildrenPerSession and maxTotalSpawns are 0", MaxBatchTasks+1, MaxBatchTasks)},
		{"maxChildrenPerSession: 6, maxTotalSpawns: 3", 4, "a batch may have at most maxTotalSpawns (3)"},
	} {
		t.Run(c.limits, func(t *testing.T) {
			h := newHarness(t, c.limits, "", standard)
			res := h.m.Spawn(ctx, caller("1"), SpawnParams{Tasks: tasks(c.n)})
			if res.Status != "error" || !strings.Contains(res.Error, c.want) {
				t.Errorf("spawn of %d = %+v, want an error containing %q", c.n, res, c.want)
			}
			if runs, _ := h.db.ListRuns(ctx, store.RunFilter{}); len(runs) != 0 {
				t.Errorf("%d runs spawned from a refused batch", len(runs))
			}
		})
	}
}

// TestRenderBatch: the header counts the outcomes, each child has its
// own section under its label in spawn order, and the one Stats line —
// the batch's wall clock, summed tokens and cost — is last.
func TestRenderBatch(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	run := func(label, task, outcome, result, note string, start, end time.Duration, in, out int64, cost float64) store.Run {
		return store.Run{Batch: "0123456789abcdef", Label: label, Task: task, Outcome: outcome, Result: result, Note: note,
			StartedAt: t0.Add(start), EndedAt: t0.Add(end), TokensIn: in, TokensOut: out, CostUSD: cost}
	}
	runs := []store.Run{
		run("alpha", "look at alpha", "success", "alpha is fine", "", 0, 30*time.Second, 1000, 200, 0.01),
		run("", "a task without a label", "error", "", "model said no", time.Second, 10*time.Second, 10, 0, -1),
		run("gamma", "look at gamma", "success", "gamma too", "", 2*time.Second, 95*time.Second, 500, 100, 0.02),
	}
	got := renderBatch(runs, lastEnd(runs))
	want := `Status: ✅ 2 success · ❌ 1 error

— 1/3 · alpha —
Status: success
Task: look at alpha

Result:
alpha is fine

Notes:
(none)

— 2/3 · a task without a label —
Status: error
Task: a task without a label

Result:
(not available)

Notes:
model said no

— 3/3 · gamma —
Status: success
Task: look at gamma

Result:
gamma too

Notes:
(none)

Stats: runtime 1m35s (batch of 3) • tokens 1.8k (in 1.5k / out 300) • est $0.03 • batch 01234567`
	if got != want {
		t.Errorf("renderBatch =\n%s\n\nwant\n%s", got, want)
	}
}

// TestGroupTimerForgottenAtEarlyEnd: a chat batch and a parent spawn
// group with a long groupTimeoutSeconds hold one timer each while a child
// runs; when the last child ends (the batch announce written, the wake
// added) the manager holds no timer or deadline of either any more.
func TestGroupTimerForgottenAtEarlyEnd(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, "maxChildrenPerSession: 5", "", func(c llmtest.Call) llmtest.Reply {
		if taskOf(c) == "slow" && !strings.Contains(c.LastUser(), "Announce step") {
			<-release
		}
		return standard(c)
	})
	ctx := context.Background()
	hour := 3600
	batch := h.m.Spawn(ctx, caller("1"), SpawnParams{GroupTimeoutSeconds: &hour,
		Tasks: tasksOf(`{"task":"quick","label":"a"}`, `{"task":"slow","label":"b"}`)})
	if batch.Status != "accepted" || len(batch.Runs) != 2 {
		t.Fatalf("batch = %+v", batch)
	}
	wake := h.m.Spawn(ctx, caller("2"), SpawnParams{Task: "slow", Announce: "parent", GroupTimeoutSeconds: &hour})
	if wake.Status != "accepted" {
		t.Fatalf("parent spawn = %+v", wake)
	}
	h.waitDone(batch.Runs[0].RunID)
	groups, deadlines := h.m.armedGroups()
	if want := []string{"agent:main:slack:group:C1:thread:2", "batch:" + batch.BatchID}; !slices.Equal(groups, want) || deadlines != 2 {
		t.Fatalf("while the slow children run the timers are %v (%d deadlines), want %v", groups, deadlines, want)
	}
	close(release)
	h.waitDone(batch.Runs[1].RunID)
	h.waitDone(wake.RunID)
	if items := h.waitAnnounces(1); !strings.Contains(items[0].Text, "2 success") {
		t.Fatalf("batch announce:\n%s", items[0].Text)
	}
	if !waitUntil(func() bool { g, d := h.m.armedGroups(); return len(g) == 0 && d == 0 }) {
		groups, deadlines := h.m.armedGroups()
		t.Fatalf("after the early ends the manager still holds timers %v (%d deadlines)", groups, deadlines)
	}
}
