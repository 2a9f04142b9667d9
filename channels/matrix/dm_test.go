package matrix

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/matrix/matrixtest"
)

// TestDMMemberListErrorIsRetryable: a message for a person's DM is checked
// against the room's member list first. When that list cannot be read now
// (a 502 from a proxy, a timeout) the send is a retryable error and the
// retry posts it; only a member list that shows someone else, or a
// homeserver that says the bot is not in the room, refuses it for good.
func TestDMMemberListErrorIsRetryable(t *testing.T) {
	f := newFakeHS(t)
	f.joined["!d:test"] = []string{"@herald:test", "@alice:test"}
	a, _ := startFake(t, f, nil)
	ctx := context.Background()
	a.noteDM(ctx, "@alice:test", "!d:test")
	alice := channels.Origin{Channel: Name, ChatID: "@alice:test", ChatType: channels.ChatDM, SenderID: "@alice:test"}
	legacy := channels.Origin{Channel: Name, ChatID: "!d:test", ChatType: channels.ChatDM, SenderID: "@alice:test"}
	// fail makes the homeserver answer the member list with status until
	// ok (a blip longer than the client's own retry).
	fail := func(status int, body string) {
		f.mu.Lock()
		f.membersReply = func() (int, string) { return status, body }
		f.mu.Unlock()
	}
	ok := func() {
		f.mu.Lock()
		f.membersReply = nil
		f.mu.Unlock()
	}

	for i, to := range []channels.Origin{alice, legacy} {
		fail(502, `{"errcode":"M_UNKNOWN","error":"bad gateway"}`)
		err := a.Send(ctx, to, channels.Message{Kind: channels.KindReply, Text: "the answer"})
		if err == nil || errors.Is(err, channels.ErrPermanent) {
			t.Fatalf("send to %s with the member list failing: err = %v; want a retryable error", to.ChatID, err)
		}
		if n := len(f.sentEvents()); n != i {
			t.Fatalf("%d events posted while the member list could not be read, want %d", n, i)
		}
		ok()
		if err := a.Send(ctx, to, channels.Message{Kind: channels.KindReply, Text: "the answer"}); err != nil {
			t.Fatalf("retry to %s: %v", to.ChatID, err)
		}
		if n := len(f.sentEvents()); n != i+1 {
			t.Fatalf("%d events posted after the retry, want %d", n, i+1)
		}
	}

	fail(403, `{"errcode":"M_FORBIDDEN","error":"not in room"}`)
	if err := a.Send(ctx, alice, channels.Message{Text: "the answer"}); !errors.Is(err, channels.ErrPermanent) {
		t.Fatalf("send with the bot no longer in the room: err = %v; want ErrPermanent", err)
	}
	ok()
	f.mu.Lock()
	f.joined["!d:test"] = []string{"@herald:test", "@mallory:test"}
	f.mu.Unlock()
	if err := a.Send(ctx, alice, channels.Message{Text: "the answer"}); !errors.Is(err, channels.ErrPermanent) {
		t.Fatalf("send after alice left and mallory joined: err = %v; want ErrPermanent", err)
	}
	if n := len(f.sentEvents()); n != 2 {
		t.Fatalf("%d events posted, want the 2 retried ones only", n)
	}
}

// TestInboundDMOutlastsMemberListError: a DM message that arrives while
// the room's member list cannot be read is not judged a group message and
// dropped (it has no mention): the /sync batch is fetched again until the
// list answers, and the message is delivered as the person's DM. Where the
// state store knows the room's members (member events seen in /sync), the
// message is judged from it at once.
func TestInboundDMOutlastsMemberListError(t *testing.T) {
	f := newFakeHS(t)
	f.joined["!d:test"] = []string{"@herald:test", "@alice:test"}
	f.joined["!known:test"] = []string{"@herald:test", "@bob:test"}
	in := make(inbox, 32)
	a, err := New(Options{Homeserver: f.srv.URL, AccessToken: "bot-token",
		Access: channels.Access{GroupPolicy: channels.GroupOpen}, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The state store knows !known:test (bob and the bot joined), nothing
	// of !d:test.
	state := mautrix.NewMemoryStateStore()
	for _, u := range []id.UserID{"@herald:test", "@bob:test"} {
		if err := state.SetMembership(ctx, "!known:test", u, event.MembershipJoin); err != nil {
			t.Fatal(err)
		}
	}
	a.client.StateStore = state
	startAdapter(t, a, in.sink)
	f.mu.Lock()
	f.membersReply = func() (int, string) { return 502, `{"errcode":"M_UNKNOWN","error":"bad gateway"}` }
	f.mu.Unlock()

	f.queueSync(joinedRooms(map[string][]map[string]any{
		"!known:test": {msg("$b", "@bob:test", "hi from bob", nil)},
	}))
	if got := in.next(t); got.Origin.MessageID != "$b" || got.Origin.ChatType != channels.ChatDM || got.Origin.ChatID != "@bob:test" {
		t.Fatalf("delivered %+v, want $b as bob's DM (judged from the state store)", got.Origin)
	}

	before := len(f.syncSinces())
	f.queueSync(joinedRooms(map[string][]map[string]any{
		"!d:test": {msg("$a", "@alice:test", "are you there?", nil)},
	}))
	// The batch is asked for again while the member list fails.
	deadline := time.Now().Add(matrixtest.WaitTimeout)
	for {
		s := f.syncSinces()
		if len(s) >= before+2 && s[len(s)-1] == s[len(s)-2] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the batch with alice's message was not fetched again; sinces %v", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case got := <-in:
		t.Fatalf("delivered %+v while the member list could not be read", got.Origin)
	default:
	}
	f.mu.Lock()
	f.membersReply = nil
	f.mu.Unlock()
	got := in.next(t)
	if got.Origin.MessageID != "$a" || got.Origin.ChatType != channels.ChatDM || got.Origin.ChatID != "@alice:test" || !got.Mentioned {
		t.Fatalf("delivered %+v (mentioned %v), want $a as alice's DM", got.Origin, got.Mentioned)
	}
}

// TestBoundAskedOnlyWhereItDecides: an un-mentioned thread message asks
// the store whether its thread is bound to a sub-agent only in a group
// that needs a mention, from a sender it admits; elsewhere the binding
// changes nothing, so it is not read.
func TestBoundAskedOnlyWhereItDecides(t *testing.T) {
	f := newFakeHS(t)
	f.members["!open:test"] = 3   // no mention needed
	f.members["!strict:test"] = 3 // mention needed
	var (
		mu    sync.Mutex
		asked []string
	)
	_, in := startFake(t, f, func(o *Options) {
		o.Access = channels.Access{GroupPolicy: channels.GroupAllowlist, Groups: map[string]channels.GroupRule{
			"!open:test":   {RequireMention: false},
			"!strict:test": {RequireMention: true, AllowFrom: []string{"@alice:test"}},
		}}
		o.Bound = func(_ context.Context, o channels.Origin) bool {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, o.MessageID)
			return o.ThreadID == "$bound"
		}
	})
	f.queueSync(joinedRooms(map[string][]map[string]any{
		"!open:test": {msg("$o", "@bob:test", "chatting in a thread", inThread("$bound"))},
	}))
	if got := in.next(t); got.Origin.MessageID != "$o" {
		t.Fatalf("delivered %s, want $o", got.Origin.MessageID)
	}
	f.queueSync(joinedRooms(map[string][]map[string]any{
		"!strict:test": {
			msg("$stranger", "@mallory:test", "not allowed here", inThread("$bound")),
			msg("$other", "@alice:test", "a thread nobody bound", inThread("$free")),
			msg("$s", "@alice:test", "more for the sub-agent", inThread("$bound")),
		},
	}))
	if got := in.next(t); got.Origin.MessageID != "$s" || !got.Mentioned {
		t.Fatalf("delivered %s (mentioned %v), want $s as addressed", got.Origin.MessageID, got.Mentioned)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"$other", "$s"}; len(asked) != len(want) || asked[0] != want[0] || asked[1] != want[1] {
		t.Fatalf("Bound was asked for %v, want only %v", asked, want)
	}
}

// TestDeviceDoubtRefetchesOnlyForApprove: with requireVerifiedDevices, a
// message from an unverified device reads its sender's keys again only
// when it is an /approve, the one command that trust decides, and within
// freshTrustDeadline, since it runs on the /sync goroutine.
func TestDeviceDoubtRefetchesOnlyForApprove(t *testing.T) {
	var calls atomic.Int32
	a := &Adapter{refetchTrust: func(ctx context.Context, _ id.UserID, _ *id.Device) (id.TrustState, bool) {
		calls.Add(1)
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > freshTrustDeadline {
			t.Errorf("key query deadline = %v (set %v), want at most %s from now", dl, ok, freshTrustDeadline)
		}
		return id.TrustStateCrossSignedTOFU, true
	}}
	evt := &event.Event{Sender: "@alice:test", Mautrix: event.MautrixInfo{WasEncrypted: true, TrustState: id.TrustStateUnset,
		TrustSource: &id.Device{UserID: "@alice:test", DeviceID: "PHONE"}}}
	for _, text := range []string{"/status", "/help", "/deny abc123", "hello", "/approvex abc"} {
		if why := a.deviceDoubt(context.Background(), evt, text); why == "" {
			t.Errorf("%q from an unverified device: no reason given", text)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("keys read again %d times for messages other than /approve", n)
	}
	for _, text := range []string{"/approve abc123", "/APPROVE@herald abc123"} {
		if why := a.deviceDoubt(context.Background(), evt, text); why != "" {
			t.Errorf("%q after the device was verified: refused (%s)", text, why)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("keys read again %d times for two /approve, want 2", n)
	}
}
