package acp

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

// BenchmarkSpawnToFirstUpdate: from Run (the sandboxed process starts) to
// the agent's first session/update reaching the run, through initialize,
// session/new and session/prompt; the fake agent answers at once, so this
// is Herald's share of the latency plus a process start in the sandbox.
//
//	go test -tags goolm -run '^$' -bench SpawnToFirstUpdate ./agent/acp/
func BenchmarkSpawnToFirstUpdate(b *testing.B) {
	var total time.Duration
	for b.Loop() {
		j, _ := fakeJob(b, "nousage")
		first := make(chan time.Duration, 1)
		start := time.Now()
		j.OnActivity = func(string) {
			select {
			case first <- time.Since(start):
			default:
			}
		}
		if res := Run(context.Background(), j); res.Err != nil {
			b.Fatal(res.Err)
		}
		total += <-first
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms/first-update")
}

// BenchmarkRunningAgentMemory: the gateway's own heap and goroutines per
// running ACP agent (the agents' processes excluded): n slow agents are
// started and held mid-prompt, then measured against the idle baseline.
func BenchmarkRunningAgentMemory(b *testing.B) {
	const n = 8
	for b.Loop() {
		runtime.GC()
		var before, during runtime.MemStats
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		ctx, cancel := context.WithCancel(context.Background())
		var started, done sync.WaitGroup
		started.Add(n)
		for range n {
			j, _ := fakeJob(b, "slow")
			var once sync.Once
			j.OnActivity = func(string) { once.Do(started.Done) }
			done.Add(1)
			go func() { defer done.Done(); Run(ctx, j) }()
		}
		started.Wait()
		runtime.GC()
		runtime.ReadMemStats(&during)
		g1 := runtime.NumGoroutine()
		cancel()
		done.Wait()
		b.ReportMetric(float64(int64(during.HeapAlloc)-int64(before.HeapAlloc))/n/1024, "KiB-heap/agent")
		b.ReportMetric(float64(g1-g0)/n, "goroutines/agent")
	}
}
