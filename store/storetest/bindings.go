package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/heraldhq/herald/store"
)

// A thread bound to a child session is found by its address (the sender
// and message of a later message do not matter) until its binding ends
// threadIdleMinutes after the last message; a touch extends it, /unfocus
// ends it, a new binding replaces it, and the children of a list show
// which of them are bound.
func testBindings(t *testing.T, s Store) {
	ctx := context.Background()
	thread := origin
	thread.ThreadID = "1700.1"
	idle := 24 * time.Hour
	b := &store.Binding{Thread: thread, ChildKey: "agent:main:subagent:c1", RunID: "r1", AgentID: "main",
		CreatedBy: "U1", CreatedAt: t0, ExpiresAt: t0.Add(idle)}
	if err := s.BindThread(ctx, b); err != nil {
		t.Fatal(err)
	}
	msg := thread
	msg.SenderID, msg.MessageID = "U2", "1700.9"
	got, err := s.ThreadBinding(ctx, msg, t0.Add(time.Hour))
	if err != nil || got.ChildKey != b.ChildKey || got.RunID != "r1" || got.AgentID != "main" || got.CreatedBy != "U1" ||
		got.Thread != thread || !got.LastAt.Equal(t0) || !got.ExpiresAt.Equal(t0.Add(idle)) {
		t.Fatalf("ThreadBinding = %+v, %v", got, err)
	}
	other := thread
	other.ThreadID = "1700.2"
	if _, err := s.ThreadBinding(ctx, other, t0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ThreadBinding(another thread) = %v, want ErrNotFound", err)
	}
	// It ends idle after the last message; a message before that extends it.
	if _, err := s.ThreadBinding(ctx, thread, t0.Add(idle)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ThreadBinding at its end = %v, want ErrNotFound", err)
	}
	at := t0.Add(20 * time.Hour)
	if ok, err := s.TouchBinding(ctx, msg, at, at.Add(idle)); err != nil || !ok {
		t.Fatalf("TouchBinding = %v, %v", ok, err)
	}
	if got, err := s.ThreadBinding(ctx, thread, t0.Add(idle+time.Hour)); err != nil || !got.LastAt.Equal(at) {
		t.Errorf("after a message: ThreadBinding = %+v, %v", got, err)
	}
	if ok, err := s.TouchBinding(ctx, thread, at.Add(idle), at.Add(2*idle)); err != nil || ok {
		t.Errorf("TouchBinding of an ended binding = %v, %v; want false", ok, err)
	}
	// The children of a list that are bound (a live binding each).
	b2 := &store.Binding{Thread: other, ChildKey: "agent:main:subagent:c2", RunID: "r2", CreatedAt: t0.Add(time.Minute), ExpiresAt: t0.Add(time.Hour)}
	if err := s.BindThread(ctx, b2); err != nil {
		t.Fatal(err)
	}
	list, err := s.ChildBindings(ctx, []string{"agent:main:subagent:c1", "agent:main:subagent:c2", "agent:main:subagent:c3"}, t0.Add(2*time.Minute))
	if err != nil || len(list) != 2 || list[0].ChildKey != "agent:main:subagent:c1" || list[1].ChildKey != "agent:main:subagent:c2" {
		t.Errorf("ChildBindings = %+v, %v", list, err)
	}
	if list, err := s.ChildBindings(ctx, []string{"agent:main:subagent:c2"}, t0.Add(2*time.Hour)); err != nil || len(list) != 0 {
		t.Errorf("ChildBindings after c2's ended = %+v, %v", list, err)
	}
	// /focus elsewhere: a new binding of the thread replaces the old one.
	b3 := &store.Binding{Thread: thread, ChildKey: "agent:main:subagent:c3", RunID: "r3", CreatedAt: at, ExpiresAt: at.Add(idle)}
	if err := s.BindThread(ctx, b3); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ThreadBinding(ctx, thread, at); err != nil || got.ChildKey != b3.ChildKey {
		t.Errorf("after rebinding: %+v, %v", got, err)
	}
	// /unfocus.
	gone, err := s.UnbindThread(ctx, msg, at)
	if err != nil || gone.ChildKey != b3.ChildKey {
		t.Fatalf("UnbindThread = %+v, %v", gone, err)
	}
	if _, err := s.ThreadBinding(ctx, thread, at); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after unbinding: %v, want ErrNotFound", err)
	}
	if _, err := s.UnbindThread(ctx, thread, at); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UnbindThread again = %v, want ErrNotFound", err)
	}
	if err := s.BindThread(ctx, &store.Binding{Thread: origin, ChildKey: "x"}); err == nil {
		t.Error("BindThread of a chat without a thread id succeeded")
	}
}

// ListRuns by chat: the runs under every conversation of one chat — any
// agent, the chat itself and its threads — and none of another chat.
func testRunsByChat(t *testing.T, s Store) {
	ctx := context.Background()
	for i, root := range []string{"agent:main:slack:group:C42", "agent:ops:slack:group:C42:thread:1700.1",
		"agent:main:slack:group:C4", "agent:main:slack:group:C42X", "agent:main:telegram:group:C42"} {
		r, child := newRun(string(rune('a' + i)))
		r.RootKey, r.RequesterKey, r.CreatedAt = root, root, t0.Add(time.Duration(i)*time.Minute)
		child.RootKey = root
		if err := s.SpawnRun(ctx, r, child, store.SpawnLimits{}); err != nil {
			t.Fatal(err)
		}
	}
	runs, err := s.ListRuns(ctx, store.RunFilter{Chat: "slack:group:C42"})
	if err != nil || len(runs) != 2 || runs[0].ID != "b" || runs[1].ID != "a" {
		t.Errorf("ListRuns(Chat) = %d runs %v, %v; want b, a", len(runs), runIDs(runs), err)
	}
	if runs, err := s.ListRuns(ctx, store.RunFilter{Chat: "slack:group:C_2"}); err != nil || len(runs) != 0 {
		t.Errorf("ListRuns(Chat with a LIKE wildcard) = %v, %v; want none", runIDs(runs), err)
	}
}

func runIDs(runs []store.Run) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.ID)
	}
	return out
}

// A child a thread is bound to is archived once both its deadline and
// its binding have passed: NextArchiveAt is the later of the two, and
// DueArchives leaves it while the binding lasts.
func testBoundChildArchive(t *testing.T, s Store) {
	ctx := context.Background()
	r, child := newRun("rb")
	if err := s.SpawnRun(ctx, r, child, store.SpawnLimits{}); err != nil {
		t.Fatal(err)
	}
	r.Status, r.Outcome, r.EndedAt, r.ArchiveAt = store.StatusDone, store.OutcomeSuccess, t0, t0.Add(time.Hour)
	if err := s.FinishRun(ctx, r, nil); err != nil {
		t.Fatal(err)
	}
	thread := origin
	thread.ThreadID = "1700.5"
	if err := s.BindThread(ctx, &store.Binding{Thread: thread, ChildKey: child.Key, RunID: "rb", CreatedAt: t0,
		ExpiresAt: t0.Add(3 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if at, ok, err := s.NextArchiveAt(ctx); err != nil || !ok || !at.Equal(t0.Add(3*time.Hour)) {
		t.Errorf("NextArchiveAt of a bound child = %v %v %v; want the binding's end %v", at, ok, err, t0.Add(3*time.Hour))
	}
	if due, err := s.DueArchives(ctx, t0.Add(2*time.Hour)); err != nil || len(due) != 0 {
		t.Errorf("DueArchives while bound = %v, %v; want none", runIDs(due), err)
	}
	if due, err := s.DueArchives(ctx, t0.Add(3*time.Hour)); err != nil || len(due) != 1 || due[0].ID != "rb" {
		t.Errorf("DueArchives after the binding ended = %v, %v; want rb", runIDs(due), err)
	}
}

// A run spawned with thread: true has its thread pending, recorded with
// the run; opening it moves the run and its child session to the thread
// and writes the binding and the link line in one step, once: a second
// open, or a refusal after it, changes nothing. A refused thread stays
// none. The run's draft is kept with its thread.
func testRunThreads(t *testing.T, s Store) {
	ctx := context.Background()
	r, child := newRun("rt")
	r.ThreadPending = true
	if err := s.SpawnRun(ctx, r, child, store.SpawnLimits{}); err != nil {
		t.Fatal(err)
	}
	if rt, err := s.RunThread(ctx, "rt"); err != nil || rt.State != store.ThreadPending || rt.Origin.ThreadID != "" {
		t.Fatalf("RunThread after SpawnRun = %+v, %v; want pending", rt, err)
	}
	thread := origin
	thread.ThreadID = "1700.7"
	open := store.ThreadOpened{Thread: thread, Link: "https://x/1700.7",
		Binding:  &store.Binding{Thread: thread, ChildKey: child.Key, RunID: "rt", AgentID: "main", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)},
		LinkLine: &store.OutboxItem{Origin: origin, Kind: "system", Text: "🧵 rt works in its own thread", CreatedAt: t0}}
	if err := s.OpenRunThread(ctx, "rt", open); err != nil || open.LinkLine.ID == 0 {
		t.Fatalf("OpenRunThread = %v (link line id %d)", err, open.LinkLine.ID)
	}
	rt, err := s.RunThread(ctx, "rt")
	if err != nil || rt.State != store.ThreadOpen || rt.Origin.ThreadID != "1700.7" || rt.Link != "https://x/1700.7" {
		t.Errorf("RunThread after OpenRunThread = %+v, %v", rt, err)
	}
	if got, err := s.GetRun(ctx, "rt"); err != nil || got.Origin.ThreadID != "1700.7" {
		t.Errorf("the run's origin = %+v, %v; want the thread", got, err)
	}
	if got, err := s.GetSession(ctx, child.Key); err != nil || got.Origin.ThreadID != "1700.7" {
		t.Errorf("the child session's origin = %+v, %v; want the thread", got, err)
	}
	if b, err := s.ThreadBinding(ctx, thread, t0); err != nil || b.ChildKey != child.Key {
		t.Errorf("binding = %+v, %v", b, err)
	}
	again := open
	again.LinkLine = &store.OutboxItem{Origin: origin, Kind: "system", Text: "again", CreatedAt: t0}
	if err := s.OpenRunThread(ctx, "rt", again); !errors.Is(err, store.ErrExists) {
		t.Errorf("a second OpenRunThread = %v, want ErrExists", err)
	}
	if err := s.RefuseRunThread(ctx, "rt"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RefuseRunThread of an open thread = %v, want ErrNotFound", err)
	}
	items, err := s.ListOutbox(ctx, false, 100)
	lines := 0
	for _, it := range items {
		if it.Origin.ChatID == origin.ChatID && (it.Text == "🧵 rt works in its own thread" || it.Text == "again") {
			lines++
		}
	}
	if err != nil || lines != 1 {
		t.Errorf("link lines in the outbox: %d, %v; want 1", lines, err)
	}
	if err := s.SetRunDraft(ctx, "rt", "draft-1"); err != nil {
		t.Fatal(err)
	}
	if rt, err := s.RunThread(ctx, "rt"); err != nil || rt.DraftRef != "draft-1" {
		t.Errorf("RunThread after SetRunDraft = %+v, %v", rt, err)
	}

	r2, child2 := newRun("rt2")
	r2.ThreadPending = true
	if err := s.SpawnRun(ctx, r2, child2, store.SpawnLimits{}); err != nil {
		t.Fatal(err)
	}
	if err := s.RefuseRunThread(ctx, "rt2"); err != nil {
		t.Fatal(err)
	}
	if rt, err := s.RunThread(ctx, "rt2"); err != nil || rt.State != store.ThreadNone {
		t.Errorf("RunThread after a refusal = %+v, %v", rt, err)
	}
	if err := s.OpenRunThread(ctx, "rt2", store.ThreadOpened{Thread: thread}); !errors.Is(err, store.ErrExists) {
		t.Errorf("OpenRunThread after a refusal = %v, want ErrExists", err)
	}
	r3, child3 := newRun("rt3")
	if err := s.SpawnRun(ctx, r3, child3, store.SpawnLimits{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunThread(ctx, "rt3"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RunThread of a run without one = %v, want ErrNotFound", err)
	}
	if err := s.SetRunDraft(ctx, "rt3", "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SetRunDraft of a run without a thread = %v, want ErrNotFound", err)
	}
}
