package schedule

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/devtools/pgtest"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent"
	"github.com/heraldhq/herald/subagent/subagenttest"
)

// instantModel answers at once: work, then the announce step's form.
type instantModel struct{}

func (instantModel) Complete(_ context.Context, req agent.Request) (*agent.Response, error) {
	if n := len(req.Messages); n > 0 && strings.Contains(req.Messages[n-1].Text, "Announce step") {
		return &agent.Response{Text: "Result:\ndone\n\nNotes:\n(none)", Usage: agent.Usage{Input: 100, Output: 20}, StopReason: "end_turn"}, nil
	}
	return &agent.Response{Text: "checked", Usage: agent.Usage{Input: 1000, Output: 200}, StopReason: "end_turn"}, nil
}

const runsBenchConfig = `{
  models: { providers: { anthropic: { api: "anthropic", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m", subagents: { maxConcurrent: %d } }, list: [ { id: "main" } ] },
}`

// BenchmarkScheduler10kDueToRunStart: 10,000 schedules due at one second
// fired into a real sub-agent Manager (lane maxConcurrent 8, a zero-latency
// model, SQLite): the time from each due time to its run's start (StartedAt,
// the lane slot taken) and to its announce being written, p50 and p99, and
// the process CPU per scheduled run (firing, run, announce step, announce).
func BenchmarkScheduler10kDueToRunStart(b *testing.B) {
	if pgtest.OnPostgres() {
		b.Skip("subagenttest's store is SQLite")
	}
	const n = 10000
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		p := subagenttest.New(b, fmt.Sprintf(runsBenchConfig, 8), func(string, config.Provider) (agent.Provider, error) { return instantModel{}, nil })
		var announced atomic.Int64
		all := make(chan struct{})
		m := subagent.New(subagent.Deps{Config: p.Config, Store: p.Store, Catalog: p.Catalog, Tools: p.Tools, Workspace: p.WorkspaceOf,
			Notify: func() {
				if announced.Add(1) == n {
					close(all)
				}
			}})
		if err := m.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		subagenttest.StopAtCleanup(b, m)
		due := time.Now().Add(3*time.Second + n*time.Millisecond).Truncate(time.Second)
		addMany(b, p.Store, n, due)
		s := New(Deps{Store: p.Store, Runs: m, Config: p.Config})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); s.Run(ctx) }()
		time.Sleep(time.Until(due) - 100*time.Millisecond) // the benchmark's own setup: wait for the due time
		b.StartTimer()
		cpu0 := cpuTime()
		select {
		case <-all:
		case <-time.After(10 * time.Minute):
			b.Fatalf("%d of %d announced", announced.Load(), n)
		}
		cpu := cpuTime() - cpu0
		b.StopTimer()
		cancel()
		<-done
		runs, err := p.Store.ListRuns(context.Background(), store.RunFilter{})
		if err != nil || len(runs) != n {
			b.Fatalf("%d runs (%v)", len(runs), err)
		}
		var start, end []time.Duration
		for _, r := range runs {
			start = append(start, r.StartedAt.Sub(r.ScheduleDue))
			end = append(end, r.EndedAt.Sub(r.ScheduleDue))
		}
		slices.Sort(start)
		slices.Sort(end)
		b.ReportMetric(float64(start[n/2].Milliseconds()), "start-p50-ms")
		b.ReportMetric(float64(start[n*99/100].Milliseconds()), "start-p99-ms")
		b.ReportMetric(float64(end[n*99/100].Milliseconds()), "ended-p99-ms")
		b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-µs/run")
	}
}
