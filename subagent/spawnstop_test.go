package subagent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent/subagenttest"
)

// stopAfterSpawnEach calls stop once SpawnEach has committed a model
// response's spawns, i.e. while their runs are recorded running in the
// store but not live yet (each goes live only when its own tool call
// runs): the window of review finding 3.
type stopAfterSpawnEach struct {
	Store
	stop func(runs []*store.Run)
}

func (s *stopAfterSpawnEach) SpawnEach(ctx context.Context, runs []*store.Run, children []*store.Session, lim store.SpawnLimits) ([]error, error) {
	errs, err := s.Store.SpawnEach(ctx, runs, children, lim)
	if err == nil {
		s.stop(runs)
	}
	return errs, err
}

// A stop that comes after a response's spawns are recorded but before
// they are live still stops them (941c32c, 09eda9d; review finding 4 c):
// StopLocal of each run reports it stopped, a sub-tree StopBelowLocal of
// their requester counts them, and the runs end 'stopped' without their
// model calls (which would hold until the test ends) finishing them.
func TestStopWhileSpawnEachRecordsRuns(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(t *testing.T, m *Manager, runs []*store.Run)
	}{
		{"StopLocal", func(t *testing.T, m *Manager, runs []*store.Run) {
			for _, r := range runs {
				if n, stopped := m.StopLocal(context.Background(), r.ID); !stopped || n != 1 {
					t.Errorf("StopLocal(%s) = %d, %v; want 1, true", r.ID, n, stopped)
				}
			}
		}},
		{"StopBelowLocal", func(t *testing.T, m *Manager, runs []*store.Run) {
			if n := m.StopBelowLocal(context.Background(), runs[0].RequesterKey); n != len(runs) {
				t.Errorf("StopBelowLocal(requester) = %d, want %d", n, len(runs))
			}
		}},
		{"StopBelowLocalRoot", func(t *testing.T, m *Manager, runs []*store.Run) {
			// As /stop does: the fan-out run (live) and its two spawns.
			if n := m.StopBelowLocal(context.Background(), runs[0].RootKey); n != len(runs)+1 {
				t.Errorf("StopBelowLocal(root) = %d, want %d", n, len(runs)+1)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			block := make(chan struct{})
			var childCalls atomic.Int32
			llm := llmtest.NewAnthropic(t, func(c llmtest.Call) llmtest.Reply {
				if strings.Contains(c.System, "- Task: fan out") && !strings.HasPrefix(c.LastUser(), "Announce") {
					if len(c.Messages) == 1 {
						var tc []agent.ToolCall
						for i := range 2 {
							tc = append(tc, agent.ToolCall{ID: fmt.Sprintf("toolu_fan_%d", i), Name: "sessions_spawn",
								Args: json.RawMessage(fmt.Sprintf(`{"task":"g%d"}`, i))})
						}
						return llmtest.Reply{ToolCalls: tc}
					}
					return llmtest.Reply{Text: "spawned them"}
				}
				if strings.Contains(c.System, "Sub-agent context") && strings.Contains(c.System, "- Task: g") && !strings.HasPrefix(c.LastUser(), "Announce") {
					childCalls.Add(1)
					<-block // a child that is not stopped never ends in this test
				}
				return standard(c)
			})
			defer close(block)
			p := subagenttest.New(t, fmt.Sprintf(baseConfig, llm.URL, "maxDepth: 2, maxChildrenPerSession: 5", ""), nil)
			var (
				once    sync.Once
				stopped = make(chan []*store.Run, 1)
				m       *Manager
			)
			st := &stopAfterSpawnEach{Store: p.Store, stop: func(runs []*store.Run) {
				once.Do(func() {
					tc.stop(t, m, runs)
					stopped <- runs
				})
			}}
			m = startManager(t, p, st)

			r := m.Spawn(context.Background(), caller("1"), SpawnParams{Task: "fan out"})
			if r.Status != "accepted" {
				t.Fatalf("spawn: %+v", r)
			}
			var runs []*store.Run
			select {
			case runs = <-stopped:
			case <-time.After(30 * time.Second):
				t.Fatal("the fan-out run's spawns were not recorded in one SpawnEach")
			}
			if len(runs) != 2 {
				t.Fatalf("SpawnEach recorded %d runs, want 2", len(runs))
			}
			for _, run := range runs {
				if got := subagenttest.WaitDone(t, p.Store, run.ID); got.Outcome != store.OutcomeStopped {
					t.Errorf("run %s (%s) ended %s (%q), want stopped", run.ID, run.Task, got.Outcome, got.Note)
				}
			}
			m.mu.Lock()
			left := len(m.spawning)
			m.mu.Unlock()
			if left != 0 {
				t.Errorf("%d runs left in m.spawning after they went live", left)
			}
			t.Logf("children's model calls made (and cancelled): %d", childCalls.Load())
		})
	}
}
