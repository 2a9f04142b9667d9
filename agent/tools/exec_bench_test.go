//go:build linux

package tools

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/sandbox"
)

// BenchmarkExecTrue measures one exec call of `true` under each sandbox
// mechanism that works here (the figures in docs/performance.md):
//
//	go test -run '^$' -bench BenchmarkExecTrue -benchtime 100x ./agent/tools
//
// It reports the median and the 90th percentile besides the mean.
func BenchmarkExecTrue(b *testing.B) {
	r := sandbox.Probe()
	for _, m := range []struct {
		mech string
		ok   bool
	}{{sandbox.Off, true}, {sandbox.Bwrap, r.Bwrap.OK}, {sandbox.Landlock, r.Landlock.OK}} {
		b.Run(m.mech, func(b *testing.B) {
			if !m.ok {
				b.Skipf("%s does not work here", m.mech)
			}
			cc := agent.CallContext{AgentID: "main", Workspace: b.TempDir()}
			tool := NewExec(Options{Sandbox: sandbox.Policy{Mechanism: m.mech}})
			raw := json.RawMessage(`{"command":"true"}`)
			took := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				out, err := tool.Call(context.Background(), cc, raw)
				took = append(took, time.Since(start))
				if err != nil {
					b.Fatalf("%s: %v", out, err)
				}
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms-median")
			b.ReportMetric(float64(took[len(took)*9/10].Microseconds())/1000, "ms-p90")
		})
	}
}
