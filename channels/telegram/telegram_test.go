package telegram

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/telegram/tgfake"
)

const token = "123456:TEST-token"

// recorder is a Sink that hands inbound messages to the test.
type recorder chan channels.Inbound

func (r recorder) sink(_ context.Context, in channels.Inbound) error { r <- in; return nil }

func (r recorder) next(t *testing.T) channels.Inbound {
	t.Helper()
	select {
	case in := <-r:
		return in
	case <-time.After(10 * time.Second):
		t.Fatal("no inbound message within 10s")
		return channels.Inbound{}
	}
}

// newAdapter returns a started polling adapter talking to a fresh fake.
func newAdapter(t *testing.T, access channels.Access, edit func(*Options)) (*Adapter, *tgfake.Server, recorder) {
	t.Helper()
	fake := tgfake.New(t, token)
	opts := Options{BotToken: token, APIURL: fake.URL(), PollTimeout: time.Second, Access: access}
	if edit != nil {
		edit(&opts)
	}
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	a.minBackoff, a.maxBackoff = 5*time.Millisecond, 20*time.Millisecond
	rec := make(recorder, 16)
	if err := a.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return a, fake, rec
}

func TestTopicRoundTrip(t *testing.T) {
	access := channels.Access{GroupPolicy: channels.GroupOpen}
	a, fake, rec := newAdapter(t, access, nil)

	msgID := fake.SendText(-1001234, "supergroup", 42, 555, "@herald_bot summarise the thread")
	in := rec.next(t)
	want := channels.Origin{Channel: "telegram", ChatID: "-1001234", ChatType: "group", ThreadID: "42", SenderID: "555", MessageID: fmt.Sprint(msgID)}
	if in.Origin != want {
		t.Errorf("origin = %+v, want %+v", in.Origin, want)
	}
	if in.Text != "summarise the thread" || !in.Mentioned {
		t.Errorf("text %q mentioned %v, want the mention stripped and mentioned", in.Text, in.Mentioned)
	}

	if err := a.Send(context.Background(), in.Origin, channels.Message{Kind: channels.KindReply, Text: "Here *is* the _summary_ [x]("}); err != nil {
		t.Fatal(err)
	}
	sent := fake.WaitSent(1, 5*time.Second)
	got := sent[0]
	if got.ChatID != -1001234 || got.ThreadID != 42 || got.Text != "Here *is* the _summary_ [x](" || got.ParseMode != "" {
		t.Errorf("sent %+v, want chat -1001234 topic 42, the text verbatim, no parse mode", got)
	}
}

func TestInboundDecoding(t *testing.T) {
	access := channels.Access{
		AllowFrom:   []string{"555", "556"},
		GroupPolicy: channels.GroupAllowlist,
		Groups: map[string]channels.GroupRule{
			"-100": {RequireMention: true},
			"-200": {RequireMention: false},
		},
	}
	a, fake, rec := newAdapter(t, access, nil)

	// A message of the bot in group -100, and one of a user, to reply to.
	origin := channels.Origin{Channel: Name, ChatID: "-100", ChatType: channels.ChatGroup}
	if err := a.Send(context.Background(), origin, channels.Message{Text: "I am the bot"}); err != nil {
		t.Fatal(err)
	}
	botMsg := fake.WaitSent(1, 5*time.Second)[0].MessageID
	userMsg := fake.SendText(-100, "supergroup", 0, 556, "@herald_bot first")
	rec.next(t)

	type want struct {
		chatType, thread, text string
		mentioned              bool
	}
	tests := []struct {
		name string
		in   tgfake.In
		want *want // nil: dropped
	}{
		{"private chat", tgfake.In{ChatID: 555, ChatType: "private", FromID: 555, Text: "hello *there*"},
			&want{"dm", "", "hello *there*", false}},
		{"dm from a sender not in allowFrom", tgfake.In{ChatID: 999, ChatType: "private", FromID: 999, Text: "hi"}, nil},
		{"group without mention", tgfake.In{ChatID: -100, ChatType: "supergroup", FromID: 555, Text: "just chatting"}, nil},
		{"group @mention", tgfake.In{ChatID: -100, ChatType: "group", FromID: 555, Text: "@herald_bot what is up"},
			&want{"group", "", "what is up", true}},
		{"mention mid-text, any case", tgfake.In{ChatID: -100, ChatType: "supergroup", FromID: 555, Text: "hey @Herald_Bot, check this"},
			&want{"group", "", "hey check this", true}},
		{"mention of a longer name is not ours", tgfake.In{ChatID: -100, ChatType: "supergroup", FromID: 555, Text: "ask @herald_bot_two"}, nil},
		{"reply to the bot", tgfake.In{ChatID: -100, ChatType: "supergroup", FromID: 555, Text: "and then?", ReplyTo: botMsg},
			&want{"group", "", "and then?", true}},
		{"reply to a person is not a mention", tgfake.In{ChatID: -100, ChatType: "supergroup", FromID: 555, Text: "agreed", ReplyTo: userMsg}, nil},
		{"reply outside a topic has no thread", tgfake.In{ChatID: -100, ChatType: "supergroup", FromID: 555, Text: "@herald_bot agreed", ReplyTo: userMsg},
			&want{"group", "", "agreed", true}},
		{"command addressed to the bot", tgfake.In{ChatID: -100, ChatType: "supergroup", FromID: 555, Text: "/subagents@herald_bot list"},
			&want{"group", "", "/subagents list", true}},
		{"bare command in a group", tgfake.In{ChatID: -100, ChatType: "supergroup", FromID: 555, Text: "/stop"},
			&want{"group", "", "/stop", true}},
		{"command for another bot", tgfake.In{ChatID: -100, ChatType: "supergroup", FromID: 555, Text: "/stop@other_bot"}, nil},
		{"command in a topic", tgfake.In{ChatID: -100, ChatType: "supergroup", ThreadID: 7, FromID: 555, Text: "/subagents@herald_bot info 1"},
			&want{"group", "7", "/subagents info 1", true}},
		{"group that needs no mention", tgfake.In{ChatID: -200, ChatType: "supergroup", FromID: 556, Text: "anyone?"},
			&want{"group", "", "anyone?", false}},
		{"group sender not allowed", tgfake.In{ChatID: -200, ChatType: "supergroup", FromID: 999, Text: "anyone?"}, nil},
		{"group not in the allowlist", tgfake.In{ChatID: -300, ChatType: "supergroup", FromID: 555, Text: "@herald_bot hi"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake.Queue(tt.in)
			// A DM sentinel after the case: whatever arrives first tells
			// whether the case was delivered or dropped.
			fake.SendText(556, "private", 0, 556, "sentinel")
			in := rec.next(t)
			if tt.want == nil {
				if in.Text != "sentinel" {
					t.Fatalf("want the message dropped, got %+v", in)
				}
				return
			}
			if in.Text == "sentinel" {
				t.Fatal("message was dropped, want it delivered")
			}
			rec.next(t) // the sentinel
			got := want{in.Origin.ChatType, in.Origin.ThreadID, in.Text, in.Mentioned}
			if got != *tt.want {
				t.Errorf("got %+v, want %+v", got, *tt.want)
			}
			if in.Origin.ChatID != fmt.Sprint(tt.in.ChatID) || in.Origin.SenderID != fmt.Sprint(tt.in.FromID) {
				t.Errorf("origin %+v does not name chat %d and sender %d", in.Origin, tt.in.ChatID, tt.in.FromID)
			}
		})
	}
}

// TestBoundAskedOnlyWhereItDecides: the store's binding lookup runs for an
// un-mentioned topic message only where a mention would admit it; a bound
// topic is then taken without a mention, an unbound one dropped.
func TestBoundAskedOnlyWhereItDecides(t *testing.T) {
	access := channels.Access{AllowFrom: []string{"555"}, Groups: map[string]channels.GroupRule{
		"-100": {RequireMention: true}, "-200": {}}}
	var mu sync.Mutex
	var asked []string
	bound := func(_ context.Context, o channels.Origin) bool {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, o.ChatID+"/"+o.ThreadID)
		return o.ThreadID == "7"
	}
	_, fake, rec := newAdapter(t, access, func(o *Options) { o.Bound = bound })
	fake.Queue(tgfake.In{ChatID: -100, ChatType: "supergroup", ThreadID: 7, FromID: 999, Text: "stranger in a bound topic"})
	fake.Queue(tgfake.In{ChatID: -300, ChatType: "supergroup", ThreadID: 7, FromID: 555, Text: "unlisted group"})
	fake.Queue(tgfake.In{ChatID: -100, ChatType: "supergroup", ThreadID: 8, FromID: 555, Text: "unbound topic"})
	fake.Queue(tgfake.In{ChatID: -200, ChatType: "supergroup", ThreadID: 8, FromID: 555, Text: "no mention needed"})
	fake.Queue(tgfake.In{ChatID: -100, ChatType: "supergroup", FromID: 555, Text: "no topic"})
	fake.Queue(tgfake.In{ChatID: -100, ChatType: "supergroup", ThreadID: 7, FromID: 555, Text: "bound topic"})
	for _, want := range []string{"no mention needed", "bound topic"} {
		if got := rec.next(t); got.Text != want || got.Mentioned != (want == "bound topic") {
			t.Fatalf("next inbound = %q (mentioned %v), want %q", got.Text, got.Mentioned, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"-100/8", "-100/7"}; !slices.Equal(asked, want) {
		t.Errorf("binding asked for %q, want only %q", asked, want)
	}
}

func TestWebhook(t *testing.T) {
	fake := tgfake.New(t, token)
	a, err := New(Options{
		BotToken: token, APIURL: fake.URL(),
		WebhookURL: "https://herald.example.org/telegram/webhook", WebhookSecret: "s3cret",
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := make(recorder, 4)
	if err := a.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())
	if url, secret := fake.Webhook(); url != "https://herald.example.org/telegram/webhook" || secret != "s3cret" {
		t.Errorf("setWebhook got url %q secret %q", url, secret)
	}
	mux := http.NewServeMux()
	for pattern, h := range a.Routes() {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	hook := srv.URL + "/telegram/webhook"

	for _, secret := range []string{"", "wrong", "s3cret-but-longer"} {
		if status := fake.PostUpdate(hook, secret, tgfake.In{ChatID: 5, FromID: 5, Text: "forged"}); status != http.StatusUnauthorized {
			t.Errorf("secret %q: status %d, want 401", secret, status)
		}
	}
	if status := fake.PostUpdate(hook, "s3cret", tgfake.In{ChatID: 5, FromID: 5, Text: "real"}); status != http.StatusOK {
		t.Fatalf("good secret: status %d, want 200", status)
	}
	if in := rec.next(t); in.Text != "real" || in.Origin.ChatType != "dm" {
		t.Errorf("got %+v, want the real DM", in)
	}

	// Telegram redelivers an update it had no answer for: handle it once.
	raw := []byte(`{"update_id":9,"message":{"message_id":1,"from":{"id":5,"is_bot":false,"first_name":"A"},"chat":{"id":5,"type":"private"},"date":1,"text":"once"}}`)
	for range 2 {
		if status, err := tgfake.PostWebhook(context.Background(), hook, "s3cret", raw); err != nil || status != http.StatusOK {
			t.Fatalf("post: %d %v", status, err)
		}
	}
	if in := rec.next(t); in.Text != "once" {
		t.Errorf("got %q", in.Text)
	}
	select {
	case in := <-rec:
		t.Errorf("redelivered update handled twice: %+v", in)
	default:
	}
}

func TestWebhookNeedsValidSecret(t *testing.T) {
	for _, secret := range []string{"", "has space", strings.Repeat("x", 257)} {
		_, err := New(Options{BotToken: token, WebhookURL: "https://herald.example.org/telegram/webhook", WebhookSecret: secret})
		if err == nil || !strings.Contains(err.Error(), "webhookSecret") {
			t.Errorf("secret %q: err = %v, want a webhookSecret error", secret, err)
		}
	}
}

func TestSendSplitsWithStatsLast(t *testing.T) {
	a, fake, _ := newAdapter(t, channels.Access{}, nil)
	var b strings.Builder
	for i := range 250 {
		fmt.Fprintf(&b, "line %03d %s\n", i, strings.Repeat("ab", 16))
	}
	b.WriteString("Stats: runtime 3s • tokens 1.2k")
	text := b.String()
	to := channels.Origin{Channel: Name, ChatID: "77", ChatType: channels.ChatDM}
	if err := a.Send(context.Background(), to, channels.Message{Kind: channels.KindAnnounce, Text: text, RunID: "r1"}); err != nil {
		t.Fatal(err)
	}
	sent := fake.Sent()
	if len(sent) != 3 {
		t.Fatalf("sent %d parts, want 3", len(sent))
	}
	var parts []string
	for i, s := range sent {
		if n := len([]rune(s.Text)); n > 4096 {
			t.Errorf("part %d has %d characters", i, n)
		}
		parts = append(parts, s.Text)
	}
	if !strings.HasSuffix(parts[2], "\nStats: runtime 3s • tokens 1.2k") {
		t.Errorf("stats line is not last: ...%q", parts[2][len(parts[2])-60:])
	}
	if strings.Join(parts, "\n") != text {
		t.Error("parts joined do not give back the text, in order")
	}
}

func TestSendErrors(t *testing.T) {
	tests := []struct {
		name       string
		fail       func(*tgfake.Server)
		retryAfter time.Duration
		permanent  bool
	}{
		{"429 retry_after", func(f *tgfake.Server) { f.FailNext(1, 429, 5) }, 5 * time.Second, false},
		{"500 is transient", func(f *tgfake.Server) { f.FailNext(1, 500, 0) }, 0, false},
		{"chat not found", func(f *tgfake.Server) { f.FailChat(77, 400, "Bad Request: chat not found") }, 0, true},
		{"bot blocked", func(f *tgfake.Server) { f.FailChat(77, 403, "Forbidden: bot was blocked by the user") }, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, fake, _ := newAdapter(t, channels.Access{}, nil)
			tt.fail(fake)
			to := channels.Origin{Channel: Name, ChatID: "77", ChatType: channels.ChatDM}
			err := a.Send(context.Background(), to, channels.Message{Text: "hello"})
			if err == nil {
				t.Fatal("send succeeded, want an error")
			}
			var ra *channels.RetryAfterError
			if gotRA := errors.As(err, &ra); gotRA != (tt.retryAfter > 0) || gotRA && ra.After != tt.retryAfter {
				t.Errorf("err %v: RetryAfterError %v (%+v), want after %s", err, gotRA, ra, tt.retryAfter)
			}
			if got := errors.Is(err, channels.ErrPermanent); got != tt.permanent {
				t.Errorf("err %v: permanent %v, want %v", err, got, tt.permanent)
			}
			if strings.Contains(err.Error(), token) {
				t.Errorf("error leaks the bot token: %v", err)
			}
			if !tt.permanent {
				if err := a.Send(context.Background(), to, channels.Message{Text: "hello"}); err != nil {
					t.Errorf("retry after a transient error: %v", err)
				}
				if n := len(fake.Sent()); n != 1 {
					t.Errorf("%d messages posted after the retry, want 1", n)
				}
			}
		})
	}
}

// SendPart posts one part and returns its message_id, so the outbox can
// record it; a 429 comes back as a RetryAfterError.
func TestSendPartReturnsMessageID(t *testing.T) {
	a, fake, _ := newAdapter(t, channels.Access{}, nil)
	to := channels.Origin{Channel: Name, ChatID: "-100", ChatType: channels.ChatGroup, ThreadID: "9"}
	id, err := a.SendPart(context.Background(), to, channels.Message{Kind: channels.KindReply, Text: "part one", Part: 1, Parts: 2})
	if err != nil || id == "" {
		t.Fatalf("SendPart = %q, %v", id, err)
	}
	sent := fake.Sent()
	if len(sent) != 1 || strconv.Itoa(sent[0].MessageID) != id || sent[0].ThreadID != 9 {
		t.Fatalf("sent %+v, want one message in topic 9 with id %s", sent, id)
	}
	fake.FailNext(1, 429, 2)
	_, err = a.SendPart(context.Background(), to, channels.Message{Kind: channels.KindReply, Text: "part two", Part: 2, Parts: 2})
	var ra *channels.RetryAfterError
	if !errors.As(err, &ra) || ra.After != 2*time.Second || !strings.Contains(err.Error(), "part 2/2") {
		t.Fatalf("SendPart during a 429 = %v, want retry after 2s naming the part", err)
	}
	if a.PartLimit() != Limit {
		t.Errorf("PartLimit = %d", a.PartLimit())
	}
}

func TestStartBadToken(t *testing.T) {
	fake := tgfake.New(t, token)
	a, err := New(Options{BotToken: "999:WRONG", APIURL: fake.URL()})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Start(context.Background(), func(context.Context, channels.Inbound) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "getMe") || !strings.Contains(err.Error(), "Unauthorized") {
		t.Errorf("err = %v, want a getMe Unauthorized error", err)
	}

	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	a, _ = New(Options{BotToken: token, APIURL: down.URL})
	err = a.Start(context.Background(), func(context.Context, channels.Inbound) error { return nil })
	if err == nil || strings.Contains(err.Error(), token) {
		t.Errorf("err = %v, want an error that does not show the token", err)
	}
}

func TestHealthFollowsPolling(t *testing.T) {
	a, fake, rec := newAdapter(t, channels.Access{}, nil)
	if err := a.Health(); err != nil {
		t.Fatalf("healthy adapter: %v", err)
	}
	fake.FailPolls(-1, 502)
	waitFor(t, "health to report failing polls", func() bool { return a.Health() != nil })
	if err := a.Health(); !strings.Contains(err.Error(), "getUpdates") {
		t.Errorf("health = %v, want it to name getUpdates", err)
	}
	fake.FailPolls(0, 0)
	fake.SendText(1, "private", 0, 1, "back")
	if in := rec.next(t); in.Text != "back" {
		t.Errorf("got %q after recovery", in.Text)
	}
	waitFor(t, "health to recover", func() bool { return a.Health() == nil })
}

func TestStopEndsPollLoop(t *testing.T) {
	fake := tgfake.New(t, token)
	hc := &http.Client{Transport: &http.Transport{}}
	before := runtime.NumGoroutine()
	a, err := New(Options{BotToken: token, APIURL: fake.URL(), PollTimeout: 30 * time.Second, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background(), func(context.Context, channels.Inbound) error { return nil }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first long poll", func() bool { return fake.Polls() > 0 })
	// 20 s: well under the 30 s poll a Stop that did not cut it would wait
	// for, and room for a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatalf("stop with a 30s long poll in flight: %v", err)
	}
	if a.Health() == nil {
		t.Error("stopped adapter reports healthy")
	}
	hc.CloseIdleConnections()
	waitFor(t, "goroutines to settle", func() bool { return runtime.NumGoroutine() <= before })
}

func TestStartContextCancelEndsPollLoop(t *testing.T) {
	fake := tgfake.New(t, token)
	a, err := New(Options{BotToken: token, APIURL: fake.URL(), PollTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.Start(ctx, func(context.Context, channels.Inbound) error { return nil }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first long poll", func() bool { return fake.Polls() > 0 })
	cancel()
	select {
	case <-a.done:
	case <-time.After(20 * time.Second): // under the 30 s poll it would otherwise wait for
		t.Fatal("poll loop still running 20s after its context was cancelled")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type memOffsets struct {
	mu sync.Mutex
	v  int
}

func (m *memOffsets) LoadOffset(context.Context) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.v, nil
}

func (m *memOffsets) SaveOffset(_ context.Context, v int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.v = v
	return nil
}

// With a saved offset the adapter continues after the last update it
// handed over before a restart, and saves the offset as it goes.
func TestPollingContinuesFromSavedOffset(t *testing.T) {
	fake := tgfake.New(t, token)
	fake.SendText(42, "private", 0, 42, "handled before the restart") // update 100000
	fake.SendText(42, "private", 0, 42, "new since")                  // update 100001
	offsets := &memOffsets{v: 100001}
	a, err := New(Options{BotToken: token, APIURL: fake.URL(), PollTimeout: time.Second, Offsets: offsets})
	if err != nil {
		t.Fatal(err)
	}
	rec := make(recorder, 16)
	if err := a.Start(context.Background(), rec.sink); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Stop(ctx)
	}()
	if got := rec.next(t); got.Text != "new since" {
		t.Fatalf("first message after the restart: %q, want the one after the saved offset", got.Text)
	}
	deadline := time.Now().Add(20 * time.Second)
	for v, _ := offsets.LoadOffset(context.Background()); v != 100002; v, _ = offsets.LoadOffset(context.Background()) {
		if time.Now().After(deadline) {
			t.Fatalf("saved offset %d, want 100002", v)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An update the gateway could not store (its store is away) is not
// confirmed: polling gets it again, in order with the rest of its batch,
// and the webhook answers 503 so that Telegram delivers it again.
func TestUpdateNotTakenIsDeliveredAgain(t *testing.T) {
	fake := tgfake.New(t, token)
	fake.SendText(42, "private", 0, 42, "first")
	fake.SendText(42, "private", 0, 42, "second")
	a, err := New(Options{BotToken: token, APIURL: fake.URL(), PollTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a.minBackoff, a.maxBackoff = 5*time.Millisecond, 20*time.Millisecond
	var mu sync.Mutex
	refusals := 3
	var got []string
	sink := func(_ context.Context, in channels.Inbound) error {
		mu.Lock()
		defer mu.Unlock()
		if refusals > 0 {
			refusals--
			return &channels.UnavailableError{RetryAfter: time.Second, Reason: "store away"}
		}
		got = append(got, in.Text)
		return nil
	}
	if err := a.Start(context.Background(), sink); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Stop(ctx)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, ",") != "first,second" {
		t.Errorf("taken %q after 3 refusals; want first,second once each, in order", got)
	}
}
