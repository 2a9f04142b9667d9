package slack_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/slack"
	"github.com/heraldhq/herald/channels/slack/slackfake"
)

const (
	wait   = 10 * time.Second
	secret = "8f742231b10e8888abcd99yyyzzz85a5"
	alice  = slackfake.UserID
	bob    = "U0BOB"
)

var openAccess = channels.Access{GroupPolicy: channels.GroupOpen}

// inbox is a Sink that records what the adapter delivers.
type inbox chan channels.Inbound

func (in inbox) sink(_ context.Context, m channels.Inbound) error { in <- m; return nil }

func (in inbox) next(t *testing.T) channels.Inbound {
	t.Helper()
	select {
	case m := <-in:
		return m
	case <-time.After(wait):
		t.Fatalf("no inbound message within %s", wait)
		return channels.Inbound{}
	}
}

func startSocket(t *testing.T, fake *slackfake.Server, opts slack.Options) (*slack.Adapter, inbox) {
	t.Helper()
	opts.BotToken, opts.AppToken, opts.APIURL = slackfake.BotToken, slackfake.AppToken, fake.URL()
	a, err := slack.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	in := make(inbox, 100)
	if err := a.Start(t.Context(), in.sink); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	if !fake.WaitConnected(wait) {
		t.Fatal("socket mode client never connected")
	}
	return a, in
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never happened: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSocketMentionInThreadRoundTrip(t *testing.T) {
	fake := slackfake.New(t)
	a, in := startSocket(t, fake, slack.Options{Access: openAccess})

	const thread = "1700000000.000100"
	ts := fake.SendMention("C0GENERAL", alice, "summarise the thread", thread)
	got := in.next(t)
	want := channels.Origin{Channel: "slack", Account: slackfake.TeamID, ChatID: "C0GENERAL", ChatType: channels.ChatGroup,
		ThreadID: thread, SenderID: alice, MessageID: ts}
	if got.Origin != want {
		t.Errorf("origin = %+v, want %+v", got.Origin, want)
	}
	if got.Text != "summarise the thread" || !got.Mentioned {
		t.Errorf("text %q mentioned %v, want the text without the mention and mentioned", got.Text, got.Mentioned)
	}
	// SendMention sends app_mention and message for the same ts: both are
	// acked, one Inbound is delivered.
	fake.WaitAcks(2, wait)

	if err := a.Send(t.Context(), got.Origin, channels.Message{Kind: channels.KindReply, Text: "here it is"}); err != nil {
		t.Fatalf("send: %v", err)
	}
	posts := fake.WaitPosts(1, wait)
	if p := posts[0]; p.Channel != "C0GENERAL" || p.ThreadTS != thread || p.Text != "here it is" {
		t.Errorf("posted %+v, want the reply in thread %s of C0GENERAL", p, thread)
	}

	// A plain reply in an unknown thread is not for the bot; one in the
	// thread the bot replied in is.
	fake.SendMessage("C0GENERAL", alice, "unrelated chatter", "1600000000.000001")
	fake.SendMessage("C0GENERAL", bob, "and one more thing", thread)
	got = in.next(t)
	if got.Text != "and one more thing" || !got.Mentioned || got.Origin.ThreadID != thread || got.Origin.SenderID != bob {
		t.Errorf("thread follow-up = %+v, want bob's message in the bot's thread, mentioned", got)
	}
}

func TestSocketSlashCommand(t *testing.T) {
	fake := slackfake.New(t)
	_, in := startSocket(t, fake, slack.Options{Access: openAccess})

	id := fake.SendSlashCommand("C0GENERAL", alice, "/subagents", "list")
	got := in.next(t)
	if got.Text != "/subagents list" || !got.Mentioned {
		t.Errorf("inbound %q mentioned %v, want \"/subagents list\" mentioned", got.Text, got.Mentioned)
	}
	if got.Origin.ChatID != "C0GENERAL" || got.Origin.ChatType != channels.ChatGroup || got.Origin.SenderID != alice || got.Origin.Account != slackfake.TeamID {
		t.Errorf("origin = %+v", got.Origin)
	}
	if !fake.WaitAck(id, wait) {
		t.Errorf("slash command envelope %s never acked", id)
	}
}

func TestReplyToMode(t *testing.T) {
	for _, tc := range []struct {
		mode         string
		threadTS     string
		wantOwnTS    bool
		wantThreadID string
	}{
		{mode: "off"},
		{mode: "first", wantOwnTS: true},
		{mode: "all", wantOwnTS: true},
		{mode: "", wantOwnTS: true}, // default all
		{mode: "off", threadTS: "1600000000.000009", wantThreadID: "1600000000.000009"},
		{mode: "all", threadTS: "1600000000.000009", wantThreadID: "1600000000.000009"},
	} {
		t.Run(tc.mode+"/thread="+tc.threadTS, func(t *testing.T) {
			fake := slackfake.New(t)
			_, in := startSocket(t, fake, slack.Options{Access: openAccess, ReplyToMode: tc.mode})
			ts := fake.SendMention("C0GENERAL", alice, "hi", tc.threadTS)
			got := in.next(t)
			want := tc.wantThreadID
			if tc.wantOwnTS {
				want = ts
			}
			if got.Origin.ThreadID != want {
				t.Errorf("ThreadID = %q, want %q (message ts %s)", got.Origin.ThreadID, want, ts)
			}
		})
	}
}

func TestDMAndChannelChatType(t *testing.T) {
	fake := slackfake.New(t)
	_, in := startSocket(t, fake, slack.Options{Access: openAccess})

	ts := fake.SendDM("D0ALICE", alice, "hello bot", "")
	got := in.next(t)
	want := channels.Origin{Channel: "slack", Account: slackfake.TeamID, ChatID: "D0ALICE", ChatType: channels.ChatDM, SenderID: alice, MessageID: ts}
	if got.Origin != want || !got.Mentioned || got.Text != "hello bot" {
		t.Errorf("DM = %+v, want origin %+v, mentioned, text as sent (a top-level DM starts no thread)", got, want)
	}

	fake.SendMention("C0GENERAL", alice, "hello channel", "")
	if got := in.next(t); got.Origin.ChatType != channels.ChatGroup {
		t.Errorf("channel mention ChatType = %q, want group", got.Origin.ChatType)
	}
}

func TestAccess(t *testing.T) {
	fake := slackfake.New(t)
	_, in := startSocket(t, fake, slack.Options{Access: channels.Access{
		AllowFrom: []string{alice},
		Groups:    map[string]channels.GroupRule{"C0TEAM": {RequireMention: true}},
	}})

	// Dropped: a stranger's DM, an unlisted channel, an unmentioned message
	// in a listed channel, a bot, the bot itself, an edit.
	fake.SendDM("D0BOB", bob, "let me in", "")
	fake.SendMention("C0OTHER", alice, "unlisted channel", "")
	fake.SendMessage("C0TEAM", alice, "just chatting", "")
	bot := slackfake.MessageEvent("im", "D0ALICE", "", "from a bot", fake.NextTS(), "")
	bot["bot_id"] = "B0OTHER"
	fake.SendEvent(bot)
	fake.SendEvent(slackfake.MessageEvent("im", "D0ALICE", slackfake.BotUserID, "my own echo", fake.NextTS(), ""))
	edit := slackfake.MessageEvent("im", "D0ALICE", alice, "edited", fake.NextTS(), "")
	edit["subtype"] = "message_changed"
	fake.SendEvent(edit)
	// Admitted, in order: alice's DM, alice's mention in the listed channel.
	fake.SendDM("D0ALICE", alice, "first allowed", "")
	fake.SendMention("C0TEAM", alice, "second allowed", "")

	for _, want := range []string{"first allowed", "second allowed"} {
		if got := in.next(t); got.Text != want {
			t.Fatalf("next inbound = %q (from %s in %s), want %q", got.Text, got.Origin.SenderID, got.Origin.ChatID, want)
		}
	}
}

// TestBoundAskedOnlyWhereItDecides: the store's binding lookup runs for an
// un-mentioned thread message only where a mention would admit it (a listed
// channel that needs one, an allowed sender); a bound thread is then taken
// without a mention, an unbound one dropped.
func TestBoundAskedOnlyWhereItDecides(t *testing.T) {
	fake := slackfake.New(t)
	var mu sync.Mutex
	var asked []string
	bound := func(_ context.Context, o channels.Origin) bool {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, o.ChatID+"/"+o.ThreadID)
		return o.ThreadID == "1700000000.000001"
	}
	_, in := startSocket(t, fake, slack.Options{Bound: bound, Access: channels.Access{
		AllowFrom: []string{alice},
		Groups:    map[string]channels.GroupRule{"C0TEAM": {RequireMention: true}, "C0OPEN": {}},
	}})
	const boundTS, otherTS = "1700000000.000001", "1700000000.000002"
	fake.SendMessage("C0TEAM", bob, "stranger in a bound thread", boundTS)
	fake.SendMessage("C0OTHER", alice, "unlisted channel", boundTS)
	fake.SendMessage("C0TEAM", alice, "unbound thread", otherTS)
	fake.SendMessage("C0OPEN", alice, "no mention needed", otherTS)
	fake.SendMessage("C0TEAM", alice, "bound thread", boundTS)
	for _, want := range []string{"no mention needed", "bound thread"} {
		if got := in.next(t); got.Text != want {
			t.Fatalf("next inbound = %q, want %q", got.Text, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"C0TEAM/" + otherTS, "C0TEAM/" + boundTS}; !slices.Equal(asked, want) {
		t.Errorf("binding asked for %q, want only %q", asked, want)
	}
}

// httpAdapter starts an http-mode adapter with its routes on a test server.
func httpAdapter(t *testing.T, fake *slackfake.Server, now func() time.Time) (*httptest.Server, inbox) {
	t.Helper()
	a, err := slack.New(slack.Options{Mode: "http", BotToken: slackfake.BotToken, SigningSecret: secret,
		APIURL: fake.URL(), Access: openAccess, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for pattern, h := range a.Routes() {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	in := make(inbox, 100)
	if err := a.Start(t.Context(), in.sink); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = a.Stop(context.Background()) })
	if err := a.Health(); err != nil {
		t.Errorf("health after start in http mode: %v", err)
	}
	return srv, in
}

func TestHTTPEvents(t *testing.T) {
	fake := slackfake.New(t)
	srv, in := httpAdapter(t, fake, nil)
	events := srv.URL + "/slack/events"
	mention := slackfake.EventCallback(slackfake.MentionEvent("C0GENERAL", alice, "<@"+slackfake.BotUserID+"> status please", "1700000001.000200", ""))

	do := func(req *http.Request) (int, string) {
		t.Helper()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	t.Run("bad signature", func(t *testing.T) {
		req, _ := slackfake.NewSignedRequest(events, "not-the-secret", "application/json", mention, time.Now())
		if code, _ := do(req); code != http.StatusUnauthorized {
			t.Errorf("status = %d, want 401", code)
		}
	})
	t.Run("stale timestamp", func(t *testing.T) {
		req, _ := slackfake.NewSignedRequest(events, secret, "application/json", mention, time.Now().Add(-6*time.Minute))
		if code, _ := do(req); code != http.StatusUnauthorized {
			t.Errorf("status = %d, want 401", code)
		}
	})
	t.Run("url verification", func(t *testing.T) {
		req, _ := slackfake.NewSignedRequest(events, secret, "application/json", slackfake.URLVerification("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"), time.Now())
		if code, body := do(req); code != http.StatusOK || body != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" {
			t.Errorf("got %d %q, want 200 and the challenge", code, body)
		}
	})
	t.Run("valid mention", func(t *testing.T) {
		resp, err := slackfake.PostEvent(events, secret, mention)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status = %d, want 200", resp.StatusCode)
		}
		got := in.next(t)
		want := channels.Origin{Channel: "slack", Account: slackfake.TeamID, ChatID: "C0GENERAL", ChatType: channels.ChatGroup,
			ThreadID: "1700000001.000200", SenderID: alice, MessageID: "1700000001.000200"}
		if got.Origin != want || got.Text != "status please" || !got.Mentioned {
			t.Errorf("inbound = %+v, want origin %+v and text \"status please\"", got, want)
		}
	})
	t.Run("slash command", func(t *testing.T) {
		resp, err := slackfake.PostSlashCommand(srv.URL+"/slack/commands", secret, slackfake.SlashCommandForm("D0ALICE", alice, "/subagents", "info 1"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status = %d, want 200", resp.StatusCode)
		}
		got := in.next(t)
		if got.Text != "/subagents info 1" || got.Origin.ChatType != channels.ChatDM || !got.Mentioned {
			t.Errorf("inbound = %+v, want \"/subagents info 1\" from a DM", got)
		}
	})
	t.Run("unsigned slash command", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/slack/commands", strings.NewReader(string(slackfake.SlashCommandForm("D0ALICE", alice, "/stop", ""))))
		if code, _ := do(req); code != http.StatusUnauthorized {
			t.Errorf("status = %d, want 401", code)
		}
	})
}

// sendAdapter is a started socket-mode adapter for send tests.
func sendAdapter(t *testing.T) (*slack.Adapter, *slackfake.Server) {
	fake := slackfake.New(t)
	a, _ := startSocket(t, fake, slack.Options{Access: openAccess})
	return a, fake
}

var thread = channels.Origin{Channel: "slack", Account: slackfake.TeamID, ChatID: "C0GENERAL", ChatType: channels.ChatGroup, ThreadID: "1700000000.000100"}

// longText is about 9000 characters in 100-character lines, with a stats line.
func longText() string {
	var b strings.Builder
	for i := range 89 {
		b.WriteString(strings.Repeat(string(rune('a'+i%26)), 99) + "\n")
	}
	b.WriteString("Stats: runtime 3m12s • tokens 12.4k (in 9.1k / out 3.3k)")
	return b.String()
}

func TestSendSplitsInOrder(t *testing.T) {
	a, fake := sendAdapter(t)
	text := longText()
	if err := a.Send(t.Context(), thread, channels.Message{Kind: channels.KindReply, Text: text}); err != nil {
		t.Fatal(err)
	}
	posts := fake.Posted()
	if len(posts) != 3 {
		t.Fatalf("posted %d parts of a %d-char message, want 3", len(posts), len(text))
	}
	var parts []string
	for i, p := range posts {
		if n := len([]rune(p.Text)); n > slack.Limit {
			t.Errorf("part %d has %d chars, over the Slack limit", i, n)
		}
		if p.ThreadTS != thread.ThreadID || p.Channel != thread.ChatID {
			t.Errorf("part %d went to %s/%s", i, p.Channel, p.ThreadTS)
		}
		parts = append(parts, p.Text)
	}
	if !strings.HasSuffix(posts[2].Text, "\nStats: runtime 3m12s • tokens 12.4k (in 9.1k / out 3.3k)") {
		t.Errorf("stats line is not at the end of the last part")
	}
	if strings.Join(parts, "\n") != text {
		t.Errorf("parts joined do not give back the message in order")
	}
}

func TestSendErrors(t *testing.T) {
	t.Run("429 long wait", func(t *testing.T) {
		a, fake := sendAdapter(t)
		fake.FailNext(1, http.StatusTooManyRequests, "30")
		err := a.Send(t.Context(), thread, channels.Message{Text: "hello"})
		var ra *channels.RetryAfterError
		if !errors.As(err, &ra) || ra.After != 30*time.Second {
			t.Fatalf("err = %v, want a RetryAfterError of 30s", err)
		}
		if len(fake.Posted()) != 0 || fake.PostCalls() != 1 {
			t.Errorf("posted %d after %d calls; a long rate limit goes back to the caller", len(fake.Posted()), fake.PostCalls())
		}
	})
	t.Run("429 short wait retried once", func(t *testing.T) {
		a, fake := sendAdapter(t)
		fake.FailNext(1, http.StatusTooManyRequests, "1")
		if err := a.Send(t.Context(), thread, channels.Message{Text: "hello"}); err != nil {
			t.Fatalf("send after a 1s rate limit: %v", err)
		}
		if posts := fake.Posted(); len(posts) != 1 || posts[0].Text != "hello" {
			t.Errorf("posted %+v, want hello once", posts)
		}
	})
	t.Run("500 transient", func(t *testing.T) {
		a, fake := sendAdapter(t)
		fake.FailNext(1, http.StatusInternalServerError, "")
		err := a.Send(t.Context(), thread, channels.Message{Text: "hello"})
		var ra *channels.RetryAfterError
		if err == nil || errors.Is(err, channels.ErrPermanent) || errors.As(err, &ra) {
			t.Fatalf("err = %v, want a plain transient error", err)
		}
		if err := a.Send(t.Context(), thread, channels.Message{Text: "hello"}); err != nil {
			t.Fatalf("retry after a 500: %v", err)
		}
	})
	for _, code := range []string{"channel_not_found", "not_in_channel", "is_archived", "invalid_auth", "msg_too_long"} {
		t.Run(code, func(t *testing.T) {
			a, fake := sendAdapter(t)
			fake.FailNextError(1, code)
			err := a.Send(t.Context(), thread, channels.Message{Text: "hello"})
			if !errors.Is(err, channels.ErrPermanent) || !strings.Contains(err.Error(), code) {
				t.Fatalf("err = %v, want ErrPermanent naming %s", err, code)
			}
		})
	}
}

// Parts from the outbox carry metadata naming the outbox item and part,
// and FindPart finds a part already posted (in a thread or at top level),
// so a post whose outcome was unknown after a crash is not posted twice.
func TestSendPartMetadataAndFindPart(t *testing.T) {
	a, fake := sendAdapter(t)
	top := thread
	top.ThreadID = ""
	for _, to := range []channels.Origin{thread, top} {
		msg := channels.Message{Kind: channels.KindReply, Text: "part two", ID: "7", Part: 2, Parts: 3}
		ts, err := a.SendPart(t.Context(), to, msg)
		if err != nil || ts == "" {
			t.Fatalf("SendPart to %s = %q, %v", to, ts, err)
		}
		posts := fake.Posted()
		if md := posts[len(posts)-1].Metadata; !strings.Contains(md, `"event_type":"herald_message"`) || !strings.Contains(md, `"outbox_id":"7"`) {
			t.Errorf("metadata %s, want event_type herald_message with the outbox id", md)
		}
		got, found, err := a.FindPart(t.Context(), to, msg)
		if err != nil || !found || got != ts {
			t.Errorf("FindPart in %s = %q, %v, %v; want %q", to, got, found, err, ts)
		}
		other := msg
		other.Part = 3
		if _, found, err := a.FindPart(t.Context(), to, other); err != nil || found {
			t.Errorf("FindPart of a part never posted = %v, %v; want not found", found, err)
		}
	}
	if a.PartLimit() != slack.Limit {
		t.Errorf("PartLimit = %d", a.PartLimit())
	}
}

func TestStartAndHealth(t *testing.T) {
	t.Run("bad token", func(t *testing.T) {
		fake := slackfake.New(t)
		fake.RejectAuth(true)
		a, err := slack.New(slack.Options{BotToken: "xoxb-wrong", AppToken: slackfake.AppToken, APIURL: fake.URL()})
		if err != nil {
			t.Fatal(err)
		}
		err = a.Start(t.Context(), func(context.Context, channels.Inbound) error { return nil })
		if err == nil || !strings.Contains(err.Error(), "invalid_auth") {
			t.Fatalf("start = %v, want an invalid_auth error", err)
		}
		if a.Health() == nil {
			t.Error("healthy after auth failed")
		}
	})
	t.Run("socket drops and recovers", func(t *testing.T) {
		fake := slackfake.New(t)
		a, in := startSocket(t, fake, slack.Options{Access: openAccess})
		eventually(t, "healthy once connected", func() bool { return a.Health() == nil })
		fake.RejectAuth(true)
		fake.DropConnections()
		eventually(t, "unhealthy while disconnected", func() bool { return a.Health() != nil })
		fake.RejectAuth(false)
		eventually(t, "healthy after reconnecting", func() bool { return a.Health() == nil && fake.Connected() })
		fake.SendDM("D0ALICE", alice, "still there?", "")
		if got := in.next(t); got.Text != "still there?" {
			t.Errorf("after reconnect got %q", got.Text)
		}
	})
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts slack.Options
		want string
	}{
		{"no bot token", slack.Options{AppToken: "xapp"}, "botToken"},
		{"socket without app token", slack.Options{BotToken: "xoxb"}, "appToken"},
		{"http without secret", slack.Options{BotToken: "xoxb", Mode: "http"}, "signingSecret"},
		{"unknown mode", slack.Options{BotToken: "xoxb", AppToken: "xapp", Mode: "rtm"}, "mode"},
		{"bad replyToMode", slack.Options{BotToken: "xoxb", AppToken: "xapp", ReplyToMode: "sometimes"}, "replyToMode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := slack.New(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestHTTPSlashCommandReplayRunsOnce: a signed slash command posted again
// within the signature window (a replay: same timestamp, body and
// signature) is acknowledged but delivers nothing; a new command signed
// afterwards is delivered.
func TestHTTPSlashCommandReplayRunsOnce(t *testing.T) {
	fake := slackfake.New(t)
	srv, in := httpAdapter(t, fake, nil)
	form := slackfake.SlashCommandForm("D0ALICE", alice, "/subagents", "stop all")
	at := time.Now()
	for i := range 2 {
		req, _ := slackfake.NewSignedRequest(srv.URL+"/slack/commands", secret, "application/x-www-form-urlencoded", form, at)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("post %d: status %d, want 200", i+1, resp.StatusCode)
		}
	}
	resp, err := slackfake.PostSlashCommand(srv.URL+"/slack/commands", secret, slackfake.SlashCommandForm("D0ALICE", alice, "/status", ""))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := in.next(t); got.Text != "/subagents stop all" {
		t.Fatalf("first inbound %q", got.Text)
	}
	if got := in.next(t); got.Text != "/status" {
		t.Errorf("second inbound %q, want /status: the replayed command was delivered again", got.Text)
	}
}

// TestHTTPSlashCommandRecasedReplayRunsOnce: the verifier accepts the
// signature's hex in any case, so a replay with the same signature
// upper-cased (or mixed) is the same signature: acknowledged, not run again.
func TestHTTPSlashCommandRecasedReplayRunsOnce(t *testing.T) {
	fake := slackfake.New(t)
	srv, in := httpAdapter(t, fake, nil)
	form := slackfake.SlashCommandForm("D0ALICE", alice, "/subagents", "stop all")
	at := time.Now()
	var sig string
	for i, recase := range []func(string) string{
		func(s string) string { return s },
		strings.ToUpper,
		func(s string) string { return s[:10] + strings.ToUpper(s[10:20]) + s[20:] },
	} {
		req, _ := slackfake.NewSignedRequest(srv.URL+"/slack/commands", secret, "application/x-www-form-urlencoded", form, at)
		if i == 0 {
			sig = strings.TrimPrefix(req.Header.Get("X-Slack-Signature"), "v0=")
		}
		req.Header.Set("X-Slack-Signature", "v0="+recase(sig))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("post %d (signature %s): status %d, want 200", i+1, recase(sig), resp.StatusCode)
		}
	}
	resp, err := slackfake.PostSlashCommand(srv.URL+"/slack/commands", secret, slackfake.SlashCommandForm("D0ALICE", alice, "/status", ""))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := in.next(t); got.Text != "/subagents stop all" {
		t.Fatalf("first inbound %q", got.Text)
	}
	if got := in.next(t); got.Text != "/status" {
		t.Errorf("second inbound %q, want /status: the re-cased replay was delivered again", got.Text)
	}
}

// TestVerbatim: text for Slack to show literally is escaped (&amp; &lt;
// &gt;), fenced, has no backtick that could close its block, and a long line
// becomes several blocks that each fit one message part, so the outbox
// never splits a block.
func TestVerbatim(t *testing.T) {
	got := slack.Verbatim("a <!channel> & <http://x|y> `id` ```")
	want := "```a &lt;!channel&gt; &amp; &lt;http://x|y&gt; \\u0060id\\u0060 \\u0060\\u0060\\u0060```"
	if got != want {
		t.Errorf("Verbatim = %q, want %q", got, want)
	}
	long := strings.Repeat("<", 5000)
	got = slack.Verbatim(long)
	parts := channels.Split(got, slack.Limit)
	total := 0
	for i, p := range parts {
		if !strings.HasPrefix(p, "```") || !strings.HasSuffix(p, "```") || strings.Count(p, "```")%2 != 0 {
			t.Errorf("part %d of a long verbatim line is not whole code blocks: %.40q…%.40q", i+1, p, p[max(0, len(p)-40):])
		}
		total += strings.Count(p, "&lt;")
	}
	if len(parts) < 2 || total != 5000 {
		t.Errorf("long line: %d parts with %d escaped characters, want several parts with 5000", len(parts), total)
	}
}
