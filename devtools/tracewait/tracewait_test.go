package tracewait

import (
	"bytes"
	"runtime/trace"
	"strings"
	"testing"
	"time"
)

// TestReadNamesWhatEndedTheWait: a program whose only work waits on a
// timer's channel is idle for that wait, and the report names the
// channel receive in the function that waited.
func TestReadNamesWhatEndedTheWait(t *testing.T) {
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Skip("a trace is already running:", err)
	}
	waitOnTimer(60 * time.Millisecond)
	trace.Stop()
	rep, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Running) == 0 || rep.Traced < 60*time.Millisecond {
		t.Fatalf("report %+v: want at least the 60 ms traced", rep)
	}
	var got time.Duration
	for _, w := range rep.Waits {
		if strings.Contains(w.What, "waitOnTimer") {
			got += w.Time
		}
	}
	// The wait is at least 60 ms; the test's other goroutines may run
	// within it on a loaded machine, so only part of it need be idle.
	if got < 20*time.Millisecond {
		t.Errorf("idle time ended by waitOnTimer: %s, want most of 60 ms; waits %+v", got, rep.Waits)
	}
}

//go:noinline
func waitOnTimer(d time.Duration) {
	<-time.After(d)
}
