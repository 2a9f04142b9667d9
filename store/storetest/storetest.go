// Package storetest is the store's contract suite: Run drives any backend
// through the store interfaces — intake, outbox claims, runs, sessions,
// transcripts, leases, KV, schedules, spend, approvals, the web log,
// files, the bus — and checks what a user of
// Herald would notice (a message stored once, a reply delivered once and
// in order, a run's announce with its end, a lease held by one replica).
// The store package runs it on SQLite and on PostgreSQL.
//
// It must not import gateway, subagent, agent or any channels/<name>
// package.
package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
)

// Store is what the suite drives: the production contract plus the
// methods only tests use: GetOutbox (to see an item's state between
// claims) and RefFiles (to name a stored file for a conversation without
// a message).
type Store interface {
	store.Store
	GetOutbox(ctx context.Context, id int64) (*store.OutboxItem, error)
	RefFiles(ctx context.Context, scope string, files []store.FileRef) error
}

// Run runs the contract suite; open returns a new, empty store for one
// test (and closes it at the test's cleanup).
func Run(t *testing.T, open func(t *testing.T) Store) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, Store)
	}{
		{"Sessions", testSessions},
		{"Intake", testIntake},
		{"IntakeClaims", testIntakeClaims},
		{"OutboxClaims", testOutboxClaims},
		{"OutboxParts", testOutboxParts},
		{"OutboxDeadLetters", testOutboxDeadLetters},
		{"OutboxDeliverNext", testOutboxDeliverNext},
		{"Runs", testRuns},
		{"Results", testResults},
		{"Wakes", testWakes},
		{"TurnWake", testTurnWake},
		{"Batch", testBatch},
		{"SpawnEach", testSpawnEach},
		{"Transcripts", testTranscripts},
		{"Leases", testLeases},
		{"KV", testKV},
		{"Schedules", testSchedules},
		{"ScheduleLimits", testScheduleLimits},
		{"Spend", testSpend},
		{"ConfigSchedules", testConfigSchedules},
		{"TranscriptLines", testTranscriptLines},
		{"TranscriptFresh", testTranscriptFresh},
		{"TailTranscriptFollows", testTailTranscriptFollows},
		{"Backup", testBackup},
		{"Approvals", testApprovals},
		{"ApprovalDecidedOnce", testApprovalDecidedOnce},
		{"ApprovalRace", testApprovalRace},
		{"PendingApprovals", testPendingApprovals},
		{"WebLog", testWebLog},
		{"WebLogConcurrent", testWebLogConcurrent},
		{"WebLogDelivers", testWebLogDelivers},
		{"WebLogDeliversFollowing", testWebLogDeliversFollowing},
		{"WebIntake", testWebIntake},
		{"WebReplyDelivered", testWebReplyDelivered},
		{"WebEndClaimsWhatItAdded", testWebEndClaimsWhatItAdded},
		{"IntakeSession", testIntakeSession},
		{"FilesStoredOnce", testFilesStoredOnce},
		{"FilesRefused", testFilesRefused},
		{"FilesConcurrentPut", testFilesConcurrentPut},
		{"FilesSweep", testFilesSweep},
		{"FileHolds", testFileHolds},
		{"Bus", testBus},
		{"Stops", testStops},
		{"ConversationSettings", testConversationSettings},
		{"IntakeDraft", testIntakeDraft},
		{"RunBySpawnCall", testRunBySpawnCall},
		{"EndRunStartsNext", testEndRunStartsNext},
		{"ClaimRuns", testClaimRuns},
		{"RunStatusAndArchive", testRunStatusAndArchive},
		{"Bindings", testBindings},
		{"RunThreads", testRunThreads},
		{"RunsByChat", testRunsByChat},
		{"BoundChildArchive", testBoundChildArchive},
		{"Memories", testMemories},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open(t)) })
	}
}

var (
	t0     = time.Date(2026, 11, 21, 20, 41, 26, 0, time.UTC)
	origin = channels.Origin{Channel: "slack", Account: "T1", ChatID: "C42", ChatType: channels.ChatGroup}
)

const convKey = "agent:main:slack:group:C42"

func testSessions(t *testing.T, s Store) {
	ctx := context.Background()
	sess := &store.Session{Key: convKey, AgentID: "main", Origin: origin, CreatedAt: t0, UpdatedAt: t0}
	if created, err := s.EnsureSession(ctx, sess); err != nil || !created || sess.ID == "" {
		t.Fatalf("EnsureSession = %v, %v (id %q)", created, err, sess.ID)
	}
	again := &store.Session{Key: convKey, AgentID: "main", ID: "other"}
	if created, err := s.EnsureSession(ctx, again); err != nil || created || again.ID != sess.ID {
		t.Fatalf("second EnsureSession = %v, %v, id %q; want the stored row %q", created, err, again.ID, sess.ID)
	}
	got, err := s.GetSession(ctx, convKey)
	if err != nil || got.Origin != origin || got.Kind != store.KindMain || !got.CreatedAt.Equal(t0) {
		t.Fatalf("GetSession = %+v, %v", got, err)
	}
	if _, err := s.GetSession(ctx, "agent:main:none"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSession(missing) = %v, want ErrNotFound", err)
	}
	if err := s.AddSessionUsage(ctx, convKey, 100, 20); err != nil {
		t.Fatal(err)
	}
	if err := s.AddSessionUsage(ctx, convKey, 1, 2); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSession(ctx, convKey); got.TokensIn != 101 || got.TokensOut != 22 {
		t.Errorf("usage = %d in, %d out; want 101, 22", got.TokensIn, got.TokensOut)
	}
	newPath := s.TranscriptPath("main", "s2")
	if err := s.ResetSession(ctx, convKey, "s2", newPath, sess.TranscriptPath+".reset", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSession(ctx, convKey); got.ID != "s2" || got.TranscriptPath != newPath {
		t.Errorf("after reset: id %q path %q", got.ID, got.TranscriptPath)
	}
	list, err := s.ListSessions(ctx, store.SessionFilter{Kind: store.KindMain})
	if err != nil || len(list) != 1 || list[0].Key != convKey {
		t.Errorf("ListSessions = %+v, %v", list, err)
	}
	cs := store.ConversationSettings{}
	if err := s.SetConversationSettings(ctx, convKey, cs); err != nil {
		t.Fatal(err)
	}
	if moved, err := s.HoldSession(ctx, convKey, "r1"); err != nil || !moved {
		t.Errorf("first HoldSession = %v, %v; want moved", moved, err)
	}
	if moved, err := s.HoldSession(ctx, convKey, "r1"); err != nil || moved {
		t.Errorf("second HoldSession by the same replica = %v, %v; want not moved", moved, err)
	}
	if moved, err := s.HoldSession(ctx, convKey, "r2"); err != nil || !moved {
		t.Errorf("HoldSession by another replica = %v, %v; want moved", moved, err)
	}
	if moved, err := s.HoldSession(ctx, convKey, "r1"); err != nil || !moved {
		t.Errorf("HoldSession back by the first = %v, %v; want moved", moved, err)
	}
	if _, err := s.HoldSession(ctx, convKey, ""); !errors.Is(err, store.ErrNoHolder) {
		t.Errorf("HoldSession without holder = %v, want ErrNoHolder", err)
	}
}

func intake(key, pid, text string) *store.Intake {
	return &store.Intake{SessionKey: key, AgentID: "main", PlatformID: pid, Origin: origin, Text: text, CreatedAt: t0}
}

// A message is stored once however often the platform delivers it; its
// turn is owed until CompleteIntake puts the reply in the outbox.
func testIntake(t *testing.T, s Store) {
	ctx := context.Background()
	a, b := intake(convKey, "m1", "first"), intake(convKey, "m2", "second")
	for _, in := range []*store.Intake{a, b} {
		if added, err := s.AddIntake(ctx, in); err != nil || !added || in.ID == 0 || !in.FilesKnown {
			t.Fatalf("AddIntake(%s) = %v, %v (files known: %v)", in.Text, added, err, in.FilesKnown)
		}
	}
	dup := intake(convKey, "m1", "first")
	if added, err := s.AddIntake(ctx, dup); err != nil || added || dup.ID != a.ID {
		t.Fatalf("re-delivery = %v, %v, id %d; want not added, id %d", added, err, dup.ID, a.ID)
	}
	owed, err := s.OwedIntake(ctx)
	if err != nil || len(owed) != 2 || owed[0].Text != "first" || owed[1].Text != "second" {
		t.Fatalf("owed = %+v, %v", owed, err)
	}
	if err := s.StartIntake(ctx, a.ID, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnsureSession(ctx, &store.Session{Key: convKey, AgentID: "main", Origin: origin, CreatedAt: t0, UpdatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	// The turn's usage is added with its completion, once.
	// The reply, the oldest pending item of its chat, is claimed for r1 in
	// the same transaction.
	reply := &store.OutboxItem{Origin: origin, Kind: channels.KindReply, Text: "answer"}
	id, _, err := s.CompleteTurn(ctx, store.TurnEnd{ID: a.ID, Reply: reply, At: t0, AddUsage: true, TokensIn: 30, TokensOut: 4, ClaimReply: "r1"})
	if err != nil || id == 0 || reply.ID != id || reply.ClaimedBy != "r1" || reply.Text != "answer" || reply.Origin != origin || !reply.FilesKnown {
		t.Fatalf("CompleteTurn = %d, %v; reply %+v, want it claimed by r1", id, err, reply)
	}
	if got, _ := s.ClaimOutbox(ctx, store.Claim{Holder: "r2"}, nil, t0.Add(time.Hour)); len(got) != 0 {
		t.Errorf("r2 claimed %v; want nothing (r1 holds the reply)", texts(got))
	}
	if got, err := s.GetOutbox(ctx, id); err != nil || got.ClaimedBy != reply.ClaimedBy || got.SendingPart != reply.SendingPart ||
		got.PartsSent != reply.PartsSent || got.Attempts != reply.Attempts || !got.CreatedAt.Equal(reply.CreatedAt) || !got.NextAttemptAt.Equal(reply.NextAttemptAt) {
		t.Errorf("stored reply %+v, %v; the claimed one %+v", got, err, reply)
	}
	if id2, _, err := s.CompleteTurn(ctx, store.TurnEnd{ID: a.ID, Reply: &store.OutboxItem{Origin: origin, Text: "answer"}, At: t0, AddUsage: true, TokensIn: 30, TokensOut: 4}); err != nil || id2 != 0 {
		t.Errorf("second CompleteTurn = %d, %v; want no second reply", id2, err)
	}
	if sess, err := s.GetSession(ctx, convKey); err != nil || sess.TokensIn != 30 || sess.TokensOut != 4 {
		t.Errorf("usage after completing twice = %+v, %v; want 30 in, 4 out", sess, err)
	}
	owed, _ = s.OwedIntake(ctx)
	if len(owed) != 1 || owed[0].ID != b.ID {
		t.Errorf("owed after completing = %+v, want the second only", owed)
	}
	recent, err := s.RecentIntake(ctx, 0)
	if err != nil || len(recent) != 2 || recent[0].ID != b.ID || recent[1].ID != a.ID || recent[1].DoneAt.IsZero() || !recent[0].DoneAt.IsZero() {
		t.Errorf("RecentIntake = %+v, %v; want second (owed), first (done)", recent, err)
	}
	if recent, _ := s.RecentIntake(ctx, 1); len(recent) != 1 || recent[0].ID != b.ID {
		t.Errorf("RecentIntake(1) = %+v; want the newest", recent)
	}
	item, err := s.GetOutbox(ctx, id)
	if err != nil || item.Text != "answer" || item.Origin.ChatID != "C42" {
		t.Errorf("reply in the outbox = %+v, %v", item, err)
	}
	// Behind a pending item of its chat, a reply waits for its turn.
	later := &store.OutboxItem{Origin: origin, Kind: channels.KindReply, Text: "later"}
	if _, _, err := s.CompleteTurn(ctx, store.TurnEnd{ID: b.ID, Reply: later, At: t0, ClaimReply: "r1"}); err != nil || later.ID == 0 || later.ClaimedBy != "" {
		t.Errorf("CompleteTurn behind a pending reply = %v; reply %+v, want it stored and not claimed", err, later)
	}
}

// A replica claims only the oldest owed message of a session; the next one
// follows when that turn completes.
func testIntakeClaims(t *testing.T, s Store) {
	ctx := context.Background()
	for _, r := range []string{"r1", "r2"} {
		if _, err := s.AcquireLease(ctx, store.ReplicaLease(r), r, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	a, b, c := intake("k1", "m1", "a"), intake("k1", "m2", "b"), intake("k2", "m3", "c")
	for _, in := range []*store.Intake{a, b, c} {
		if _, err := s.AddIntake(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.ClaimOwed(ctx, store.Claim{Holder: "r1"})
	if err != nil || len(got) != 2 || got[0].ID != a.ID || got[1].ID != c.ID {
		t.Fatalf("r1 claims %+v, %v; want a and c (each session's oldest)", got, err)
	}
	// Several replicas share a PostgreSQL state: r1's claims stay r1's
	// while its lease lives. On SQLite one process runs, so another holder
	// is a previous run of it and its claims are free (checked apart).
	if s.Driver() == store.DriverPostgres {
		if got, err := s.ClaimOwed(ctx, store.Claim{Holder: "r2"}); err != nil || len(got) != 0 {
			t.Fatalf("r2 claims %d messages, %v; want none while r1 is alive", len(got), err)
		}
	}
	if _, err := s.ClaimOwed(ctx, store.Claim{Holder: ""}); !errors.Is(err, store.ErrNoHolder) {
		t.Errorf("claim without holder = %v", err)
	}
	_, next, err := s.CompleteIntake(ctx, a.ID, nil, t0)
	if err != nil || next == nil || next.ID != b.ID || next.ClaimedBy != "r1" {
		t.Fatalf("CompleteIntake next = %+v, %v; want b, claimed by r1", next, err)
	}
}

// The outbox delivers in order per destination: a later item waits until
// the earlier one is delivered or failed; a retry waits for its time.
func testOutboxClaims(t *testing.T, s Store) {
	ctx := context.Background()
	if _, err := s.AcquireLease(ctx, store.ReplicaLease("r1"), "r1", time.Minute); err != nil {
		t.Fatal(err)
	}
	other := origin
	other.ChatID = "C99"
	first := &store.OutboxItem{Origin: origin, Kind: channels.KindReply, Text: "one", CreatedAt: t0, NextAttemptAt: t0}
	second := &store.OutboxItem{Origin: origin, Kind: channels.KindReply, Text: "two", CreatedAt: t0, NextAttemptAt: t0}
	elsewhere := &store.OutboxItem{Origin: other, Kind: channels.KindReply, Text: "three", CreatedAt: t0, NextAttemptAt: t0}
	for _, o := range []*store.OutboxItem{first, second, elsewhere} {
		if _, err := s.EnqueueOutbox(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	ann := &store.OutboxItem{RunID: "run-1", Origin: other, Kind: channels.KindAnnounce, Text: "done", CreatedAt: t0, NextAttemptAt: t0}
	id1, err := s.EnqueueOutbox(ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	if id2, err := s.EnqueueOutbox(ctx, &store.OutboxItem{RunID: "run-1", Origin: other, Text: "again"}); err != nil || id2 != id1 {
		t.Errorf("second announce of a run = %d, %v; want the first %d", id2, err, id1)
	}
	if pending, err := s.PendingOutbox(ctx, 0); err != nil || strings.Join(texts(pending), ",") != "one,two,three,done" {
		t.Errorf("PendingOutbox = %v, %v; want every item, oldest first", texts(pending), err)
	}
	if pending, _ := s.PendingOutbox(ctx, 2); len(pending) != 2 {
		t.Errorf("PendingOutbox(2) = %d items", len(pending))
	}
	if at, ok, err := s.NextOutboxAt(ctx, ""); err != nil || !ok || !at.Equal(t0) {
		t.Errorf("NextOutboxAt = %v %v %v; want %v", at, ok, err, t0)
	}
	got, err := s.ClaimOutbox(ctx, store.Claim{Holder: "r1"}, nil, t0)
	if err != nil || len(got) != 2 || got[0].Text != "one" || got[1].Text != "three" {
		t.Fatalf("claims %+v, %v; want one and three (the heads of their chats)", texts(got), err)
	}
	if got, _ := s.ClaimOutbox(ctx, store.Claim{Holder: "r1"}, nil, t0); len(got) != 0 {
		t.Fatalf("claimed again: %v", texts(got))
	}
	// r1's sends are in flight: nothing else is due for r1; another
	// replica sees them due.
	if _, ok, err := s.NextOutboxAt(ctx, "r1"); err != nil || ok {
		t.Errorf("NextOutboxAt(r1) with r1's claims the only heads = %v, %v; want nothing", ok, err)
	}
	if at, ok, err := s.NextOutboxAt(ctx, "r2"); err != nil || !ok || !at.Equal(t0) {
		t.Errorf("NextOutboxAt(r2) = %v %v %v; want %v", at, ok, err, t0)
	}
	if got, _ := s.ClaimOutbox(ctx, store.Claim{Holder: "r1", Reclaim: true}, []string{"telegram"}, t0); len(got) != 0 {
		t.Fatalf("claimed on another channel: %v", texts(got))
	}
	if err := s.MarkDelivered(ctx, first.ID, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkRetry(ctx, elsewhere.ID, t0.Add(time.Minute), "429"); err != nil {
		t.Fatal(err)
	}
	got, _ = s.ClaimOutbox(ctx, store.Claim{Holder: "r1"}, []string{"slack"}, t0)
	if len(got) != 1 || got[0].Text != "two" {
		t.Fatalf("after delivering one: claims %v; want two (three waits for its retry)", texts(got))
	}
	if err := s.MarkFailed(ctx, second.ID, t0, "gone"); err != nil {
		t.Fatal(err)
	}
	got, _ = s.ClaimOutbox(ctx, store.Claim{Holder: "r1"}, nil, t0.Add(time.Minute))
	if len(got) != 1 || got[0].Text != "three" || got[0].Attempts != 1 || got[0].LastError != "429" {
		t.Fatalf("at the retry time: %+v", got)
	}
	if err := s.Check(ctx); err != nil {
		t.Errorf("Check on an open store: %v", err)
	}
	pending, delivered, failed, err := s.OutboxStats(ctx)
	if err != nil || pending != 2 || delivered != 1 || failed != 1 {
		t.Errorf("stats = %d pending, %d delivered, %d failed, %v; want 2, 1, 1", pending, delivered, failed, err)
	}
	if n, err := s.OutboxPending(ctx); err != nil || n != 2 {
		t.Errorf("OutboxPending = %d, %v; want 2 (as OutboxStats)", n, err)
	}
	if list, err := s.ListOutbox(ctx, true, 0); err != nil || strings.Join(texts(list), ",") != "done,three" {
		t.Errorf("ListOutbox(pending) = %v, %v; want done, three (newest first)", texts(list), err)
	}
	if list, _ := s.ListOutbox(ctx, false, 0); len(list) != 4 {
		t.Errorf("ListOutbox(all) = %v; want 4 items", texts(list))
	}
	if err := s.MarkDelivered(ctx, elsewhere.ID, t0); err != nil {
		t.Fatal(err)
	}
	// done waits behind nothing now: due since t0.
	if at, ok, err := s.NextOutboxAt(ctx, ""); err != nil || !ok || !at.Equal(t0) {
		t.Errorf("NextOutboxAt = %v %v %v; want %v", at, ok, err, t0)
	}
	if err := s.MarkDelivered(ctx, ann.ID, t0); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.NextOutboxAt(ctx, ""); err != nil || ok {
		t.Errorf("NextOutboxAt with nothing pending = %v, %v", ok, err)
	}
}

func texts(items []store.OutboxItem) []string {
	var out []string
	for _, o := range items {
		out = append(out, o.Text)
	}
	return out
}

// A message sent part by part keeps its progress: the parts on the
// platform and the one whose outcome is unknown.
func testOutboxParts(t *testing.T, s Store) {
	ctx := context.Background()
	o := &store.OutboxItem{Origin: origin, Kind: channels.KindReply, Text: "long", CreatedAt: t0, NextAttemptAt: t0}
	id, err := s.EnqueueOutbox(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	for part, pid := range []string{"p1", "p2"} {
		if err := s.BeginPart(ctx, id, part); err != nil {
			t.Fatal(err)
		}
		if err := s.EndPart(ctx, id, part, pid); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.BeginPart(ctx, id, 2); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetOutbox(ctx, id)
	if err != nil || got.PartsSent != 2 || strings.Join(got.PartIDs, ",") != "p1,p2" || got.SendingPart != 2 {
		t.Fatalf("progress = %d sent %v, sending %d, %v", got.PartsSent, got.PartIDs, got.SendingPart, err)
	}
	if err := s.EndPart(ctx, id, 1, "p2"); err != nil { // ended twice: nothing changes
		t.Fatal(err)
	}
	if err := s.AbortPart(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetOutbox(ctx, id); got.PartsSent != 2 || got.SendingPart != -1 || len(got.PartIDs) != 2 {
		t.Errorf("after abort = %d sent %v, sending %d", got.PartsSent, got.PartIDs, got.SendingPart)
	}
}

func newRun(id string) (*store.Run, *store.Session) {
	return &store.Run{ID: id, RequesterKey: convKey, AgentID: "main", Task: "sum up", Origin: origin,
		Cleanup: "keep", CostUSD: -1, CreatedAt: t0}, &store.Session{Key: "agent:main:subagent:" + id, ID: "sess-" + id}
}

// A run moves queued → running → done; its end and its announce are one
// transaction; the spawn limits hold.
func testRuns(t *testing.T, s Store) {
	ctx := context.Background()
	r, child := newRun("r1")
	if err := s.SpawnRun(ctx, r, child, store.SpawnLimits{MaxChildren: 1}); err != nil {
		t.Fatal(err)
	}
	r2, child2 := newRun("r2")
	var lim *store.LimitError
	if err := s.SpawnRun(ctx, r2, child2, store.SpawnLimits{MaxChildren: 1}); !errors.As(err, &lim) || lim.Limit != "maxChildrenPerSession" {
		t.Fatalf("second spawn over maxChildren = %v", err)
	}
	if _, err := s.GetRun(ctx, "r2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("refused run stored: %v", err)
	}
	if cs, err := s.GetSession(ctx, child.Key); err != nil || cs.Kind != store.KindSubagent || cs.ParentKey != convKey {
		t.Errorf("child session = %+v, %v", cs, err)
	}
	if err := s.StartRun(ctx, "r1", t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.StartRun(ctx, "r1", t0.Add(time.Second)); !errors.Is(err, store.ErrNotQueued) {
		t.Errorf("second StartRun = %v, want ErrNotQueued", err)
	}
	// The gateway stopped during the run: it is queued again (SPEC §25),
	// keeps its start and counts the resume and the time it ran.
	if err := s.ResumeRun(ctx, "r1", 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.ResumeRun(ctx, "r1", time.Second); !errors.Is(err, store.ErrNotQueued) {
		t.Errorf("ResumeRun of a queued run = %v, want ErrNotQueued", err)
	}
	if err := s.StartRun(ctx, "r1", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetRun(ctx, "r1"); err != nil || got.Status != store.StatusRunning || got.Resumes != 1 ||
		got.Ran != 1500*time.Millisecond || !got.StartedAt.Equal(t0.Add(time.Second)) || !got.StretchAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("resumed run = resumes %d, ran %s, started %s, stretch %s, status %s (%v); want 1, 1.5s, %s, %s, running",
			got.Resumes, got.Ran, got.StartedAt, got.StretchAt, got.Status, err, t0.Add(time.Second), t0.Add(time.Minute))
	}
	if err := s.AddRunUsage(ctx, "r1", 10, 2, 0, 0); err != nil {
		t.Fatal(err)
	}
	r.Status, r.Outcome, r.Result, r.EndedAt, r.ArchiveAt = store.StatusDone, store.OutcomeSuccess, "the summary", t0.Add(time.Minute), t0.Add(time.Hour)
	ann := &store.OutboxItem{Origin: origin, Kind: channels.KindAnnounce, Text: "✅ the summary"}
	if err := s.FinishRun(ctx, r, ann); err != nil {
		t.Fatal(err)
	}
	if ann.ID == 0 {
		t.Fatal("FinishRun stored no announce")
	}
	got, err := s.GetRun(ctx, "r1")
	if err != nil || got.Status != store.StatusDone || got.Result != "the summary" || !got.StartedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("finished run = %+v, %v", got, err)
	}
	if list, err := s.ListRuns(ctx, store.RunFilter{RequesterKey: convKey, Statuses: []string{store.StatusDone}}); err != nil || len(list) != 1 {
		t.Errorf("ListRuns(done) = %d, %v", len(list), err)
	}
	if list, _ := s.ListRuns(ctx, store.RunFilter{Statuses: []string{store.StatusQueued, store.StatusRunning}}); len(list) != 0 {
		t.Errorf("ListRuns(active) = %d runs, want none", len(list))
	}
	checkBrief(t, s, got)
	due, err := s.DueArchives(ctx, t0.Add(2*time.Hour))
	if err != nil || len(due) != 1 {
		t.Fatalf("DueArchives = %d, %v", len(due), err)
	}
	if err := s.MarkArchived(ctx, "r1", t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if due, _ := s.DueArchives(ctx, t0.Add(2*time.Hour)); len(due) != 0 {
		t.Errorf("archived run still due")
	}
	// Now r1 is done, a new child fits under the limit.
	if err := s.SpawnRun(ctx, r2, child2, store.SpawnLimits{MaxChildren: 1}); err != nil {
		t.Errorf("spawn after the first ended: %v", err)
	}
}

// A transcript is readable line by line as it is appended, and an archive
// moves it aside and back.
func testTranscripts(t *testing.T, s Store) {
	ctx := context.Background()
	path := s.TranscriptPath("main", "sess-1")
	if _, _, err := s.ReadTranscript(ctx, path); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("read before open = %v, want ErrNotFound", err)
	}
	tr, err := s.OpenTranscript(ctx, path, store.TranscriptHeader{SessionKey: convKey, SessionID: "sess-1", AgentID: "main"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"hello", "with\nnewline"} {
		if err := tr.Append(ctx, store.TranscriptEntry{Role: "user", Content: c}); err != nil {
			t.Fatal(err)
		}
	}
	h, entries, err := s.ReadTranscript(ctx, path)
	if err != nil || h.SessionKey != convKey || len(entries) != 2 || entries[1].Content != "with\nnewline" {
		t.Fatalf("read = %+v %+v, %v", h, entries, err)
	}
	if s.TranscriptTorn(ctx, path) {
		t.Error("TranscriptTorn of whole lines = true")
	}
	tr.Close()
	archived, err := s.ArchiveTranscriptAs(ctx, path, "reset", t0)
	if err != nil || archived == "" {
		t.Fatalf("archive = %q, %v", archived, err)
	}
	if _, _, err := s.ReadTranscript(ctx, path); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("read after archive = %v, want ErrNotFound", err)
	}
	if err := s.UnarchiveTranscript(ctx, archived, path); err != nil {
		t.Fatal(err)
	}
	if got := s.FindTranscript(ctx, path); got != path {
		t.Errorf("FindTranscript = %q, want %q", got, path)
	}
	deleted, err := s.ArchiveTranscript(ctx, path, t0)
	if err != nil || s.FindTranscript(ctx, path) != deleted {
		t.Errorf("after delete: FindTranscript = %q, want %q (%v)", s.FindTranscript(ctx, path), deleted, err)
	}
}

// A lease is held by one holder until released or expired.
func testLeases(t *testing.T, s Store) {
	ctx := context.Background()
	if _, err := s.GetLease(ctx, "gateway"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetLease of nothing = %v, want ErrNotFound", err)
	}
	l, err := s.AcquireLease(ctx, "gateway", "r1", time.Minute)
	if err != nil || l.Holder != "r1" || !l.ExpiresAt.After(l.AcquiredAt) {
		t.Fatalf("acquire = %+v, %v", l, err)
	}
	if got, err := s.GetLease(ctx, "gateway"); err != nil || got.Holder != "r1" || !got.ExpiresAt.Equal(l.ExpiresAt) {
		t.Errorf("GetLease = %+v, %v; want %+v", got, err, l)
	}
	if cur, err := s.AcquireLease(ctx, "gateway", "r2", time.Minute); !errors.Is(err, store.ErrLeaseHeld) || cur.Holder != "r1" {
		t.Fatalf("r2 acquiring a held lease = %+v, %v; want ErrLeaseHeld by r1", cur, err)
	}
	renewed, err := s.AcquireLease(ctx, "gateway", "r1", 2*time.Minute)
	if err != nil || !renewed.AcquiredAt.Equal(l.AcquiredAt) || !renewed.ExpiresAt.After(l.ExpiresAt) {
		t.Errorf("renew = %+v, %v", renewed, err)
	}
	if err := s.ReleaseLease(ctx, "gateway", "r1"); err != nil {
		t.Fatal(err)
	}
	if l, err := s.AcquireLease(ctx, "gateway", "r2", time.Minute); err != nil || l.Holder != "r2" {
		t.Errorf("r2 after release = %+v, %v", l, err)
	}
	if _, err := s.AcquireLease(ctx, store.ReplicaLease("r2"), "r2", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, store.ReplicaLease("r3"), "r3", -time.Second); err != nil { // already lapsed
		t.Fatal(err)
	}
	if live, err := s.LiveReplicas(ctx); err != nil || strings.Join(live, ",") != "r2" {
		t.Errorf("LiveReplicas = %v, %v; want r2", live, err)
	}
}

func testKV(t *testing.T, s Store) {
	ctx := context.Background()
	if _, ok, err := s.GetKV(ctx, "telegram:offset"); err != nil || ok {
		t.Fatalf("missing key: found %v, %v", ok, err)
	}
	if err := s.SetKV(ctx, "telegram:offset", "41"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetKV(ctx, "telegram:offset", "42"); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := s.GetKV(ctx, "telegram:offset"); err != nil || !ok || v != "42" {
		t.Errorf("GetKV = %q %v %v", v, ok, err)
	}
	if ok, err := s.ClaimKV(ctx, "once:1", "r1"); err != nil || !ok {
		t.Fatalf("first ClaimKV = %v, %v", ok, err)
	}
	if ok, err := s.ClaimKV(ctx, "once:1", "r2"); err != nil || ok {
		t.Errorf("second ClaimKV = %v, %v; want refused", ok, err)
	}
	if n, err := s.DeleteKVBefore(ctx, "once:", time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Errorf("DeleteKVBefore = %d, %v; want 1", n, err)
	}
	if _, ok, _ := s.GetKV(ctx, "telegram:offset"); !ok {
		t.Error("DeleteKVBefore removed a key outside its prefix")
	}
}

// A schedule's due time fires once, with its run recorded in the same
// transaction; paused, it does not fire.
func testSchedules(t *testing.T, s Store) {
	ctx := context.Background()
	sch := &store.Schedule{ID: "s1", SessionKey: convKey, AgentID: "main", Kind: store.ScheduleEvery, Expr: "1m0s",
		Task: "check", Origin: origin, NextDue: t0, CreatedAt: t0}
	if err := s.AddSchedule(ctx, sch, 1); err != nil {
		t.Fatal(err)
	}
	var lim *store.LimitError
	if err := s.AddSchedule(ctx, &store.Schedule{ID: "s2", SessionKey: convKey, AgentID: "main", Kind: store.ScheduleEvery,
		Expr: "1m0s", Task: "more", Origin: origin, NextDue: t0, CreatedAt: t0}, 1); !errors.As(err, &lim) {
		t.Fatalf("second schedule over the limit = %v", err)
	}
	plan := func(sc *store.Schedule) store.Firing {
		id := "run-" + sc.NextDue.Format("150405")
		return store.Firing{Run: &store.Run{ID: id, ChildKey: "agent:main:subagent:" + id, ChildSessionID: "sess-" + id, RequesterKey: sc.SessionKey, AgentID: "main", Task: sc.Task,
			Origin: sc.Origin, CostUSD: -1, CreatedAt: t0, ScheduleDue: sc.NextDue},
			Child: &store.Session{Key: "agent:main:subagent:" + id, ID: "sess-" + id}, Next: sc.NextDue.Add(time.Minute)}
	}
	if fired, err := s.FireDue(ctx, t0.Add(-time.Second), time.Time{}, 10, plan); err != nil || len(fired) != 0 {
		t.Fatalf("before due: %d fired, %v", len(fired), err)
	}
	fired, err := s.FireDue(ctx, t0, time.Time{}, 10, plan)
	if err != nil || len(fired) != 1 {
		t.Fatalf("at due: %d fired, %v", len(fired), err)
	}
	if fired, _ := s.FireDue(ctx, t0, time.Time{}, 10, plan); len(fired) != 0 {
		t.Fatalf("the same due time fired twice")
	}
	r, err := s.GetRun(ctx, fired[0].Firing.Run.ID)
	if err != nil || r.ScheduleID != "s1" || r.Status != store.StatusQueued {
		t.Fatalf("scheduled run = %+v, %v", r, err)
	}
	if at, ok, err := s.NextScheduleAt(ctx, time.Time{}); err != nil || !ok || !at.Equal(t0.Add(time.Minute)) {
		t.Errorf("NextScheduleAt = %v %v %v", at, ok, err)
	}
	if err := s.PauseSchedule(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.NextScheduleAt(ctx, time.Time{}); ok {
		t.Error("a paused schedule is due")
	}
	if c, err := s.CountSchedules(ctx); err != nil || c.Paused != 1 || c.Active != 0 {
		t.Errorf("counts = %+v, %v", c, err)
	}
	if err := s.ResumeSchedule(ctx, "s1", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if at, ok, err := s.NextScheduleAt(ctx, time.Time{}); err != nil || !ok || !at.Equal(t0.Add(time.Hour)) {
		t.Errorf("resumed: NextScheduleAt = %v %v %v; want %v", at, ok, err, t0.Add(time.Hour))
	}
	if list, err := s.ListSchedules(ctx, convKey); err != nil || len(list) != 1 || list[0].ID != "s1" || list[0].Task != "check" {
		t.Errorf("ListSchedules = %+v, %v", list, err)
	}
	if list, err := s.ListSchedules(ctx, "agent:main:other"); err != nil || len(list) != 0 {
		t.Errorf("ListSchedules(other) = %+v, %v", list, err)
	}
	if err := s.RemoveSchedule(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSchedule(ctx, "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("removed schedule: %v", err)
	}
}

func testSpend(t *testing.T, s Store) {
	ctx := context.Background()
	for _, e := range []store.SpendEntry{
		{At: t0, Conversation: convKey, AgentID: "main", Model: "anthropic/claude-haiku", RunID: "r1", USD: 0.5, TokensIn: 100, TokensOut: 10},
		{At: t0, Conversation: convKey, AgentID: "main", Model: "anthropic/claude-haiku", RunID: "r1", USD: 0.25, TokensIn: 50, TokensOut: 5},
		{At: t0, Conversation: "agent:main:other", AgentID: "main", Model: "anthropic/claude-haiku", RunID: "r2", USD: 1, TokensIn: 1, TokensOut: 1},
		{At: t0.AddDate(0, 0, -40), Conversation: convKey, AgentID: "main", Model: "anthropic/claude-haiku", RunID: "old", USD: 9},
	} {
		if err := s.RecordSpend(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	tot, err := s.SpendTotals(ctx, store.SpendDay(t0))
	if err != nil || len(tot) != 2 {
		t.Fatalf("totals = %+v, %v", tot, err)
	}
	for _, x := range tot {
		if x.Conversation == convKey && (x.USD != 0.75 || x.TokensIn != 150 || x.Calls != 2) {
			t.Errorf("conversation total = %+v", x)
		}
	}
	top, err := s.TopSpendRuns(ctx, store.SpendDay(t0), convKey, 5)
	if err != nil || len(top) != 1 || top[0].RunID != "r1" || top[0].USD != 0.75 {
		t.Errorf("top runs = %+v, %v", top, err)
	}
}

// Nothing waits forever (SPEC §27): an item past its attempts or its age
// is dead where it would be claimed, stops blocking its chat, and an
// operator retries or drops it.
func testOutboxDeadLetters(t *testing.T, s Store) {
	ctx := context.Background()
	if _, err := s.AcquireLease(ctx, store.ReplicaLease("r1"), "r1", time.Minute); err != nil {
		t.Fatal(err)
	}
	other := origin
	other.ChatID = "C77"
	stuck := &store.OutboxItem{Origin: origin, Kind: channels.KindReply, Text: "stuck", CreatedAt: t0, NextAttemptAt: t0}
	behind := &store.OutboxItem{Origin: origin, Kind: channels.KindReply, Text: "behind", CreatedAt: t0, NextAttemptAt: t0}
	old := &store.OutboxItem{Origin: other, Kind: channels.KindReply, Text: "old", CreatedAt: t0.Add(-25 * time.Hour), NextAttemptAt: t0}
	for _, o := range []*store.OutboxItem{stuck, behind, old} {
		if _, err := s.EnqueueOutbox(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	lim := store.OutboxLimits{MaxAttempts: 2, MaxAge: 24 * time.Hour}
	r1 := store.Claim{Holder: "r1"}
	for range 2 {
		if err := s.MarkRetry(ctx, stuck.ID, t0.Add(time.Hour), "500"); err != nil {
			t.Fatal(err)
		}
	}
	// An item in flight (claimed by the burying replica) is not buried.
	if got, err := s.ClaimOutbox(ctx, r1, nil, t0); err != nil || strings.Join(texts(got), ",") != "old" {
		t.Fatalf("claims %v, %v; want old (stuck waits for its retry)", texts(got), err)
	}
	if dead, err := s.BuryOutbox(ctx, r1, lim, t0); err != nil || len(dead) != 1 || dead[0].Text != "stuck" {
		t.Fatalf("BuryOutbox while old is in flight = %v, %v; want stuck only", texts(dead), err)
	}
	if err := s.MarkRetry(ctx, old.ID, t0, "500"); err != nil { // lets it go
		t.Fatal(err)
	}
	// One pass buries old and claims behind, which no longer waits for
	// stuck.
	pass, err := s.PassOutbox(ctx, r1, nil, lim, t0)
	dead := pass.Dead
	if err != nil || len(dead) != 1 || dead[0].Text != "old" || dead[0].DeadAt.IsZero() || dead[0].State() != store.OutboxDead {
		t.Fatalf("PassOutbox buried %+v, %v; want old, dead", dead, err)
	}
	if strings.Join(texts(pass.Claimed), ",") != "behind" {
		t.Fatalf("PassOutbox claimed %v; want behind", texts(pass.Claimed))
	}
	if again, _ := s.BuryOutbox(ctx, r1, lim, t0); len(again) != 0 {
		t.Errorf("buried twice: %v", texts(again))
	}
	for _, only := range []store.OutboxLimits{{MaxAge: time.Hour}, {MaxAttempts: 3}, {}} {
		if again, err := s.BuryOutbox(ctx, r1, only, t0); err != nil || len(again) != 0 {
			t.Errorf("BuryOutbox(%+v) = %v, %v; want nothing, no error", only, texts(again), err)
		}
	}
	if err := s.MarkFailed(ctx, behind.ID, t0, "403"); err != nil {
		t.Fatal(err)
	}
	for state, want := range map[string]string{store.OutboxDead: "old,stuck", store.OutboxFailed: "behind", store.OutboxPending: "", "": "old,behind,stuck"} {
		list, err := s.OutboxInState(ctx, state, 0)
		if err != nil || strings.Join(texts(list), ",") != want {
			t.Errorf("OutboxInState(%q) = %v, %v; want %s", state, texts(list), err, want)
		}
	}
	if _, err := s.OutboxInState(ctx, "lost", 0); err == nil {
		t.Error("OutboxInState(lost): no error")
	}
	if b, err := s.Backlog(ctx); err != nil || b.Pending != 0 || b.Failed != 1 || b.Dead != 2 || !b.OldestAt.IsZero() {
		t.Errorf("Backlog = %+v, %v; want 0 pending, 1 failed, 2 dead", b, err)
	}
	// Retry: pending again, due now, attempts and age counted afresh.
	later := t0.Add(48 * time.Hour)
	if err := s.RetryOutbox(ctx, old.ID, later); err != nil {
		t.Fatal(err)
	}
	if dead, _ := s.BuryOutbox(ctx, r1, lim, later); len(dead) != 0 {
		t.Errorf("a retried item was buried again at once: %v", texts(dead))
	}
	if b, _ := s.Backlog(ctx); b.Pending != 1 || b.Dead != 1 || !b.OldestAt.Equal(old.CreatedAt) {
		t.Errorf("Backlog after retry = %+v; want 1 pending since %v, 1 dead", b, old.CreatedAt)
	}
	got, _ := s.ClaimOutbox(ctx, r1, nil, later)
	if len(got) != 1 || got[0].Text != "old" || got[0].Attempts != 0 || got[0].State() != store.OutboxPending {
		t.Fatalf("after retry claims %+v; want old with no attempts", got)
	}
	if err := s.MarkDelivered(ctx, old.ID, later); err != nil {
		t.Fatal(err)
	}
	for _, fn := range []func() error{
		func() error { return s.RetryOutbox(ctx, old.ID, later) },
		func() error { return s.DropOutbox(ctx, old.ID) },
		func() error { return s.RetryOutbox(ctx, 99999, later) },
	} {
		if err := fn(); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("retry or drop of a delivered or unknown item = %v; want ErrNotFound", err)
		}
	}
	if err := s.DropOutbox(ctx, stuck.ID); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.OutboxInState(ctx, store.OutboxDead, 0); len(list) != 0 {
		t.Errorf("dead after the drop: %v", texts(list))
	}
}

// A delivery claims its destination's next item in the same transaction
// when it is due, free and within the limits; another destination's item
// is not touched.
func testOutboxDeliverNext(t *testing.T, s Store) {
	ctx := context.Background()
	other := origin
	other.ChatID = "C78"
	add := func(o channels.Origin, text string, due time.Time) *store.OutboxItem {
		t.Helper()
		it := &store.OutboxItem{Origin: o, Kind: channels.KindReply, Text: text, CreatedAt: t0, NextAttemptAt: due}
		if _, err := s.EnqueueOutbox(ctx, it); err != nil {
			t.Fatal(err)
		}
		return it
	}
	a, b, late := add(origin, "a", t0), add(origin, "b", t0), add(origin, "late", t0.Add(time.Hour))
	x, y := add(other, "x", t0), add(other, "y", t0)
	if got, err := s.ClaimOutbox(ctx, store.Claim{Holder: "r1"}, nil, t0); err != nil || strings.Join(texts(got), ",") != "a,x" {
		t.Fatalf("claims %v, %v; want a and x", texts(got), err)
	}
	lim := store.OutboxLimits{MaxAttempts: 2, MaxAge: 24 * time.Hour}
	next := &store.NextClaim{Holder: "r1", Limits: lim, Now: t0}
	if err := s.DeliverOutbox(ctx, a.ID, t0, next); err != nil || next.Item == nil || next.Item.ID != b.ID || next.Item.ClaimedBy != "r1" {
		t.Fatalf("DeliverOutbox(a) = %v, next %+v; want b claimed by r1", err, next.Item)
	}
	if got, _ := s.GetOutbox(ctx, a.ID); got.State() != store.OutboxDelivered || got.ClaimedBy != "" {
		t.Errorf("a after DeliverOutbox = %+v; want delivered, unclaimed", got)
	}
	// late is not due yet.
	if err := s.DeliverOutbox(ctx, b.ID, t0, next); err != nil || next.Item != nil {
		t.Errorf("DeliverOutbox(b) = %v, next %+v; want none (late is due in an hour)", err, next.Item)
	}
	if got, _ := s.GetOutbox(ctx, late.ID); got.ClaimedBy != "" {
		t.Errorf("late claimed: %+v", got)
	}
	// y is past maxAttempts: a pass buries it, the delivery does not claim it.
	for range 2 {
		if err := s.MarkRetry(ctx, y.ID, t0, "500"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeliverOutbox(ctx, x.ID, t0, next); err != nil || next.Item != nil {
		t.Errorf("DeliverOutbox(x) = %v, next %+v; want none (y is a dead letter)", err, next.Item)
	}
	if err := s.DeliverOutbox(ctx, x.ID+1000, t0, nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeliverOutbox(unknown) = %v, want ErrNotFound", err)
	}
}
