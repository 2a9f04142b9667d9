package schedule

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

// fakeRuns records the runs the scheduler starts.
type fakeRuns struct {
	mu      sync.Mutex
	n       int
	started []*store.Run
	broken  string // a schedule id whose runs the store cannot record (no child key)
}

func (f *fakeRuns) ScheduledRun(s *store.Schedule, due time.Time, note string) (*store.Run, *store.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	id := fmt.Sprintf("run-%d", f.n)
	child := "agent:main:subagent:" + id
	if s.ID == f.broken {
		child = ""
	}
	return &store.Run{ID: id, ChildKey: child, ChildSessionID: "sess-" + id, RequesterKey: s.SessionKey,
		Depth: 1, AgentID: s.AgentID, Task: s.Task, Origin: s.Origin, CostUSD: -1, ScheduleDue: due, Note: note}, &store.Session{}, nil
}

func (f *fakeRuns) StartScheduled(r *store.Run) {
	f.mu.Lock()
	f.started = append(f.started, r)
	f.mu.Unlock()
}

func (f *fakeRuns) dues() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, r := range f.started {
		out = append(out, r.ScheduleDue.Format("15:04:05"))
	}
	return out
}

type testEnv struct {
	db    *store.DB
	clock *fakeClock
	runs  *fakeRuns
	s     *Scheduler
	fired map[string]int
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	db := openStore(t)
	e := &testEnv{db: db, clock: &fakeClock{now: base}, runs: &fakeRuns{}, fired: map[string]int{}}
	cfg := config.Default(func(string) (string, bool) { return "", false })
	e.s = New(Deps{Store: db, Runs: e.runs, Config: cfg, Clock: e.clock,
		OnFiring: func(r string, n int) { e.fired[r] += n }})
	return e
}

func (e *testEnv) add(t *testing.T, id, every, catchUp string) {
	t.Helper()
	w, err := Parse(store.ScheduleEvery, every, "UTC")
	if err != nil {
		t.Fatal(err)
	}
	err = e.db.AddSchedule(context.Background(), &store.Schedule{ID: id, SessionKey: "agent:main:web:dm:c1", AgentID: "main",
		Kind: store.ScheduleEvery, Expr: w.Expr, Task: "check", CatchUp: catchUp,
		Origin: channels.Origin{Channel: "web", ChatID: "c1", ChatType: channels.ChatDM}, NextDue: w.First(e.clock.Now())}, 0)
	if err != nil {
		t.Fatal(err)
	}
}

func (e *testEnv) tick(t *testing.T, at time.Time) int {
	t.Helper()
	e.clock.Set(at)
	n, err := e.s.Tick(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// finishAll ends every started run with outcome.
func (e *testEnv) finishAll(t *testing.T, outcome string) {
	t.Helper()
	e.runs.mu.Lock()
	runs := e.runs.started
	e.runs.mu.Unlock()
	for _, r := range runs {
		got, _ := e.db.GetRun(context.Background(), r.ID)
		if got.Status == store.StatusDone {
			continue
		}
		rr := *got
		rr.Outcome, rr.Status = outcome, store.StatusDone
		if err := e.db.FinishRun(context.Background(), &rr, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSchedulerFiresEachDueTimeOnceInOrder(t *testing.T) {
	e := newTestEnv(t)
	e.add(t, "s", "1m", "latest")
	for i := 0; i <= 5; i++ {
		// A few passes per minute, slightly late as a real timer is.
		e.tick(t, base.Add(time.Duration(i)*time.Minute))
		e.tick(t, base.Add(time.Duration(i)*time.Minute+10*time.Millisecond))
		e.tick(t, base.Add(time.Duration(i)*time.Minute+30*time.Second))
		e.finishAll(t, store.OutcomeSuccess)
	}
	got := fmt.Sprint(e.runs.dues())
	if got != "[09:01:00 09:02:00 09:03:00 09:04:00 09:05:00]" {
		t.Fatalf("runs for due times %s", got)
	}
	if e.fired[ResultStarted] != 5 || e.fired[ResultSkipped] != 0 {
		t.Fatalf("firings counted %v", e.fired)
	}
}

// The gateway was down from 9:01 to 9:10:30: latest runs once for 9:10,
// none runs nothing late, all runs 9:01 … 9:10 one after another.
func TestSchedulerCatchUpAfterDowntime(t *testing.T) {
	for _, c := range []struct {
		policy string
		want   string
	}{
		{"latest", "[09:10:00 09:11:00]"},
		{"none", "[09:11:00]"},
		{"all", "[09:01:00 09:02:00 09:03:00 09:04:00 09:05:00 09:06:00 09:07:00 09:08:00 09:09:00 09:10:00 09:11:00]"},
	} {
		t.Run(c.policy, func(t *testing.T) {
			e := newTestEnv(t)
			e.add(t, "s", "1m", c.policy)
			// Back at 9:10:30 + a little over the grace for "none".
			back := base.Add(10*time.Minute + 61*time.Second)
			if c.policy != "none" {
				back = base.Add(10*time.Minute + 30*time.Second)
			}
			for i := 0; i < 20; i++ {
				e.tick(t, back)
				e.finishAll(t, store.OutcomeSuccess)
			}
			e.tick(t, base.Add(11*time.Minute+30*time.Second))
			if got := fmt.Sprint(e.runs.dues()); got != c.want {
				t.Fatalf("runs for due times %s, want %s", got, c.want)
			}
		})
	}
}

// A firing whose previous run still runs is skipped and counted, under
// every catchUp policy ("all" too: it is for times missed while no gateway
// ran); once the run ends the next due time runs again.
func TestSchedulerSkipsOverlappingFirings(t *testing.T) {
	for _, policy := range []string{"latest", "none", "all"} {
		t.Run(policy, func(t *testing.T) {
			e := newTestEnv(t)
			e.add(t, "s", "1m", policy)
			e.tick(t, base.Add(time.Minute))
			e.tick(t, base.Add(2*time.Minute)) // the 9:01 run still runs
			e.tick(t, base.Add(3*time.Minute))
			e.finishAll(t, store.OutcomeSuccess)
			e.tick(t, base.Add(4*time.Minute))
			if got := fmt.Sprint(e.runs.dues()); got != "[09:01:00 09:04:00]" {
				t.Fatalf("runs for due times %s", got)
			}
			s, _ := e.db.GetSchedule(context.Background(), "s")
			if e.fired[ResultSkipped] != 2 || s.Skipped != 2 {
				t.Fatalf("skipped counted %d (metric) and %d (store)", e.fired[ResultSkipped], s.Skipped)
			}
		})
	}
}

// catchUp "all" after a downtime: the due times missed while no gateway
// ran wait for each other's runs (one at a time, in order); none of them
// is skipped.
func TestSchedulerCatchUpAllBacklogWaits(t *testing.T) {
	e := newTestEnv(t)
	e.add(t, "s", "1m", "all")
	// A gateway starts at 9:03:30: 9:01, 9:02, 9:03 were missed.
	e.clock.Set(base.Add(3*time.Minute + 30*time.Second))
	e.s = New(Deps{Store: e.db, Runs: e.runs, Config: e.s.conf.Load(), Clock: e.clock,
		OnFiring: func(r string, n int) { e.fired[r] += n }})
	e.tick(t, base.Add(3*time.Minute+30*time.Second))
	e.tick(t, base.Add(3*time.Minute+40*time.Second)) // 9:01's run still runs: 9:02 waits
	e.finishAll(t, store.OutcomeSuccess)
	e.tick(t, base.Add(3*time.Minute+50*time.Second))
	e.finishAll(t, store.OutcomeSuccess)
	e.tick(t, base.Add(3*time.Minute+55*time.Second))
	e.tick(t, base.Add(4*time.Minute)) // 9:03's run still runs; 9:04 came while this gateway ran
	if got := fmt.Sprint(e.runs.dues()); got != "[09:01:00 09:02:00 09:03:00]" {
		t.Fatalf("runs for due times %s", got)
	}
	if e.fired[ResultSkipped] != 1 {
		t.Fatalf("skipped %d, want 1 (9:04)", e.fired[ResultSkipped])
	}
}

// maxFailures failed runs in a row pause the schedule with a line in its
// destination; it fires no more until resumed.
func TestSchedulerPausesAfterFailures(t *testing.T) {
	e := newTestEnv(t)
	e.add(t, "s", "1m", "latest")
	for i := 1; i <= 5; i++ {
		e.tick(t, base.Add(time.Duration(i)*time.Minute))
		e.finishAll(t, store.OutcomeError)
	}
	if n := len(e.runs.dues()); n != 3 {
		t.Fatalf("%d runs; the schedule should pause after 3 failures", n)
	}
	items, _ := e.db.ListOutbox(context.Background(), true, 10)
	if len(items) != 1 || items[0].Text != store.SchedulePausedText("s", 3) || items[0].Origin.ChatID != "c1" {
		t.Fatalf("outbox: %+v", items)
	}
}

// One schedule whose firing the store cannot record does not hold back the
// others: they fire in the same pass; it stays as it was and the pass
// reports it (Run then backs off instead of retrying every millisecond).
func TestSchedulerBadRowDoesNotBlockOthers(t *testing.T) {
	e := newTestEnv(t)
	e.runs.broken = "bad"
	e.add(t, "bad", "1m", "latest")
	e.clock.Set(base.Add(10 * time.Second)) // "good" is due after "bad"
	e.add(t, "good", "1m", "latest")
	e.clock.Set(base.Add(2 * time.Minute))
	n, err := e.s.Tick(context.Background())
	if err == nil || !strings.Contains(err.Error(), "schedule bad") {
		t.Fatalf("pass error = %v, want one naming schedule bad", err)
	}
	if n != 1 || fmt.Sprint(e.runs.dues()) != "[09:01:10]" {
		t.Fatalf("%d runs started for %v; want good's run", n, e.runs.dues())
	}
	bad, _ := e.db.GetSchedule(context.Background(), "bad")
	if !bad.NextDue.Equal(base.Add(time.Minute)) || bad.Fired != 0 {
		t.Fatalf("bad schedule changed: next %v fired %d", bad.NextDue, bad.Fired)
	}
}

func TestFireBackoffBounded(t *testing.T) {
	var got []time.Duration
	d := time.Duration(0)
	for range 9 {
		d = nextBackoff(d)
		got = append(got, d)
	}
	if fmt.Sprint(got) != "[1s 2s 4s 8s 16s 32s 1m0s 1m0s 1m0s]" {
		t.Fatalf("backoff %v", got)
	}
}
