package subagent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent/subagenttest"
)

// spawnCounter counts the spawn transactions a Manager makes, by
// requester: SpawnRun (one spawn) and SpawnEach (the spawns of one model
// response) are one store transaction each.
type spawnCounter struct {
	Store
	mu   sync.Mutex
	one  map[string]int // SpawnRun calls by requester
	each map[string]int // SpawnEach calls by the first run's requester
	runs map[string]int // runs given to SpawnEach by requester
}

func (s *spawnCounter) SpawnRun(ctx context.Context, r *store.Run, child *store.Session, lim store.SpawnLimits) error {
	s.mu.Lock()
	s.one[r.RequesterKey]++
	s.mu.Unlock()
	return s.Store.SpawnRun(ctx, r, child, lim)
}

func (s *spawnCounter) SpawnEach(ctx context.Context, runs []*store.Run, children []*store.Session, lim store.SpawnLimits) ([]error, error) {
	s.mu.Lock()
	s.each[runs[0].RequesterKey]++
	for _, r := range runs {
		s.runs[r.RequesterKey]++
	}
	s.mu.Unlock()
	return s.Store.SpawnEach(ctx, runs, children, lim)
}

func (s *spawnCounter) counts(requester string) (one, each, runs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.one[requester], s.each[requester], s.runs[requester]
}

// A model response with several sessions_spawn calls records their runs
// in one transaction, and each call still answers as it would alone: the
// calls within maxChildrenPerSession are accepted with runs of their own,
// the ones past it refused with the limit's message, in order; a call
// with bad arguments gets its error and takes no slot.
func TestSpawnCallsOfOneResponseShareOneTransaction(t *testing.T) {
	block := make(chan struct{})
	results := make(chan []agent.ToolResult, 1)
	calls := []string{`{"task":"g1"}`, `{"task":"g2","label":"two"}`, `{}`, `{"task":"g3"}`, `{"task":"g4"}`, `{"task":"g5"}`}
	llm := llmtest.NewAnthropic(t, func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "- Task: fan out") && !strings.HasPrefix(c.LastUser(), "Announce") {
			if len(c.Messages) == 1 {
				var tc []agent.ToolCall
				for i, args := range calls {
					tc = append(tc, agent.ToolCall{ID: fmt.Sprintf("toolu_fan_%d", i), Name: "sessions_spawn", Args: json.RawMessage(args)})
				}
				return llmtest.Reply{ToolCalls: tc}
			}
			var rs []agent.ToolResult
			for _, m := range c.Messages {
				rs = append(rs, m.ToolResults...)
			}
			select {
			case results <- rs:
			default:
			}
			return llmtest.Reply{Text: "spawned them"}
		}
		if strings.Contains(c.System, "Sub-agent context") && strings.Contains(c.System, "- Task: g") && !strings.HasPrefix(c.LastUser(), "Announce") {
			<-block // the grandchildren stay live: they fill maxChildrenPerSession
		}
		return standard(c)
	})
	defer close(block)
	p := subagenttest.New(t, fmt.Sprintf(baseConfig, llm.URL, "maxDepth: 2, maxChildrenPerSession: 3", ""), nil)
	st := &spawnCounter{Store: p.Store, one: map[string]int{}, each: map[string]int{}, runs: map[string]int{}}
	m := startManager(t, p, st)

	r := m.Spawn(context.Background(), caller("1"), SpawnParams{Task: "fan out"})
	if r.Status != "accepted" {
		t.Fatalf("spawn: %+v", r)
	}
	var got []agent.ToolResult
	select {
	case got = <-results:
	case <-time.After(20 * time.Second):
		t.Fatal("the child's model was never called with its tool results")
	}
	if len(got) != len(calls) {
		t.Fatalf("%d tool results, want %d: %+v", len(got), len(calls), got)
	}
	child, err := p.Store.GetRun(context.Background(), r.RunID)
	if err != nil {
		t.Fatal(err)
	}
	requester := child.ChildKey
	runIDs := map[string]bool{}
	for i, res := range got {
		var sr SpawnResult
		if err := json.Unmarshal([]byte(res.Content), &sr); err != nil {
			t.Fatalf("result %d %q: %v", i, res.Content, err)
		}
		if want := fmt.Sprintf("toolu_fan_%d", i); res.CallID != want {
			t.Errorf("result %d answers %s, want %s", i, res.CallID, want)
		}
		switch i {
		case 0, 1, 3:
			if sr.Status != "accepted" || sr.RunID == "" || runIDs[sr.RunID] || sr.ModelApplied != "anthropic/claude-test" {
				t.Errorf("call %d = %+v, want accepted with a run of its own", i, sr)
			}
			runIDs[sr.RunID] = true
			run, err := p.Store.RunBySpawnCall(context.Background(), requester, res.CallID)
			if err != nil || run.ID != sr.RunID || run.Batch != "" || run.ChildKey != sr.ChildSessionKey {
				t.Errorf("run of call %d = %+v, %v", i, run, err)
			}
		case 2:
			if sr.Status != "error" || !strings.Contains(sr.Error, `"task" is required`) {
				t.Errorf("call without a task = %+v", sr)
			}
		default:
			want := "limit reached: this session already has 3 running or queued sub-agents (maxChildrenPerSession 3); wait for an announce or stop one"
			if sr.Status != "forbidden" || sr.Error != want {
				t.Errorf("call %d past the limit = %+v, want forbidden: %s", i, sr, want)
			}
		}
	}
	one, each, runs := st.counts(child.ChildKey)
	if one != 0 || each != 1 || runs != 5 {
		t.Errorf("the response's spawns made %d SpawnRun and %d SpawnEach transactions (%d runs), want one SpawnEach of the 5 spawns with a task", one, each, runs)
	}
	if n, err := p.Store.ListRuns(context.Background(), store.RunFilter{RequesterKey: child.ChildKey}); err != nil || len(n) != 3 {
		t.Errorf("runs stored for the child = %d, %v; want the 3 accepted", len(n), err)
	}
}
