package slack_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/slack"
	"github.com/heraldhq/herald/channels/slack/slackfake"
)

// refusingInbox is a Sink that refuses its first n messages the way the
// gateway does while its state store is away, then takes them.
type refusingInbox struct {
	in      inbox
	mu      sync.Mutex
	refuse  int
	refused int
}

func (r *refusingInbox) sink(ctx context.Context, m channels.Inbound) error {
	r.mu.Lock()
	if r.refused < r.refuse {
		r.refused++
		r.mu.Unlock()
		return &channels.UnavailableError{RetryAfter: 3 * time.Second, Reason: "store down"}
	}
	r.mu.Unlock()
	return r.in.sink(ctx, m)
}

// TestHTTPEventRefusedIsRetried: an event the gateway cannot store is
// answered 503 with Retry-After, so Slack sends it again; the re-sent event
// is taken and handed over once.
func TestHTTPEventRefusedIsRetried(t *testing.T) {
	fake := slackfake.New(t)
	r := &refusingInbox{in: make(inbox, 10), refuse: 1}
	a, err := slack.New(slack.Options{Mode: "http", BotToken: slackfake.BotToken, SigningSecret: secret,
		APIURL: fake.URL(), Access: openAccess})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for pattern, h := range a.Routes() {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	if err := a.Start(t.Context(), r.sink); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = a.Stop(context.Background()) })

	events := srv.URL + "/slack/events"
	dm := slackfake.EventCallback(slackfake.MessageEvent("im", "D0ALICE", alice, "are you there?", "1700000002.000300", ""))
	post := func() *http.Response {
		t.Helper()
		resp, err := slackfake.PostEvent(events, secret, dm)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := post(); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "3" {
		t.Fatalf("refused event: status %d Retry-After %q, want 503 and 3", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	select {
	case m := <-r.in:
		t.Fatalf("refused event was handed over: %+v", m)
	default:
	}
	// Slack's retry of the same event.
	if resp := post(); resp.StatusCode != http.StatusOK {
		t.Fatalf("retried event: status %d, want 200", resp.StatusCode)
	}
	if got := r.in.next(t); got.Origin.MessageID != "1700000002.000300" || got.Text != "are you there?" {
		t.Errorf("taken on retry: %+v %q", got.Origin, got.Text)
	}
	// A further delivery of the taken event is a duplicate.
	if resp := post(); resp.StatusCode != http.StatusOK {
		t.Fatalf("duplicate event: status %d, want 200", resp.StatusCode)
	}
	select {
	case m := <-r.in:
		t.Fatalf("event handed over twice: %+v", m)
	default:
	}
}

// TestSocketEnvelopeRefusedIsNotAcked: in Socket Mode an envelope whose
// message the gateway cannot store is not acknowledged (Slack sends it
// again); the re-sent envelope is taken, acknowledged and handed over once.
func TestSocketEnvelopeRefusedIsNotAcked(t *testing.T) {
	fake := slackfake.New(t)
	r := &refusingInbox{in: make(inbox, 10), refuse: 1}
	a, err := slack.New(slack.Options{BotToken: slackfake.BotToken, AppToken: slackfake.AppToken, APIURL: fake.URL(), Access: openAccess})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(t.Context(), r.sink); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_ = a.Stop(ctx)
	})
	if !fake.WaitConnected(wait) {
		t.Fatal("socket mode client never connected")
	}

	dm := slackfake.MessageEvent("im", "D0ALICE", alice, "are you there?", fake.NextTS(), "")
	refused := fake.SendEvent(dm)
	// Envelopes are handled in order: once the next one is acked, the
	// refused one has been handled.
	other := fake.SendEvent(slackfake.MessageEvent("im", "D0BOB", bob, "hello", fake.NextTS(), ""))
	if !fake.WaitAck(other, wait) {
		t.Fatal("the envelope after the refused one was never acked")
	}
	if fake.Acked(refused) {
		t.Fatal("the envelope of a message the gateway refused was acked: Slack will not send it again")
	}
	if got := r.in.next(t); got.Origin.ChatID != "D0BOB" {
		t.Fatalf("handed over %+v, want bob's message only", got.Origin)
	}
	// Slack sends the unacknowledged envelope again.
	again := fake.SendEvent(dm)
	if !fake.WaitAck(again, wait) {
		t.Fatal("the re-sent envelope was never acked")
	}
	if got := r.in.next(t); got.Origin.ChatID != "D0ALICE" || got.Text != "are you there?" {
		t.Fatalf("re-sent message handed over as %+v %q", got.Origin, got.Text)
	}
	select {
	case m := <-r.in:
		t.Fatalf("unexpected extra hand-over %+v", m.Origin)
	default:
	}
}
