package subagent

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent/subagenttest"
)

// instantModel is a zero-latency in-process model: the child's first call
// gets a text answer, the announce step gets the Result/Notes form. With
// block set, every call waits until its context ends (a model that never
// answers, for the memory measure).
type instantModel struct {
	block bool
	calls atomic.Int64
}

func (p *instantModel) Complete(ctx context.Context, req agent.Request) (*agent.Response, error) {
	p.calls.Add(1)
	if p.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	last := ""
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == agent.RoleUser {
			last = req.Messages[i].Text
			break
		}
	}
	if strings.Contains(last, "Announce step") {
		return &agent.Response{Text: "Result:\ndone\n\nNotes:\n(none)", Usage: agent.Usage{Input: 100, Output: 20}, StopReason: "end_turn"}, nil
	}
	return &agent.Response{Text: "worked on it", Usage: agent.Usage{Input: 1000, Output: 200}, StopReason: "end_turn"}, nil
}

const benchConfig = `{
  models: { providers: {
    anthropic: { api: "anthropic", apiKey: "k", models: [{ id: "claude-test", cost: { input: 3, output: 15 } }] } } },
  agents: {
    defaults: { model: "anthropic/claude-test", subagents: { maxConcurrent: %d, maxChildrenPerSession: 1000000, maxTotalSpawns: 1000000 } },
    list: [ { id: "main" } ],
  },
}`

// benchManager is a started Manager on a real store in a temp dir, its
// provider replaced by model. announced counts announces written to the
// outbox (Notify is called once per announce, after its transaction).
type benchManager struct {
	m         *Manager
	db        *store.DB
	announced atomic.Int64
	wake      chan struct{}
}

func newBenchManager(tb testing.TB, model agent.Provider, maxConcurrent int, log *zap.Logger) *benchManager {
	tb.Helper()
	p := subagenttest.New(tb, fmt.Sprintf(benchConfig, maxConcurrent), func(string, config.Provider) (agent.Provider, error) { return model, nil })
	bm := &benchManager{db: p.Store, wake: make(chan struct{}, 1)}
	bm.m = New(Deps{
		Config: p.Config, Store: p.Store, Catalog: p.Catalog, Tools: p.Tools, Workspace: p.WorkspaceOf,
		Notify: func() {
			bm.announced.Add(1)
			select {
			case bm.wake <- struct{}{}:
			default:
			}
		},
		Logger: log,
	})
	if err := bm.m.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	subagenttest.StopAtCleanup(tb, bm.m)
	return bm
}

// waitAnnounced waits until n announces are in the outbox, at most 10 min
// (a benchmark with a large -benchtime may take long; a stuck run fails).
func (bm *benchManager) waitAnnounced(tb testing.TB, n int64) {
	tb.Helper()
	deadline := time.After(10 * time.Minute)
	for bm.announced.Load() < n {
		select {
		case <-bm.wake:
		case <-time.After(time.Second):
		case <-deadline:
			tb.Fatalf("%d of %d announces written", bm.announced.Load(), n)
		}
	}
}

// cpuTime is the user+system CPU time this process has used.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRunLifecycle measures the gateway's own cost of one sub-agent run
// with a model that answers instantly: spawn (limits, run + child session
// rows) → lane → child turn (transcript lines) → announce step → run end and
// announce in one transaction. b.N runs are spawned over 256 requester
// sessions, then the benchmark waits until every announce is in the outbox.
// "nolog" discards logs; "jsonlog" encodes every info line as the daemon
// does (JSON) into io.Discard.
func BenchmarkRunLifecycle(b *testing.B) {
	jsonLog := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))
	for _, bc := range []struct {
		name string
		log  *zap.Logger
	}{{"nolog", zap.NewNop()}, {"jsonlog", jsonLog}} {
		b.Run(bc.name, func(b *testing.B) {
			model := &instantModel{}
			bm := newBenchManager(b, model, 8, bc.log)
			ctx := context.Background()
			callers := make([]agent.CallContext, 256)
			for i := range callers {
				callers[i] = caller("bench-" + strconv.Itoa(i))
			}
			b.ReportAllocs()
			runtime.GC()
			cpu0 := cpuTime(b)
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				res := bm.m.Spawn(ctx, callers[i%len(callers)], SpawnParams{Task: "benchmark task " + strconv.Itoa(i), Label: "bench"})
				if res.Status != "accepted" {
					b.Fatalf("spawn %d: %+v", i, res)
				}
			}
			bm.waitAnnounced(b, int64(b.N))
			elapsed := time.Since(start)
			b.StopTimer()
			cpu := cpuTime(b) - cpu0
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "runs/s")
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/run")
			if got := model.calls.Load(); got != int64(2*b.N) {
				b.Fatalf("model called %d times for %d runs, want 2 per run", got, b.N)
			}
			pending, _, _, err := bm.db.OutboxStats(ctx)
			if err != nil || pending != b.N {
				b.Fatalf("outbox pending = %d, %v; want %d", pending, err, b.N)
			}
		})
	}
}

// TestQueued10kMemory spawns 10,000 runs whose model never answers, so 8 run
// and the rest wait on the lane, and reports the Go heap and the process RSS
// with all of them live. It is a load measure, not a unit test: it runs only
// with HERALD_LOAD=1 (HERALD_LOAD_RUNS and HERALD_LOAD_CONCURRENT change the
// run count and the lane size).
func TestQueued10kMemory(t *testing.T) {
	if os.Getenv("HERALD_LOAD") != "1" {
		t.Skip("load measure: set HERALD_LOAD=1 to run")
	}
	runs := envInt(t, "HERALD_LOAD_RUNS", 10000)
	lanes := envInt(t, "HERALD_LOAD_CONCURRENT", 8)
	model := &instantModel{block: true}
	bm := newBenchManager(t, model, lanes, zap.NewNop())
	ctx := context.Background()

	before := heapInUse()
	start := time.Now()
	cpu0 := cpuTime(t)
	for i := 0; i < runs; i++ {
		res := bm.m.Spawn(ctx, caller("load-"+strconv.Itoa(i%1000)), SpawnParams{Task: "load task " + strconv.Itoa(i)})
		if res.Status != "accepted" {
			t.Fatalf("spawn %d: %+v", i, res)
		}
	}
	spawnTime, spawnCPU := time.Since(start), cpuTime(t)-cpu0
	deadline := time.Now().Add(20 * time.Second)
	for model.calls.Load() < int64(min(lanes, runs)) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d runs reached the model", model.calls.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	queued, running := bm.m.Lane().Stats()
	after := heapInUse()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss := rssKB()
	t.Logf("%d runs live (%d running, %d queued): heap in use %.1f MB (%.1f MB before spawning, %.1f KB per run), goroutine stacks %.1f MB, Go runtime total %.1f MB, RSS %.1f MB, %d goroutines; spawning took %v wall, %v CPU (%.3f ms CPU per spawn)",
		runs, running, queued, mb(after), mb(before), float64(after-before)/1024/float64(runs), mb(ms.StackInuse), mb(ms.Sys), float64(rss)/1024, runtime.NumGoroutine(),
		spawnTime.Round(time.Millisecond), spawnCPU.Round(time.Millisecond), float64(spawnCPU.Microseconds())/1000/float64(runs))
	if running+queued != runs {
		t.Errorf("lane holds %d running + %d queued, want %d", running, queued, runs)
	}

	stopStart := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	bm.m.Shutdown(sctx)
	if q, r := bm.m.Lane().Stats(); q != 0 || r != 0 {
		t.Errorf("after shutdown the lane holds %d queued, %d running", q, r)
	}
	t.Logf("shutdown with %d live runs took %v", runs, time.Since(stopStart).Round(time.Millisecond))
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func mb(n uint64) float64 { return float64(n) / (1 << 20) }

// rssKB is the process's resident set size from /proc (0 elsewhere).
func rssKB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// BenchmarkRunCtxText is the per-chunk cost of a streamed child's text
// (RunCtx.Text, called for every delta of every child run): with no
// viewer (no thread of its own, no /focus) and with a /focus view. Run
// in parallel, as many children stream at once, so a lock shared by all
// runs shows up.
func BenchmarkRunCtxText(b *testing.B) {
	for _, focused := range []bool{false, true} {
		name := "unseen"
		if focused {
			name = "focused"
		}
		b.Run(name, func(b *testing.B) {
			m := &Manager{live: map[string]*liveRun{}}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				lr := &liveRun{}
				if focused {
					lr.focus.Store(&liveView{p: textSink(func(string) {})})
				}
				rc := &RunCtx{m: m, lr: lr}
				for pb.Next() {
					rc.Text("the child's message so far")
				}
			})
		})
	}
}
