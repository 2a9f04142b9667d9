package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
)

// The web chat's conversations are numbered per client from 1; an
// announce (by RunID) or an outbox item (by Key) appended again shows once.
func testWebLog(t *testing.T, s Store) {
	ctx := context.Background()
	file := store.FileRef{ID: "3f", Name: "a.png", MIME: "image/png", Size: 3}
	steps := []struct {
		client  string
		msg     store.WebMessage
		wantSeq int64
	}{
		{"alice", store.WebMessage{Role: "user", Text: "hi", At: t0, Files: []store.FileRef{file}}, 1},
		{"alice", store.WebMessage{Role: "assistant", Text: "hello", At: t0.Add(time.Second)}, 2},
		{"bob", store.WebMessage{Role: "user", Text: "yo", At: t0}, 1},
		{"alice", store.WebMessage{Role: "announce", Text: "✅ done", RunID: "r1", At: t0.Add(2 * time.Second)}, 3},
		{"alice", store.WebMessage{Role: "announce", Text: "✅ done (redelivered)", RunID: "r1"}, 3},
		{"bob", store.WebMessage{Role: "announce", Text: "other client", RunID: "r1", At: t0}, 2},
		{"alice", store.WebMessage{Role: "system", Text: "/status", At: t0.Add(3 * time.Second), Key: "outbox:7"}, 4},
		{"alice", store.WebMessage{Role: "system", Text: "/status", Key: "outbox:7"}, 4},
		{"bob", store.WebMessage{Role: "system", Text: "/status", Key: "outbox:7", At: t0}, 3},
	}
	for i, st := range steps {
		m := st.msg
		seq, err := s.AppendWeb(ctx, st.client, &m)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if seq != st.wantSeq || m.Seq != seq {
			t.Errorf("step %d (%s %q): seq %d (m.Seq %d), want %d", i, st.client, st.msg.Text, seq, m.Seq, st.wantSeq)
		}
		// Added: the first append of a RunID or Key only.
		if again := st.msg.RunID+st.msg.Key != "" && st.msg.At.IsZero(); m.Added == again {
			t.Errorf("step %d (%s %q): Added %v, want %v", i, st.client, st.msg.Text, m.Added, !again)
		}
	}
	tests := []struct {
		client string
		after  int64
		limit  int
		want   []store.WebMessage
	}{
		{"alice", 0, 0, []store.WebMessage{
			{Seq: 1, Role: "user", Text: "hi", At: ms(t0), Files: []store.FileRef{file}},
			{Seq: 2, Role: "assistant", Text: "hello", At: ms(t0.Add(time.Second))},
			{Seq: 3, Role: "announce", Text: "✅ done", RunID: "r1", At: ms(t0.Add(2 * time.Second))},
			{Seq: 4, Role: "system", Text: "/status", At: ms(t0.Add(3 * time.Second))},
		}},
		{"alice", 2, 1, []store.WebMessage{
			{Seq: 3, Role: "announce", Text: "✅ done", RunID: "r1", At: ms(t0.Add(2 * time.Second))},
		}},
		{"alice", 4, 0, nil},
		{"carol", 0, 0, nil},
	}
	for _, tt := range tests {
		got, err := s.WebAfter(ctx, tt.client, tt.after, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("WebAfter(%s, %d, %d) =\n%+v\nwant\n%+v", tt.client, tt.after, tt.limit, got, tt.want)
		}
	}
	if _, err := s.AppendWeb(ctx, "", &store.WebMessage{Role: "user"}); err == nil {
		t.Error("AppendWeb without a client succeeded")
	}
}

// Messages appended at once to one client get the next numbers, each once.
func testWebLogConcurrent(t *testing.T, s Store) {
	ctx := context.Background()
	const n = 12
	var wg sync.WaitGroup
	var mu sync.Mutex
	var seqs []int64
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq, err := s.AppendWeb(ctx, "c1", &store.WebMessage{Role: "user", Text: "x", At: t0})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			seqs = append(seqs, seq)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(seqs)
	for i, seq := range seqs {
		if seq != int64(i+1) {
			t.Fatalf("seqs %v, want 1..%d each once", seqs, n)
		}
	}
	if got, _ := s.WebAfter(ctx, "c1", 0, 0); len(got) != n {
		t.Errorf("%d messages stored, want %d", len(got), n)
	}
}

// A web message that delivers an outbox item whole marks it delivered in
// the transaction that stores it; appended again (a re-send after a
// crash) it shows once and the first time stays. An unknown item stores
// nothing.
func testWebLogDelivers(t *testing.T, s Store) {
	ctx := context.Background()
	to := channels.Origin{Channel: "web", ChatID: "alice", ChatType: channels.ChatDM}
	item := &store.OutboxItem{Origin: to, Kind: channels.KindReply, Text: "hello", CreatedAt: t0}
	second := &store.OutboxItem{Origin: to, Kind: channels.KindReply, Text: "again", CreatedAt: t0}
	for _, it := range []*store.OutboxItem{item, second} {
		if _, err := s.EnqueueOutbox(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.ClaimOutbox(ctx, store.Claim{Holder: "r1"}, nil, t0); err != nil || len(got) != 1 {
		t.Fatalf("claim = %v, %v", texts(got), err)
	}
	key := "outbox:" + strconv.FormatInt(item.ID, 10)
	for i, at := range []time.Time{t0.Add(time.Second), t0.Add(time.Minute)} {
		// The first append claims the chat's next item with the mark.
		next := &store.NextClaim{Holder: "r1", Now: t0.Add(time.Hour)}
		seq, err := s.AppendWeb(ctx, "alice", &store.WebMessage{Role: "assistant", Text: "hello", At: at, Key: key, Delivers: item.ID, Next: next})
		if err != nil || seq != 1 {
			t.Fatalf("append %d = %d, %v; want seq 1", i, seq, err)
		}
		if claimed := next.Item != nil && next.Item.ID == second.ID && next.Item.ClaimedBy == "r1"; claimed != (i == 0) {
			t.Errorf("append %d claimed %+v; want the next item claimed the first time only", i, next.Item)
		}
	}
	got, err := s.GetOutbox(ctx, item.ID)
	if err != nil || got.State() != store.OutboxDelivered || !got.DeliveredAt.Equal(ms(t0.Add(time.Second))) || got.ClaimedBy != "" {
		t.Fatalf("item after the append = %+v, %v; want delivered at the first append, unclaimed", got, err)
	}
	if _, err := s.AppendWeb(ctx, "alice", &store.WebMessage{Role: "assistant", Text: "lost", At: t0, Delivers: item.ID + 1000}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("append delivering an unknown item = %v, want ErrNotFound", err)
	}
	if msgs, _ := s.WebAfter(ctx, "alice", 0, 0); len(msgs) != 1 {
		t.Errorf("messages = %+v; want the one", msgs)
	}
}

// A web append that delivers an item with Then delivers the chat's next
// items in its transaction, in order, each as its own message and once:
// up to the first it cannot take whole (Then says no, or it has files),
// which stays claimed for a send of its own; an item not due, another
// chat's and a dead letter are left alone.
func testWebLogDeliversFollowing(t *testing.T, s Store) {
	ctx := context.Background()
	to := channels.Origin{Channel: "web", ChatID: "dora", ChatType: channels.ChatDM}
	add := func(o channels.Origin, kind channels.Kind, text, runID string, due time.Time, files ...store.FileRef) *store.OutboxItem {
		t.Helper()
		it := &store.OutboxItem{Origin: o, Kind: kind, Text: text, RunID: runID, CreatedAt: t0, NextAttemptAt: due, Files: files}
		if _, err := s.EnqueueOutbox(ctx, it); err != nil {
			t.Fatal(err)
		}
		return it
	}
	other := to
	other.ChatID = "eve"
	first := add(to, channels.KindReply, "first", "", t0)
	eve := add(other, channels.KindReply, "eve's", "", t0)
	a1 := add(to, channels.KindAnnounce, "run 1", "run-1", t0)
	a2 := add(to, channels.KindAnnounce, "run 2", "run-2", t0)
	refused := add(to, channels.KindSystem, "refused", "", t0)
	after := add(to, channels.KindReply, "after", "", t0)
	if got, err := s.ClaimOutbox(ctx, store.Claim{Holder: "r1"}, nil, t0); err != nil || strings.Join(texts(got), ",") != "first,eve's" {
		t.Fatalf("claim = %v, %v; want first and eve's", texts(got), err)
	}
	var given []string
	then := func(it store.OutboxItem) *store.WebMessage {
		given = append(given, it.Text)
		if it.Kind == channels.KindSystem {
			return nil
		}
		return &store.WebMessage{Role: "announce", Text: it.Text, RunID: it.RunID, Key: "outbox:" + strconv.FormatInt(it.ID, 10)}
	}
	at := t0.Add(time.Second)
	next := &store.NextClaim{Holder: "r1", Now: at}
	m := &store.WebMessage{Role: "assistant", Text: "first", At: at, Key: "outbox:" + strconv.FormatInt(first.ID, 10), Delivers: first.ID, Next: next, Then: then}
	if seq, err := s.AppendWeb(ctx, "dora", m); err != nil || seq != 1 {
		t.Fatalf("append = %d, %v; want seq 1", seq, err)
	}
	if got := strings.Join(followedTexts(m.Followed), ","); got != "run 1,run 2" || strings.Join(given, ",") != "run 1,run 2,refused" {
		t.Fatalf("followed %q after giving Then %v; want run 1 and run 2, then refused given and left", got, given)
	}
	if next.Item == nil || next.Item.ID != refused.ID || next.Item.ClaimedBy != "r1" {
		t.Fatalf("next = %+v; want the refused item claimed by r1", next.Item)
	}
	for _, it := range []*store.OutboxItem{first, a1, a2} {
		if got, _ := s.GetOutbox(ctx, it.ID); got.State() != store.OutboxDelivered || !got.DeliveredAt.Equal(ms(at)) || got.ClaimedBy != "" {
			t.Errorf("%q = %+v; want delivered at the append, unclaimed", it.Text, got)
		}
	}
	for _, it := range []*store.OutboxItem{after, eve} {
		if got, _ := s.GetOutbox(ctx, it.ID); got.State() == store.OutboxDelivered {
			t.Errorf("%q delivered; want it left alone", it.Text)
		}
	}
	for i, f := range m.Followed {
		if f.Message.Seq != int64(i+2) || !f.Message.Added || f.Message.Text != f.Item.Text {
			t.Errorf("followed message %d = %+v; want seq %d, added, the item's text", i, f.Message, i+2)
		}
	}
	msgs, err := s.WebAfter(ctx, "dora", 0, 0)
	var got []string
	for _, w := range msgs {
		got = append(got, strconv.FormatInt(w.Seq, 10)+":"+w.Role+":"+w.Text+":"+w.RunID)
	}
	if want := "1:assistant:first:,2:announce:run 1:run-1,3:announce:run 2:run-2"; err != nil || strings.Join(got, ",") != want {
		t.Fatalf("dora's messages = %v, %v; want %s", got, err, want)
	}

	// The refused item's own send delivers it; what follows has a file
	// (a send of its own too) and then an item not due yet.
	file := store.FileRef{ID: "f1", Name: "a.txt", MIME: "text/plain", Size: 1}
	withFile := add(to, channels.KindReply, "with a file", "", t0, file)
	given, next = nil, &store.NextClaim{Holder: "r1", Now: at}
	m = &store.WebMessage{Role: "system", Text: "refused", At: at, Key: "outbox:" + strconv.FormatInt(refused.ID, 10), Delivers: refused.ID, Next: next, Then: then}
	if _, err := s.AppendWeb(ctx, "dora", m); err != nil {
		t.Fatal(err)
	}
	if len(m.Followed) != 1 || m.Followed[0].Item.ID != after.ID || next.Item == nil || next.Item.ID != withFile.ID {
		t.Fatalf("followed %v, next %+v; want after, then the item with a file claimed", followedTexts(m.Followed), next.Item)
	}
	if slices.Contains(given, "with a file") {
		t.Errorf("Then was given an item with files: %v", given)
	}

	// Appended again (a re-send after a crash), nothing shows twice.
	m = &store.WebMessage{Role: "assistant", Text: "first", At: at, Key: "outbox:" + strconv.FormatInt(first.ID, 10), Delivers: first.ID,
		Next: &store.NextClaim{Holder: "r1", Now: at}, Then: then}
	if _, err := s.AppendWeb(ctx, "dora", m); err != nil || len(m.Followed) != 0 {
		t.Fatalf("append again = %v, followed %v; want nothing more", err, followedTexts(m.Followed))
	}
	if msgs, _ := s.WebAfter(ctx, "dora", 0, 0); len(msgs) != 5 {
		t.Errorf("%d messages after the appends, want 5 (first, run 1, run 2, refused, after)", len(msgs))
	}
}

// A person's web message is stored as the conversation's entry and as
// owed in one transaction: the entry's seq is the message's platform id,
// and the conversation's numbering goes on across both kinds of append.
func testWebIntake(t *testing.T, s Store) {
	ctx := context.Background()
	to := channels.Origin{Channel: "web", ChatID: "carol", ChatType: channels.ChatDM, SenderID: "carol"}
	if _, err := s.AppendWeb(ctx, "carol", &store.WebMessage{Role: "system", Text: "welcome", At: t0}); err != nil {
		t.Fatal(err)
	}
	in := &store.Intake{SessionKey: "agent:main:web:dm:carol", AgentID: "main", Origin: to, Text: "hi", CreatedAt: t0, ClaimedBy: "r1",
		Web: &store.WebMessage{Role: "user", Text: "hi", At: t0.Add(time.Second)}}
	added, err := s.AddIntake(ctx, in)
	if err != nil || !added || in.ID == 0 || in.ClaimedBy != "r1" {
		t.Fatalf("AddIntake = %v, %v (id %d, claimed by %q)", added, err, in.ID, in.ClaimedBy)
	}
	if in.Web.Seq != 2 || !in.Web.Added || in.Origin.MessageID != "2" || in.PlatformID != "carol/2" {
		t.Fatalf("web seq %d (added %v), message id %q, platform id %q; want 2 added, \"2\", \"carol/2\"", in.Web.Seq, in.Web.Added, in.Origin.MessageID, in.PlatformID)
	}
	owed, err := s.OwedIntake(ctx)
	if err != nil || len(owed) != 1 || owed[0].ID != in.ID || owed[0].Origin.MessageID != "2" || owed[0].PlatformID != "carol/2" {
		t.Fatalf("owed = %+v, %v; want the message with its seq as id", owed, err)
	}
	if seq, err := s.AppendWeb(ctx, "carol", &store.WebMessage{Role: "assistant", Text: "hello"}); err != nil || seq != 3 {
		t.Fatalf("next append = %d, %v; want 3", seq, err)
	}
	want := []store.WebMessage{
		{Seq: 1, Role: "system", Text: "welcome", At: ms(t0)},
		{Seq: 2, Role: "user", Text: "hi", At: ms(t0.Add(time.Second))},
	}
	if msgs, err := s.WebAfter(ctx, "carol", 0, 2); err != nil || !reflect.DeepEqual(msgs, want) {
		t.Errorf("messages = %+v, %v; want %+v", msgs, err, want)
	}
	// Without a client there is nothing to number: nothing is stored.
	bad := &store.Intake{SessionKey: "agent:main:web:dm:x", AgentID: "main", Origin: channels.Origin{Channel: "web"}, Text: "x",
		Web: &store.WebMessage{Role: "user", Text: "x"}}
	if _, err := s.AddIntake(ctx, bad); err == nil {
		t.Error("AddIntake with a web entry and no client succeeded")
	}
}

// A web reply claimed by its turn's completion is delivered in the same
// transaction (TurnEnd.Web): the entry is in the conversation, the item
// delivered and the chat's next item claimed. A reply behind a pending
// item of its chat, one with files, or a completion made again delivers
// nothing there.
func testWebReplyDelivered(t *testing.T, s Store) {
	ctx := context.Background()
	to := channels.Origin{Channel: "web", ChatID: "dora", ChatType: channels.ChatDM, SenderID: "dora"}
	key := "agent:main:web:dm:dora"
	owed := func(text string) *store.Intake {
		t.Helper()
		in := &store.Intake{SessionKey: key, AgentID: "main", Origin: to, Text: text, CreatedAt: t0, ClaimedBy: "r1",
			Web: &store.WebMessage{Role: "user", Text: text, At: t0}}
		if added, err := s.AddIntake(ctx, in); err != nil || !added {
			t.Fatalf("AddIntake(%s) = %v, %v", text, added, err)
		}
		return in
	}
	complete := func(in *store.Intake, text string, files []store.FileRef) (*store.OutboxItem, *store.WebDelivery) {
		t.Helper()
		reply := &store.OutboxItem{Origin: to, Kind: channels.KindReply, Text: text, SessionKey: key, AgentID: "main", Files: files, CreatedAt: t0}
		w := &store.WebDelivery{Client: "dora", Msg: store.WebMessage{Role: "assistant", Text: text, At: t0.Add(time.Second),
			Next: &store.NextClaim{Holder: "r1", Now: t0.Add(time.Hour)}}}
		if _, _, err := s.CompleteTurn(ctx, store.TurnEnd{ID: in.ID, Reply: reply, At: t0, ClaimReply: "r1", Web: w}); err != nil || reply.ID == 0 {
			t.Fatalf("CompleteTurn(%s) = %v; reply %+v", text, err, reply)
		}
		return reply, w
	}
	a := owed("one")
	reply, w := complete(a, "answer", nil)
	if w.Msg.Delivers != reply.ID || w.Msg.Seq != 2 || !w.Msg.Added || reply.ClaimedBy != "" || !reply.DeliveredAt.Equal(ms(t0.Add(time.Second))) {
		t.Fatalf("delivery %+v, reply %+v; want entry 2 added, the reply delivered and unclaimed", w.Msg, reply)
	}
	if got, err := s.GetOutbox(ctx, reply.ID); err != nil || got.State() != store.OutboxDelivered || got.ClaimedBy != "" {
		t.Fatalf("stored reply %+v, %v; want delivered", got, err)
	}
	if msgs, _ := s.WebAfter(ctx, "dora", 1, 0); len(msgs) != 1 || msgs[0].Text != "answer" || msgs[0].Role != "assistant" {
		t.Fatalf("conversation after the reply = %+v", msgs)
	}
	// Completing again (a lost commit's retry) adds and delivers nothing.
	w2 := &store.WebDelivery{Client: "dora", Msg: store.WebMessage{Role: "assistant", Text: "answer"}}
	if id, _, err := s.CompleteTurn(ctx, store.TurnEnd{ID: a.ID, Reply: &store.OutboxItem{Origin: to, Text: "answer"}, At: t0, ClaimReply: "r1", Web: w2}); err != nil || id != 0 || w2.Msg.Delivers != 0 {
		t.Errorf("second completion = %d, %v, delivers %d; want nothing", id, err, w2.Msg.Delivers)
	}
	// Behind a pending item of the chat: stored, not claimed, not delivered;
	// delivering the pending one claims it next.
	first := &store.OutboxItem{Origin: to, Kind: channels.KindAnnounce, Text: "first", CreatedAt: t0}
	if _, err := s.EnqueueOutbox(ctx, first); err != nil {
		t.Fatal(err)
	}
	later, w := complete(owed("two"), "later", nil)
	if w.Msg.Delivers != 0 || w.Msg.Seq != 0 || later.ClaimedBy != "" || !later.DeliveredAt.IsZero() {
		t.Fatalf("reply behind a pending item: delivery %+v, reply %+v; want it waiting", w.Msg, later)
	}
	next := &store.NextClaim{Holder: "r1", Now: t0.Add(time.Hour)}
	if err := s.DeliverOutbox(ctx, first.ID, t0, next); err != nil || next.Item == nil || next.Item.ID != later.ID {
		t.Fatalf("delivering the first = %v, next %+v; want the reply claimed", err, next.Item)
	}
	if err := s.MarkDelivered(ctx, later.ID, t0); err != nil {
		t.Fatal(err)
	}
	// A reply with files goes through the deliverer (text, then a part per file).
	file, err := s.PutFile(ctx, strings.NewReader("a"), 10, plainSniff)
	if err != nil {
		t.Fatal(err)
	}
	file.Name = "a.txt"
	withFile, w := complete(owed("three"), "see file", []store.FileRef{file})
	if w.Msg.Delivers != 0 || withFile.ClaimedBy != "r1" {
		t.Errorf("reply with a file: delivery %+v, reply claimed by %q; want claimed for the deliverer", w.Msg, withFile.ClaimedBy)
	}
	if msgs, _ := s.WebAfter(ctx, "dora", 0, 0); len(msgs) != 4 {
		t.Errorf("conversation = %+v; want three messages and one reply", msgs)
	}
	// A run's announce, claimed by its end, is delivered there the same
	// way, shown with its run id; the end retried adds nothing.
	r, child := newRun("web-run")
	if err := s.SpawnRun(ctx, r, child, store.SpawnLimits{}); err != nil {
		t.Fatal(err)
	}
	r.Status, r.Outcome, r.EndedAt = store.StatusDone, store.OutcomeSuccess, t0.Add(time.Minute)
	eve := channels.Origin{Channel: "web", ChatID: "eve", ChatType: channels.ChatDM}
	for try := range 2 {
		ann := &store.OutboxItem{Origin: eve, Kind: channels.KindAnnounce, Text: "✅ done", CreatedAt: t0}
		w := &store.WebDelivery{Client: "eve", Msg: store.WebMessage{Role: "announce", Text: "✅ done", At: t0.Add(time.Minute)}}
		if err := s.EndRun(ctx, r, store.RunEnd{Announce: ann, ClaimAnnounce: "r1", Web: w}); err != nil {
			t.Fatal(err)
		}
		if delivered := w.Msg.Delivers == ann.ID && ann.ClaimedBy == "" && !ann.DeliveredAt.IsZero(); delivered != (try == 0) || try == 0 && (w.Msg.Seq != 1 || !w.Msg.Added) {
			t.Errorf("end %d: delivery %+v, announce %+v; want it delivered by the first end only", try, w.Msg, ann)
		}
	}
	want := []store.WebMessage{{Seq: 1, Role: "announce", Text: "✅ done", RunID: "web-run", At: ms(t0.Add(time.Minute))}}
	if msgs, err := s.WebAfter(ctx, "eve", 0, 0); err != nil || !reflect.DeepEqual(msgs, want) {
		t.Errorf("eve's conversation = %+v, %v; want %+v", msgs, err, want)
	}
	if pending, _ := s.PendingOutbox(ctx, 0); len(pending) != 1 || pending[0].ID != withFile.ID {
		t.Errorf("pending = %v; want only the reply with a file", texts(pending))
	}
}

// A run's end that delivers its own item to the web chat claims the
// chat's next item with it: none when the end added nothing after its
// own, the batch's announce when it added that (the last run of a batch
// that also finishes its thread draft). The items are delivered and
// claimed once, in order.
func testWebEndClaimsWhatItAdded(t *testing.T, s Store) {
	ctx := context.Background()
	gus := channels.Origin{Channel: "web", ChatID: "gus", ChatType: channels.ChatDM}
	var runs []*store.Run
	var children []*store.Session
	for _, id := range []string{"gus-1", "gus-2"} {
		r, child := newRun(id)
		r.Origin, r.Batch, r.SpawnCallID = gus, "gus-b", "call-gus"
		runs, children = append(runs, r), append(children, child)
	}
	if err := s.SpawnRuns(ctx, runs, children, store.SpawnLimits{}); err != nil {
		t.Fatal(err)
	}
	end := func(r *store.Run) (*store.OutboxItem, *store.WebDelivery, *store.BatchEnd) {
		t.Helper()
		r.Status, r.Outcome, r.EndedAt = store.StatusDone, store.OutcomeSuccess, t0.Add(time.Minute)
		own := &store.OutboxItem{Origin: gus, Kind: channels.KindReply, Text: "draft of " + r.ID, CreatedAt: t0, SessionKey: convKey}
		w := &store.WebDelivery{Client: "gus", Msg: store.WebMessage{Role: "assistant", Text: own.Text, At: t0.Add(time.Minute),
			Next: &store.NextClaim{Holder: "r1", Now: t0.Add(time.Hour)}}}
		b := &store.BatchEnd{Render: func(rs []store.Run) *store.OutboxItem {
			return &store.OutboxItem{Origin: gus, Kind: channels.KindAnnounce, Text: fmt.Sprintf("batch of %d", len(rs)), SessionKey: convKey, CreatedAt: t0}
		}}
		if err := s.EndRun(ctx, r, store.RunEnd{Announce: own, ClaimAnnounce: "r1", Web: w, Batch: b}); err != nil {
			t.Fatal(err)
		}
		if w.Msg.Delivers != own.ID || !w.Msg.Added || own.ClaimedBy != "" || own.DeliveredAt.IsZero() {
			t.Fatalf("end of %s: delivery %+v, item %+v; want its item delivered", r.ID, w.Msg, own)
		}
		if got, err := s.GetOutbox(ctx, own.ID); err != nil || got.State() != store.OutboxDelivered || got.ClaimedBy != "" {
			t.Fatalf("end of %s: stored item %+v, %v; want delivered, claimed by nobody", r.ID, got, err)
		}
		return own, w, b
	}
	if _, w, b := end(runs[0]); w.Msg.Next.Item != nil || b.Announce != nil {
		t.Errorf("first end claimed %+v, batch announce %+v; want nothing after it", w.Msg.Next.Item, b.Announce)
	}
	_, w, b := end(runs[1])
	if b.Announce == nil || w.Msg.Next.Item == nil || w.Msg.Next.Item.ID != b.Announce.ID || w.Msg.Next.Item.ClaimedBy != "r1" {
		t.Fatalf("last end: claimed %+v, batch announce %+v; want the batch's announce claimed for r1", w.Msg.Next.Item, b.Announce)
	}
	if got, err := s.GetOutbox(ctx, b.Announce.ID); err != nil || got.State() != store.OutboxPending || got.ClaimedBy != "r1" {
		t.Errorf("stored batch announce %+v, %v; want pending, claimed by r1", got, err)
	}
	want := []string{"draft of gus-1", "draft of gus-2"}
	if msgs, err := s.WebAfter(ctx, "gus", 0, 0); err != nil || len(msgs) != 2 || msgs[0].Text != want[0] || msgs[1].Text != want[1] || msgs[1].Seq != 2 {
		t.Errorf("gus's conversation = %+v, %v; want %v", msgs, err, want)
	}
}

// A message can bring its session's row: stored with the message when the
// session has none, else the stored row is handed back; a re-delivery
// does nothing.
func testIntakeSession(t *testing.T, s Store) {
	ctx := context.Background()
	const key = "agent:main:web:dm:dave"
	to := channels.Origin{Channel: "web", ChatID: "dave", ChatType: channels.ChatDM, MessageID: "1"}
	first := &store.Intake{SessionKey: key, AgentID: "main", Origin: to, PlatformID: "dave/1", Text: "hi", CreatedAt: t0,
		Session: &store.Session{Key: key, ID: "s1", AgentID: "main", Origin: to, Model: "m", CreatedAt: t0}}
	if added, err := s.AddIntake(ctx, first); err != nil || !added || !first.SessionCreated {
		t.Fatalf("first AddIntake = %v, %v (session created %v)", added, err, first.SessionCreated)
	}
	got, err := s.GetSession(ctx, key)
	if err != nil || got.ID != "s1" || got.Model != "m" || got.Kind != store.KindMain || got.TranscriptPath == "" {
		t.Fatalf("GetSession = %+v, %v; want the row the message brought", got, err)
	}
	to.MessageID = "2"
	second := &store.Intake{SessionKey: key, AgentID: "main", Origin: to, PlatformID: "dave/2", Text: "again", CreatedAt: t0,
		Session: &store.Session{Key: key, ID: "s2", AgentID: "main", Origin: to, CreatedAt: t0.Add(time.Minute)}}
	if added, err := s.AddIntake(ctx, second); err != nil || !added || second.SessionCreated || second.Session.ID != "s1" || second.Session.Model != "m" {
		t.Fatalf("second AddIntake = %v, %v (created %v, row %+v); want the stored row back", added, err, second.SessionCreated, second.Session)
	}
	again := &store.Intake{SessionKey: key, AgentID: "main", Origin: to, PlatformID: "dave/2", Text: "again", CreatedAt: t0,
		Session: &store.Session{Key: key, ID: "s3", AgentID: "main"}}
	if added, err := s.AddIntake(ctx, again); err != nil || added || again.SessionCreated || again.Session.ID != "s3" {
		t.Fatalf("re-delivery = %v, %v (created %v, row %+v); want nothing done", added, err, again.SessionCreated, again.Session)
	}
}

func followedTexts(fs []store.Followed) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Item.Text)
	}
	return out
}
