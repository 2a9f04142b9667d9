package matrix

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/matrix/matrixtest"
	"github.com/heraldhq/herald/devtools/pgtest"
)

// testHS is the Dendrite shared by this package's integration tests, started
// in TestMain when available.
var (
	testHS      *matrixtest.Homeserver
	testHSError string
)

func TestMain(m *testing.M) {
	code := runMain(m)
	pgtest.Stop() // a PostgreSQL cluster a test started (crypto_test.go)
	os.Exit(code)
}

func runMain(m *testing.M) int {
	if ok, why := matrixtest.Available(); !ok {
		testHSError = why
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "herald-dendrite-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "matrix tests: temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	hs, err := matrixtest.Launch(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "matrix tests: start Dendrite:", err)
		return 1
	}
	defer hs.Close()
	testHS = hs
	return m.Run()
}

func requireHS(t *testing.T) *matrixtest.Homeserver {
	t.Helper()
	if testHS == nil {
		t.Skip("Dendrite integration test skipped: " + testHSError)
	}
	return testHS
}

// inbox collects what an adapter delivers.
type inbox chan channels.Inbound

func (in inbox) sink(_ context.Context, msg channels.Inbound) error { in <- msg; return nil }

// next waits for the next delivered message.
func (in inbox) next(t *testing.T) channels.Inbound {
	t.Helper()
	select {
	case msg := <-in:
		return msg
	case <-time.After(matrixtest.WaitTimeout):
		t.Fatalf("no inbound message delivered within %s", matrixtest.WaitTimeout)
		return channels.Inbound{}
	}
}

func startBot(t *testing.T, hs *matrixtest.Homeserver, bot *mautrix.Client, threads string) (*Adapter, inbox) {
	t.Helper()
	a, in, _ := startBotWith(t, hs, bot, func(o *Options) { o.ThreadReplies = threads })
	return a, in
}

// startBotWith starts an adapter logged in as bot, with the options opts
// sets; stop ends it (also at the test's end).
func startBotWith(t *testing.T, hs *matrixtest.Homeserver, bot *mautrix.Client, opts func(*Options)) (a *Adapter, in inbox, stop func()) {
	t.Helper()
	o := Options{
		Homeserver:  hs.URL,
		UserID:      string(bot.UserID),
		AccessToken: bot.AccessToken,
		AutoJoin:    true,
		Access:      channels.Access{GroupPolicy: channels.GroupOpen},
		Logger:      zaptest.NewLogger(t),
	}
	opts(&o)
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	in = make(inbox, 32)
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.Start(ctx, in.sink); err != nil {
		cancel()
		t.Fatalf("start adapter: %v", err)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		stopCtx, stopCancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer stopCancel()
		if err := a.Stop(stopCtx); err != nil {
			t.Errorf("stop adapter: %v", err)
		}
		cancel()
	}
	t.Cleanup(stop)
	return a, in, stop
}

func send(t *testing.T, a *Adapter, to channels.Origin, text string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Send(ctx, to, channels.Message{Kind: channels.KindReply, Text: text}); err != nil {
		t.Fatalf("send %q to %s: %v", text, to, err)
	}
}

func relation(t *testing.T, evt *event.Event) *event.RelatesTo {
	t.Helper()
	msg, ok := evt.Content.Parsed.(*event.MessageEventContent)
	if !ok || msg.RelatesTo == nil {
		t.Fatalf("event %s has no m.relates_to: %s", evt.ID, evt.Content.VeryRaw)
	}
	return msg.RelatesTo
}

// TestDendriteThreads drives the adapter against a real homeserver the way a
// person in a group room would: thread replies go to the thread that asked.
func TestDendriteThreads(t *testing.T) {
	hs := requireHS(t)
	alice := hs.RegisterUser(t, "alice")
	carol := hs.RegisterUser(t, "carol")
	bot := hs.RegisterUser(t, "herald")

	a, in := startBot(t, hs, bot, ThreadsInbound)
	if got := a.UserID(); got != string(bot.UserID) {
		t.Fatalf("adapter user id = %q, want %q", got, bot.UserID)
	}

	room := matrixtest.CreateRoomWith(t, alice, bot.UserID, carol.UserID)
	matrixtest.WaitJoined(t, alice, room, bot.UserID) // auto-join on invite
	if _, err := carol.JoinRoomByID(context.Background(), room); err != nil {
		t.Fatalf("carol joins: %v", err)
	}
	matrixtest.WaitJoined(t, alice, room, carol.UserID)

	// A root without a mention is not for the bot; the reply in its thread
	// that names the bot is, and carries the thread root.
	root := matrixtest.Post(t, alice, room, "let's plan the release")
	// The bot's own localpart ("herald", with a suffix on a homeserver
	// that already has one: -count=2, HERALD_DENDRITE_URL).
	ask := matrixtest.PostInThread(t, alice, room, root, bot.UserID.Localpart()+": can you summarize the open issues?")
	got := in.next(t)
	want := channels.Origin{Channel: "matrix", ChatID: string(room), ChatType: channels.ChatGroup,
		ThreadID: string(root), SenderID: string(alice.UserID), MessageID: string(ask)}
	if got.Origin != want {
		t.Fatalf("inbound origin = %+v\nwant %+v", got.Origin, want)
	}
	if got.Text != "can you summarize the open issues?" || !got.Mentioned {
		t.Fatalf("inbound text %q mentioned %v; want the question without the leading mention, mentioned", got.Text, got.Mentioned)
	}

	send(t, a, got.Origin, "Three issues are open.")
	replies := matrixtest.WaitThreadMessages(t, alice, room, root, bot.UserID, 1)
	rel := relation(t, replies[0])
	if rel.Type != event.RelThread || rel.EventID != root || !rel.IsFallingBack || rel.GetReplyTo() != ask {
		t.Fatalf("reply relation = %+v (in_reply_to %q); want m.thread to %s, falling back to %s", rel, rel.GetReplyTo(), root, ask)
	}
	if body := replies[0].Content.AsMessage().Body; body != "Three issues are open." {
		t.Fatalf("reply body = %q", body)
	}
	assertSyncSees(t, alice, room, replies[0].ID, root)

	// In a thread the bot is in, carol need not mention it.
	follow := matrixtest.PostInThread(t, carol, room, root, "and which one is the riskiest?")
	got = in.next(t)
	if got.Origin.ThreadID != string(root) || got.Origin.MessageID != string(follow) || !got.Mentioned || got.Origin.SenderID != string(carol.UserID) {
		t.Fatalf("follow-up in the bot's thread: got %+v mentioned=%v", got.Origin, got.Mentioned)
	}

	// A second thread, addressed through m.mentions, gets its own thread id.
	root2 := matrixtest.Post(t, carol, room, "separate topic: the CI budget")
	matrixtest.PostInThread(t, carol, room, root2, "what do you think?", bot.UserID)
	got = in.next(t)
	if got.Origin.ThreadID != string(root2) {
		t.Fatalf("second thread: ThreadID = %q, want %q", got.Origin.ThreadID, root2)
	}
	send(t, a, got.Origin, "Keep it under 90 minutes.")
	second := matrixtest.WaitThreadMessages(t, carol, room, root2, bot.UserID, 1)
	if r := relation(t, second[0]); r.EventID != root2 {
		t.Fatalf("second thread reply rooted at %s, want %s", r.EventID, root2)
	}
	if n := len(matrixtest.WaitThreadMessages(t, alice, room, root, bot.UserID, 1)); n != 1 {
		t.Fatalf("first thread has %d bot replies after the second thread's answer, want 1", n)
	}

	// A long answer is split and every part stays in the thread.
	long := strings.Repeat(strings.Repeat("x", 99)+"\n", 200) // 20000 characters
	send(t, a, got.Origin, long)
	parts := matrixtest.WaitThreadMessages(t, carol, room, root2, bot.UserID, 3)
	if len(parts) != 3 {
		t.Fatalf("got %d bot messages in the second thread, want 1 + 2 parts", len(parts))
	}
	for _, p := range parts[1:] {
		if n := len([]rune(p.Content.AsMessage().Body)); n > Limit {
			t.Fatalf("part of %d characters exceeds %d", n, Limit)
		}
	}
}

// assertSyncSees checks that c's own /sync shows evt in room as part of the
// thread rooted at root.
func assertSyncSees(t *testing.T, c *mautrix.Client, room id.RoomID, evtID, root id.EventID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.FullSyncRequest(ctx, mautrix.ReqSync{Timeout: 0})
	if err != nil {
		t.Fatalf("%s /sync: %v", c.UserID, err)
	}
	joined := resp.Rooms.Join[room]
	if joined == nil {
		t.Fatalf("%s /sync has no joined room %s", c.UserID, room)
	}
	for _, evt := range joined.Timeline.Events {
		if evt.ID != evtID {
			continue
		}
		_ = evt.Content.ParseRaw(evt.Type)
		if r := relation(t, evt); r.Type != event.RelThread || r.EventID != root {
			t.Fatalf("/sync shows %s with relation %+v, want m.thread to %s", evtID, r, root)
		}
		return
	}
	t.Fatalf("%s /sync timeline of %s lacks the bot's event %s", c.UserID, room, evtID)
}

// TestDendriteThreadAlwaysAndDM: with threadReplies "always" a top-level
// message gets its answer in a thread rooted at it; a two-person room is a DM
// where no mention is needed; messages from before the start are not replayed.
func TestDendriteThreadAlwaysAndDM(t *testing.T) {
	hs := requireHS(t)
	alice := hs.RegisterUser(t, "alice")
	bot := hs.RegisterUser(t, "herald")

	// The bot is invited while offline, and alice talks before it starts.
	room := matrixtest.CreateRoomWith(t, alice, bot.UserID)
	if _, err := bot.JoinRoomByID(context.Background(), room); err != nil {
		t.Fatalf("bot joins: %v", err)
	}
	matrixtest.Post(t, alice, room, "are you there? (sent before the bot started)")

	a, in := startBot(t, hs, bot, ThreadsAlways)
	q := matrixtest.Post(t, alice, room, "what's the weather like")
	got := in.next(t)
	if got.Origin.MessageID != string(q) {
		t.Fatalf("first delivered message is %s (%q), want the one sent after start %s", got.Origin.MessageID, got.Text, q)
	}
	if got.Origin.ChatType != channels.ChatDM || got.Origin.ThreadID != string(q) {
		t.Fatalf("origin = %+v; want a dm with ThreadID = the message itself", got.Origin)
	}
	send(t, a, got.Origin, "Sunny.")
	replies := matrixtest.WaitThreadMessages(t, alice, room, q, bot.UserID, 1)
	if r := relation(t, replies[0]); r.EventID != q || r.GetReplyTo() != q {
		t.Fatalf("reply relation = %+v; want m.thread rooted at and replying to %s", r, q)
	}
}

// TestDendriteResendIsDeduplicated: a message re-sent after a crash between
// the homeserver accepting it and the outbox marking it (same outbox id)
// shows once in the room: its transaction ids are derived from the outbox
// item and part. A different outbox item with the same text shows again.
func TestDendriteResendIsDeduplicated(t *testing.T) {
	hs := requireHS(t)
	alice := hs.RegisterUser(t, "alice")
	bot := hs.RegisterUser(t, "herald")
	a, _ := startBot(t, hs, bot, ThreadsInbound)
	room := matrixtest.CreateRoomWith(t, alice, bot.UserID)
	matrixtest.WaitJoined(t, alice, room, bot.UserID)
	to := channels.Origin{Channel: "matrix", ChatID: string(room), ChatType: channels.ChatDM}
	long := strings.Repeat(strings.Repeat("y", 99)+"\n", 200) // two parts
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 2 { // the first send, then the re-send of the same outbox item
		if err := a.Send(ctx, to, channels.Message{Kind: channels.KindReply, Text: long, ID: "41"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Send(ctx, to, channels.Message{Kind: channels.KindReply, Text: "short", ID: "42"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx, to, channels.Message{Kind: channels.KindReply, Text: "short", ID: "43"}); err != nil {
		t.Fatal(err)
	}
	msgs := matrixtest.WaitThreadMessages(t, alice, room, "", bot.UserID, 4)
	if len(msgs) != 4 {
		var bodies []string
		for _, m := range msgs {
			bodies = append(bodies, fmt.Sprintf("%.10q", m.Content.AsMessage().Body))
		}
		t.Fatalf("room shows %d bot messages %v, want 4: two parts once, then two distinct items", len(msgs), bodies)
	}
}

// TestDendriteCatchUpAfterRestart: with the sync token kept across runs, a
// message sent while the gateway was down is delivered when it starts
// again (the gateway's intake drops what it already stored by event id).
func TestDendriteCatchUpAfterRestart(t *testing.T) {
	hs := requireHS(t)
	alice := hs.RegisterUser(t, "alice")
	bot := hs.RegisterUser(t, "herald")
	tokens := mautrix.NewMemorySyncStore() // stands in for the gateway's store
	run := func() (*Adapter, inbox) {
		a, err := New(Options{Homeserver: hs.URL, UserID: string(bot.UserID), AccessToken: bot.AccessToken, AutoJoin: true,
			Access: channels.Access{GroupPolicy: channels.GroupOpen}, SyncStore: tokens, Logger: zaptest.NewLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		in := make(inbox, 32)
		if err := a.Start(context.Background(), in.sink); err != nil {
			t.Fatalf("start adapter: %v", err)
		}
		return a, in
	}
	stop := func(a *Adapter) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Errorf("stop adapter: %v", err)
		}
	}
	a, in := run()
	room := matrixtest.CreateRoomWith(t, alice, bot.UserID)
	matrixtest.WaitJoined(t, alice, room, bot.UserID)
	matrixtest.Post(t, alice, room, "first, while running")
	first := in.next(t)
	if first.Text != "first, while running" {
		t.Fatalf("first message: %q", first.Text)
	}
	stop(a)

	matrixtest.Post(t, alice, room, "second, while the gateway is down")
	a, in = run()
	defer stop(a)
	got := in.next(t)
	// A stop that lands after the first message was handed over but before
	// its batch's token was saved fetches that batch again (by design: the
	// token moves only after a whole batch); the gateway's intake drops the
	// same event id, so here it is skipped once, by id.
	if got.Origin.MessageID == first.Origin.MessageID {
		got = in.next(t)
	}
	if got.Text != "second, while the gateway is down" {
		t.Fatalf("after the restart: %q, want the message sent while down", got.Text)
	}
}

// TestDendriteDMKeyedByPerson: a DM's conversation is its person's, not the
// room's (issue 35). Alice's DM origin names her; the room it talks in is
// kept in the channel's store, so after a restart a message for her goes
// there before she writes again. When she invites Mallory and leaves, the
// room is a two-member room again, now with Mallory: a message for Alice's
// conversation is refused instead of posted to Mallory, and Mallory's
// messages come as her own conversation.
func TestDendriteDMKeyedByPerson(t *testing.T) {
	hs := requireHS(t)
	alice := hs.RegisterUser(t, "alice")
	mallory := hs.RegisterUser(t, "mallory")
	bot := hs.RegisterUser(t, "herald")
	kv := &channels.MemoryKV{}
	withKV := func(o *Options) { o.State = kv }
	a, in, stop := startBotWith(t, hs, bot, withKV)
	room := matrixtest.CreateRoomWith(t, alice, bot.UserID)
	matrixtest.WaitJoined(t, alice, room, bot.UserID)

	matrixtest.Post(t, alice, room, "my secret word is pineapple")
	got := in.next(t)
	if got.Origin.ChatType != channels.ChatDM || got.Origin.ChatID != string(alice.UserID) {
		t.Fatalf("alice's DM origin = %+v; want a dm keyed by %s", got.Origin, alice.UserID)
	}
	forAlice := got.Origin
	send(t, a, forAlice, "noted, alice")

	// A restart: the room of Alice's DM is read from the store.
	stop()
	a, in, _ = startBotWith(t, hs, bot, withKV)
	send(t, a, forAlice, "still here, alice")
	matrixtest.WaitThreadMessages(t, alice, room, "", bot.UserID, 2)

	// Alice brings Mallory in and leaves: two members again.
	matrixtest.HandOver(t, alice, mallory, room)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := a.Send(ctx, forAlice, channels.Message{Kind: channels.KindReply, Text: "for alice only"})
	if !errors.Is(err, channels.ErrPermanent) || !strings.Contains(err.Error(), "no longer in a direct chat") {
		t.Fatalf("a message for alice after she left: %v; want a permanent refusal", err)
	}
	// An origin stored before DMs were keyed by the person names the room.
	legacy := channels.Origin{Channel: Name, ChatID: string(room), ChatType: channels.ChatDM, SenderID: string(alice.UserID)}
	if err := a.Send(ctx, legacy, channels.Message{Kind: channels.KindReply, Text: "for alice only"}); !errors.Is(err, channels.ErrPermanent) {
		t.Fatalf("a message for alice's room-keyed conversation after she left: %v; want a permanent refusal", err)
	}

	matrixtest.Post(t, mallory, room, "what did alice tell you?")
	got = in.next(t)
	if got.Origin.ChatType != channels.ChatDM || got.Origin.ChatID != string(mallory.UserID) {
		t.Fatalf("mallory's origin = %+v; want a dm keyed by %s, not alice's conversation", got.Origin, mallory.UserID)
	}
	send(t, a, got.Origin, "hello mallory")
	for _, m := range matrixtest.WaitThreadMessages(t, mallory, room, "", bot.UserID, 3) {
		if body := m.Content.AsMessage().Body; body == "for alice only" {
			t.Errorf("alice's message was posted to the room mallory now shares with the bot")
		}
	}
}
