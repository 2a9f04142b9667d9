package matrix

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
)

var groupOrigin = channels.Origin{Channel: Name, ChatID: "!g:test", ChatType: channels.ChatGroup}

func TestSendErrorClassification(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		header    http.Header
		body      string
		retryIn   time.Duration // > 0: want *RetryAfterError with this wait
		permanent bool
	}{
		{name: "rate limited with retry_after_ms", status: 429,
			body: `{"errcode":"M_LIMIT_EXCEEDED","error":"Too many requests","retry_after_ms":1500}`, retryIn: 1500 * time.Millisecond},
		{name: "rate limited with Retry-After header only", status: 429, header: http.Header{"Retry-After": {"3"}},
			body: `{"errcode":"M_LIMIT_EXCEEDED","error":"Too many requests"}`, retryIn: 3 * time.Second},
		{name: "forbidden", status: 403, body: `{"errcode":"M_FORBIDDEN","error":"not in room"}`, permanent: true},
		{name: "unknown token", status: 401, body: `{"errcode":"M_UNKNOWN_TOKEN","error":"Unknown token"}`, permanent: true},
		{name: "server error is transient", status: 500, body: `{"errcode":"M_UNKNOWN","error":"database is locked"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeHS(t)
			f.sendReply = func(int) (int, http.Header, string) { return tt.status, tt.header, tt.body }
			a, _ := startFake(t, f, nil)
			err := a.Send(context.Background(), groupOrigin, channels.Message{Kind: channels.KindReply, Text: "hello"})
			if err == nil {
				t.Fatal("send succeeded, want an error")
			}
			var ra *channels.RetryAfterError
			isRetry := errors.As(err, &ra)
			if tt.retryIn > 0 {
				if !isRetry || ra.After != tt.retryIn {
					t.Fatalf("err = %v; want RetryAfterError after %s", err, tt.retryIn)
				}
				if n := len(f.sentEvents()); n != 1 {
					t.Fatalf("homeserver saw %d send attempts; the rate limit must reach the caller after 1", n)
				}
			} else if isRetry {
				t.Fatalf("err = %v; did not want a RetryAfterError", err)
			}
			if got := errors.Is(err, channels.ErrPermanent); got != tt.permanent {
				t.Fatalf("errors.Is(err, ErrPermanent) = %v, want %v (err: %v)", got, tt.permanent, err)
			}
			if !strings.Contains(err.Error(), "!g:test") {
				t.Fatalf("error %q does not say which room", err)
			}
		})
	}
}

func TestSendNetworkErrorIsTransient(t *testing.T) {
	f := newFakeHS(t)
	a, _ := startFake(t, f, nil)
	f.srv.CloseClientConnections()
	f.srv.Close()
	err := a.Send(context.Background(), groupOrigin, channels.Message{Text: "hello"})
	if err == nil || errors.Is(err, channels.ErrPermanent) {
		t.Fatalf("err = %v; want a transient error", err)
	}
}

func TestSendSplitsLongTextInThread(t *testing.T) {
	f := newFakeHS(t)
	a, _ := startFake(t, f, nil)
	line := strings.Repeat("y", 99) + "\n"
	text := strings.Repeat(line, 200) + "Stats: 1.2s"
	to := groupOrigin
	to.ThreadID = "$root"
	if err := a.Send(context.Background(), to, channels.Message{Kind: channels.KindReply, Text: text}); err != nil {
		t.Fatal(err)
	}
	sent := f.sentEvents()
	if len(sent) != 2 {
		t.Fatalf("sent %d events for %d characters, want 2", len(sent), len([]rune(text)))
	}
	var bodies []string
	wantReplyTo := []string{"$root", "$sent1"} // the root, then the latest event in the thread
	for i, c := range sent {
		body, _ := c["body"].(string)
		if n := len([]rune(body)); n > Limit {
			t.Fatalf("part %d has %d characters, limit %d", i+1, n, Limit)
		}
		bodies = append(bodies, body)
		rel, _ := c["m.relates_to"].(map[string]any)
		reply, _ := rel["m.in_reply_to"].(map[string]any)
		if rel["rel_type"] != "m.thread" || rel["event_id"] != "$root" || rel["is_falling_back"] != true || reply["event_id"] != wantReplyTo[i] {
			t.Fatalf("part %d m.relates_to = %v; want m.thread to $root falling back to %s", i+1, rel, wantReplyTo[i])
		}
		if c["msgtype"] != "m.text" {
			t.Fatalf("part %d msgtype = %v", i+1, c["msgtype"])
		}
	}
	if !strings.HasSuffix(bodies[1], "\nStats: 1.2s") {
		t.Fatalf("stats line is not last in the last part: ...%q", bodies[1][len(bodies[1])-30:])
	}
	if strings.Join(bodies, "\n") != text {
		t.Fatal("the parts joined by newlines differ from the original text")
	}
}

func TestSendOutsideThreadHasNoRelation(t *testing.T) {
	f := newFakeHS(t)
	a, _ := startFake(t, f, nil)
	if err := a.Send(context.Background(), groupOrigin, channels.Message{Text: "plain"}); err != nil {
		t.Fatal(err)
	}
	sent := f.sentEvents()
	if len(sent) != 1 || sent[0]["m.relates_to"] != nil || sent[0]["body"] != "plain" {
		t.Fatalf("sent %v; want one plain message without a relation", sent)
	}
}

func TestStartRejectsBadToken(t *testing.T) {
	f := newFakeHS(t)
	a, err := New(Options{Homeserver: f.srv.URL, AccessToken: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Start(context.Background(), func(context.Context, channels.Inbound) error { return nil })
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "whoami") {
		t.Fatalf("start with a bad token: %v; want ErrAuth naming whoami", err)
	}
	if err := a.Send(context.Background(), groupOrigin, channels.Message{Text: "x"}); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("send after failed start: %v, want ErrNotStarted", err)
	}
	if a.Health() == nil {
		t.Fatal("health is nil after a failed start")
	}
}

func TestPasswordLoginKeepsToken(t *testing.T) {
	f := newFakeHS(t)
	f.token = "fresh-token"
	a, _ := startFake(t, f, func(o *Options) {
		o.AccessToken = ""
		o.UserID = "@herald:test"
		o.Password = "secret"
	})
	if err := a.Send(context.Background(), groupOrigin, channels.Message{Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	if got := f.sendAuth[0]; got != "Bearer fresh-token" {
		t.Fatalf("send used Authorization %q, want the token from login", got)
	}
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no homeserver", Options{AccessToken: "t"}, "homeserver"},
		{"no credentials", Options{Homeserver: "http://h"}, "accessToken or password"},
		{"password without user", Options{Homeserver: "http://h", Password: "p"}, "userId"},
		{"bad thread mode", Options{Homeserver: "http://h", AccessToken: "t", ThreadReplies: "sometimes"}, "threadReplies"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v; want an error about %s", err, tt.want)
			}
		})
	}
}

// TestInbound feeds /sync responses and checks what reaches the gateway.
func TestInbound(t *testing.T) {
	f := newFakeHS(t)
	f.members["!g:test"] = 3
	f.members["!d:test"] = 2
	f.members["!n:test"] = 2
	// The first sync carries history: it must not be answered.
	f.firstSync = map[string]any{"rooms": joinedRooms(map[string][]map[string]any{
		"!d:test": {msg("$old", "@alice:test", "from before the start", nil)},
	})}
	_, in := startFake(t, f, nil)

	f.queueSync(joinedRooms(map[string][]map[string]any{
		"!g:test": {
			msg("$a", "@alice:test", "just chatting", nil),                             // group, not addressed
			msg("$b", "@alice:test", "Herald Bot: what time is it?", nil),              // display name
			msg("$c", "@herald:test", "herald: talking to myself", nil),                // own event
			msg("$e", "@bob:test", "a question", map[string]any{"msgtype": "m.emote"}), // not text
			msg("$f", "@bob:test", "summarize please", map[string]any{"m.mentions": map[string]any{"user_ids": []string{"@herald:test"}}}),
			msg("$h", "@bob:test", "@herald:test, in a thread", inThread("$root")),
		},
	}))
	f.queueSync(joinedRooms(map[string][]map[string]any{
		"!d:test": {msg("$i", "@alice:test", "hi there", nil)},
	}))
	// A room just joined shows its history before the bot's join: skipped.
	f.queueSync(joinedRooms(map[string][]map[string]any{
		"!n:test": {
			msg("$pre", "@alice:test", "said before the bot joined", nil),
			{"type": "m.room.member", "event_id": "$join", "sender": "@herald:test", "state_key": "@herald:test",
				"origin_server_ts": time.Now().UnixMilli(), "content": map[string]any{"membership": "join"}},
			msg("$post", "@alice:test", "welcome", nil),
		},
	}))

	want := []struct {
		id, chatType, thread, text string
	}{
		{"$b", channels.ChatGroup, "", "what time is it?"},
		{"$f", channels.ChatGroup, "", "summarize please"},
		{"$h", channels.ChatGroup, "$root", "in a thread"},
		{"$i", channels.ChatDM, "", "hi there"},
		{"$post", channels.ChatDM, "", "welcome"},
	}
	for _, w := range want {
		got := in.next(t)
		o := got.Origin
		if o.MessageID != w.id || o.ChatType != w.chatType || o.ThreadID != w.thread || got.Text != w.text || !got.Mentioned || o.Channel != Name {
			t.Fatalf("delivered %+v text %q mentioned %v;\nwant id %s %s thread %q text %q", o, got.Text, got.Mentioned, w.id, w.chatType, w.thread, w.text)
		}
	}
	select {
	case extra := <-in:
		t.Fatalf("unexpected extra delivery %+v %q", extra.Origin, extra.Text)
	default:
	}
}

// TestThreadModes: which ThreadID a top-level and a threaded message get.
func TestThreadModes(t *testing.T) {
	tests := []struct {
		mode                 string
		wantTop, wantThreadd string
	}{
		{ThreadsOff, "", ""},
		{ThreadsInbound, "", "$root"},
		{ThreadsAlways, "$top", "$root"},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			f := newFakeHS(t)
			f.members["!d:test"] = 2
			_, in := startFake(t, f, func(o *Options) { o.ThreadReplies = tt.mode })
			f.queueSync(joinedRooms(map[string][]map[string]any{"!d:test": {
				msg("$top", "@alice:test", "top-level", nil),
				msg("$th", "@alice:test", "in thread", inThread("$root")),
			}}))
			if got := in.next(t).Origin.ThreadID; got != tt.wantTop {
				t.Fatalf("top-level message ThreadID = %q, want %q", got, tt.wantTop)
			}
			if got := in.next(t).Origin.ThreadID; got != tt.wantThreadd {
				t.Fatalf("threaded message ThreadID = %q, want %q", got, tt.wantThreadd)
			}
		})
	}
}

// TestBotThreadCountsAsMention: once the bot posted in a thread, later
// messages there reach it without a mention; other threads still need one.
func TestBotThreadCountsAsMention(t *testing.T) {
	f := newFakeHS(t)
	f.members["!g:test"] = 5
	a, in := startFake(t, f, nil)
	to := groupOrigin
	to.ThreadID = "$root"
	if err := a.Send(context.Background(), to, channels.Message{Text: "I'm on it"}); err != nil {
		t.Fatal(err)
	}
	f.queueSync(joinedRooms(map[string][]map[string]any{"!g:test": {
		msg("$other", "@alice:test", "unrelated thread", inThread("$elsewhere")),
		msg("$more", "@alice:test", "thanks, and one more thing", inThread("$root")),
		msg("$reply", "@carol:test", "nice answer", map[string]any{"m.relates_to": map[string]any{
			"m.in_reply_to": map[string]any{"event_id": "$sent1"}}}),
	}}))
	for _, want := range []string{"$more", "$reply"} {
		if got := in.next(t); got.Origin.MessageID != want || !got.Mentioned {
			t.Fatalf("delivered %s (mentioned %v), want %s", got.Origin.MessageID, got.Mentioned, want)
		}
	}
}

func TestAllowlistDropsStrangers(t *testing.T) {
	f := newFakeHS(t)
	f.members["!d:test"] = 2
	_, in := startFake(t, f, func(o *Options) { o.Access.AllowFrom = []string{"@alice:test"} })
	f.queueSync(joinedRooms(map[string][]map[string]any{"!d:test": {
		msg("$x", "@mallory:test", "let me in", nil),
		msg("$y", "@alice:test", "hello", nil),
	}}))
	if got := in.next(t); got.Origin.MessageID != "$y" {
		t.Fatalf("delivered %s from %s, want only alice's $y", got.Origin.MessageID, got.Origin.SenderID)
	}
}

func TestStripLeadingMention(t *testing.T) {
	names := botNames("@herald:example.org", "Herald Bot")
	tests := []struct{ in, want string }{
		{"@herald:example.org: status?", "status?"},
		{"herald, status?", "status?"},
		{"Herald Bot: status?", "status?"},
		{"@Herald status?", "status?"},
		{"heraldry is a hobby", "heraldry is a hobby"},
		{"status, herald?", "status, herald?"},
	}
	for _, tt := range tests {
		if got := stripLeadingMention(tt.in, names); got != tt.want {
			t.Errorf("stripLeadingMention(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if containsWord("I like heraldry", "herald") {
		t.Error("containsWord matched inside a longer word")
	}
	if !containsWord("ask Herald.", "herald") {
		t.Error("containsWord missed a name followed by punctuation")
	}
}

// TestStopLeavesNoGoroutines: Stop ends the sync loop and its connections.
func TestStopLeavesNoGoroutines(t *testing.T) {
	f := newFakeHS(t)
	before := runtime.NumGoroutine()
	a, err := New(Options{Homeserver: f.srv.URL, AccessToken: "bot-token"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background(), func(context.Context, channels.Inbound) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if a.Health() != nil {
		t.Fatalf("health after start: %v", a.Health())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	f.srv.CloseClientConnections()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after Stop, %d before Start:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
	if !errors.Is(a.Send(context.Background(), groupOrigin, channels.Message{Text: "x"}), ErrNotStarted) {
		t.Fatal("send after Stop did not report ErrNotStarted")
	}
}
