package acp

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/coder/acp-go-sdk"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/acp/acptest"
)

// cpuTime is the CPU this process used so far (user + system), its
// children (the agents) excluded.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

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

// BenchmarkRunningAgentMemory: the gateway's own heap, goroutines and CPU
// per running ACP agent (the agents' processes excluded): n slow agents
// are started and held mid-prompt, then measured against the idle
// baseline; the CPU is that of a 2 s window while they wait (their
// prompts are at work, sending nothing).
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
		const window = 2 * time.Second
		c0 := cpuTime(b)
		time.Sleep(window) // the window measured, not a wait for a condition
		idle := cpuTime(b) - c0
		cancel()
		done.Wait()
		b.ReportMetric(float64(int64(during.HeapAlloc)-int64(before.HeapAlloc))/n/1024, "KiB-heap/agent")
		b.ReportMetric(float64(g1-g0)/n, "goroutines/agent")
		b.ReportMetric(float64(idle.Microseconds())/1000/n/window.Seconds(), "cpu-ms/agent/s")
	}
}

// BenchmarkUpdateCPU: the gateway's CPU per session/update of an agent at
// work (the agent's process excluded): the fake sends
// acptest.ChattyUpdates updates (message chunks, tool calls starting and
// completing), each written to the run's transcript and shown as its
// activity, as a run does.
func BenchmarkUpdateCPU(b *testing.B) {
	var cpu time.Duration
	for b.Loop() {
		j, _ := fakeJob(b, "chatty")
		var n int
		j.OnActivity = func(string) { n++ }
		c0 := cpuTime(b)
		if res := Run(context.Background(), j); res.Err != nil || res.Text != "Done chatting." {
			b.Fatalf("Run = %+v", res)
		}
		cpu += cpuTime(b) - c0
		if n < acptest.ChattyUpdates*2/3 {
			b.Fatalf("%d activity lines for %d updates", n, acptest.ChattyUpdates)
		}
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N)/acptest.ChattyUpdates, "cpu-µs/update")
}

// chunkRunner is a runner fed message chunks directly (no agent process),
// its text and activity going where a run's go.
func chunkRunner() *runner {
	return &runner{j: Job{OnText: func(string) {}, OnActivity: func(string) {}, Clock: agent.SystemClock{}},
		log: zap.NewNop(), ctx: context.Background(), open: map[string]agent.ToolCall{}}
}

// feedChunks sends one message of n chunks of 100 bytes (no newline).
func feedChunks(r *runner, n int) {
	chunk := strings.Repeat("x", 99) + " "
	for range n {
		r.update(context.Background(), sdk.UpdateAgentMessageText(chunk))
	}
	r.mu.Lock()
	r.text.Reset()
	r.mu.Unlock()
}

// BenchmarkMessageChunks: the gateway's cost of an agent's message chunks
// (transcript aside) per chunk, for messages of 1,000 and 10,000 chunks of
// 100 bytes: the same per chunk whatever the message's length (it was
// the message so far, copied per chunk: quadratic).
//
//	go test -tags goolm -run '^$' -bench MessageChunks ./agent/acp/
func BenchmarkMessageChunks(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("chunks=%d", n), func(b *testing.B) {
			r := chunkRunner()
			b.ReportAllocs()
			for b.Loop() {
				feedChunks(r, n)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/chunk")
		})
	}
}

// TestMessageChunksCostTheirLength: a 200 KB message in 2,000 chunks
// allocates about its own size, not the message so far per chunk (which
// was 2,000 copies of up to 200 KB, ×4 as runes: ~800 MB).
func TestMessageChunksCostTheirLength(t *testing.T) {
	r := chunkRunner()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	feedChunks(r, 2000)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Errorf("2,000 chunks of a 200 KB message allocated %d MB; want about the message's size", got>>20)
	}
}
