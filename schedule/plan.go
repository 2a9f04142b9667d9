package schedule

import (
	"fmt"
	"time"

	"github.com/heraldhq/herald/store"
)

// Grace is how late a due time may be fired and still be on time: a due
// time further back than this was missed (no gateway ran), and catchUp
// decides what happens to it.
const Grace = time.Minute

// maxScan bounds the due times counted in one decision (an every-second
// schedule after a day of downtime); past it the schedule moves on from now.
const maxScan = 10000

// Decision is what one firing pass does with a due schedule.
type Decision struct {
	Due     time.Time // the due time that gets a run now; zero: none
	Skipped int       // due times skipped: the previous run still ran
	Missed  int       // due times passed over (catchUp)
	Next    time.Time // the next due time; zero: none
	Note    string    // for a late run: how late, for its announce
}

// Plan decides a due schedule's firing at now (SPEC §19): of the due times
// up to now, catchUp "latest" runs the latest and counts the others missed,
// "none" runs the latest only if it is on time (within Grace), "all" runs
// the earliest (the store holds the next one back until that run ends). A
// due time whose previous run still runs is skipped and counted; only "all"
// lets a due time missed while no gateway ran wait for it instead. Plan
// takes every due time as missed while no gateway ran; see PlanSince.
func Plan(w When, s *store.Schedule, now time.Time) Decision {
	return PlanSince(w, s, now, time.Time{})
}

// PlanSince is Plan for a scheduler that started at started: under catchUp
// "all", due times from started on came while a gateway ran, so with the
// previous run still going they are skipped and counted like under the
// other policies, and the schedule moves on past now; earlier ones (the
// backlog of a downtime) wait for the run to end. Zero started: all wait.
func PlanSince(w When, s *store.Schedule, now, started time.Time) Decision {
	d0 := s.NextDue
	if s.CatchUp == "all" {
		if s.ActiveRun != "" {
			if started.IsZero() || d0.Before(started) {
				return Decision{Next: d0} // missed while down: wait for the previous run
			}
			dec := Decision{Skipped: 1, Next: w.Next(d0)}
			for !dec.Next.IsZero() && !dec.Next.After(now) && dec.Skipped < maxScan {
				dec.Skipped++
				dec.Next = w.Next(dec.Next)
			}
			if !dec.Next.IsZero() && !dec.Next.After(now) {
				dec.Next = w.Next(now) // too far behind to count
			}
			return dec
		}
		dec := Decision{Due: d0, Next: w.Next(d0)}
		if late := now.Sub(d0); late > Grace {
			dec.Note = fmt.Sprintf("Late: due %s, started %s after it (catchUp all: every missed due time runs, in order).",
				d0.UTC().Format(time.RFC3339), roundLate(late))
		}
		return dec
	}
	last, n := d0, 1
	for {
		nx := w.Next(last)
		if nx.IsZero() || nx.After(now) {
			break
		}
		last, n = nx, n+1
		if n >= maxScan {
			// Too far behind to count: move on from now.
			last = now
			break
		}
	}
	dec := Decision{Missed: n - 1, Next: w.Next(last)}
	if last.Equal(now) && n >= maxScan {
		dec.Next = w.Next(now)
		return dec
	}
	late := now.Sub(last)
	switch {
	case s.ActiveRun != "":
		dec.Skipped = 1
	case s.CatchUp == "none" && late > Grace:
		dec.Missed++
	default:
		dec.Due = last
		if dec.Missed > 0 || late > Grace {
			dec.Note = fmt.Sprintf("Late: due %s, started %s after it", last.UTC().Format(time.RFC3339), roundLate(late))
			if dec.Missed > 0 {
				dec.Note += fmt.Sprintf("; %d earlier due time%s since %s passed while no gateway ran (catchUp %s: not run)",
					dec.Missed, plural(dec.Missed), d0.UTC().Format(time.RFC3339), s.CatchUp)
			}
			dec.Note += "."
		}
	}
	return dec
}

func roundLate(d time.Duration) time.Duration {
	if d > time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
