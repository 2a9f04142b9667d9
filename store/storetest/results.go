package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
)

// A run's result is written once with its end and is folded into its
// requester's history by one turn: a second fold by another turn takes
// nothing, the same turn again (resumed) gets it back, the fold records
// the turn's start, and a session started again with /new does not take
// the old session's results.
func testResults(t *testing.T, s Store) {
	ctx := context.Background()
	end := func(id, sessionID, text string) {
		t.Helper()
		r, child := newRun(id)
		r.RequesterSessionID, r.OutputSchema = sessionID, `{"type":"object"}`
		if err := s.SpawnRun(ctx, r, child, store.SpawnLimits{}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.GetRun(ctx, id); err != nil || got.RequesterSessionID != sessionID || got.OutputSchema != r.OutputSchema {
			t.Fatalf("spawned run = %+v, %v", got, err)
		}
		r.Status, r.Outcome, r.EndedAt, r.Output = store.StatusDone, store.OutcomeSuccess, t0.Add(time.Minute), `{"n":1}`
		for range 2 { // a retried end adds nothing twice
			ann := &store.OutboxItem{Origin: origin, Kind: channels.KindAnnounce, Text: text}
			if err := s.EndRun(ctx, r, store.RunEnd{Announce: ann, Result: &store.Result{Text: text}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	end("res1", "s-old", "[sub-agent result] one")
	if got, err := s.GetRun(ctx, "res1"); err != nil || got.Output != `{"n":1}` { // outputSchema's value (SPEC §23)
		t.Errorf("ended run's output = %+v, %v", got, err)
	}
	end("res2", "s-new", "[sub-agent result] two")
	end("res3", "s-new", "[sub-agent result] three")

	pending, err := s.PendingResults(ctx, convKey, "s-new")
	if err != nil || len(pending) != 2 || pending[0].RunID != "res2" || pending[1].Text != "[sub-agent result] three" {
		t.Fatalf("PendingResults = %+v, %v", pending, err)
	}
	if all, _ := s.PendingResults(ctx, convKey, ""); len(all) != 3 {
		t.Errorf("PendingResults(any session id) = %d results, want 3", len(all))
	}
	it := &store.Intake{SessionKey: convKey, AgentID: "main", Origin: origin, Text: "and?", CreatedAt: t0}
	if _, err := s.AddIntake(ctx, it); err != nil {
		t.Fatal(err)
	}
	fold := store.Fold{SessionKey: convKey, SessionID: "s-new", By: "intake:1", IntakeID: it.ID, At: t0.Add(2 * time.Minute)}
	got, err := s.FoldResults(ctx, fold)
	if err != nil || len(got) != 2 || got[0].FoldedBy != "intake:1" || got[0].FoldedAt.IsZero() {
		t.Fatalf("FoldResults = %+v, %v", got, err)
	}
	owed, _ := s.OwedIntake(ctx)
	if len(owed) != 1 || !owed[0].StartedAt.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("the fold did not record the turn's start: %+v", owed)
	}
	if again, _ := s.FoldResults(ctx, fold); len(again) != 2 {
		t.Errorf("the same turn folding again got %d results, want its 2", len(again))
	}
	if other, _ := s.FoldResults(ctx, store.Fold{SessionKey: convKey, SessionID: "s-new", By: "intake:2"}); len(other) != 0 {
		t.Errorf("another turn folded %d results already taken", len(other))
	}
	if left, _ := s.PendingResults(ctx, convKey, ""); len(left) != 1 || left[0].RunID != "res1" {
		t.Errorf("left unfolded = %+v, want the old session's one", left)
	}
}

// A spawn group's wake is added with the end of its last live run, once:
// not while another run of the group is live, and not again when the end
// is written a second time. It is an owed intake of kind wake, claimed
// like a message, naming the session it is for.
func testWakes(t *testing.T, s Store) {
	ctx := context.Background()
	var runs []*store.Run
	for _, id := range []string{"w1", "w2"} {
		r, child := newRun(id)
		r.Announce, r.SpawnGroup, r.GroupDeadline = store.AnnounceParent, "intake:9", t0.Add(time.Hour)
		if err := s.SpawnRun(ctx, r, child, store.SpawnLimits{}); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	if got, _ := s.ListRuns(ctx, store.RunFilter{SpawnGroup: "intake:9"}); len(got) != 2 || got[0].Announce != store.AnnounceParent ||
		!got[0].GroupDeadline.Equal(t0.Add(time.Hour)) {
		t.Fatalf("ListRuns(group) = %+v", got)
	}
	end := func(r *store.Run) *store.Intake {
		t.Helper()
		r.Status, r.Outcome, r.EndedAt = store.StatusDone, store.OutcomeSuccess, t0.Add(time.Minute)
		w := &store.Intake{SessionKey: convKey, AgentID: "main", Origin: origin, Text: "results of " + r.ID, PlatformID: "wake:intake:9",
			SessionID: "s-1", ClaimedBy: "replica-a", CreatedAt: r.EndedAt}
		if err := s.EndRun(ctx, r, store.RunEnd{Result: &store.Result{Text: "[sub-agent result] " + r.ID}, Wake: w}); err != nil {
			t.Fatal(err)
		}
		return w
	}
	if w := end(runs[0]); w.ID != 0 {
		t.Errorf("a wake was added while w2 still runs: %+v", w)
	}
	w := end(runs[1])
	if w.ID == 0 || w.ClaimedBy != "replica-a" {
		t.Fatalf("the last run's end added no claimed wake: %+v", w)
	}
	if again := end(runs[1]); again.ID != 0 {
		t.Errorf("a second end of the last run added another wake: %+v", again)
	}
	owed, err := s.OwedIntake(ctx)
	if err != nil || len(owed) != 1 || owed[0].Kind != store.IntakeWake || owed[0].SessionID != "s-1" || owed[0].Text != "results of w2" {
		t.Errorf("owed intake = %+v, %v; want the one wake", owed, err)
	}
}

// A group whose runs all end while the turn that spawned them still runs
// is woken when that turn completes, in its transaction: the wake is the
// session's next owed turn, with the last run's result as its text.
func testTurnWake(t *testing.T, s Store) {
	ctx := context.Background()
	it := &store.Intake{SessionKey: convKey, AgentID: "main", Origin: origin, Text: "spawn two", CreatedAt: t0, ClaimedBy: "replica-a"}
	if _, err := s.AddIntake(ctx, it); err != nil {
		t.Fatal(err)
	}
	group := fmt.Sprintf("intake:%d", it.ID)
	for i, id := range []string{"tw1", "tw2"} {
		r, child := newRun(id)
		r.Announce, r.SpawnGroup, r.RequesterSessionID = store.AnnounceParent, group, "s-1"
		if err := s.SpawnRun(ctx, r, child, store.SpawnLimits{}); err != nil {
			t.Fatal(err)
		}
		r.Status, r.Outcome, r.EndedAt = store.StatusDone, store.OutcomeSuccess, t0.Add(time.Duration(i+1)*time.Minute)
		w := &store.Intake{SessionKey: convKey, AgentID: "main", Origin: origin, Text: "x", PlatformID: "wake:" + group, ClaimedBy: "replica-a"}
		if err := s.EndRun(ctx, r, store.RunEnd{Result: &store.Result{Text: "[sub-agent result] " + id}, Wake: w}); err != nil {
			t.Fatal(err)
		}
		if w.ID != 0 {
			t.Errorf("run %s woke the requester while the turn that spawned it still runs", id)
		}
	}
	_, next, err := s.CompleteIntake(ctx, it.ID, nil, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if next == nil || next.Kind != store.IntakeWake || next.Text != "[sub-agent result] tw2" || next.SessionID != "s-1" || next.ClaimedBy != "replica-a" {
		t.Fatalf("next owed turn after the spawning turn = %+v, want the group's wake", next)
	}
}
