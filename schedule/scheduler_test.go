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
	mu    sync.Mutex
	now   time.Time
	reads int // calls of Now
}

func (c *fakeClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); c.reads++; return c.now }
func (c *fakeClock) Reads() int      { c.mu.Lock(); defer c.mu.Unlock(); return c.reads }
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

// countingStore counts the scheduler's passes (FireDue calls, write
// transactions) and its looks at the next due time.
type countingStore struct {
	store.Schedules
	mu            sync.Mutex
	passes, looks int
}

func (c *countingStore) FireDue(ctx context.Context, now, waitBefore time.Time, limit int, plan func(s *store.Schedule) store.Firing) ([]store.Fired, error) {
	c.mu.Lock()
	c.passes++
	c.mu.Unlock()
	return c.Schedules.FireDue(ctx, now, waitBefore, limit, plan)
}

func (c *countingStore) NextScheduleAt(ctx context.Context, waitBefore time.Time) (time.Time, bool, error) {
	c.mu.Lock()
	c.looks++
	c.mu.Unlock()
	return c.Schedules.NextScheduleAt(ctx, waitBefore)
}

func (c *countingStore) Passes() int { c.mu.Lock(); defer c.mu.Unlock(); return c.passes }
func (c *countingStore) Looks() int  { c.mu.Lock(); defer c.mu.Unlock(); return c.looks }

// waitUntil polls cond until it holds or 10 s passed.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// An Exclusive scheduler (SQLite: no other process adds schedules) looks
// at the clock every MaxWait but makes no pass (no store transaction)
// while nothing is due and nobody woke it; a Wake is a look at the next
// due time, and a pass only when something is due; a due time is fired
// when the clock reaches it.
func TestExclusiveSchedulerPassesOnlyWhenDueOrWoken(t *testing.T) {
	e := newTestEnv(t)
	st := &countingStore{Schedules: e.db}
	e.s = New(Deps{Store: st, Runs: e.runs, Config: e.s.config(), Clock: e.clock, MaxWait: 2 * time.Millisecond, Exclusive: true})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	waitUntil(t, "the first look", func() bool { return st.Looks() == 1 })
	reads := e.clock.Reads()
	waitUntil(t, "50 looks at the clock", func() bool { return e.clock.Reads() >= reads+50 })
	if n, l := st.Passes(), st.Looks(); n != 0 || l != 1 {
		t.Fatalf("%d passes and %d looks at the store with nothing due and no wake; want the first look only", n, l)
	}

	e.add(t, "s", "1m", "latest") // due at base+1m
	e.s.Wake()
	waitUntil(t, "the look of the wake", func() bool { return st.Looks() == 2 })
	reads = e.clock.Reads()
	waitUntil(t, "100 more clock reads", func() bool { return e.clock.Reads() >= reads+100 })
	if n := st.Passes(); n != 0 || len(e.runs.dues()) != 0 {
		t.Fatalf("%d passes, runs %v before the due time", n, e.runs.dues())
	}

	e.clock.Set(base.Add(time.Minute))
	waitUntil(t, "the run of the due time", func() bool { return len(e.runs.dues()) == 1 })
	if got := e.runs.dues()[0]; got != "09:01:00" {
		t.Fatalf("run for due time %s", got)
	}
	if n := st.Passes(); n != 1 {
		t.Fatalf("%d passes; want the due time's one", n)
	}
}

// A wake-up with nothing due (every run's spawn, start and end wakes the
// loop) makes no pass, only a look at the next due time, with replicas
// too (not Exclusive); a due schedule still fires.
func TestSchedulerWakeWithNothingDueMakesNoPass(t *testing.T) {
	e := newTestEnv(t)
	e.add(t, "hourly", "1h", "latest")
	st := &countingStore{Schedules: e.db}
	e.s = New(Deps{Store: st, Runs: e.runs, Config: e.s.config(), Clock: e.clock})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, "the first look", func() bool { return st.Looks() >= 1 })
	for range 10 {
		n := st.Looks()
		e.s.Wake()
		waitUntil(t, "a look after the wake-up", func() bool { return st.Looks() > n })
	}
	if n := st.Passes(); n != 0 {
		t.Errorf("%d passes with nothing due; want none", n)
	}
	e.clock.Set(base.Add(time.Hour))
	e.s.Wake()
	waitUntil(t, "the due run", func() bool { return len(e.runs.dues()) == 1 })
	if n := st.Passes(); n == 0 {
		t.Error("the due schedule fired without a pass")
	}
}
