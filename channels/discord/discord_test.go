package discord

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/discord/discordfake"
)

const (
	guild   = "800000000000000001"
	general = "800000000000000010"
	dm      = "800000000000000020"
)

var (
	alice = discordfake.User{ID: "700000000000000001", Username: "alice", GlobalName: "Alice"}
	bob   = discordfake.User{ID: "700000000000000002", Username: "bob"}
)

// recorder is a Sink that hands inbound messages to the test; fail, when
// set, decides the sink's answer.
type recorder struct {
	ch   chan channels.Inbound
	mu   sync.Mutex
	fail func(channels.Inbound) error
}

func newRecorder() *recorder { return &recorder{ch: make(chan channels.Inbound, 64)} }

func (r *recorder) sink(_ context.Context, in channels.Inbound) error {
	r.mu.Lock()
	fail := r.fail
	r.mu.Unlock()
	if fail != nil {
		if err := fail(in); err != nil {
			return err
		}
	}
	r.ch <- in
	return nil
}

func (r *recorder) next(t *testing.T) channels.Inbound {
	t.Helper()
	select {
	case in := <-r.ch:
		return in
	case <-time.After(10 * time.Second):
		t.Fatal("no inbound message within 10s")
		return channels.Inbound{}
	}
}

// none asserts nothing else reached the sink by the time a later message
// (sent by the test as a marker) arrives.
func (r *recorder) upTo(t *testing.T, marker string) []channels.Inbound {
	t.Helper()
	var got []channels.Inbound
	for {
		in := r.next(t)
		if in.Text == marker {
			return got
		}
		got = append(got, in)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type setup struct {
	fake *discordfake.Server
	kv   *channels.MemoryKV
	logs *observer.ObservedLogs
}

func newSetup(t *testing.T) *setup {
	fake := discordfake.New(t)
	fake.AddGuildChannel(guild, general, "general")
	fake.AddDM(dm)
	return &setup{fake: fake, kv: &channels.MemoryKV{}}
}

// start starts an adapter on the fake; the access rules serve DMs from
// anyone and the guild channel general (mention required).
func (s *setup) start(t *testing.T, rec *recorder, edit func(*Options)) *Adapter {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	s.logs = logs
	opts := Options{BotToken: s.fake.Token, APIURL: s.fake.URL(), State: s.kv, Logger: zap.New(core),
		Access: channels.Access{Groups: map[string]channels.GroupRule{general: {RequireMention: true}}}}
	if edit != nil {
		edit(&opts)
	}
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	a.retryHeld = 20 * time.Millisecond
	if err := a.Start(testCtx(t), rec.sink); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, a) })
	return a
}

func stop(t *testing.T, a *Adapter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}
}

func mention(text string) string { return "<@900000000000000001> " + text }

func TestGuildMentionOpensThreadAndRepliesStayInIt(t *testing.T) {
	s := newSetup(t)
	rec := newRecorder()
	a := s.start(t, rec, nil)
	ctx := testCtx(t)

	s.fake.Say(general, bob, "chatter without the bot", "")
	m := s.fake.Say(general, alice, mention("summarise the design doc"), "")
	in := rec.next(t)
	want := channels.Origin{Channel: Name, ChatID: general, ChatType: channels.ChatGroup, ThreadID: m.ID, SenderID: alice.ID, MessageID: m.ID}
	if in.Origin != want {
		t.Fatalf("origin = %+v, want %+v (a top-level mention is answered in a thread named by its message id)", in.Origin, want)
	}
	if in.Text != "summarise the design doc" || !in.Mentioned || in.SenderName != "Alice" {
		t.Errorf("inbound text %q mentioned %v sender %q", in.Text, in.Mentioned, in.SenderName)
	}

	if err := a.Typing(ctx, in.Origin, true); err != nil {
		t.Fatal(err)
	}
	th, ok := s.fake.Channel(m.ID)
	if !ok || th.ParentID != general || th.Name != "summarise the design doc" {
		t.Fatalf("thread %+v (found %v): want one opened from the message in general, named after it", th, ok)
	}
	if s.fake.Typing(m.ID) != 1 {
		t.Errorf("typing in the thread: %d, want 1", s.fake.Typing(m.ID))
	}
	if _, err := a.SendPart(ctx, in.Origin, channels.Message{Kind: channels.KindReply, Text: "Here is the summary.", ID: "41", Part: 1, Parts: 1}); err != nil {
		t.Fatal(err)
	}
	if got := s.fake.BotMessages(m.ID); len(got) != 1 || got[0].Content != "Here is the summary." {
		t.Fatalf("thread messages %+v", got)
	}
	if got := s.fake.BotMessages(general); len(got) != 0 {
		t.Errorf("the reply went to the channel too: %+v", got)
	}

	// A follow-up in the thread needs no mention: the bot is in it.
	s.fake.Say(m.ID, alice, "and the risks?", "")
	in2 := rec.next(t)
	if in2.Origin.ChatID != general || in2.Origin.ThreadID != m.ID || !in2.Mentioned || in2.Text != "and the risks?" {
		t.Errorf("follow-up origin %+v mentioned %v text %q", in2.Origin, in2.Mentioned, in2.Text)
	}
	// An announce to the thread's origin lands in the thread.
	if err := a.Send(ctx, in2.Origin, channels.Message{Kind: channels.KindAnnounce, Text: "Status: success", RunID: "run-1"}); err != nil {
		t.Fatal(err)
	}
	if got := s.fake.BotMessages(m.ID); len(got) != 2 || got[1].Content != "Status: success" {
		t.Errorf("thread after the announce: %+v", got)
	}

	_, _, _, gwBot, gw := s.fake.Counts()
	if gwBot == 0 || gw != 0 {
		t.Errorf("GET gateway/bot %d times, GET gateway %d times: want gateway/bot only", gwBot, gw)
	}
	if s.fake.Intents()&discordfake.IntentMessageContent == 0 {
		t.Errorf("intents %b lack MESSAGE_CONTENT", s.fake.Intents())
	}
	for _, e := range s.logs.All() {
		line := e.Message
		for _, f := range e.Context {
			line += " " + f.String + " " + f.Key
			if f.Interface != nil {
				if err, ok := f.Interface.(error); ok {
					line += err.Error()
				}
			}
		}
		if strings.Contains(line, s.fake.Token) {
			t.Errorf("a log line has the token: %q", line)
		}
	}
}

func TestAccessRules(t *testing.T) {
	s := newSetup(t)
	s.fake.AddGuildChannel(guild, "800000000000000011", "random") // not listed
	rec := newRecorder()
	a := s.start(t, rec, func(o *Options) {
		o.Access.AllowFrom = []string{alice.ID}
		f := false
		o.ReplyInThread = &f
	})

	s.fake.Say(general, alice, "no mention, not for the bot", "")
	s.fake.Say("800000000000000011", alice, mention("unlisted channel"), "")
	s.fake.Say(dm, bob, "bob is not in allowFrom", "")
	s.fake.Say(general, bob, mention("bob is not allowed in groups either"), "")
	s.fake.Say(dm, alice, "hello in a DM", "")
	in := rec.next(t)
	if in.Origin.ChatType != channels.ChatDM || in.Origin.ChatID != dm || in.Text != "hello in a DM" {
		t.Fatalf("first admitted message %+v %q: want Alice's DM only", in.Origin, in.Text)
	}
	m := s.fake.Say(general, alice, "<@!900000000000000001> nick mention, no thread", "")
	in = rec.next(t)
	if in.Origin.ThreadID != "" || in.Origin.ChatID != general || in.Text != "nick mention, no thread" {
		t.Errorf("with replyInThread false: origin %+v text %q", in.Origin, in.Text)
	}
	// A reply to the bot's message addresses it without a mention.
	botID, err := a.SendPart(testCtx(t), in.Origin, channels.Message{Text: "noted", ID: "7", Part: 1, Parts: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.fake.Say(general, alice, "thanks, and one more thing", botID)
	in = rec.next(t)
	if !in.Mentioned || in.Text != "thanks, and one more thing" {
		t.Errorf("reply to the bot: mentioned %v text %q", in.Mentioned, in.Text)
	}
	_ = m
}

func TestDroppedConnectionResumesAndReplaysNothingTwice(t *testing.T) {
	s := newSetup(t)
	rec := newRecorder()
	s.start(t, rec, nil)
	ctx := testCtx(t)

	s.fake.Say(general, alice, mention("before the drop"), "")
	if in := rec.next(t); in.Text != "before the drop" {
		t.Fatalf("got %q", in.Text)
	}
	s.fake.Drop()
	s.fake.Say(general, alice, mention("while the connection is down"), "")
	s.fake.Say(dm, bob, "a DM while down", "")
	if err := s.fake.Wait(ctx, "the bot to resume", func() bool { return s.fake.Connected() }); err != nil {
		t.Fatal(err)
	}
	s.fake.Say(dm, alice, "marker", "")
	got := rec.upTo(t, "marker")
	var texts []string
	for _, in := range got {
		texts = append(texts, in.Text)
	}
	if strings.Join(texts, "|") != "while the connection is down|a DM while down" {
		t.Errorf("after the resume the sink got %q; want each missed message once, in order, and nothing from before the drop", texts)
	}
	identify, resume, resumed, _, _ := s.fake.Counts()
	if identify != 1 || resume != 1 || resumed != 1 {
		t.Errorf("identify %d, resume %d (resumed %d): want one session, resumed once", identify, resume, resumed)
	}
}

func TestRefusedResumeCatchesUpOverREST(t *testing.T) {
	s := newSetup(t)
	rec := newRecorder()
	s.start(t, rec, nil)
	ctx := testCtx(t)

	s.fake.Say(general, alice, mention("first"), "")
	rec.next(t)
	s.fake.InvalidateNextResume()
	s.fake.Drop()
	s.fake.Say(general, bob, mention("lost with the old session"), "")
	if err := s.fake.Wait(ctx, "a new session", func() bool { return s.fake.Connected() }); err != nil {
		t.Fatal(err)
	}
	s.fake.Say(dm, alice, "marker", "")
	got := rec.upTo(t, "marker")
	if len(got) != 1 || got[0].Text != "lost with the old session" || got[0].Origin.SenderID != bob.ID {
		t.Errorf("after INVALID_SESSION the sink got %+v; want the missed message once, fetched with ?after=", got)
	}
	identify, _, resumed, _, _ := s.fake.Counts()
	if identify != 2 || resumed != 0 {
		t.Errorf("identify %d resumed %d: want a second IDENTIFY and no resume", identify, resumed)
	}
}

func TestRestartCatchesUpFromTheStoredCursor(t *testing.T) {
	s := newSetup(t)
	rec := newRecorder()
	a := s.start(t, rec, nil)

	first := s.fake.Say(general, alice, mention("seen before the restart"), "")
	rec.next(t)
	s.fake.Say(dm, alice, "a DM before the restart", "")
	rec.next(t)
	stop(t, a)

	m1 := s.fake.Say(general, alice, mention("sent while Herald was down"), "")
	s.fake.Say(general, bob, "not for the bot", "")
	s.fake.Say(dm, alice, "a DM while down", "")
	m2 := s.fake.Say(general, bob, mention("second one while down"), "")

	rec2 := newRecorder()
	s.start(t, rec2, nil)
	s.fake.Say(dm, alice, "marker", "")
	got := rec2.upTo(t, "marker")
	var texts []string
	for _, in := range got {
		texts = append(texts, in.Text)
	}
	if strings.Join(texts, "|") != "a DM while down|sent while Herald was down|second one while down" &&
		strings.Join(texts, "|") != "sent while Herald was down|second one while down|a DM while down" {
		t.Fatalf("after the restart the sink got %q; want the three missed messages, each once", texts)
	}
	if got[0].Origin.MessageID == "" {
		t.Error("caught-up messages carry no message id (durable intake is keyed by it)")
	}
	// REST messages carry no guild_id: the guild comes from the channel,
	// so a caught-up guild message keeps the group's rules and session.
	for _, in := range got {
		if want := map[bool]string{true: channels.ChatGroup, false: channels.ChatDM}[in.Origin.ChatID == general]; in.Origin.ChatType != want {
			t.Errorf("caught-up %q has chat type %q, want %q", in.Text, in.Origin.ChatType, want)
		}
	}
	var asked bool
	for _, r := range s.fake.Requests() {
		if r.Path == "/api/v10/channels/"+general+"/messages" && strings.Contains(r.Query, "after="+first.ID) {
			asked = true
		}
	}
	if !asked {
		t.Errorf("no GET channels/%s/messages?after=%s among %+v", general, first.ID, s.fake.Requests())
	}
	_, _ = m1, m2
}

func TestStoreOutageHoldsTheChannelAndCatchesUpLater(t *testing.T) {
	s := newSetup(t)
	rec := newRecorder()
	var refused int
	rec.fail = func(in channels.Inbound) error {
		if in.Text == "refused once" && refused == 0 {
			refused++
			return &channels.UnavailableError{RetryAfter: time.Millisecond, Reason: "store away"}
		}
		return nil
	}
	s.start(t, rec, nil)
	s.fake.Say(general, alice, mention("refused once"), "")
	s.fake.Say(general, alice, mention("after it"), "")
	s.fake.Say(dm, alice, "marker", "")
	var texts []string
	for len(texts) < 3 {
		texts = append(texts, rec.next(t).Text)
	}
	// The DM marker may come first (another channel); the held channel's
	// messages come in order, each once.
	joined := strings.Join(texts, "|")
	if !strings.Contains(joined, "refused once|after it") || strings.Count(joined, "refused once") != 1 {
		t.Errorf("sink got %q: want the refused message again, then the next, each once", texts)
	}
}

func TestSplitAtTwoThousandWithStatsLastAndNonce(t *testing.T) {
	s := newSetup(t)
	a := s.start(t, newRecorder(), nil)
	ctx := testCtx(t)
	to := channels.Origin{Channel: Name, ChatID: general, ChatType: channels.ChatGroup}
	var body strings.Builder
	for i := 0; i < 90; i++ {
		body.WriteString(strings.Repeat("x", 49) + "\n")
	}
	stats := "Stats: runtime 5s • tokens 1.2k (in 1.0k / out 200) • sessionKey agent:main:subagent:1"
	if err := a.Send(ctx, to, channels.Message{Kind: channels.KindAnnounce, Text: body.String() + stats, RunID: "r1"}); err != nil {
		t.Fatal(err)
	}
	got := s.fake.BotMessages(general)
	if len(got) != 3 {
		t.Fatalf("%d messages, want 3 (4500 characters at 2000)", len(got))
	}
	for _, m := range got {
		if n := len([]rune(m.Content)); n > Limit {
			t.Errorf("a part has %d characters", n)
		}
	}
	if !strings.HasSuffix(got[2].Content, "\n"+stats) {
		t.Errorf("last part does not end with the stats line: %q", got[2].Content)
	}
	if string(got[0].AllowedMentions) == "" || strings.Contains(string(got[0].AllowedMentions), "everyone") {
		t.Errorf("allowed_mentions %s: want none parsed", got[0].AllowedMentions)
	}

	// The outbox re-sends a part whose outcome it did not learn: the
	// nonce with enforce_nonce returns the message already posted.
	part := channels.Message{Kind: channels.KindReply, Text: "exactly once", ID: "1234", Part: 2, Parts: 3}
	id1, err := a.SendPart(ctx, to, part)
	if err != nil {
		t.Fatal(err)
	}
	id2, err := a.SendPart(ctx, to, part)
	if err != nil {
		t.Fatal(err)
	}
	if id1 != id2 || len(s.fake.BotMessages(general)) != 4 {
		t.Errorf("re-send of one part: ids %s, %s and %d messages; want one message", id1, id2, len(s.fake.BotMessages(general)))
	}
	part.Part = 3
	if id3, err := a.SendPart(ctx, to, part); err != nil || id3 == id1 {
		t.Errorf("the next part: id %s err %v; want a new message", id3, err)
	}
}

func TestRateLimitIsHandedBackWithRetryAfter(t *testing.T) {
	s := newSetup(t)
	a := s.start(t, newRecorder(), nil)
	ctx := testCtx(t)
	to := channels.Origin{Channel: Name, ChatID: general, ChatType: channels.ChatGroup}
	s.fake.RateLimitNext("POST", "/channels/"+general+"/messages", 0.25)
	_, err := a.SendPart(ctx, to, channels.Message{Text: "hello", ID: "9", Part: 1, Parts: 1})
	var ra *channels.RetryAfterError
	if !errors.As(err, &ra) || ra.After != 250*time.Millisecond {
		t.Fatalf("err = %v; want a RetryAfterError of 250ms (Discord's retry_after)", err)
	}
	if _, err := a.SendPart(ctx, to, channels.Message{Text: "hello", ID: "9", Part: 1, Parts: 1}); err != nil {
		t.Fatalf("retry after the 429: %v", err)
	}
	if got := s.fake.BotMessages(general); len(got) != 1 {
		t.Errorf("%d messages after a 429 and a retry, want 1", len(got))
	}
}

func TestStreamingByEdits(t *testing.T) {
	s := newSetup(t)
	a := s.start(t, newRecorder(), nil)
	ctx := testCtx(t)
	to := channels.Origin{Channel: Name, ChatID: dm, ChatType: channels.ChatDM}
	ref, err := a.Draft(ctx, to, "", "Hel")
	if err != nil {
		t.Fatal(err)
	}
	if ref2, err := a.Draft(ctx, to, ref, "Hello wor"); err != nil || ref2 != ref {
		t.Fatalf("second draft: ref %s err %v", ref2, err)
	}
	id, err := a.SendPart(ctx, to, channels.Message{Kind: channels.KindReply, Text: "Hello world.", DraftRef: ref, ID: "5", Part: 1, Parts: 1})
	if err != nil || id != ref {
		t.Fatalf("final: id %s err %v, want the draft %s", id, err, ref)
	}
	got := s.fake.BotMessages(dm)
	if len(got) != 1 || got[0].Content != "Hello world." || got[0].Edits != 2 {
		t.Errorf("messages %+v: want one message edited twice to the final text", got)
	}
}

func TestApplicationCommands(t *testing.T) {
	s := newSetup(t)
	rec := newRecorder()
	s.start(t, rec, func(o *Options) { o.Access.AllowFrom = []string{alice.ID} })
	ctx := testCtx(t)
	var cmds []struct {
		Name    string `json:"name"`
		Options []struct {
			Name string `json:"name"`
			Type int    `json:"type"`
		} `json:"options"`
	}
	if err := s.fake.Wait(ctx, "the bulk overwrite of the commands", func() bool { return s.fake.Commands() != nil }); err != nil {
		t.Fatal(err)
	}
	raw := s.fake.Commands()
	if err := json.Unmarshal(raw, &cmds); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, c := range cmds {
		names[c.Name] = len(c.Options) == 1 && c.Options[0].Name == "args" && c.Options[0].Type == 3
	}
	for _, n := range []string{"subagents", "stop", "new", "reset", "status", "help", "approve", "deny", "compact", "model", "think", "schedule", "usage"} {
		if !names[n] {
			t.Errorf("command /%s missing or without its args option (%s)", n, raw)
		}
	}

	i := s.fake.Interact(general, alice, "subagents", "log 1 50")
	in := rec.next(t)
	if in.Text != "/subagents log 1 50" || !in.Mentioned || in.Origin.ChatID != general || in.Origin.ThreadID != "" {
		t.Errorf("interaction became %+v %q", in.Origin, in.Text)
	}
	if err := s.fake.Wait(ctx, "the answer", func() bool { return s.fake.InteractionAnswer(i.ID) != nil }); err != nil {
		t.Fatal(err)
	}
	if ans := s.fake.InteractionAnswer(i.ID); ans.Type != 4 || ans.Data.Content != "/subagents log 1 50" {
		t.Errorf("interaction answer %+v", ans)
	}
	j := s.fake.Interact(general, bob, "stop", "")
	if err := s.fake.Wait(ctx, "the refusal", func() bool { return s.fake.InteractionAnswer(j.ID) != nil }); err != nil {
		t.Fatal(err)
	}
	s.fake.Say(dm, alice, "marker", "")
	if got := rec.upTo(t, "marker"); len(got) != 0 {
		t.Errorf("a command from a sender outside allowFrom reached the gateway: %+v", got)
	}
	if ans := s.fake.InteractionAnswer(j.ID); ans == nil || ans.Data.Flags&64 == 0 {
		t.Errorf("refused interaction answer %+v: want an ephemeral refusal", ans)
	}
}

func TestCheckAndBadToken(t *testing.T) {
	s := newSetup(t)
	a, err := New(Options{BotToken: s.fake.Token, APIURL: s.fake.URL()})
	if err != nil {
		t.Fatal(err)
	}
	checks := a.Check(testCtx(t))
	if len(checks) != 2 || checks[0].Status != channels.CheckOK || checks[1].Status != channels.CheckOK ||
		!strings.Contains(checks[0].Detail, "herald") || !strings.Contains(checks[1].Detail, "999 of 1000") {
		t.Errorf("checks %+v", checks)
	}
	bad, err := New(Options{BotToken: "wrong-token", APIURL: s.fake.URL()})
	if err != nil {
		t.Fatal(err)
	}
	checks = bad.Check(testCtx(t))
	if len(checks) != 1 || checks[0].Status != channels.CheckFail || !strings.Contains(checks[0].Fix, "botToken") ||
		strings.Contains(checks[0].Detail, "wrong-token") {
		t.Errorf("bad token checks %+v", checks)
	}
	err = bad.Start(testCtx(t), newRecorder().sink)
	if err == nil || !strings.Contains(err.Error(), "botToken") || strings.Contains(err.Error(), "wrong-token") {
		t.Errorf("start with a bad token: %v", err)
	}
	if _, err := New(Options{APIURL: s.fake.URL()}); err == nil || !strings.Contains(err.Error(), "botToken") {
		t.Errorf("no token: %v", err)
	}
	if _, err := New(Options{BotToken: "x", APIURL: "ftp://x"}); err == nil || !strings.Contains(err.Error(), "apiUrl") {
		t.Errorf("bad apiUrl: %v", err)
	}
}

// A catch-up that overlaps messages the gateway already delivered (a READY
// while live events wait in the queue) hands each message to the sink once.
func TestOverlapOfCatchUpAndLiveIsDeliveredOnce(t *testing.T) {
	s := newSetup(t)
	rec := newRecorder()
	a := s.start(t, rec, nil)
	s.fake.Say(general, alice, mention("one"), "")
	rec.next(t)
	m := s.fake.Say(general, alice, mention("two"), "")
	rec.next(t)
	// The worker handles events in order: once the DM reached the sink, it
	// is done with "two" (its cursor moved).
	s.fake.Say(dm, alice, "in order", "")
	rec.next(t)
	msgs, err := a.s.ChannelMessages(general, 100, "", prevID(m.ID), "")
	if err != nil || len(msgs) != 1 {
		t.Fatalf("history: %v %d", err, len(msgs))
	}
	if !a.message(testCtx(t), msgs[0], false) {
		t.Fatal("message held")
	}
	s.fake.Say(dm, alice, "marker", "")
	if got := rec.upTo(t, "marker"); len(got) != 0 {
		t.Errorf("a message handled twice: %+v", got)
	}
}

func TestFilesBothWays(t *testing.T) {
	s := newSetup(t)
	rec := newRecorder()
	a := s.start(t, rec, nil)
	ctx := testCtx(t)

	data := []byte("%PDF-1.4 a small report")
	s.fake.SayWithFile(dm, alice, "", "report.pdf", "application/pdf", data)
	in := rec.next(t)
	if len(in.Attachments) != 1 {
		t.Fatalf("attachments %+v, want the PDF (a message with only a file is taken)", in.Attachments)
	}
	f := in.Attachments[0]
	if f.Name != "report.pdf" || f.MIME != "application/pdf" || f.Size != int64(len(data)) || f.Kind != channels.KindFile || f.Open == nil {
		t.Fatalf("attachment %+v", f)
	}
	rc, err := f.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != string(data) {
		t.Errorf("downloaded %q, want %q", got, data)
	}

	m := s.fake.Say(general, alice, mention("make me a chart"), "")
	in = rec.next(t)
	png := []byte("\x89PNG\r\n\x1a\n fake chart")
	msg := channels.Message{Kind: channels.KindAnnounce, Text: "the chart", ID: "77", Part: 4, Parts: 4,
		File: &channels.OutFile{Name: "chart.png", MIME: "image/png", Size: int64(len(png)),
			Open: func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(png)), nil }}}
	id, err := a.SendFile(ctx, in.Origin, msg)
	if err != nil {
		t.Fatal(err)
	}
	posted := s.fake.BotMessages(m.ID)
	if len(posted) != 1 || posted[0].ID != id || posted[0].Content != "the chart" || len(posted[0].Attachments) != 1 {
		t.Fatalf("thread %+v: want one message with the file and its caption", posted)
	}
	att := posted[0].Attachments[0]
	if att.Filename != "chart.png" || att.ContentType != "image/png" || string(s.fake.AttachmentData(m.ID, att.ID)) != string(png) {
		t.Errorf("posted attachment %+v", att)
	}
	if id2, err := a.SendFile(ctx, in.Origin, msg); err != nil || id2 != id || len(s.fake.BotMessages(m.ID)) != 1 {
		t.Errorf("re-send of the file part: id %s (first %s) err %v; want the same message", id2, id, err)
	}
	if a.FileLimit() != 10<<20 {
		t.Errorf("FileLimit %d", a.FileLimit())
	}
}

// discordgo waits for a bucket from the X-RateLimit-* headers before a
// request: five parts through a bucket of two per 300 ms all go through
// without one 429.
func TestRateLimitBucketsAreHonoured(t *testing.T) {
	s := newSetup(t)
	a := s.start(t, newRecorder(), nil)
	refused := s.fake.SetBucket("POST", "/channels/"+general+"/messages", 2, 300*time.Millisecond)
	var text strings.Builder
	for i := 0; i < 5; i++ {
		text.WriteString(strings.Repeat("y", 1990) + "\n")
	}
	if err := a.Send(testCtx(t), channels.Origin{Channel: Name, ChatID: general, ChatType: channels.ChatGroup}, channels.Message{Text: text.String()}); err != nil {
		t.Fatalf("send through a bucket: %v", err)
	}
	if n := len(s.fake.BotMessages(general)); n != 5 || refused() != 0 {
		t.Errorf("%d messages, %d refused with 429; want 5 and none (the bucket waited for)", n, refused())
	}
}

// ThreadHistory gives the thread's starter message and the messages before
// the one that addressed the bot, oldest first, with sender names.
func TestThreadHistory(t *testing.T) {
	s := newSetup(t)
	rec := newRecorder()
	a := s.start(t, rec, func(o *Options) { o.ThreadContext = 3 })
	ctx := testCtx(t)
	s.fake.Say(general, bob, "the design doc is out", "")
	root := s.fake.Messages(general)[0]
	// A person opens a thread on it (not the bot).
	s.fake.StartThread(general, root.ID, "doc", bob)
	s.fake.Say(root.ID, alice, "I think section 2 is wrong", "")
	s.fake.Say(root.ID, bob, "which part?", "")
	s.fake.Say(root.ID, alice, "the cache bit", "")
	m := s.fake.Say(root.ID, alice, mention("what do you think?"), "")
	in := rec.next(t)
	if in.Origin.ThreadID != root.ID || in.Origin.MessageID != m.ID {
		t.Fatalf("origin %+v", in.Origin)
	}
	msgs, err := a.ThreadHistory(ctx, in.Origin)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tm := range msgs {
		got = append(got, tm.SenderName+": "+tm.Text)
	}
	if strings.Join(got, "|") != "Alice: I think section 2 is wrong|bob: which part?|Alice: the cache bit" {
		t.Errorf("history %q: want the last 3 before the mention, oldest first", got)
	}
	a.opts.ThreadContext = 10
	msgs, _ = a.ThreadHistory(ctx, in.Origin)
	if len(msgs) != 4 || msgs[0].Text != "the design doc is out" || msgs[0].SenderName != "bob" {
		t.Errorf("history with room: %+v; want the starter message first", msgs)
	}
}

// A catch-up that Discord refuses for a while (a 429, then a 500) keeps
// the channel held: a live message meanwhile waits for the catch-up, which
// is retried after the Retry-After or a backoff, and every message missed
// while Herald was down reaches the sink once, in order, before it.
func TestFailedCatchUpHoldsTheChannelUntilItIsRead(t *testing.T) {
	s := newSetup(t)
	rec := newRecorder()
	a := s.start(t, rec, nil)
	s.fake.Say(general, alice, mention("seen before the restart"), "")
	rec.next(t)
	stop(t, a)

	for _, text := range []string{"missed one", "missed two", "missed three"} {
		s.fake.Say(general, alice, mention(text), "")
	}
	history := "/channels/" + general + "/messages"
	s.fake.RateLimitNext("GET", history, 0.3)
	s.fake.FailNext("GET", history, 500)
	refused := func(status int) func() bool {
		return func() bool {
			for _, r := range s.fake.Requests() {
				if r.Method == "GET" && r.Path == "/api/v10"+history && r.Status == status {
					return true
				}
			}
			return false
		}
	}

	rec2 := newRecorder()
	s.start(t, rec2, nil)
	ctx := testCtx(t)
	if err := s.fake.Wait(ctx, "the catch-up refused with 429", refused(429)); err != nil {
		t.Fatal(err)
	}
	s.fake.Say(general, bob, mention("live while the catch-up waits"), "")
	if err := s.fake.Wait(ctx, "the retried catch-up refused with 500", refused(500)); err != nil {
		t.Fatal(err)
	}
	s.fake.Say(general, bob, mention("live after the 500"), "")

	want := "missed one|missed two|missed three|live while the catch-up waits|live after the 500"
	var texts []string
	for len(texts) < 5 {
		texts = append(texts, rec2.next(t).Text)
	}
	if strings.Join(texts, "|") != want {
		t.Fatalf("after a refused catch-up the sink got %q; want %q (each missed message once, in order, before the live ones)", texts, want)
	}
	s.fake.Say(dm, alice, "marker", "")
	if got := rec2.upTo(t, "marker"); len(got) != 0 {
		t.Errorf("a message reached the sink twice: %+v", got)
	}
}

// An application command is keyed by its interaction id and answered only
// once the gateway took it; one the gateway refuses (its store away) gets
// an ephemeral answer asking to try again, not the command line.
func TestApplicationCommandAnsweredOnlyAfterTheGatewayTookIt(t *testing.T) {
	s := newSetup(t)
	rec := newRecorder()
	answeredEarly := make(chan string, 8)
	rec.fail = func(in channels.Inbound) error {
		if ans := s.fake.InteractionAnswer(in.Origin.MessageID); ans != nil {
			answeredEarly <- in.Text
		}
		if strings.HasPrefix(in.Text, "/stop") {
			return &channels.UnavailableError{RetryAfter: 5 * time.Second, Reason: "store away"}
		}
		return nil
	}
	s.start(t, rec, nil)
	ctx := testCtx(t)
	if err := s.fake.Wait(ctx, "the commands registered", func() bool { return s.fake.Commands() != nil }); err != nil {
		t.Fatal(err)
	}

	i := s.fake.Interact(general, alice, "status", "")
	in := rec.next(t)
	if in.Text != "/status" || in.Origin.MessageID != i.ID {
		t.Errorf("command %q with message id %q; want /status keyed by the interaction id %s", in.Text, in.Origin.MessageID, i.ID)
	}
	if err := s.fake.Wait(ctx, "the answer", func() bool { return s.fake.InteractionAnswer(i.ID) != nil }); err != nil {
		t.Fatal(err)
	}
	if ans := s.fake.InteractionAnswer(i.ID); ans.Type != 4 || ans.Data.Content != "/status" || ans.Data.Flags&64 != 0 {
		t.Errorf("answer %+v; want the command line, visible to all", ans)
	}

	j := s.fake.Interact(dm, alice, "stop", "")
	if err := s.fake.Wait(ctx, "the refusal", func() bool { return s.fake.InteractionAnswer(j.ID) != nil }); err != nil {
		t.Fatal(err)
	}
	if ans := s.fake.InteractionAnswer(j.ID); ans.Data.Flags&64 == 0 || !strings.Contains(ans.Data.Content, "try again") {
		t.Errorf("answer to a command the store refused: %+v; want an ephemeral \"try again\"", ans)
	}
	select {
	case text := <-answeredEarly:
		t.Errorf("%s was answered before the gateway took it", text)
	default:
	}
}

// Discord gives at most 100 messages a request while threadContext allows
// 200: a longer thread is read back page by page, and its starter message
// still heads it.
func TestThreadHistoryPagesPastOneHundred(t *testing.T) {
	s := newSetup(t)
	rec := newRecorder()
	a := s.start(t, rec, func(o *Options) { o.ThreadContext = 150 })
	ctx := testCtx(t)
	root := s.fake.Say(general, bob, "the incident timeline", "")
	s.fake.StartThread(general, root.ID, "timeline", bob)
	for i := 1; i <= 130; i++ {
		s.fake.Say(root.ID, alice, fmt.Sprintf("entry %d", i), "")
	}
	s.fake.Say(root.ID, alice, mention("summarise it"), "")
	in := rec.next(t)
	msgs, err := a.ThreadHistory(ctx, in.Origin)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 131 || msgs[0].Text != "the incident timeline" || msgs[1].Text != "entry 1" || msgs[130].Text != "entry 130" {
		var first, last string
		if len(msgs) > 0 {
			first, last = msgs[0].Text, msgs[len(msgs)-1].Text
		}
		t.Fatalf("history has %d messages (%q … %q); want the starter and all 130 entries, oldest first", len(msgs), first, last)
	}
	var pages int
	for _, r := range s.fake.Requests() {
		if r.Path == "/api/v10/channels/"+root.ID+"/messages" && strings.Contains(r.Query, "before=") {
			pages++
			if q, _ := url.ParseQuery(r.Query); q.Get("limit") != "100" && q.Get("limit") != "50" {
				t.Errorf("history request %q: want 100, then the 50 still wanted", r.Query)
			}
		}
	}
	if pages != 2 {
		t.Errorf("%d history requests, want 2 (100, then 50 of which 30 came)", pages)
	}
}
