package storetest

import (
	"context"
	"errors"
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
		for try := range 2 { // a retried end adds nothing twice
			ann := &store.OutboxItem{Origin: origin, Kind: channels.KindAnnounce, Text: text}
			if err := s.EndRun(ctx, r, store.RunEnd{Announce: ann, Result: &store.Result{Text: text}, ClaimAnnounce: "r1"}); err != nil {
				t.Fatal(err)
			}
			// The first announce, the oldest pending item of its chat, is
			// claimed with the end that adds it; one already stored (the
			// retried end) or behind another is not.
			want := try == 0 && id == "res1"
			if (ann.ClaimedBy == "r1") != want || want && (ann.SendingPart != -1 || !ann.FilesKnown) {
				t.Errorf("end %d of %s: announce %+v; claimed want %v", try, id, ann, want)
			}
			if got, err := s.GetOutbox(ctx, ann.ID); err != nil || (got.ClaimedBy == "r1") != (id == "res1") || got.State() != store.OutboxPending {
				t.Errorf("end %d of %s: stored announce %+v, %v; want pending, claimed by r1 only for res1", try, id, got, err)
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
	// A turn's first start with nothing to take in records the start alone.
	next := &store.Intake{SessionKey: "agent:main:other", AgentID: "main", Origin: origin, Text: "new", CreatedAt: t0}
	if _, err := s.AddIntake(ctx, next); err != nil {
		t.Fatal(err)
	}
	start := t0.Add(3 * time.Minute)
	if none, err := s.FoldResults(ctx, store.Fold{SessionKey: "agent:main:other", By: "intake:3", IntakeID: next.ID, At: start}); err != nil || len(none) != 0 {
		t.Fatalf("first start with no results = %+v, %v", none, err)
	}
	owed, _ = s.OwedIntake(ctx)
	if len(owed) != 2 || owed[1].ID != next.ID || !owed[1].StartedAt.Equal(start) {
		t.Errorf("the start was not recorded: %+v", owed)
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

// A batch's runs are recorded in one transaction, all or none under the
// limits (a batch the limits would cut stores none of its runs); the end
// of its last run adds the batch's one announce, with the files of its
// runs' results, once; the files of a result reach the turn that folds it.
func testBatch(t *testing.T, s Store) {
	ctx := context.Background()
	batch := func(ids ...string) ([]*store.Run, []*store.Session) {
		var runs []*store.Run
		var children []*store.Session
		for _, id := range ids {
			r, child := newRun(id)
			r.Batch, r.SpawnCallID, r.RequesterSessionID = "b1", "call-1", "s-1"
			runs, children = append(runs, r), append(children, child)
		}
		return runs, children
	}
	runs, children := batch("b1-1", "b1-2", "b1-3")
	var lim *store.LimitError
	if err := s.SpawnRuns(ctx, runs, children, store.SpawnLimits{MaxChildren: 2}); !errors.As(err, &lim) ||
		lim.Limit != "maxChildrenPerSession" || lim.Count != 0 || lim.Adding != 3 {
		t.Fatalf("a batch of 3 under maxChildren 2 = %v, want a *LimitError adding 3", err)
	}
	for _, r := range runs {
		if _, err := s.GetRun(ctx, r.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("run %s of a refused batch is stored: %v", r.ID, err)
		}
	}
	if _, err := s.GetSession(ctx, children[0].Key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("child session of a refused batch is stored: %v", err)
	}
	if err := s.SpawnRuns(ctx, runs, children, store.SpawnLimits{MaxChildren: 3, MaxTotal: 3}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListRuns(ctx, store.RunFilter{Batch: "b1"})
	if err != nil || len(got) != 3 || got[0].Batch != "b1" || got[0].Status != store.StatusQueued {
		t.Fatalf("ListRuns(batch) = %+v, %v", got, err)
	}
	if r, err := s.RunBySpawnCall(ctx, convKey, "call-1"); err != nil || r.Batch != "b1" {
		t.Errorf("RunBySpawnCall of the batch's call = %+v, %v", r, err)
	}
	more, moreChildren := batch("b2-1")
	more[0].Batch, more[0].SpawnCallID = "b2", ""
	if err := s.SpawnRuns(ctx, more, moreChildren, store.SpawnLimits{MaxTotal: 3}); !errors.As(err, &lim) || lim.Limit != "maxTotalSpawns" || lim.Count != 3 {
		t.Errorf("a spawn past maxTotal = %v", err)
	}

	file := putFile(t, s, []byte("chart of run 1"))
	file.Name = "chart.txt"
	var rendered [][]store.Run
	end := func(r *store.Run, outcome string, skipped bool, files []store.FileRef) *store.OutboxItem {
		t.Helper()
		r.Status, r.Outcome, r.EndedAt, r.Skipped = store.StatusDone, outcome, t0.Add(time.Minute), skipped
		b := &store.BatchEnd{Render: func(runs []store.Run) *store.OutboxItem {
			rendered = append(rendered, runs)
			return &store.OutboxItem{Origin: origin, Kind: channels.KindAnnounce, Text: fmt.Sprintf("batch of %d", len(runs)), SessionKey: convKey}
		}}
		if err := s.EndRun(ctx, r, store.RunEnd{Result: &store.Result{Text: "[sub-agent result] " + r.ID, Files: files}, Batch: b}); err != nil {
			t.Fatal(err)
		}
		return b.Announce
	}
	if a := end(runs[0], store.OutcomeSuccess, false, []store.FileRef{file}); a != nil || len(rendered) != 0 {
		t.Errorf("the batch was announced while two of its runs still run: %+v", a)
	}
	end(runs[1], store.OutcomeError, true, nil)
	a := end(runs[2], store.OutcomeSuccess, false, nil)
	if a == nil || a.ID == 0 || a.RunID != "batch:b1" || len(rendered) != 1 {
		t.Fatalf("the end of the batch's last run added %+v (rendered %d times)", a, len(rendered))
	}
	if rs := rendered[0]; len(rs) != 3 || rs[0].ID != "b1-1" || rs[2].ID != "b1-3" || !rs[1].Skipped || rs[1].Outcome != store.OutcomeError ||
		rs[2].Status != store.StatusDone {
		t.Errorf("Render got %+v, want the 3 runs in spawn order with their ends", rs)
	}
	stored, err := s.GetOutbox(ctx, a.ID)
	if err != nil || stored.Text != "batch of 3" {
		t.Fatalf("the batch announce = %+v, %v", stored, err)
	}
	if files, err := s.OutboxFiles(ctx, a.ID); err != nil || len(files) != 1 || files[0].ID != file.ID || files[0].Name != "chart.txt" {
		t.Errorf("the batch announce's files = %+v, %v; want run 1's", files, err)
	}
	if again := end(runs[2], store.OutcomeSuccess, false, nil); again != nil {
		t.Errorf("a second end of the last run added another batch announce: %+v", again)
	}
	if list, _ := s.ListOutbox(ctx, false, 0); len(list) != 1 {
		t.Errorf("outbox holds %d items, want the one batch announce", len(list))
	}

	// A run spawned with announce parent posts nothing: its files go with
	// the reply of the turn that folds its result; the batch's (announce
	// chat) went with the batch's announce and are not posted again.
	quiet, quietChild := newRun("quiet")
	quiet.Announce, quiet.RequesterSessionID = store.AnnounceParent, "s-1"
	if err := s.SpawnRun(ctx, quiet, quietChild, store.SpawnLimits{}); err != nil {
		t.Fatal(err)
	}
	quiet.Status, quiet.Outcome, quiet.EndedAt = store.StatusDone, store.OutcomeSuccess, t0.Add(2*time.Minute)
	quietFile := putFile(t, s, []byte("table of the quiet run"))
	if err := s.EndRun(ctx, quiet, store.RunEnd{Result: &store.Result{Text: "[sub-agent result] quiet", Files: []store.FileRef{quietFile}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FoldResults(ctx, store.Fold{SessionKey: convKey, SessionID: "s-1", By: "intake:7"}); err != nil {
		t.Fatal(err)
	}
	if files, err := s.FoldedFiles(ctx, convKey, "intake:7"); err != nil || len(files) != 1 || files[0].ID != quietFile.ID {
		t.Errorf("FoldedFiles of the folding turn = %+v, %v; want the announce parent run's only", files, err)
	}
	if files, err := s.FoldedFiles(ctx, convKey, "intake:8"); err != nil || len(files) != 0 {
		t.Errorf("FoldedFiles of another turn = %+v, %v", files, err)
	}

	// A batch's group deadline passes while one of its runs still runs:
	// AnnounceBatch adds its announce once, with the live run as it is,
	// and that run's end adds no second one.
	late, lateChildren := batch("b3-1", "b3-2")
	for _, r := range late {
		r.Batch, r.SpawnCallID = "b3", ""
	}
	if err := s.SpawnRuns(ctx, late, lateChildren, store.SpawnLimits{}); err != nil {
		t.Fatal(err)
	}
	end(late[0], store.OutcomeSuccess, false, nil)
	rendered = nil
	early := func(runs []store.Run) *store.OutboxItem {
		rendered = append(rendered, runs)
		return &store.OutboxItem{Origin: origin, Kind: channels.KindAnnounce, Text: fmt.Sprintf("batch of %d so far", len(runs)), SessionKey: convKey}
	}
	a, err = s.AnnounceBatch(ctx, "b3", early)
	if err != nil || a == nil || a.ID == 0 || a.RunID != "batch:b3" {
		t.Fatalf("AnnounceBatch with one run live = %+v, %v", a, err)
	}
	if rs := rendered[0]; len(rs) != 2 || rs[0].Status != store.StatusDone || rs[1].Status != store.StatusQueued {
		t.Errorf("AnnounceBatch rendered %+v, want the ended run and the live one", rs)
	}
	if again, err := s.AnnounceBatch(ctx, "b3", early); err != nil || again != nil {
		t.Errorf("a second AnnounceBatch added %+v, %v", again, err)
	}
	if after := end(late[1], store.OutcomeSuccess, false, nil); after != nil {
		t.Errorf("the end of the run still live at the deadline added another batch announce: %+v", after)
	}
	if list, _ := s.ListOutbox(ctx, false, 0); len(list) != 2 {
		t.Errorf("outbox holds %d items, want the two batches' announces", len(list))
	}
}

// SpawnEach records separate spawns in one transaction, each as its own
// SpawnRun would: each run's limits count the runs before it, a refused
// run (limit reached, or its call spawned already) stores nothing and
// frees its call, the others are stored.
func testSpawnEach(t *testing.T, s Store) {
	ctx := context.Background()
	var runs []*store.Run
	var children []*store.Session
	for i := range 4 {
		r, child := newRun(fmt.Sprintf("e%d", i))
		r.SpawnCallID, r.RequesterSessionID = fmt.Sprintf("each-%d", i), "s-1"
		runs, children = append(runs, r), append(children, child)
	}
	// e0 spawned before: its call is made again.
	if err := s.SpawnRun(ctx, runs[0], children[0], store.SpawnLimits{}); err != nil {
		t.Fatal(err)
	}
	again, againChild := newRun("e0-again")
	again.SpawnCallID = "each-0"
	list := []*store.Run{again, runs[1], runs[2], runs[3]}
	errs, err := s.SpawnEach(ctx, list, []*store.Session{againChild, children[1], children[2], children[3]}, store.SpawnLimits{MaxChildren: 3})
	if err != nil || len(errs) != 4 {
		t.Fatalf("SpawnEach = %v, %v", errs, err)
	}
	var sc *store.SpawnCallError
	if !errors.As(errs[0], &sc) || sc.RunID != "e0" {
		t.Errorf("the call made again = %v, want a *SpawnCallError naming e0", errs[0])
	}
	if errs[1] != nil || errs[2] != nil {
		t.Errorf("the spawns within maxChildren 3 = %v, %v", errs[1], errs[2])
	}
	var lim *store.LimitError
	if !errors.As(errs[3], &lim) || lim.Limit != "maxChildrenPerSession" || lim.Count != 3 || lim.Max != 3 {
		t.Errorf("the fourth live child = %v, want a *LimitError counting 3", errs[3])
	}
	for id, want := range map[string]bool{"e0-again": false, "e1": true, "e2": true, "e3": false} {
		_, err := s.GetRun(ctx, id)
		if stored := err == nil; stored != want {
			t.Errorf("run %s stored = %v (%v), want %v", id, stored, err, want)
		}
	}
	if r, err := s.RunBySpawnCall(ctx, convKey, "each-2"); err != nil || r.ID != "e2" {
		t.Errorf("RunBySpawnCall(each-2) = %+v, %v", r, err)
	}
	if r, err := s.RunBySpawnCall(ctx, convKey, "each-3"); err == nil {
		t.Errorf("the refused call each-3 is recorded as spawning %s", r.ID)
	}
	// The refused call may spawn once a slot frees.
	runs[3].Status = ""
	errs, err = s.SpawnEach(ctx, runs[3:], children[3:], store.SpawnLimits{MaxChildren: 4, MaxTotal: 4})
	if err != nil || errs[0] != nil {
		t.Fatalf("the refused call made again under maxChildren 4 = %v, %v", errs, err)
	}
	r, child := newRun("e4")
	errs, err = s.SpawnEach(ctx, []*store.Run{r}, []*store.Session{child}, store.SpawnLimits{MaxTotal: 4})
	if err != nil || !errors.As(errs[0], &lim) || lim.Limit != "maxTotalSpawns" {
		t.Errorf("a fifth spawn under maxTotal 4 = %v, %v", errs, err)
	}
	// One call named twice in a response: the second is the call made
	// again. A call refused by a limit is freed with its repeats refused too.
	var twice []*store.Run
	var twiceChildren []*store.Session
	for i, call := range []string{"dup", "dup", "dup-full", "dup-full"} {
		r, child := newRun(fmt.Sprintf("d%d", i))
		r.SpawnCallID = call
		twice, twiceChildren = append(twice, r), append(twiceChildren, child)
	}
	errs, err = s.SpawnEach(ctx, twice[:2], twiceChildren[:2], store.SpawnLimits{})
	if err != nil || errs[0] != nil || !errors.As(errs[1], &sc) || sc.RunID != "d0" {
		t.Errorf("one call twice = %v, %v, want the second a *SpawnCallError naming d0", errs, err)
	}
	errs, err = s.SpawnEach(ctx, twice[2:], twiceChildren[2:], store.SpawnLimits{MaxTotal: 5})
	if err != nil || !errors.As(errs[0], &lim) || !errors.As(errs[1], &lim) {
		t.Errorf("one call twice over maxTotal = %v, %v, want both refused", errs, err)
	}
	if r, err := s.RunBySpawnCall(ctx, convKey, "dup-full"); err == nil {
		t.Errorf("the refused call dup-full is recorded as spawning %s", r.ID)
	}
	for id, want := range map[string]bool{"d0": true, "d1": false, "d2": false, "d3": false} {
		_, err := s.GetRun(ctx, id)
		if stored := err == nil; stored != want {
			t.Errorf("run %s stored = %v (%v), want %v", id, stored, err, want)
		}
	}
}
