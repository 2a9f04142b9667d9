// Package tracewait reads a Go execution trace (runtime/trace, as
// herald-load -profile writes it) and says where a process waited: how
// long none, one, two … of its goroutines were running, and, for each
// stretch with none running, what the goroutine that ended it had been
// waiting for (the block reason and its first frame outside the runtime,
// the standard library's I/O and sync packages). docs/performance.md
// ("one plain turn and SPAWN 8, the path in wall time") reads it.
package tracewait

import (
	"cmp"
	"errors"
	"io"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// Wait is the idle time that goroutines waking from one kind of wait ended.
type Wait struct {
	What string // "<reason> @ <function>"
	Time time.Duration
}

// Report is what Read found.
type Report struct {
	Traced  time.Duration   // from the first event to the last
	Running []time.Duration // [n]: how long n goroutines were running
	Waits   []Wait          // longest first
}

// skipped are the frames that name no caller of interest.
var skipped = []string{"runtime.", "internal/", "sync.", "syscall.", "net.", "bufio.", "io.", "os.", "crypto/tls."}

// Read reads the trace in r.
func Read(r io.Reader) (Report, error) {
	var rep Report
	tr, err := trace.NewReader(r)
	if err != nil {
		return rep, err
	}
	running := map[trace.GoID]bool{}
	blocked := map[trace.GoID]string{}
	idle := map[string]time.Duration{}
	var first, prev, idleFrom trace.Time
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return rep, err
		}
		now := ev.Time()
		if first == 0 {
			first = now
		}
		if prev != 0 {
			for len(rep.Running) <= len(running) {
				rep.Running = append(rep.Running, 0)
			}
			rep.Running[len(running)] += time.Duration(now - prev)
		}
		prev = now
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		id := st.Resource.Goroutine()
		from, to := st.Goroutine()
		switch {
		case from == trace.GoNotExist:
			// A new goroutine (runnable, waiting or in a syscall; it
			// runs later, below): named by where it starts.
			blocked[id] = "new goroutine @ " + caller(st.Stack)
		case to == trace.GoRunning:
			if len(running) == 0 && idleFrom != 0 {
				idle[blocked[id]] += time.Duration(now - idleFrom)
			}
			running[id] = true
		case from == trace.GoRunning:
			delete(running, id)
			blocked[id] = st.Reason + " @ " + caller(ev.Stack())
			if len(running) == 0 {
				idleFrom = now
			}
		}
	}
	rep.Traced = time.Duration(prev - first)
	for what, d := range idle {
		rep.Waits = append(rep.Waits, Wait{what, d})
	}
	slices.SortFunc(rep.Waits, func(a, b Wait) int { return cmp.Or(cmp.Compare(b.Time, a.Time), strings.Compare(a.What, b.What)) })
	return rep, nil
}

// caller is the first frame of s outside the skipped packages.
func caller(s trace.Stack) string {
	for f := range s.Frames() {
		if !slices.ContainsFunc(skipped, func(p string) bool { return strings.HasPrefix(f.Func, p) }) {
			return f.Func
		}
	}
	return ""
}
