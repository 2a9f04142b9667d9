package subagent

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent/subagenttest"
)

// A response's spawns prepared together whose second call is never made
// (its turn was cut after the first) leave nothing behind once the loop is
// done with them: the run the second call recorded is started — it is
// running in the store, as a restart would resume it — so it leaves
// m.spawning and its prepared entry, and it runs to its end.
func TestPreparedSpawnNeverCalledIsStarted(t *testing.T) {
	h := newHarness(t, "maxChildrenPerSession: 5", "", standard)
	m := h.m
	var spawn *spawnTool
	for _, tool := range m.SessionTools(0) {
		if st, ok := tool.(*spawnTool); ok {
			spawn = st
		}
	}
	if spawn == nil {
		t.Fatal("no sessions_spawn tool")
	}
	var calls []agent.PreparedCall
	for _, id := range []string{"toolu_1", "toolu_2"} {
		cc := caller("1")
		cc.CallID = id
		calls = append(calls, agent.PreparedCall{Ctx: context.Background(), CC: &cc, Args: json.RawMessage(`{"task":"work ` + id + `"}`)})
	}
	spawning := func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.spawning)
	}
	spawn.Prepare(calls)
	out, err := spawn.Call(calls[0].Ctx, *calls[0].CC, calls[0].Args)
	if err != nil {
		t.Fatal(err)
	}
	var first SpawnResult
	if err := json.Unmarshal([]byte(out), &first); err != nil || first.Status != "accepted" {
		t.Fatalf("the first call answered %s, %v", out, err)
	}
	if n := spawning(); n != 1 {
		t.Fatalf("%d runs in m.spawning after the first call, want the second call's", n)
	}
	spawn.Done(calls) // the turn was cut: the second call never comes
	if n := spawning(); n != 0 {
		t.Errorf("%d runs left in m.spawning after the loop was done with the calls", n)
	}
	if spawn.has(keyOf(calls[1].CC)) {
		t.Error("the second call's prepared spawn was kept")
	}
	second, err := h.db.RunBySpawnCall(context.Background(), calls[1].CC.SessionKey, "toolu_2")
	if err != nil {
		t.Fatalf("the second call's run was not recorded: %v", err)
	}
	for _, id := range []string{first.RunID, second.ID} {
		if got := subagenttest.WaitDone(t, h.db, id); got.Outcome != store.OutcomeSuccess {
			t.Errorf("run %s ended %s (%q), want ok", id, got.Outcome, got.Note)
		}
	}
}
