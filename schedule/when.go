package schedule

import (
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // IANA timezones from the embedded database

	"github.com/robfig/cron/v3"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

// When is a parsed schedule time: a cron expression, an interval or one
// time, with its timezone.
type When struct {
	Kind string // store.ScheduleCron, store.ScheduleEvery or store.ScheduleAt
	Expr string // as stored: the cron text, the interval ("30m0s"), the time (RFC 3339 UTC)
	Loc  *time.Location

	cron  cron.Schedule
	every time.Duration
	at    time.Time
}

// LoadLocation loads an IANA timezone; "Local" is refused (a schedule's
// time must not depend on the host).
func LoadLocation(tz string) (*time.Location, error) {
	if tz == "" || tz == "Local" {
		return nil, fmt.Errorf("%q is not an IANA timezone like UTC or Europe/Berlin", tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("%q is not an IANA timezone like UTC or Europe/Berlin", tz)
	}
	return loc, nil
}

// Parse parses a stored schedule time.
func Parse(kind, expr, tz string) (When, error) {
	loc, err := LoadLocation(tz)
	if err != nil {
		return When{}, err
	}
	w := When{Kind: kind, Expr: expr, Loc: loc}
	switch kind {
	case store.ScheduleCron:
		c, err := config.CheckCron(expr)
		if err != nil {
			return When{}, err
		}
		if spec, ok := c.(*cron.SpecSchedule); ok {
			spec.Location = loc
		}
		w.cron = c
	case store.ScheduleEvery:
		d, err := config.ParseEvery(expr)
		if err != nil {
			return When{}, err
		}
		w.every, w.Expr = d, d.String()
	case store.ScheduleAt:
		t, err := config.ParseAt(expr, loc)
		if err != nil {
			return When{}, err
		}
		w.at, w.Expr = t.UTC(), t.UTC().Format(time.RFC3339)
	default:
		return When{}, fmt.Errorf("unknown schedule kind %q", kind)
	}
	return w, nil
}

// Every is the interval of an every schedule (0 for the others).
func (w When) Every() time.Duration { return w.every }

// First is the first due time of a schedule made at now: an interval after
// now, the cron's next time after now, or the one time.
func (w When) First(now time.Time) time.Time {
	switch w.Kind {
	case store.ScheduleEvery:
		return now.Add(w.every).UTC()
	case store.ScheduleAt:
		return w.at
	}
	return w.Next(now)
}

// Next is the due time after the due time t; zero when there is none (a
// one-off). Cron times are computed in the schedule's timezone, so a
// daylight-saving change neither skips nor doubles a local 9:00.
func (w When) Next(t time.Time) time.Time {
	switch w.Kind {
	case store.ScheduleEvery:
		return t.Add(w.every).UTC()
	case store.ScheduleAt:
		return time.Time{}
	}
	lt := t.In(w.Loc)
	next := w.cron.Next(lt)
	// When clocks go back, an hour's wall times happen twice; the cron
	// library fires both. For a cron of given hours (9:00, 2:30 daily) a
	// due time is one wall time: skip the repeat. A cron of every hour
	// keeps the library's elapsed-time firings (02:00 summer time, 02:00
	// winter time, 03:00: an hour apart each), like one of every 30 minutes.
	if !everyHour(w.cron) {
		for i := 0; i < 4 && !next.IsZero() && sameWallTime(next.In(w.Loc), lt); i++ {
			next = w.cron.Next(next)
		}
	}
	return next.UTC()
}

// everyHour reports whether a cron fires in every hour of the day.
func everyHour(c cron.Schedule) bool {
	spec, ok := c.(*cron.SpecSchedule)
	if !ok {
		return false
	}
	const all = 1<<24 - 1
	return spec.Hour&all == all
}

func sameWallTime(a, b time.Time) bool {
	ay, am, ad := a.Date()
	by, bm, bd := b.Date()
	return ay == by && am == bm && ad == bd && a.Hour() == b.Hour() && a.Minute() == b.Minute() && a.Second() == b.Second()
}

// Label renders the schedule's "when" for people: "every 30m",
// "cron 0 9 * * 1-5 (Europe/Berlin)", "at 2026-12-01 09:00 UTC".
func (w When) Label() string {
	switch w.Kind {
	case store.ScheduleEvery:
		return "every " + shortDuration(w.every)
	case store.ScheduleAt:
		return "at " + w.at.In(w.Loc).Format(config.ScheduleAtLayout) + " " + w.Loc.String()
	}
	return fmt.Sprintf("cron %q (%s)", w.Expr, w.Loc)
}

// FormatTime renders a due time in the schedule's timezone:
// "2026-12-01 09:00 Europe/Berlin" (seconds shown when not zero).
func (w When) FormatTime(t time.Time) string {
	lt := t.In(w.Loc)
	layout := config.ScheduleAtLayout
	if lt.Second() != 0 {
		layout += ":05"
	}
	return lt.Format(layout) + " " + w.Loc.String()
}

// shortDuration renders 30m0s as 30m and 1h0m0s as 1h.
func shortDuration(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
