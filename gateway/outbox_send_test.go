package gateway

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
)

// heldChannel is a channel whose sends start (reported on started) and
// end when released.
type heldChannel struct {
	started chan string
	release chan struct{}
}

func (c *heldChannel) Name() channels.Name                        { return "held" }
func (c *heldChannel) Start(context.Context, channels.Sink) error { return nil }
func (c *heldChannel) Stop(context.Context) error                 { return nil }
func (c *heldChannel) Send(ctx context.Context, _ channels.Origin, m channels.Message) error {
	c.started <- m.Text
	select {
	case <-c.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// blockingPass is a store whose PassOutbox blocks while held is set (a
// dead connection), reporting that it did on entered.
type blockingPass struct {
	*store.DB
	mu      sync.Mutex
	held    bool
	entered chan context.Context
	unblock chan struct{}
}

func (s *blockingPass) PassOutbox(ctx context.Context, c store.Claim, chans []string, lim store.OutboxLimits, now time.Time) (store.OutboxPass, error) {
	s.mu.Lock()
	held := s.held
	s.mu.Unlock()
	if held {
		select {
		case s.entered <- ctx: // the first pass held; the test reads it
		default: // a later one (after the test let the first go)
		}
		select {
		case <-s.unblock:
		case <-ctx.Done():
			return store.OutboxPass{}, ctx.Err()
		}
	}
	return s.DB.PassOutbox(ctx, c, chans, lim, now)
}

// testDeliverer runs a deliverer of replica r1 on db with ch as its only
// channel, at most limit sends in flight, until the test ends.
func testDeliverer(t testing.TB, db outboxStore, ch channels.Channel, limit int) *deliverer {
	t.Helper()
	d, stop := startDeliverer(db, ch, limit)
	t.Cleanup(stop)
	return d
}

// startDeliverer runs a deliverer as testDeliverer does until stop,
// which returns once its loop and sends have ended.
func startDeliverer(db outboxStore, ch channels.Channel, limit int) (*deliverer, func()) {
	d := newDeliverer(outboxDeps{db: db, replica: "r1", tell: func() {},
		channel: func(channels.Name) channels.Channel { return ch }, sendsOn: func() []string { return nil },
		limits: func() store.OutboxLimits { return store.OutboxLimits{} }, changed: func() {},
		uncertainKey: func(channels.Name) (channels.Uncertain, string) { return "", "" },
		retryWrite: func(ctx context.Context, _ string, _ *zap.Logger, write func(context.Context) error) error {
			return write(ctx)
		},
		writeCtx: context.Background(), clock: agent.SystemClock{}, metrics: newMetrics(), log: zap.NewNop()})
	d.limit = limit
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.run(ctx) }()
	return d, func() {
		cancel()
		<-done
		d.sends.Wait()
	}
}

func openTestStore(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// enqueueClaimed queues text to chat and claims it for r1, as a turn's
// completion does (store.TurnEnd.ClaimReply).
func enqueueClaimed(t *testing.T, db *store.DB, chat, text string) store.OutboxItem {
	t.Helper()
	ctx := context.Background()
	it := &store.OutboxItem{Origin: channels.Origin{Channel: "held", ChatID: chat, ChatType: channels.ChatDM}, Kind: channels.KindReply, Text: text}
	if _, err := db.EnqueueOutbox(ctx, it); err != nil {
		t.Fatal(err)
	}
	got, err := db.ClaimOutbox(ctx, store.Claim{Holder: "r1", Limit: 1}, nil, time.Now())
	if err != nil || len(got) != 1 || got[0].Text != text {
		t.Fatalf("claim %q: %+v, %v", text, got, err)
	}
	return got[0]
}

// waitSend waits for the start of a send of text.
func waitSend(t *testing.T, ch *heldChannel, text string, within time.Duration) {
	t.Helper()
	select {
	case got := <-ch.started:
		if got != text {
			t.Fatalf("send of %q started; want %q", got, text)
		}
	case <-time.After(within):
		t.Fatalf("the send of %q did not start within %s", text, within)
	}
}

// TestHandedReplyWaitingForRoomGoesOutWhenASendEnds: a reply a turn's
// completion claimed for this replica while every send slot was taken
// goes out as soon as a send ends — not after the minute the loop waits
// when nothing else is due (NextOutboxAt leaves this replica's claims out).
func TestHandedReplyWaitingForRoomGoesOutWhenASendEnds(t *testing.T) {
	t.Parallel()
	db := openTestStore(t)
	ch := &heldChannel{started: make(chan string, 4), release: make(chan struct{})}
	ctx := context.Background()
	if _, err := db.EnqueueOutbox(ctx, &store.OutboxItem{Origin: channels.Origin{Channel: "held", ChatID: "a", ChatType: channels.ChatDM},
		Kind: channels.KindReply, Text: "first"}); err != nil {
		t.Fatal(err)
	}
	d := testDeliverer(t, db, ch, 1)
	waitSend(t, ch, "first", 10*time.Second) // the one send slot is taken
	reply := enqueueClaimed(t, db, "b", "reply")
	d.hand(reply) // no room: the next pass is to take it back
	// Let the loop use the wake-up hand gave it (a pass with no room),
	// then end the send in flight.
	if !waitCond(10*time.Second, func() bool { return len(d.wake) == 0 }) {
		t.Fatal("the delivery loop did not take the wake-up")
	}
	close(ch.release)
	waitSend(t, ch, "reply", 10*time.Second)
}

// TestHandDoesNotWaitForAHungPass: a pass whose store transaction hangs
// (a dead PostgreSQL connection) does not hold up hand, which a turn's
// completion calls on its session's lane; and the transaction has a
// deadline.
func TestHandDoesNotWaitForAHungPass(t *testing.T) {
	t.Parallel()
	db := &blockingPass{DB: openTestStore(t), entered: make(chan context.Context, 1), unblock: make(chan struct{})}
	ch := &heldChannel{started: make(chan string, 4), release: make(chan struct{})}
	close(ch.release)
	d := testDeliverer(t, db, ch, maxSends)
	if !waitCond(10*time.Second, func() bool { d.mu.Lock(); defer d.mu.Unlock(); return d.ctx != nil }) {
		t.Fatal("the first pass was not made")
	}
	reply := enqueueClaimed(t, db.DB, "b", "reply")
	// Every pass from here hangs. Held first: the loop, idle, may see the
	// item below due and pass before the wake-up; a pass made before the
	// hold would send it, and the wake-up then find nothing to pass.
	db.mu.Lock()
	db.held = true
	db.mu.Unlock()
	// Something due, for the pass that hangs.
	if _, err := db.EnqueueOutbox(context.Background(), &store.OutboxItem{Origin: channels.Origin{Channel: "held", ChatID: "c", ChatType: channels.ChatDM},
		Kind: channels.KindReply, Text: "due"}); err != nil {
		t.Fatal(err)
	}
	d.wakeLocal()
	var pctx context.Context
	select {
	case pctx = <-db.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no pass was made after the wake-up")
	}
	defer close(db.unblock)
	if dl, ok := pctx.Deadline(); !ok || time.Until(dl) > storeCallTimeout {
		t.Errorf("the pass's store transaction has deadline %v, %v; want one within %s", dl, ok, storeCallTimeout)
	}
	handed := make(chan struct{})
	go func() { defer close(handed); d.hand(reply) }()
	select {
	case <-handed:
	case <-time.After(10 * time.Second):
		t.Fatal("hand waited for the pass's hung store transaction")
	}
	waitSend(t, ch, "reply", 10*time.Second)
}

// waitCond polls cond until it holds or within ends.
func waitCond(within time.Duration, cond func() bool) bool {
	end := time.Now().Add(within)
	for !cond() {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// lostAnswer is a store whose next PassOutbox, once armed, commits and
// then reports an error (the connection dropped before the answer).
type lostAnswer struct {
	*store.DB
	lose chan struct{} // closed: the next pass loses its answer
	lost sync.Once
}

func (s *lostAnswer) PassOutbox(ctx context.Context, c store.Claim, chans []string, lim store.OutboxLimits, now time.Time) (store.OutboxPass, error) {
	got, err := s.DB.PassOutbox(ctx, c, chans, lim, now)
	select {
	case <-s.lose:
		failed := false
		s.lost.Do(func() { failed = true })
		if failed {
			return store.OutboxPass{}, errors.New("connection reset")
		}
	default:
	}
	return got, err
}

// TestPassWithLostAnswerSendsSoon: a pass whose claim committed but whose
// answer was lost leaves its item claimed by this replica; the next pass
// takes it back within a second or so — not after the minute the loop
// waits when nothing else is due (NextOutboxAt leaves the claim out).
func TestPassWithLostAnswerSendsSoon(t *testing.T) {
	t.Parallel()
	db := &lostAnswer{DB: openTestStore(t), lose: make(chan struct{})}
	ch := &heldChannel{started: make(chan string, 4), release: make(chan struct{})}
	close(ch.release)
	d := testDeliverer(t, db, ch, maxSends)
	if !waitCond(10*time.Second, func() bool { d.mu.Lock(); defer d.mu.Unlock(); return d.ctx != nil }) {
		t.Fatal("the first pass was not made")
	}
	close(db.lose)
	if _, err := db.EnqueueOutbox(context.Background(), &store.OutboxItem{Origin: channels.Origin{Channel: "held", ChatID: "c", ChatType: channels.ChatDM},
		Kind: channels.KindReply, Text: "due"}); err != nil {
		t.Fatal(err)
	}
	d.wakeLocal()
	waitSend(t, ch, "due", 10*time.Second)
}
