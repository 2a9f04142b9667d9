package chaos

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/devtools/harness"
)

// TestDrainKeepsQueuedTurns: SIGTERM while one turn runs and more wait
// queued exits 0 within the grace period, logs how many turns stay owed,
// and the next start answers every one of them, in order.
func TestDrainKeepsQueuedTurns(t *testing.T) {
	r := newRig(t, 2*time.Second, harness.Config{MainConcurrent: 4, Subagents: 4, Children: 10, GraceSeconds: 1})
	ctx, start := r.ctx, r.start
	gw := start()
	web := harness.NewWeb(gw.Base, 2)
	for i := 1; i <= 3; i++ {
		if _, err := web.Post(ctx, "drain", fmt.Sprintf("SAY d%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// The first turn waits on the model (2 s), the other two are queued.
	if err := gw.Term(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if code := gw.ExitCode(); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0; log:\n%s", code, gw.Tail(20))
	}
	if log := gw.Tail(40); !strings.Contains(log, "queued turns stay owed for the next start") {
		t.Errorf("the drain did not log the owed turns; log:\n%s", log)
	}

	gw = start()
	deadline := time.Now().Add(time.Minute)
	for {
		msgs, err := web.Messages(ctx, "drain", 0)
		if err != nil {
			t.Fatal(err)
		}
		var answers []string
		for _, m := range msgs {
			if m.Role == "assistant" {
				answers = append(answers, m.Text)
			}
		}
		if len(answers) >= 3 {
			if got := strings.Join(answers, ","); got != "ack d1,ack d2,ack d3" {
				t.Fatalf("answers after the restart = %s, want ack d1,ack d2,ack d3 (each once, in order)", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart only %v were answered; log:\n%s", answers, gw.Tail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSecondSignalExitsAtOnce: during a drain that waits for a turn whose
// model call hangs (grace 60 s), a second SIGTERM ends the process at once;
// the turn stays owed in the store.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	r := newRig(t, 10*time.Minute, harness.Config{MainConcurrent: 2, Subagents: 2, Children: 5, GraceSeconds: 60})
	ctx, model := r.ctx, r.model
	gw := r.start()
	if _, err := harness.NewWeb(gw.Base, 1).Post(ctx, "hang", "SAY hang"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); model.Calls() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the turn never called the model")
		}
	}
	if err := syscall.Kill(gw.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(gw.Tail(20), "gateway shutting down"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the drain did not start")
		}
	}
	// The drain would wait up to 60 s for the hung turn; the second signal
	// must end it well before.
	if err := gw.Term(30 * time.Second); err != nil {
		t.Fatalf("second SIGTERM: %v", err)
	}
	if code := gw.ExitCode(); code != 1 || !strings.Contains(gw.Tail(5), "second terminated during the drain") {
		t.Errorf("exit code %d, log:\n%s\nwant 1 and the second-signal line", code, gw.Tail(5))
	}
}
