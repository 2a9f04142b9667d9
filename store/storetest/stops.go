package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/store"
)

// A stop asked for work another replica holds is recorded until that
// work ends: the holder finds its runs whose stop was requested (not the
// ended ones, not another replica's) and the sessions whose running turn
// /stop cut (the started message it holds, until it is done; never the
// messages queued behind it). A run's end clears its stop request, and a
// stop asked for an ended run is not recorded.
func testStops(t *testing.T, s Store) {
	ctx := context.Background()
	for _, r := range []string{"r1", "r2"} {
		if _, err := s.AcquireLease(ctx, store.ReplicaLease(r), r, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for i, owner := range []string{"r1", "r1", "r2", "r1"} {
		r, child := newRun(fmt.Sprintf("s-%d", i))
		r.Owner, r.Status = owner, store.StatusRunning
		if i == 1 {
			r.Status = store.StatusDone
		}
		if err := s.SpawnRun(ctx, r, child, store.SpawnLimits{}); err != nil {
			t.Fatal(err)
		}
	}
	requests := func(holder string) string {
		t.Helper()
		runs, sessions, err := s.StopRequests(ctx, holder)
		if err != nil {
			t.Fatalf("StopRequests(%s): %v", holder, err)
		}
		return fmt.Sprint(runs, sessions)
	}
	if got := requests("r1"); got != "[] []" {
		t.Fatalf("before any request r1 has %s", got)
	}
	if err := s.RequestStop(ctx, []string{"s-0", "s-1", "s-2", "missing"}, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.RequestStop(ctx, nil, t0); err != nil {
		t.Fatal(err)
	}
	if got := requests("r1"); got != "[s-0] []" {
		t.Errorf("r1 is asked to stop %s, want [s-0] [] (s-1 ended, s-2 is r2's, s-3 not asked)", got)
	}
	if got := requests("r2"); got != "[s-2] []" {
		t.Errorf("r2 is asked to stop %s, want [s-2] []", got)
	}
	ended, _ := newRun("s-0")
	ended.Status, ended.Outcome = store.StatusDone, store.OutcomeStopped
	if err := s.EndRun(ctx, ended, store.RunEnd{}); err != nil {
		t.Fatal(err)
	}
	if got := requests("r1"); got != "[] []" {
		t.Errorf("after its run ended r1 is asked to stop %s", got)
	}
	// What an ended run carries: its end cleared the stop asked while it
	// ran (s-0), and a stop asked after its end was not recorded (s-1).
	// Seen by making both live again, which only this probe does: neither
	// is then a stop to act on.
	for _, id := range []string{"s-0", "s-1"} {
		if err := s.SetRunStatus(ctx, id, store.StatusRunning); err != nil {
			t.Fatal(err)
		}
	}
	if got := requests("r1"); got != "[] []" {
		t.Errorf("ended runs made live again are asked to stop %s; an ended run carries no pending stop", got)
	}
	if err := s.RequestStop(ctx, []string{"s-0"}, t0); err != nil {
		t.Fatal(err)
	}
	if got := requests("r1"); got != "[s-0] []" {
		t.Errorf("a stop asked for a live run is %s, want [s-0] [] (the end's clearing leaves room for a new request)", got)
	}
	for _, id := range []string{"s-0", "s-1"} {
		if err := s.SetRunStatus(ctx, id, store.StatusDone); err != nil {
			t.Fatal(err)
		}
	}

	a, b := intake(convKey, "m1", "first"), intake(convKey, "m2", "second")
	for _, in := range []*store.Intake{a, b} {
		if _, err := s.AddIntake(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if claimed, err := s.ClaimOwed(ctx, store.Claim{Holder: "r1"}); err != nil || len(claimed) != 1 || claimed[0].ID != a.ID {
		t.Fatalf("r1 claims %+v, %v; want the first message", claimed, err)
	}
	abort := func(except string, want int64) {
		t.Helper()
		if n, err := s.RequestAbort(ctx, convKey, except, t0); err != nil || n != want {
			t.Errorf("RequestAbort(except %s) = %d, %v; want %d", except, n, err, want)
		}
	}
	abort("r2", 0) // no turn started
	if err := s.StartIntake(ctx, a.ID, t0); err != nil {
		t.Fatal(err)
	}
	abort("r1", 0) // the asking replica's own turn: it cuts it itself
	abort("r2", 1)
	abort("r2", 0) // asked already
	if got := requests("r1"); got != "[] ["+convKey+"]" {
		t.Errorf("r1 is asked to cut %s, want its turn of %s", got, convKey)
	}
	if got := requests("r2"); got != "[s-2] []" {
		t.Errorf("r2 is asked to stop %s, want only its run s-2", got)
	}
	if _, _, err := s.CompleteIntake(ctx, a.ID, nil, t0); err != nil {
		t.Fatal(err)
	}
	if got := requests("r1"); got != "[] []" {
		t.Errorf("after the cut turn ended r1 is asked to stop %s (the next message must run)", got)
	}
}
