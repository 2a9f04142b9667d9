package store

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
)

func TestCreateRunStoresRunAndChild(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	r, child := newRun("r1")
	if err := db.CreateRun(ctx, r, child); err != nil {
		t.Fatal(err)
	}
	if r.Status != StatusQueued || r.RootKey != r.RequesterKey {
		t.Errorf("defaults: status %q root %q", r.Status, r.RootKey)
	}
	got, err := db.GetRun(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	want := *r
	want.CreatedAt = ms(t0)
	if !reflect.DeepEqual(got, &want) {
		t.Errorf("GetRun =\n%+v\nwant\n%+v", got, &want)
	}
	byChild, err := db.GetRunByChildKey(ctx, r.ChildKey)
	if err != nil || byChild.ID != "r1" {
		t.Errorf("GetRunByChildKey = %+v, %v", byChild, err)
	}

	s, err := db.GetSession(ctx, r.ChildKey)
	if err != nil {
		t.Fatalf("child session: %v", err)
	}
	wantS := Session{Key: r.ChildKey, ID: r.ChildSessionID, AgentID: "main", Kind: KindSubagent,
		ParentKey: r.RequesterKey, RootKey: r.RootKey, Depth: 1, Label: "summary", Model: r.Model,
		Origin: slackOrigin, TranscriptPath: db.TranscriptPath("main", r.ChildSessionID),
		CreatedAt: ms(t0), UpdatedAt: ms(t0)}
	if !reflect.DeepEqual(*s, wantS) {
		t.Errorf("child session =\n%+v\nwant\n%+v", *s, wantS)
	}
}

func TestCreateRunAllowedToolsNilVsEmpty(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	tests := []struct {
		id    string
		tools []string
	}{{"nil", nil}, {"empty", []string{}}, {"some", []string{"read"}}}
	for _, tt := range tests {
		r, child := newRun(tt.id)
		r.AllowedTools = tt.tools
		if err := db.CreateRun(ctx, r, child); err != nil {
			t.Fatal(err)
		}
		got, err := db.GetRun(ctx, tt.id)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.AllowedTools, tt.tools) {
			t.Errorf("%s: AllowedTools = %#v, want %#v", tt.id, got.AllowedTools, tt.tools)
		}
	}
}

func TestCreateRunRollsBackBothRows(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	r, child := newRun("dup")
	if err := db.CreateRun(ctx, r, child); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		setup func() (*Run, *Session)
	}{
		// The child session inserts fine, the run row then fails: both go.
		{"duplicate run id", func() (*Run, *Session) {
			r2, c2 := newRun("dup")
			r2.ChildKey, r2.ChildSessionID = "agent:main:subagent:fresh", "sess-fresh"
			return r2, c2
		}},
		// The child session fails first: no run row.
		{"duplicate child key", func() (*Run, *Session) {
			r2, c2 := newRun("fresh2")
			r2.ChildKey = r.ChildKey
			return r2, c2
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r2, c2 := tt.setup()
			err := db.CreateRun(ctx, r2, c2)
			if !errors.Is(err, ErrExists) {
				t.Fatalf("CreateRun = %v, want ErrExists", err)
			}
			if r2.ChildKey != r.ChildKey {
				if _, err := db.GetSession(ctx, r2.ChildKey); !errors.Is(err, ErrNotFound) {
					t.Errorf("child session %s left behind: %v", r2.ChildKey, err)
				}
			}
			if r2.ID != r.ID {
				if _, err := db.GetRun(ctx, r2.ID); !errors.Is(err, ErrNotFound) {
					t.Errorf("run %s left behind: %v", r2.ID, err)
				}
			}
		})
	}
	sessions, err := db.ListSessions(ctx, SessionFilter{IncludeDeleted: true})
	if err != nil || len(sessions) != 1 {
		t.Errorf("sessions after failed creates = %d (%v), want 1", len(sessions), err)
	}
	// Without a child session, the run needs a stored one.
	r3, _ := newRun("orphan")
	if err := db.CreateRun(ctx, r3, nil); err == nil {
		t.Error("CreateRun with an unknown child key and no child session succeeded")
	}
}

func TestStartRunAndStatus(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	r, child := newRun("r1")
	if err := db.CreateRun(ctx, r, child); err != nil {
		t.Fatal(err)
	}
	started := t0.Add(time.Second)
	if err := db.StartRun(ctx, "r1", started); err != nil {
		t.Fatal(err)
	}
	got, _ := db.GetRun(ctx, "r1")
	if got.Status != StatusRunning || !got.StartedAt.Equal(ms(started)) {
		t.Errorf("after StartRun: %q %v", got.Status, got.StartedAt)
	}
	if err := db.StartRun(ctx, "r1", started); !errors.Is(err, ErrNotQueued) {
		t.Errorf("StartRun twice = %v, want ErrNotQueued", err)
	}
	if err := db.StartRun(ctx, "nope", started); !errors.Is(err, ErrNotFound) {
		t.Errorf("StartRun(unknown) = %v, want ErrNotFound", err)
	}
	if err := db.SetRunStatus(ctx, "r1", StatusAnnouncing); err != nil {
		t.Fatal(err)
	}
	if err := db.SetRunNote(ctx, "r1", StatusRunning, "awaiting approval K7Q2"); err != nil {
		t.Fatal(err)
	}
	got, _ = db.GetRun(ctx, "r1")
	if got.Status != StatusRunning || got.Note != "awaiting approval K7Q2" {
		t.Errorf("status, note = %q, %q", got.Status, got.Note)
	}
	if err := db.SetRunStatus(ctx, "nope", StatusDone); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetRunStatus(unknown) = %v, want ErrNotFound", err)
	}
	if err := db.SetRunNote(ctx, "nope", StatusDone, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetRunNote(unknown) = %v, want ErrNotFound", err)
	}
}

func finishedRun(r *Run) {
	r.Status, r.Outcome, r.Note, r.Result = StatusDone, OutcomeSuccess, "", "Here is the summary."
	r.EndedAt, r.ArchiveAt = t0.Add(time.Minute), t0.Add(61*time.Minute)
	r.TokensIn, r.TokensOut, r.CacheRead, r.CacheWrite, r.CostUSD = 10100, 2200, 5000, 300, 0.0123
}

func TestFinishRunWithAnnounce(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	r, child := newRun("r1")
	if err := db.CreateRun(ctx, r, child); err != nil {
		t.Fatal(err)
	}
	if err := db.StartRun(ctx, r.ID, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	finishedRun(r)
	ann := &OutboxItem{Origin: r.Origin, Kind: channels.KindAnnounce, Text: "✅ summary", CreatedAt: r.EndedAt}
	if err := db.FinishRun(ctx, r, ann); err != nil {
		t.Fatal(err)
	}
	if ann.ID == 0 || ann.RunID != "r1" {
		t.Errorf("announce after FinishRun: id %d runId %q", ann.ID, ann.RunID)
	}
	got, _ := db.GetRun(ctx, "r1")
	if got.Status != StatusDone || got.Outcome != OutcomeSuccess || got.Result != r.Result ||
		!got.EndedAt.Equal(ms(r.EndedAt)) || !got.ArchiveAt.Equal(ms(r.ArchiveAt)) ||
		got.TokensIn != 10100 || got.TokensOut != 2200 || got.CacheRead != 5000 || got.CacheWrite != 300 ||
		got.CostUSD != 0.0123 || !got.StartedAt.Equal(ms(t0.Add(time.Second))) {
		t.Errorf("finished run = %+v", got)
	}
	if s, err := db.GetSession(ctx, got.ChildKey); err != nil || s.TokensIn != 10100 || s.TokensOut != 2200 {
		t.Errorf("child session after the run = %+v, %v; want the run's tokens (10100 / 2200) for herald sessions list", s, err)
	}
	item, err := db.GetOutbox(ctx, ann.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := OutboxItem{ID: ann.ID, RunID: "r1", Origin: slackOrigin, Kind: channels.KindAnnounce,
		Text: "✅ summary", CreatedAt: ms(r.EndedAt), NextAttemptAt: ms(r.EndedAt), SendingPart: -1}
	if !reflect.DeepEqual(*item, want) {
		t.Errorf("outbox item =\n%+v\nwant\n%+v", *item, want)
	}

	// Finishing again (e.g. after a restart) updates the run but adds no
	// second announce.
	r.Note = "second finish"
	ann2 := &OutboxItem{Origin: r.Origin, Kind: channels.KindAnnounce, Text: "second"}
	if err := db.FinishRun(ctx, r, ann2); err != nil {
		t.Fatal(err)
	}
	if ann2.ID != ann.ID {
		t.Errorf("second FinishRun announce id = %d, want the first %d", ann2.ID, ann.ID)
	}
	pending, _, _, _ := db.OutboxStats(ctx)
	if pending != 1 {
		t.Errorf("pending outbox = %d, want 1", pending)
	}
	if got, _ := db.GetRun(ctx, "r1"); got.Note != "second finish" {
		t.Errorf("note = %q", got.Note)
	}

	// Without an announce only the run changes.
	r2, c2 := newRun("r2")
	if err := db.CreateRun(ctx, r2, c2); err != nil {
		t.Fatal(err)
	}
	r2.Status, r2.Outcome = "", OutcomeStopped
	if err := db.FinishRun(ctx, r2, nil); err != nil {
		t.Fatal(err)
	}
	got, _ = db.GetRun(ctx, "r2")
	if got.Status != StatusDone || got.EndedAt.IsZero() {
		t.Errorf("defaults: status %q ended %v", got.Status, got.EndedAt)
	}
}

func TestFinishRunIsOneTransaction(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	r, child := newRun("r1")
	if err := db.CreateRun(ctx, r, child); err != nil {
		t.Fatal(err)
	}

	// The outbox insert fails after the run update: the run stays as it was.
	testHookFinishRun = func() error { return errors.New("disk full") }
	t.Cleanup(func() { testHookFinishRun = nil })
	finishedRun(r)
	ann := &OutboxItem{Origin: r.Origin, Kind: channels.KindAnnounce, Text: "x"}
	if err := db.FinishRun(ctx, r, ann); err == nil {
		t.Fatal("FinishRun succeeded despite the failing step")
	}
	testHookFinishRun = nil
	got, _ := db.GetRun(ctx, "r1")
	if got.Status != StatusQueued || !got.EndedAt.IsZero() || got.Result != "" {
		t.Errorf("half-finished run left: %+v", got)
	}
	if p, d, f, _ := db.OutboxStats(ctx); p+d+f != 0 {
		t.Errorf("outbox rows after failed FinishRun: %d/%d/%d", p, d, f)
	}

	// An unknown run adds no announce.
	ghost := &Run{ID: "ghost"}
	if err := db.FinishRun(ctx, ghost, &OutboxItem{Text: "x"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("FinishRun(unknown) = %v, want ErrNotFound", err)
	}
	if p, _, _, _ := db.OutboxStats(ctx); p != 0 {
		t.Errorf("announce stored for an unknown run")
	}

	// An announce whose RunID already has an outbox row (enqueued before)
	// leaves exactly one row and a finished run.
	if _, err := db.EnqueueOutbox(ctx, &OutboxItem{RunID: "r1", Text: "early"}); err != nil {
		t.Fatal(err)
	}
	if err := db.FinishRun(ctx, r, &OutboxItem{Text: "late"}); err != nil {
		t.Fatal(err)
	}
	due, _ := db.PendingOutbox(ctx, 0)
	if len(due) != 1 || due[0].Text != "early" {
		t.Errorf("outbox = %+v, want the one early item", due)
	}
	if got, _ := db.GetRun(ctx, "r1"); got.Status != StatusDone {
		t.Errorf("run status = %q, want done", got.Status)
	}
}

func TestListRunsAndCountSpawns(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	type spec struct{ id, requester, root, status string }
	specs := []spec{
		{"a", "top1", "", StatusDone},
		{"b", "top1", "", StatusRunning},
		{"c", "agent:main:subagent:b", "top1", StatusQueued},
		{"d", "top2", "", StatusRunning},
	}
	for i, s := range specs {
		r, child := newRun(s.id)
		r.RequesterKey, r.RootKey, r.Status = s.requester, s.root, s.status
		r.CreatedAt = t0.Add(time.Duration(i) * time.Second)
		if err := db.CreateRun(ctx, r, child); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		f    RunFilter
		want []string
	}{
		{"all newest first", RunFilter{}, []string{"d", "c", "b", "a"}},
		{"requester", RunFilter{RequesterKey: "top1"}, []string{"b", "a"}},
		{"root", RunFilter{RootKey: "top1"}, []string{"c", "b", "a"}},
		{"statuses", RunFilter{Statuses: []string{StatusRunning, StatusQueued}}, []string{"d", "c", "b"}},
		{"root and status", RunFilter{RootKey: "top1", Statuses: []string{StatusRunning}}, []string{"b"}},
		{"limit", RunFilter{Limit: 1}, []string{"d"}},
		{"none", RunFilter{RequesterKey: "nobody"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runs, err := db.ListRuns(ctx, tt.f)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range runs {
				ids = append(ids, r.ID)
			}
			if !reflect.DeepEqual(ids, tt.want) {
				t.Errorf("ids = %v, want %v", ids, tt.want)
			}
		})
	}
	for root, want := range map[string]int{"top1": 3, "top2": 1, "none": 0} {
		if n, err := db.CountSpawns(ctx, root); err != nil || n != want {
			t.Errorf("CountSpawns(%s) = %d, %v; want %d", root, n, err, want)
		}
	}
}

func TestArchiveDeadlines(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	if _, ok, err := db.NextArchiveAt(ctx); ok || err != nil {
		t.Errorf("NextArchiveAt on empty = %v, %v", ok, err)
	}
	deadlines := map[string]time.Time{"a": t0.Add(time.Hour), "b": t0.Add(time.Minute), "c": {}}
	for _, id := range []string{"a", "b", "c"} {
		r, child := newRun(id)
		if err := db.CreateRun(ctx, r, child); err != nil {
			t.Fatal(err)
		}
		finishedRun(r)
		r.ArchiveAt = deadlines[id]
		if err := db.FinishRun(ctx, r, nil); err != nil {
			t.Fatal(err)
		}
	}
	next, ok, err := db.NextArchiveAt(ctx)
	if err != nil || !ok || !next.Equal(ms(t0.Add(time.Minute))) {
		t.Errorf("NextArchiveAt = %v, %v, %v", next, ok, err)
	}
	ids := func(now time.Time) []string {
		runs, err := db.DueArchives(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range runs {
			out = append(out, r.ID)
		}
		return out
	}
	if got := ids(t0); got != nil {
		t.Errorf("due before any deadline = %v", got)
	}
	if got := ids(t0.Add(time.Minute)); !reflect.DeepEqual(got, []string{"b"}) {
		t.Errorf("due at the first deadline = %v, want [b]", got)
	}
	if got := ids(t0.Add(2 * time.Hour)); !reflect.DeepEqual(got, []string{"b", "a"}) {
		t.Errorf("due later = %v, want [b a]", got)
	}

	archivedAt := t0.Add(2 * time.Minute)
	if err := db.MarkArchived(ctx, "b", archivedAt); err != nil {
		t.Fatal(err)
	}
	if got := ids(t0.Add(2 * time.Hour)); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("due after archiving b = %v, want [a]", got)
	}
	r, _ := db.GetRun(ctx, "b")
	if !r.ArchivedAt.Equal(ms(archivedAt)) {
		t.Errorf("ArchivedAt = %v", r.ArchivedAt)
	}
	s, _ := db.GetSession(ctx, r.ChildKey)
	if !s.DeletedAt.Equal(ms(archivedAt)) {
		t.Errorf("child session DeletedAt = %v, want %v", s.DeletedAt, ms(archivedAt))
	}
	next, ok, _ = db.NextArchiveAt(ctx)
	if !ok || !next.Equal(ms(t0.Add(time.Hour))) {
		t.Errorf("NextArchiveAt after archiving b = %v, %v", next, ok)
	}
	if err := db.MarkArchived(ctx, "nope", archivedAt); !errors.Is(err, ErrNotFound) {
		t.Errorf("MarkArchived(unknown) = %v, want ErrNotFound", err)
	}
}
