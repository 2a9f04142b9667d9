package schedule

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

// benchRuns records when each firing's run reached the lane (StartScheduled),
// measured from its due time.
type benchRuns struct {
	fakeRuns
	mu   sync.Mutex
	lags []time.Duration
	all  chan struct{}
	want int
}

func (b *benchRuns) StartScheduled(r *store.Run) {
	lag := time.Since(r.ScheduleDue)
	b.mu.Lock()
	b.lags = append(b.lags, lag)
	if len(b.lags) == b.want {
		close(b.all)
	}
	b.mu.Unlock()
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func addMany(tb testing.TB, db *store.DB, n int, due time.Time) {
	tb.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		err := db.AddSchedule(ctx, &store.Schedule{ID: fmt.Sprintf("b%05d", i), SessionKey: fmt.Sprintf("agent:main:web:dm:c%d", i%500),
			AgentID: "main", Kind: store.ScheduleEvery, Expr: "1m0s", Task: "check", Timezone: "UTC",
			Origin: channels.Origin{Channel: "web", ChatID: fmt.Sprintf("c%d", i%500), ChatType: channels.ChatDM}, NextDue: due}, 0)
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkScheduler10kDue: 10,000 schedules due at the same moment; the
// figures are the time from the due time to each run being recorded and
// on the lane (p50, p99, max) and the process CPU per firing. (Run start
// itself then waits for a free slot of the subagent lane.)
func BenchmarkScheduler10kDue(b *testing.B) {
	const n = 10000
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db := openStore(b)
		// Far enough ahead that storing 10,000 schedules is done by then.
		due := time.Now().Add(3*time.Second + n*time.Millisecond).Truncate(time.Second)
		addMany(b, db, n, due)
		if time.Until(due) < time.Second {
			b.Fatalf("storing the schedules took until %v before their due time", time.Until(due))
		}
		runs := &benchRuns{all: make(chan struct{}), want: n}
		cfg := config.Default(func(string) (string, bool) { return "", false })
		s := New(Deps{Store: db, Runs: runs, Config: cfg})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); s.Run(ctx) }()
		time.Sleep(time.Until(due) - 100*time.Millisecond) // the benchmark's own setup: wait for the due time
		b.StartTimer()
		cpu0 := cpuTime()
		select {
		case <-runs.all:
		case <-time.After(5 * time.Minute):
			b.Fatalf("%d of %d fired", len(runs.lags), n)
		}
		cpu := cpuTime() - cpu0
		b.StopTimer()
		cancel()
		<-done
		slices.Sort(runs.lags)
		b.ReportMetric(float64(runs.lags[n/2].Milliseconds()), "p50-ms")
		b.ReportMetric(float64(runs.lags[n*99/100].Milliseconds()), "p99-ms")
		b.ReportMetric(float64(runs.lags[n-1].Milliseconds()), "max-ms")
		b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-µs/firing")
	}
}

// BenchmarkSchedulerIdle10k: a scheduler holding 10,000 schedules, none due
// for an hour, for 10 s: the process CPU it uses per second.
func BenchmarkSchedulerIdle10k(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db := openStore(b)
		addMany(b, db, 10000, time.Now().Add(time.Hour))
		cfg := config.Default(func(string) (string, bool) { return "", false })
		s := New(Deps{Store: db, Runs: &fakeRuns{}, Config: cfg})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		b.StartTimer()
		cpu0 := cpuTime()
		go func() { defer close(done); s.Run(ctx) }()
		time.Sleep(10 * time.Second) // the measured idle period
		cpu := cpuTime() - cpu0
		cancel()
		<-done
		b.ReportMetric(float64(cpu.Microseconds())/10/1000, "cpu-ms/s")
	}
}
