package subagent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent/subagenttest"
)

// childRun is a run of agentID at depth for the conversation of thread.
func childRun(id, agentID, thread string, depth int, allowed ...string) *store.Run {
	root := "agent:" + agentID + ":slack:group:C1:thread:" + thread
	return &store.Run{ID: id, AgentID: agentID, RootKey: root, RequesterKey: root, ChildKey: "agent:" + agentID + ":subagent:" + id,
		ChildSessionID: "s-" + id, Depth: depth, Model: "anthropic/claude-test", AllowedTools: allowed}
}

// Children of the same agent share one read-only tool set while what is
// theirs stays theirs: each gets its own conversation's workspace, session
// and run id; a child at the deepest level, a spawn's allowedTools,
// another agent or a reload each get their own set; the shared set
// refuses Add, and a tool added to a copy reaches no other child. Run
// with -race: the sets are built and read from many goroutines.
func TestChildToolSetsSharedNotMixed(t *testing.T) {
	h := newHarness(t, "maxDepth: 2", "", standard)
	m := h.m
	model, ok := m.d.Catalog.Lookup("anthropic/claude-test")
	if !ok {
		t.Fatal("no model")
	}
	turn := func(run *store.Run) agent.Turn { return m.childTurn(&liveRun{}, run, model, m.log) }

	const n = 16
	turns := make([]agent.Turn, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			turns[i] = turn(childRun(fmt.Sprint("r", i), "main", fmt.Sprint(i), 1))
			_ = turns[i].Tools.Specs() // what each model call reads
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, tt := range turns {
		if tt.Tools != turns[0].Tools {
			t.Errorf("child %d has a tool set of its own, want the one shared by main's children", i)
		}
		if tt.Call.RunID != fmt.Sprint("r", i) || tt.Call.SessionKey != "agent:main:subagent:r"+fmt.Sprint(i) || tt.Call.Depth != 1 {
			t.Errorf("child %d calls as %+v", i, tt.Call)
		}
		if seen[tt.Call.Workspace] {
			t.Errorf("child %d has workspace %s, another conversation's", i, tt.Call.Workspace)
		}
		seen[tt.Call.Workspace] = true
	}
	first := turns[0]
	if !slices.Contains(first.Call.Tools, "sessions_spawn") || !slices.Contains(first.Call.Tools, "exec") {
		t.Fatalf("main's child at depth 1 of 2 has %v, want exec and sessions_spawn", first.Call.Tools)
	}
	if _, ok := first.Tools.Get("sessions_spawn"); !ok {
		t.Fatal("the registry lacks sessions_spawn")
	}

	deep := turn(childRun("deep", "main", "1", 2))
	if slices.Contains(deep.Call.Tools, "sessions_spawn") || !slices.Contains(deep.Call.Tools, "exec") {
		t.Errorf("the deepest child has %v, want exec without the session tools", deep.Call.Tools)
	}
	narrow := turn(childRun("narrow", "main", "1", 1, "read_file"))
	if !slices.Equal(narrow.Call.Tools, []string{"read_file"}) || narrow.Tools.Names()[0] != "read_file" || len(narrow.Tools.Names()) != 1 {
		t.Errorf("a spawn with allowedTools [read_file] gave %v (registry %v)", narrow.Call.Tools, narrow.Tools.Names())
	}
	if again := turn(childRun("r0b", "main", "0", 1)); again.Tools != first.Tools || !slices.Equal(again.Call.Tools, first.Call.Tools) {
		t.Errorf("after the narrow and deepest children, main's child has %v, want %v", again.Call.Tools, first.Call.Tools)
	}
	other := turn(childRun("other", "researcher", "1", 1))
	if other.Tools == first.Tools || other.Call.AgentID != "researcher" {
		t.Errorf("researcher's child shares main's tool set (or calls as %s)", other.Call.AgentID)
	}

	// The shared set refuses Add; a copy takes it alone.
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Add to a shared tool set did not panic")
			}
		}()
		first.Tools.Add(extraTool{})
	}()
	own := first.Tools.Clone()
	own.Add(extraTool{})
	if _, ok := turn(childRun("r1b", "main", "1", 1)).Tools.Get("extra"); ok {
		t.Error("a tool added to one run's copy reached another child")
	}

	// A reload makes a new set, with its settings.
	next, err := config.Parse("next.json5", []byte(fmt.Sprintf(baseConfig, h.llm.URL, "maxDepth: 1", "")), func(string) (string, bool) { return "", false })
	if err == nil {
		err = next.Validate()
	}
	if err != nil {
		t.Fatal(err)
	}
	m.SetConfig(next)
	after := turn(childRun("after", "main", "1", 1))
	if after.Tools == first.Tools || slices.Contains(after.Call.Tools, "sessions_spawn") {
		t.Errorf("after a reload to maxDepth 1 a child at depth 1 has %v (same set: %v)", after.Call.Tools, after.Tools == first.Tools)
	}
}

type extraTool struct{}

func (extraTool) Spec() agent.ToolSpec { return agent.ToolSpec{Name: "extra"} }
func (extraTool) Group() string        { return "" }
func (extraTool) Call(context.Context, agent.CallContext, json.RawMessage) (string, error) {
	return "", nil
}

// The one sessions_spawn tool serves every turn: two turns whose model
// used the same call ids each get their own prepared spawns — a call is
// answered with the run its own turn recorded, never the other's.
func TestSharedSpawnToolKeepsTurnsApart(t *testing.T) {
	h := newHarness(t, "maxChildrenPerSession: 5", "", standard)
	var spawn *spawnTool
	for _, tool := range h.m.SessionTools(0) {
		if st, ok := tool.(*spawnTool); ok {
			spawn = st
		}
	}
	if spawn == nil {
		t.Fatal("no sessions_spawn tool")
	}
	batches := map[string][]agent.PreparedCall{}
	for _, thread := range []string{"1", "2"} {
		for _, id := range []string{"toolu_1", "toolu_2"} {
			cc := caller(thread)
			cc.CallID, cc.Turn = id, "intake:"+thread
			batches[thread] = append(batches[thread], agent.PreparedCall{Ctx: context.Background(), CC: &cc,
				Args: json.RawMessage(`{"task":"work ` + thread + `/` + id + `"}`)})
		}
	}
	// Both turns prepare before either calls, as two parents answered
	// at once do. With a key of the call id alone, the second turn's
	// calls would look prepared already and be left out.
	spawn.Prepare(batches["1"])
	spawn.Prepare(batches["2"])
	spawn.mu.Lock()
	prepared := len(spawn.prepared)
	spawn.mu.Unlock()
	if prepared != 4 {
		spawn.Done(batches["1"])
		spawn.Done(batches["2"])
		t.Fatalf("%d calls prepared for two turns of two calls each, want 4", prepared)
	}
	runs := map[string]bool{}
	for thread, calls := range batches {
		for _, c := range calls {
			out, err := spawn.Call(c.Ctx, *c.CC, c.Args)
			if err != nil {
				t.Fatal(err)
			}
			var res SpawnResult
			if err := json.Unmarshal([]byte(out), &res); err != nil || res.Status != "accepted" {
				t.Fatalf("thread %s %s answered %s, %v", thread, c.CC.CallID, out, err)
			}
			if runs[res.RunID] {
				t.Errorf("thread %s %s was answered with a run another call had", thread, c.CC.CallID)
			}
			runs[res.RunID] = true
			r := subagenttest.WaitDone(t, h.db, res.RunID)
			if r.RequesterKey != c.CC.SessionKey || r.Task != "work "+thread+"/"+c.CC.CallID {
				t.Errorf("thread %s %s started run of %s with task %q", thread, c.CC.CallID, r.RequesterKey, r.Task)
			}
		}
	}
	spawn.mu.Lock()
	left := len(spawn.prepared)
	spawn.mu.Unlock()
	if left != 0 {
		t.Errorf("%d prepared spawns left after every call was made", left)
	}
}
