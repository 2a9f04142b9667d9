package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
)

func newSchedule(id string, next time.Time) *Schedule {
	return &Schedule{ID: id, SessionKey: "agent:main:slack:group:C42", AgentID: "main", Kind: ScheduleEvery,
		Expr: "1m0s", Task: "check the status page", Origin: slackOrigin, NextDue: next, CreatedAt: t0}
}

// everyMinute is a plan that starts one run per due time and moves the
// schedule a minute on.
func everyMinute(s *Schedule) Firing {
	id := s.ID + "-" + s.NextDue.Format("150405")
	r := &Run{ID: id, ChildKey: "agent:main:subagent:" + id, ChildSessionID: "sess-" + id,
		RequesterKey: s.SessionKey, Depth: 1, AgentID: s.AgentID, Task: s.Task, Origin: s.Origin,
		CostUSD: -1, CreatedAt: t0, ScheduleDue: s.NextDue}
	return Firing{Run: r, Child: &Session{}, Next: s.NextDue.Add(time.Minute)}
}

func TestFireDueRecordsOneRunPerDueTime(t *testing.T) {
	db := newTestDB(t)
	ctx := context.Background()
	due := ms(t0)
	if err := db.AddSchedule(ctx, newSchedule("s1", due), 0); err != nil {
		t.Fatal(err)
	}
	if fired, err := db.FireDue(ctx, due.Add(-time.Second), time.Time{}, 10, everyMinute); err != nil || len(fired) != 0 {
		t.Fatalf("before its due time: fired %d, %v", len(fired), err)
	}
	fired, err := db.FireDue(ctx, due, time.Time{}, 10, everyMinute)
	if err != nil || len(fired) != 1 {
		t.Fatalf("at its due time: fired %d, %v", len(fired), err)
	}
	r, err := db.GetRun(ctx, fired[0].Firing.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.ScheduleID != "s1" || !r.ScheduleDue.Equal(due) || r.Status != StatusQueued {
		t.Fatalf("run: schedule %q @ %v status %s", r.ScheduleID, r.ScheduleDue, r.Status)
	}
	// The same moment again: the due time was claimed with its run.
	if fired, err := db.FireDue(ctx, due, time.Time{}, 10, everyMinute); err != nil || len(fired) != 0 {
		t.Fatalf("second pass: fired %d, %v", len(fired), err)
	}
	s, _ := db.GetSchedule(ctx, "s1")
	if !s.NextDue.Equal(due.Add(time.Minute)) || s.ActiveRun != r.ID || s.Fired != 1 {
		t.Fatalf("schedule after firing: next %v active %q fired %d", s.NextDue, s.ActiveRun, s.Fired)
	}
	if at, ok, _ := db.NextScheduleAt(ctx, time.Time{}); !ok || !at.Equal(due.Add(time.Minute)) {
		t.Fatalf("NextScheduleAt = %v %v", at, ok)
	}
}

// A plan that hands back a due time that already has a run is refused by
// the store, and nothing of that pass is kept.
func TestFireDueRefusesASecondRunOfOneDueTime(t *testing.T) {
	db := newTestDB(t)
	ctx := context.Background()
	due := ms(t0)
	db.AddSchedule(ctx, newSchedule("s1", due), 0)
	if _, err := db.FireDue(ctx, due, time.Time{}, 10, everyMinute); err != nil {
		t.Fatal(err)
	}
	again := func(s *Schedule) Firing {
		f := everyMinute(s)
		f.Run.ID += "-again"
		f.Run.ChildKey += "-again"
		f.Run.ScheduleDue = due // the due time already fired
		return f
	}
	if _, err := db.FireDue(ctx, due.Add(time.Minute), time.Time{}, 10, again); err == nil {
		t.Fatal("a second run of one due time was stored")
	}
	s, _ := db.GetSchedule(ctx, "s1")
	if !s.NextDue.Equal(due.Add(time.Minute)) || s.Fired != 1 {
		t.Fatalf("the failed pass changed the schedule: next %v fired %d", s.NextDue, s.Fired)
	}
}

// Many passes at once (goroutines; on PostgreSQL several connections, as
// replicas have) fire every due time exactly once.
func TestFireDueConcurrentPassesFireEachDueTimeOnce(t *testing.T) {
	db := newTestDB(t)
	ctx := context.Background()
	due := ms(t0)
	const n = 40
	for i := 0; i < n; i++ {
		db.AddSchedule(ctx, newSchedule(strings.Repeat("x", 1)+string(rune('a'+i%26))+string(rune('a'+i/26)), due), 0)
	}
	var mu sync.Mutex
	runs := map[string]int{}
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for step := 0; step < 3; step++ {
				fired, err := db.FireDue(ctx, due.Add(time.Duration(step)*time.Minute), time.Time{}, 7, everyMinute)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, f := range fired {
					runs[f.Firing.Run.ID]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// Whatever the interleaving, finish the remaining due times.
	for step := 0; step < 3; step++ {
		for {
			fired, err := db.FireDue(ctx, due.Add(time.Duration(step)*time.Minute), time.Time{}, 100, everyMinute)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range fired {
				runs[f.Firing.Run.ID]++
			}
			if len(fired) == 0 {
				break
			}
		}
	}
	if len(runs) != n*3 {
		t.Fatalf("%d runs for %d due times", len(runs), n*3)
	}
	for id, c := range runs {
		if c != 1 {
			t.Fatalf("run %s fired %d times", id, c)
		}
	}
}

func TestScheduledRunFailuresPauseTheSchedule(t *testing.T) {
	db := newTestDB(t)
	ctx := context.Background()
	due := ms(t0)
	s := newSchedule("s1", due)
	s.MaxFailures = 2
	db.AddSchedule(ctx, s, 0)
	end := func(outcome string, at time.Time) {
		t.Helper()
		fired, err := db.FireDue(ctx, at, time.Time{}, 10, everyMinute)
		if err != nil || len(fired) != 1 {
			t.Fatalf("fire at %v: %d %v", at, len(fired), err)
		}
		r := *fired[0].Firing.Run
		r.Outcome = outcome
		if err := db.FinishRun(ctx, &r, &OutboxItem{Origin: r.Origin, Kind: channels.KindAnnounce, Text: "Status: " + outcome}); err != nil {
			t.Fatal(err)
		}
	}
	end(OutcomeError, due)
	end(OutcomeSuccess, due.Add(time.Minute)) // a success starts the count again
	end(OutcomeError, due.Add(2*time.Minute))
	if got, _ := db.GetSchedule(ctx, "s1"); got.Paused || got.Failures != 1 || got.ActiveRun != "" {
		t.Fatalf("after error, success, error: paused %v failures %d active %q", got.Paused, got.Failures, got.ActiveRun)
	}
	end(OutcomeTimeout, due.Add(3*time.Minute))
	got, _ := db.GetSchedule(ctx, "s1")
	if !got.Paused || got.Failures != 2 {
		t.Fatalf("after two failures in a row: paused %v failures %d", got.Paused, got.Failures)
	}
	items, _ := db.ListOutbox(ctx, true, 100)
	var notices []string
	for _, it := range items {
		if it.Kind == channels.KindSystem {
			notices = append(notices, it.Text)
		}
	}
	if len(notices) != 1 || notices[0] != SchedulePausedText("s1", 2) || items[len(items)-1].Origin != slackOrigin {
		t.Fatalf("pause notices in the outbox: %q", notices)
	}
	if fired, _ := db.FireDue(ctx, due.Add(time.Hour), time.Time{}, 10, everyMinute); len(fired) != 0 {
		t.Fatal("a paused schedule fired")
	}
	if err := db.ResumeSchedule(ctx, "s1", due.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.GetSchedule(ctx, "s1"); got.Paused || got.Failures != 0 {
		t.Fatalf("resumed: paused %v failures %d", got.Paused, got.Failures)
	}
}

func TestAddScheduleLimitAndListing(t *testing.T) {
	db := newTestDB(t)
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if err := db.AddSchedule(ctx, newSchedule(id, ms(t0)), 2); err != nil {
			t.Fatal(err)
		}
	}
	var le *LimitError
	if err := db.AddSchedule(ctx, newSchedule("c", ms(t0)), 2); !errors.As(err, &le) || le.Limit != "maxPerConversation" {
		t.Fatalf("third schedule with max 2: %v", err)
	}
	if err := db.AddSchedule(ctx, newSchedule("a", ms(t0)), 0); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate id: %v", err)
	}
	other := newSchedule("d", ms(t0))
	other.SessionKey = "agent:main:web:dm:c1"
	db.AddSchedule(ctx, other, 2)
	mine, _ := db.ListSchedules(ctx, "agent:main:slack:group:C42")
	all, _ := db.ListSchedules(ctx, "")
	if len(mine) != 2 || len(all) != 3 {
		t.Fatalf("listed %d of the conversation, %d in all", len(mine), len(all))
	}
	if err := db.RemoveSchedule(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := db.RemoveSchedule(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("removing twice: %v", err)
	}
	if err := db.PauseSchedule(ctx, "zz"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("pausing an unknown id: %v", err)
	}
}

// Runs a budget stopped end "error" but do not pause the schedule: the
// budget resets by itself, a paused schedule would stay off.
func TestBudgetStoppedRunsDoNotPauseTheSchedule(t *testing.T) {
	db := newTestDB(t)
	ctx := context.Background()
	due := ms(t0)
	s := newSchedule("s1", due)
	s.MaxFailures = 2
	db.AddSchedule(ctx, s, 0)
	end := func(outcome string, budget bool, at time.Time) {
		t.Helper()
		fired, err := db.FireDue(ctx, at, time.Time{}, 10, everyMinute)
		if err != nil || len(fired) != 1 {
			t.Fatalf("fire at %v: %d %v", at, len(fired), err)
		}
		r := *fired[0].Firing.Run
		r.Outcome, r.BudgetStopped = outcome, budget
		if err := db.FinishRun(ctx, &r, &OutboxItem{Origin: r.Origin, Kind: channels.KindAnnounce, Text: "Status: " + outcome}); err != nil {
			t.Fatal(err)
		}
	}
	end(OutcomeError, false, due) // one real failure
	for i := 1; i <= 4; i++ {
		end(OutcomeError, true, due.Add(time.Duration(i)*time.Minute))
	}
	got, _ := db.GetSchedule(ctx, "s1")
	if got.Paused || got.Failures != 1 || got.NextDue.IsZero() {
		t.Fatalf("after a failure and 4 budget stops: paused %v failures %d next %v", got.Paused, got.Failures, got.NextDue)
	}
	end(OutcomeError, false, due.Add(5*time.Minute))
	if got, _ := db.GetSchedule(ctx, "s1"); !got.Paused || got.Failures != 2 {
		t.Fatalf("a second real failure in a row: paused %v failures %d", got.Paused, got.Failures)
	}
}

// maxPerConversation counts the conversation's live chat and tool
// schedules: a one-off whose run has ended and a config schedule delivered
// into the conversation leave room for a new one; a paused one does not.
func TestAddScheduleLimitCountsLiveSchedulesOnly(t *testing.T) {
	db := newTestDB(t)
	ctx := context.Background()
	due := ms(t0)
	once := newSchedule("once", due)
	once.Kind, once.Expr = ScheduleAt, due.Format(time.RFC3339)
	paused := newSchedule("paused", due.Add(time.Hour))
	for _, s := range []*Schedule{once, paused} {
		if err := db.AddSchedule(ctx, s, 2); err != nil {
			t.Fatal(err)
		}
	}
	db.PauseSchedule(ctx, "paused")
	cfg := *newSchedule("cfg", due.Add(time.Hour))
	if err := db.SyncConfigSchedules(ctx, []Schedule{cfg}); err != nil {
		t.Fatal(err)
	}
	var le *LimitError
	if err := db.AddSchedule(ctx, newSchedule("early", due), 2); !errors.As(err, &le) {
		t.Fatalf("third while the one-off is due: %v", err)
	}
	fired, err := db.FireDue(ctx, due, time.Time{}, 10, func(s *Schedule) Firing {
		f := everyMinute(s)
		f.Next = time.Time{} // a one-off: done after this run
		return f
	})
	if err != nil || len(fired) != 1 {
		t.Fatalf("fire: %d %v", len(fired), err)
	}
	if err := db.AddSchedule(ctx, newSchedule("running", due), 2); !errors.As(err, &le) {
		t.Fatalf("third while the one-off's run still runs: %v", err)
	}
	r := *fired[0].Firing.Run
	r.Outcome = OutcomeSuccess
	if err := db.FinishRun(ctx, &r, &OutboxItem{Origin: r.Origin, Kind: channels.KindAnnounce, Text: "done"}); err != nil {
		t.Fatal(err)
	}
	if err := db.AddSchedule(ctx, newSchedule("after", due.Add(time.Hour)), 2); err != nil {
		t.Fatalf("after the one-off ended (paused + done + config): %v", err)
	}
	if err := db.AddSchedule(ctx, newSchedule("more", due.Add(time.Hour)), 2); !errors.As(err, &le) || le.Count != 2 {
		t.Fatalf("over the limit again: %v", err)
	}
}
