package schedule

import (
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/store"
)

// A local 9:00 on weekdays across both daylight-saving changes of 2026 in
// Berlin and New York: every weekday has exactly one firing, at 9:00 local.
func TestCronDaylightSavingNeitherSkipsNorDoubles(t *testing.T) {
	for _, tz := range []string{"Europe/Berlin", "America/New_York", "Australia/Sydney"} {
		t.Run(tz, func(t *testing.T) {
			w, err := Parse(store.ScheduleCron, "0 9 * * *", tz)
			if err != nil {
				t.Fatal(err)
			}
			loc := w.Loc
			// From before the spring change to after the autumn one.
			start := time.Date(2026, 3, 1, 0, 0, 0, 0, loc)
			end := time.Date(2026, 11, 30, 0, 0, 0, 0, loc)
			seen := map[string]int{}
			t0 := w.First(start)
			for due := t0; due.Before(end); due = w.Next(due) {
				lt := due.In(loc)
				if lt.Hour() != 9 || lt.Minute() != 0 {
					t.Fatalf("firing at %v local", lt)
				}
				seen[lt.Format("2006-01-02")]++
			}
			for d := start; d.Before(end); d = d.AddDate(0, 0, 1) {
				if n := seen[d.Format("2006-01-02")]; n != 1 {
					t.Fatalf("%s: %d firings at 9:00", d.Format("2006-01-02"), n)
				}
			}
		})
	}
}

// At the spring-forward gap (2:30 does not exist in Berlin on 29 March
// 2026) and the autumn overlap (2:30 happens twice on 25 October), a daily
// 2:30 fires once each day.
func TestCronInsideTheChangeHourFiresOncePerDay(t *testing.T) {
	w, _ := Parse(store.ScheduleCron, "30 2 * * *", "Europe/Berlin")
	for _, day := range []time.Time{
		time.Date(2026, 3, 28, 12, 0, 0, 0, w.Loc),
		time.Date(2026, 10, 24, 12, 0, 0, 0, w.Loc),
	} {
		first := w.Next(day)
		second := w.Next(first)
		third := w.Next(second)
		if second.Sub(first) < 22*time.Hour || third.Sub(second) < 22*time.Hour {
			t.Fatalf("around %s: firings %v, %v, %v", day.Format("2006-01-02"), first.In(w.Loc), second.In(w.Loc), third.In(w.Loc))
		}
	}
}

// A cron of every hour (or every 30 minutes) keeps elapsed time across the
// night clocks go back: the repeated hour fires both times, so firings stay
// an hour (30 minutes) apart, and the two expressions agree.
func TestSubDailyCronAcrossFallBack(t *testing.T) {
	for _, c := range []struct{ expr, want string }{
		{"0 * * * *", "[01:00+02:00 02:00+02:00 02:00+01:00 03:00+01:00]"},
		{"*/30 * * * *", "[01:00+02:00 01:30+02:00 02:00+02:00 02:30+02:00 02:00+01:00 02:30+01:00 03:00+01:00]"},
	} {
		w, err := Parse(store.ScheduleCron, c.expr, "Europe/Berlin")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		at := time.Date(2026, 10, 25, 0, 59, 0, 0, w.Loc)
		for i := 0; i < 10; i++ {
			at = w.Next(at)
			if at.After(time.Date(2026, 10, 25, 3, 0, 0, 0, w.Loc)) {
				break
			}
			got = append(got, at.In(w.Loc).Format("15:04-07:00"))
		}
		if fmt.Sprint(got) != c.want {
			t.Errorf("%s: %v, want %s", c.expr, got, c.want)
		}
	}
}

func TestParseRefusesBadTimes(t *testing.T) {
	for _, c := range []struct{ kind, expr, tz string }{
		{store.ScheduleCron, "0 9 * *", "UTC"},
		{store.ScheduleCron, "@every 5m", "UTC"},
		{store.ScheduleCron, "0 9 * * *", "Mars/Olympus"},
		{store.ScheduleCron, "0 9 * * *", "Local"},
		{store.ScheduleEvery, "soon", "UTC"},
		{store.ScheduleEvery, "-5m", "UTC"},
		{store.ScheduleAt, "tomorrow", "UTC"},
	} {
		if _, err := Parse(c.kind, c.expr, c.tz); err == nil {
			t.Errorf("%s %q in %s parsed", c.kind, c.expr, c.tz)
		}
	}
	for _, c := range []struct{ kind, expr string }{
		{store.ScheduleCron, "@daily"}, {store.ScheduleCron, "@weekly"}, {store.ScheduleCron, "*/5 * * * 1-5"},
		{store.ScheduleEvery, "1d"}, {store.ScheduleEvery, "1h30m"}, {store.ScheduleAt, "2026-12-01 09:00"},
	} {
		if _, err := Parse(c.kind, c.expr, "Europe/Berlin"); err != nil {
			t.Errorf("%s %q: %v", c.kind, c.expr, err)
		}
	}
}

func TestLabels(t *testing.T) {
	for _, c := range []struct{ kind, expr, tz, want string }{
		{store.ScheduleEvery, "30m", "UTC", "every 30m"},
		{store.ScheduleEvery, "1h", "UTC", "every 1h"},
		{store.ScheduleEvery, "1d", "UTC", "every 1d"},
		{store.ScheduleCron, "0 9 * * 1-5", "Europe/Berlin", `cron "0 9 * * 1-5" (Europe/Berlin)`},
		{store.ScheduleAt, "2026-12-01 09:00", "Europe/Berlin", "at 2026-12-01 09:00 Europe/Berlin"},
	} {
		w, err := Parse(c.kind, c.expr, c.tz)
		if err != nil {
			t.Fatal(err)
		}
		if got := w.Label(); got != c.want {
			t.Errorf("Label(%s %q) = %q, want %q", c.kind, c.expr, got, c.want)
		}
	}
}

// schedules.minIntervalSeconds bounds cron schedules too: the closest two
// firings (every weekday sampled) may not be closer than it.
func TestParseWhenCronRespectsMinInterval(t *testing.T) {
	now := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		text string
		ok   bool
	}{
		{`cron "* * * * *" ping`, false},
		{`cron "*/30 * * * *" ping`, false},
		{`cron "* 9 * * 1" ping`, false}, // every minute of one hour on Mondays
		{`@hourly ping`, true},
		{`cron "0 * * * *" ping`, true},
		{`cron "0 9 * * 1-5" ping`, true},
	} {
		_, _, err := ParseWhen(c.text, now, time.UTC, time.Hour)
		if (err == nil) != c.ok {
			t.Errorf("%s with a minimum of 1h: err = %v, want ok %v", c.text, err, c.ok)
		}
	}
	if _, _, err := ParseWhen(`@hourly ping`, now, time.UTC, 2*time.Hour); err == nil {
		t.Error("@hourly accepted with a minimum of 2h")
	}
}
