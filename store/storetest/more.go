package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/store"
)

// A conversation's own settings read back as set, are zero before any,
// belong to that conversation only and survive /new.
func testConversationSettings(t *testing.T, s Store) {
	ctx := context.Background()
	if got, err := s.ConversationSettings(ctx, convKey); err != nil || got != (store.ConversationSettings{}) {
		t.Fatalf("before any: %+v, %v; want zero", got, err)
	}
	if _, err := s.EnsureSession(ctx, &store.Session{Key: convKey, AgentID: "main", Origin: origin}); err != nil {
		t.Fatal(err)
	}
	want := store.ConversationSettings{Model: "anthropic/claude-haiku", Thinking: "high"}
	if err := s.SetConversationSettings(ctx, convKey, want); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ConversationSettings(ctx, convKey); err != nil || got != want {
		t.Fatalf("after set: %+v, %v; want %+v", got, err, want)
	}
	if got, _ := s.ConversationSettings(ctx, "agent:main:other"); got != (store.ConversationSettings{}) {
		t.Errorf("another conversation has %+v", got)
	}
	want.Thinking = "off"
	if err := s.SetConversationSettings(ctx, convKey, want); err != nil {
		t.Fatal(err)
	}
	if err := s.ResetSession(ctx, convKey, "s2", s.TranscriptPath("main", "s2"), "", t0); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ConversationSettings(ctx, convKey); got != want {
		t.Errorf("after set again and /new: %+v; want %+v", got, want)
	}
	if err := s.SetConversationSettings(ctx, convKey, store.ConversationSettings{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ConversationSettings(ctx, convKey); got != (store.ConversationSettings{}) {
		t.Errorf("after clearing: %+v", got)
	}
}

// The draft a turn shows is kept with its owed message, so a resumed turn
// (on this replica or another) edits the same draft.
func testIntakeDraft(t *testing.T, s Store) {
	ctx := context.Background()
	a, b := intake(convKey, "m1", "a"), intake(convKey, "m2", "b")
	for _, in := range []*store.Intake{a, b} {
		if _, err := s.AddIntake(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	for _, ref := range []string{"draft-1", "draft-2"} {
		if err := s.SetIntakeDraft(ctx, a.ID, ref); err != nil {
			t.Fatal(err)
		}
	}
	owed, err := s.OwedIntake(ctx)
	if err != nil || len(owed) != 2 || owed[0].DraftRef != "draft-2" || owed[1].DraftRef != "" {
		t.Fatalf("owed = %+v, %v; want a with draft-2, b with none", owed, err)
	}
	if _, err := s.AcquireLease(ctx, store.ReplicaLease("r1"), "r1", time.Minute); err != nil {
		t.Fatal(err)
	}
	claimed, err := s.ClaimOwed(ctx, store.Claim{Holder: "r1"})
	if err != nil || len(claimed) != 1 || claimed[0].DraftRef != "draft-2" {
		t.Errorf("claimed = %+v, %v; want a with its draft", claimed, err)
	}
}

// A sessions_spawn call spawns one run: asked again (a turn replayed after
// a crash), the call finds the run it made.
func testRunBySpawnCall(t *testing.T, s Store) {
	ctx := context.Background()
	r, child := newRun("r1")
	r.SpawnCallID = "toolu_1"
	if err := s.SpawnRun(ctx, r, child, store.SpawnLimits{}); err != nil {
		t.Fatal(err)
	}
	other, otherChild := newRun("r2")
	if err := s.SpawnRun(ctx, other, otherChild, store.SpawnLimits{}); err != nil {
		t.Fatal(err)
	}
	got, err := s.RunBySpawnCall(ctx, convKey, "toolu_1")
	if err != nil || got.ID != "r1" || got.Task != "sum up" {
		t.Fatalf("RunBySpawnCall = %+v, %v; want r1", got, err)
	}
	if _, err := s.RunBySpawnCall(ctx, convKey, "toolu_2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an unknown call = %v, want ErrNotFound", err)
	}
	if _, err := s.RunBySpawnCall(ctx, "agent:main:other", "toolu_1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the call id in another session = %v, want ErrNotFound", err)
	}
	again, againChild := newRun("r3")
	again.SpawnCallID = "toolu_1"
	err = s.SpawnRun(ctx, again, againChild, store.SpawnLimits{})
	var sc *store.SpawnCallError
	if !errors.Is(err, store.ErrExists) || !errors.As(err, &sc) || sc.RunID != "r1" || sc.CallID != "toolu_1" {
		t.Errorf("a second run of the same call = %v, want a *SpawnCallError naming r1 (ErrExists)", err)
	}
	// The call is told it spawned already, also where a limit would
	// refuse a new run now.
	err = s.SpawnRun(ctx, again, againChild, store.SpawnLimits{MaxChildren: 1, MaxTotal: 1})
	if !errors.As(err, &sc) || sc.RunID != "r1" {
		t.Errorf("a second run of the same call at the limits = %v, want a *SpawnCallError naming r1", err)
	}
	if _, err := s.GetRun(ctx, "r3"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused second run was stored: %v", err)
	}

	// SpawnRuns is all or none: runs naming a new call and a call stored
	// before are told of the stored one's run, and nothing is stored, not
	// even the new call. The runs of one call record it for the first.
	a, aChild := newRun("r4")
	b, bChild := newRun("r5")
	a.SpawnCallID, b.SpawnCallID = "toolu_4", "toolu_1"
	err = s.SpawnRuns(ctx, []*store.Run{a, b}, []*store.Session{aChild, bChild}, store.SpawnLimits{})
	if !errors.As(err, &sc) || sc.RunID != "r1" || sc.CallID != "toolu_1" {
		t.Errorf("runs naming a call stored before = %v, want a *SpawnCallError naming r1", err)
	}
	for _, id := range []string{"r4", "r5"} {
		if _, err := s.GetRun(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("run %s of the refused spawn was stored: %v", id, err)
		}
	}
	if _, err := s.RunBySpawnCall(ctx, convKey, "toolu_4"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused spawn's new call was recorded: %v", err)
	}
	b.SpawnCallID = "toolu_4"
	if err := s.SpawnRuns(ctx, []*store.Run{a, b}, []*store.Session{aChild, bChild}, store.SpawnLimits{}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.RunBySpawnCall(ctx, convKey, "toolu_4"); err != nil || got.ID != "r4" {
		t.Errorf("RunBySpawnCall(toolu_4) = %+v, %v; want r4, the first run naming it", got, err)
	}
}

// Runs a replica left (queued, running or announcing; not done) are
// claimed by another, oldest first. With several replicas (PostgreSQL) a
// live replica's runs stay its own; on SQLite any other holder is a
// previous run of the one process, so its runs are free.
func testClaimRuns(t *testing.T, s Store) {
	ctx := context.Background()
	for _, r := range []string{"r1", "r2"} {
		if _, err := s.AcquireLease(ctx, store.ReplicaLease(r), r, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	statuses := []string{store.StatusQueued, store.StatusRunning, store.StatusAnnouncing, store.StatusDone}
	for i, owner := range []string{"r1", "r2", "r1", "r1", "r1"} {
		r, child := newRun(fmt.Sprintf("run-%d", i))
		r.Owner, r.Status = owner, statuses[min(i, 3)]
		r.CreatedAt = t0.Add(time.Duration(-i) * time.Second) // run-4 oldest
		if i == 4 {
			r.Status = store.StatusQueued
			r.CreatedAt = t0.Add(time.Minute)
		}
		if err := s.SpawnRun(ctx, r, child, store.SpawnLimits{}); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(runs []store.Run) (out []string) {
		for _, r := range runs {
			out = append(out, r.ID)
		}
		return out
	}
	if _, err := s.ClaimRuns(ctx, store.Claim{}); !errors.Is(err, store.ErrNoHolder) {
		t.Errorf("claim without holder = %v", err)
	}
	if s.Driver() == store.DriverPostgres {
		if got, err := s.ClaimRuns(ctx, store.Claim{Holder: "r2"}); err != nil || len(got) != 0 {
			t.Fatalf("r2 claims %v, %v; want none while r1 lives", ids(got), err)
		}
		if err := s.ReleaseLease(ctx, store.ReplicaLease("r1"), "r1"); err != nil {
			t.Fatal(err)
		}
	}
	// r1 is gone (or, on SQLite, a previous run): r2 takes its active runs,
	// oldest first, but not the done one nor its own.
	got, err := s.ClaimRuns(ctx, store.Claim{Holder: "r2"})
	if err != nil || fmt.Sprint(ids(got)) != "[run-2 run-0 run-4]" {
		t.Fatalf("r2 claims %v, %v; want [run-2 run-0 run-4]", ids(got), err)
	}
	for _, r := range got {
		if r.Owner != "r2" {
			t.Errorf("claimed %s owned by %q", r.ID, r.Owner)
		}
	}
	if r, _ := s.GetRun(ctx, "run-0"); r == nil || r.Owner != "r2" {
		t.Errorf("run-0 stored owner %+v, want r2", r)
	}
	if again, _ := s.ClaimRuns(ctx, store.Claim{Holder: "r2"}); len(again) != 0 {
		t.Errorf("claimed again: %v", ids(again))
	}
	// Restarted under its id, r2 takes back everything it held.
	if mine, _ := s.ClaimRuns(ctx, store.Claim{Holder: "r2", Reclaim: true}); fmt.Sprint(ids(mine)) != "[run-2 run-1 run-0 run-4]" {
		t.Errorf("r2 reclaims %v; want [run-2 run-1 run-0 run-4]", ids(mine))
	}
	if _, err := s.ClaimRuns(ctx, store.Claim{Holder: "r2", Limit: 1}); err == nil {
		t.Error("ClaimRuns accepted a limit")
	}
}

// A run's status is set alone; archive deadlines are found earliest first.
func testRunStatusAndArchive(t *testing.T, s Store) {
	ctx := context.Background()
	if _, ok, err := s.NextArchiveAt(ctx); ok || err != nil {
		t.Errorf("NextArchiveAt with no runs = %v, %v", ok, err)
	}
	r, child := newRun("r1")
	if err := s.SpawnRun(ctx, r, child, store.SpawnLimits{}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRunStatus(ctx, "r1", store.StatusAnnouncing); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetRun(ctx, "r1"); got.Status != store.StatusAnnouncing || got.Task != "sum up" {
		t.Errorf("after SetRunStatus: %+v", got)
	}
	if err := s.SetRunStatus(ctx, "nope", store.StatusDone); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SetRunStatus(unknown) = %v, want ErrNotFound", err)
	}
	for range 2 {
		if err := s.AddRunUsage(ctx, "r1", 10, 2, 3, 4); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := s.GetRun(ctx, "r1"); got.TokensIn != 20 || got.TokensOut != 4 || got.CacheRead != 6 || got.CacheWrite != 8 {
		t.Errorf("run usage = %d/%d/%d/%d; want 20/4/6/8", got.TokensIn, got.TokensOut, got.CacheRead, got.CacheWrite)
	}
	if c, _ := s.GetSession(ctx, child.Key); c == nil || c.TokensIn != 20 || c.TokensOut != 4 {
		t.Errorf("child session usage = %+v; want 20 in, 4 out", c)
	}
	if err := s.AddRunUsage(ctx, "nope", 1, 1, 0, 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AddRunUsage(unknown) = %v, want ErrNotFound", err)
	}
	for i, id := range []string{"r1", "r2"} {
		run := r
		if id == "r2" {
			var c *store.Session
			run, c = newRun("r2")
			if err := s.SpawnRun(ctx, run, c, store.SpawnLimits{}); err != nil {
				t.Fatal(err)
			}
		}
		run.Status, run.Outcome, run.EndedAt = store.StatusDone, store.OutcomeSuccess, t0
		run.ArchiveAt = t0.Add(time.Duration(2-i) * time.Hour) // r2's is earlier
		if err := s.FinishRun(ctx, run, nil); err != nil {
			t.Fatal(err)
		}
	}
	if at, ok, err := s.NextArchiveAt(ctx); err != nil || !ok || !at.Equal(t0.Add(time.Hour)) {
		t.Errorf("NextArchiveAt = %v %v %v; want r2's %v", at, ok, err, t0.Add(time.Hour))
	}
	if err := s.MarkArchived(ctx, "r2", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if at, ok, _ := s.NextArchiveAt(ctx); !ok || !at.Equal(t0.Add(2*time.Hour)) {
		t.Errorf("NextArchiveAt after archiving r2 = %v %v; want r1's", at, ok)
	}
	if c, err := s.GetSession(ctx, "agent:main:subagent:r2"); err != nil || c.DeletedAt.IsZero() {
		t.Errorf("archived run's child session = %+v, %v; want deleted", c, err)
	}
}

// A run's end can start the queued run that takes its lane slot
// (RunEnd.Start): that run is running from then, with its start, in the
// same transaction; one that is no longer queued is left as it is.
func testEndRunStartsNext(t *testing.T, s Store) {
	ctx := context.Background()
	var runs []*store.Run
	for _, id := range []string{"r1", "r2", "r3"} {
		r, child := newRun(id)
		if err := s.SpawnRun(ctx, r, child, store.SpawnLimits{}); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	if err := s.StartRun(ctx, "r1", t0); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Minute)
	r1 := runs[0]
	r1.Status, r1.Outcome, r1.EndedAt = store.StatusDone, store.OutcomeSuccess, at
	if err := s.EndRun(ctx, r1, store.RunEnd{Start: &store.RunStart{RunID: "r2", At: at}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetRun(ctx, "r2")
	if err != nil || got.Status != store.StatusRunning || !got.StartedAt.Equal(at) || !got.StretchAt.Equal(at) {
		t.Fatalf("r2 after r1's end = %+v, %v; want running since %v", got, err, at)
	}
	if got, _ := s.GetRun(ctx, "r1"); got.Status != store.StatusDone {
		t.Errorf("r1 = %s, want done", got.Status)
	}
	// r3 was stopped (ended) before the end that would start it.
	r3 := runs[2]
	r3.Status, r3.Outcome, r3.EndedAt = store.StatusDone, store.OutcomeStopped, at
	if err := s.EndRun(ctx, r3, store.RunEnd{}); err != nil {
		t.Fatal(err)
	}
	r2 := runs[1]
	r2.Status, r2.Outcome, r2.EndedAt = store.StatusDone, store.OutcomeSuccess, at.Add(time.Minute)
	if err := s.EndRun(ctx, r2, store.RunEnd{Start: &store.RunStart{RunID: "r3", At: at.Add(time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetRun(ctx, "r3"); got.Status != store.StatusDone || got.Outcome != store.OutcomeStopped {
		t.Errorf("r3 = %s %s, want done stopped (left as it was)", got.Status, got.Outcome)
	}
}
