package schedule

import (
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/store"
)

var base = time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)

func everyMinute(t *testing.T, catchUp string, next time.Time, active string) (When, *store.Schedule) {
	t.Helper()
	w, err := Parse(store.ScheduleEvery, "1m", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	return w, &store.Schedule{ID: "s", Kind: store.ScheduleEvery, Expr: w.Expr, CatchUp: catchUp, NextDue: next, ActiveRun: active}
}

func TestPlanOnTime(t *testing.T) {
	for _, cu := range []string{"latest", "none", "all"} {
		w, s := everyMinute(t, cu, base, "")
		dec := Plan(w, s, base.Add(20*time.Millisecond))
		if !dec.Due.Equal(base) || dec.Missed != 0 || dec.Skipped != 0 || !dec.Next.Equal(base.Add(time.Minute)) || dec.Note != "" {
			t.Errorf("%s on time: %+v", cu, dec)
		}
	}
}

// Ten minutes without a gateway: latest runs once (for 9:10, saying how
// late and how many were missed), none runs nothing, all runs 9:00 first.
func TestPlanCatchUpPolicies(t *testing.T) {
	now := base.Add(10*time.Minute + 30*time.Second)
	w, s := everyMinute(t, "latest", base, "")
	dec := Plan(w, s, now)
	if !dec.Due.Equal(base.Add(10*time.Minute)) || dec.Missed != 10 || !dec.Next.Equal(base.Add(11*time.Minute)) {
		t.Fatalf("latest: %+v", dec)
	}
	if !strings.Contains(dec.Note, "started 30s after it") || !strings.Contains(dec.Note, "10 earlier due times since 2026-11-25T09:00:00Z") {
		t.Fatalf("latest note: %q", dec.Note)
	}

	w, s = everyMinute(t, "none", base, "")
	if dec := Plan(w, s, now); !dec.Due.Equal(base.Add(10*time.Minute)) || dec.Missed != 10 || !dec.Next.Equal(base.Add(11*time.Minute)) {
		t.Fatalf("none, latest on time: %+v", dec)
	}
	// none with the latest due time itself too old: nothing at all runs.
	w, _ = Parse(store.ScheduleEvery, "1h", "UTC")
	s = &store.Schedule{CatchUp: "none", NextDue: base}
	if dec := Plan(w, s, base.Add(5*time.Minute)); !dec.Due.IsZero() || dec.Missed != 1 || !dec.Next.Equal(base.Add(time.Hour)) {
		t.Fatalf("none, late: %+v", dec)
	}

	w, s = everyMinute(t, "all", base, "")
	dec = Plan(w, s, now)
	if !dec.Due.Equal(base) || dec.Missed != 0 || !dec.Next.Equal(base.Add(time.Minute)) || !strings.Contains(dec.Note, "started 10m30s after it") {
		t.Fatalf("all: %+v", dec)
	}
}

// A firing whose previous run still runs is skipped and counted (latest,
// none) or waits for it (all).
func TestPlanOverlap(t *testing.T) {
	w, s := everyMinute(t, "latest", base, "run-1")
	dec := Plan(w, s, base)
	if !dec.Due.IsZero() || dec.Skipped != 1 || !dec.Next.Equal(base.Add(time.Minute)) {
		t.Fatalf("latest overlapping: %+v", dec)
	}
	w, s = everyMinute(t, "all", base, "run-1")
	dec = Plan(w, s, base.Add(3*time.Minute))
	if !dec.Due.IsZero() || dec.Skipped != 0 || !dec.Next.Equal(base) {
		t.Fatalf("all overlapping, missed while down: %+v", dec)
	}
	// Due times that came while this gateway ran are skipped under "all" too.
	dec = PlanSince(w, s, base.Add(3*time.Minute+10*time.Second), base.Add(-time.Hour))
	if !dec.Due.IsZero() || dec.Skipped != 4 || !dec.Next.Equal(base.Add(4*time.Minute)) {
		t.Fatalf("all overlapping while running: %+v", dec)
	}
}

func TestPlanOneOff(t *testing.T) {
	w, _ := Parse(store.ScheduleAt, "2026-11-25 09:00", "UTC")
	s := &store.Schedule{CatchUp: "latest", NextDue: base}
	dec := Plan(w, s, base.Add(time.Second))
	if !dec.Due.Equal(base) || !dec.Next.IsZero() {
		t.Fatalf("at: %+v", dec)
	}
}
