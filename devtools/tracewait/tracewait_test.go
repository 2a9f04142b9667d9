package tracewait

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"runtime/trace"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "record testdata/timer.trace from a live run of waitOnTimer")

// timerTrace is a trace of this package's test binary (no -race) while
// its only work was waitOnTimer(60 ms). Which goroutine runs first when
// an idle stretch ends is up to the scheduler (under -race another
// goroutine often does), so the report is checked on a recorded trace;
// -update records it again and checks the live report first.
var timerTrace = filepath.Join("testdata", "timer.trace")

// TestReadNamesWhatEndedTheWait: a program whose only work waits on a
// timer's channel is idle for that wait, and the report names the
// channel receive in the function that waited.
func TestReadNamesWhatEndedTheWait(t *testing.T) {
	if *update {
		var buf bytes.Buffer
		if err := trace.Start(&buf); err != nil {
			t.Fatal("a trace is already running:", err)
		}
		waitOnTimer(60 * time.Millisecond)
		trace.Stop()
		rep, err := Read(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		if got := waitedOnTimer(rep); got < 50*time.Millisecond {
			t.Fatalf("live run: idle time ended by waitOnTimer %s, want most of 60 ms (run again, without -race); waits %+v", got, rep.Waits)
		}
		if err := os.WriteFile(timerTrace, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(timerTrace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Running) == 0 || rep.Traced < 60*time.Millisecond {
		t.Fatalf("report %+v: want at least the 60 ms traced", rep)
	}
	if rep.Running[0] < 50*time.Millisecond {
		t.Errorf("no goroutine running for %s, want most of the 60 ms wait", rep.Running[0])
	}
	if got := waitedOnTimer(rep); got < 50*time.Millisecond {
		t.Errorf("idle time ended by waitOnTimer: %s, want most of 60 ms; waits %+v", got, rep.Waits)
	}
	if len(rep.Waits) == 0 || !strings.Contains(rep.Waits[0].What, "chan receive") || !strings.Contains(rep.Waits[0].What, "waitOnTimer") {
		t.Errorf("longest wait %+v, want the channel receive in waitOnTimer", rep.Waits)
	}
}

// waitedOnTimer is the idle time the report gives waitOnTimer's wake.
func waitedOnTimer(rep Report) time.Duration {
	var got time.Duration
	for _, w := range rep.Waits {
		if strings.Contains(w.What, "waitOnTimer") {
			got += w.Time
		}
	}
	return got
}

//go:noinline
func waitOnTimer(d time.Duration) {
	<-time.After(d)
}
