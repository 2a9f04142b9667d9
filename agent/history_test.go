package agent_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/heraldhq/herald/agent"
)

// A response's tool results merge into one tool message in history, in
// order; a view of the history taken before a result keeps what it held,
// and results slices the session did not make are never written into.
func TestToolResultsMergeInPlace(t *testing.T) {
	ctx := context.Background()
	const n = 100
	s := &agent.Session{Key: "k"}
	calls := make([]agent.ToolCall, n)
	for i := range calls {
		calls[i] = agent.ToolCall{ID: "c" + strconv.Itoa(i), Name: "sessions_spawn"}
	}
	if err := s.Record(ctx, agent.Message{Role: agent.RoleAssistant, ToolCalls: calls}, nil, "", nil); err != nil {
		t.Fatal(err)
	}
	var views [][]agent.ToolResult
	record := func(i int) {
		t.Helper()
		r := agent.ToolResult{CallID: "c" + strconv.Itoa(i), Content: strconv.Itoa(i)}
		if err := s.Record(ctx, agent.Message{Role: agent.RoleTool, ToolResults: []agent.ToolResult{r}}, nil, "", nil); err != nil {
			t.Fatal(err)
		}
		views = append(views, s.History[len(s.History)-1].ToolResults)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range n {
		record(i)
	}
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	if len(s.History) != 2 || len(s.History[1].ToolResults) != n {
		t.Fatalf("history = %d messages, last with %d results; want 2, %d", len(s.History), len(s.History[1].ToolResults), n)
	}
	for i, v := range views {
		if len(v) != i+1 {
			t.Fatalf("view %d holds %d results", i, len(v))
		}
		for j, r := range v {
			if r.CallID != "c"+strconv.Itoa(j) {
				t.Fatalf("view %d result %d = %s", i, j, r.CallID)
			}
		}
	}
	// One clone of the list per result copies 5,050 results (~280 KB);
	// amortised growth a few hundred, with the test's own allocations.
	t.Logf("allocated %d", allocated)
	if allocated > 100<<10 {
		t.Errorf("%d results allocated %d bytes", n, allocated)
	}

	// History set from outside: its last results have spare room that is
	// not the session's, and stay untouched.
	outside := make([]agent.ToolResult, 1, 8)
	outside[0] = agent.ToolResult{CallID: "o0"}
	s.History = []agent.Message{{Role: agent.RoleAssistant, ToolCalls: calls[:2]}, {Role: agent.RoleTool, ToolResults: outside}}
	if err := s.Record(ctx, agent.Message{Role: agent.RoleTool, ToolResults: []agent.ToolResult{{CallID: "o1"}}}, nil, "", nil); err != nil {
		t.Fatal(err)
	}
	if got := s.History[1].ToolResults; len(got) != 2 || got[0].CallID != "o0" || got[1].CallID != "o1" {
		t.Errorf("merged results = %+v", got)
	}
	if spare := outside[:2][1]; spare.CallID != "" {
		t.Errorf("the outside slice's spare room was written: %+v", spare)
	}
}
