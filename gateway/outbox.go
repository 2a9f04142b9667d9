package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/media"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/telemetry"
)

// Outbox delivery: every reply, command answer, approval request and
// announce is a store row until a channel accepted it. Rows are retried with
// backoff (honouring rate limits) across errors and restarts; an announce is
// keyed by its run id, so it is queued once and channels that can drop a
// repeat (web, Slack) show it once.
const (
	outboxBatch      = 256
	outboxMaxBackoff = 5 * time.Minute
	sendTimeout      = 60 * time.Second
)

// maxSends caps the sends in flight at once (one per destination).
const maxSends = 256

// storeCallTimeout bounds a pass's claim transaction and the look at when
// the next item is due: a store that hangs (a dead PostgreSQL connection)
// makes the pass fail and be made again, instead of stopping delivery.
const storeCallTimeout = 30 * time.Second

// outboxStore is what the deliverer reads and writes: the outbox, and the
// stored files its items carry.
type outboxStore interface {
	store.Outbox
	OutboxFiles(ctx context.Context, outboxID int64) ([]store.FileRef, error)
	OpenFile(ctx context.Context, id string) (io.ReadCloser, store.FileRef, error)
}

// outboxDeps are the few things the deliverer uses; the Gateway wires
// them (New).
type outboxDeps struct {
	db      outboxStore
	replica string        // this replica's id: the holder of its claims
	poll    time.Duration // how often to look for items other replicas left; 0 = one process (SQLite)
	tell    func()        // passes a wake-up on to the other replicas
	// channel is the running adapter of a channel (nil: none); sendsOn the
	// channels whose items this replica sends (nil: every one).
	channel func(channels.Name) channels.Channel
	sendsOn func() []string
	// limits are outbox.maxAttempts and outbox.maxAgeHours (SPEC §27),
	// read at every pass.
	limits func() store.OutboxLimits
	// changed tells the console an item changed state.
	changed func()
	// uncertainKey is the channel's policy for a part whose send outcome
	// is unknown, with the key of the channel's section that sets it.
	uncertainKey func(channels.Name) (channels.Uncertain, string)
	// retryWrite runs a store write until the store takes it (an outage),
	// under writeCtx, which ends at shutdown.
	retryWrite func(ctx context.Context, what string, log *zap.Logger, write func(context.Context) error) error
	writeCtx   context.Context
	clock      agent.Clock
	metrics    *metrics
	tracer     *telemetry.Tracer
	log        *zap.Logger
}

type deliverer struct {
	outboxDeps
	wake chan struct{}
	// sent is nudged when a send ended: a pass follows only if an item is
	// due then (its destination's next one, say), not at every send.
	sent chan struct{}

	// mu guards the sends in flight and what a pass claimed. A claimed item
	// is the oldest pending one of its destination and no other replica's,
	// so a destination has at most one send in flight across the replicas
	// and a message is never sent by two passes. mu is never held across
	// store I/O: hand runs on a turn's lane or a run's slot, and a slow
	// store must not stop those (a pass releases it for its transaction and
	// checks, after, which sends ended meanwhile: ended).
	mu       sync.Mutex
	inflight int  // sends in flight (≤ limit, but for a hand during a pass's transaction)
	limit    int  // maxSends (smaller in tests)
	started  bool // the first pass (which takes back this replica's own claims) was made; false again when claims are owed back
	// ended are the ids of the items whose sends ended during a pass's
	// store transaction (nil outside one).
	ended map[int64]bool
	// ctx is the delivery loop's, set by its passes: sends handed over
	// (hand) run under it as a pass's do.
	ctx context.Context
	// sending are the ids of the items whose send is in flight here.
	sending map[int64]bool
	// again are the ids of items in sending that a pass claimed again: the
	// send ends by taking this replica's claims back (see pass).
	again map[int64]bool
	sends sync.WaitGroup
}

func newDeliverer(deps outboxDeps) *deliverer {
	return &deliverer{outboxDeps: deps, wake: make(chan struct{}, 1), sent: make(chan struct{}, 1), limit: maxSends, sending: map[int64]bool{}, again: map[int64]bool{}}
}

// wakeUp asks for a delivery pass now, here and on the other replicas (an
// item may be for a channel another replica runs).
func (d *deliverer) wakeUp() {
	d.wakeLocal()
	d.tell()
}

// wakeLocal asks for a delivery pass of this replica now.
func (d *deliverer) wakeLocal() { nudge(d.wake) }

// run makes delivery passes until ctx ends. Sends it started go on (each
// with its own deadline): shutdown stops the loop first, then makes the
// last pass with flush, which waits for them. With other replicas it looks
// at least every poll for items they left or could not send.
func (d *deliverer) run(ctx context.Context) {
	for {
		full := d.pass(ctx)
		if ctx.Err() != nil {
			return
		}
		if !full && !d.idle(ctx) {
			return
		}
	}
}

// idle waits until the next pass is due: the earliest time an item not in
// flight here is due (at least 5 ms on: a due item this replica cannot
// take, on a channel it does not run, is not looked at in a busy loop), at
// most a minute (or poll), a wake-up (a new item, an operator's retry) or
// a send's end when an item is due by then, or a wake-up that asks for
// this replica's claims back. Dead letters are buried at the next pass, so
// at most a minute (or poll) after they would have been claimed. It
// reports false when ctx ended.
func (d *deliverer) idle(ctx context.Context) bool {
	floor := 5 * time.Millisecond
	for {
		wait := time.Minute
		if d.poll > 0 {
			wait = d.poll
		}
		nctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
		next, ok, err := d.db.NextOutboxAt(nctx, d.replica)
		cancel()
		if err == nil && ok {
			wait = min(wait, max(next.Sub(d.clock.Now()), floor))
		}
		if d.owed() {
			// NextOutboxAt leaves this replica's claims out: those a failed
			// pass may have made wait for no item's time.
			wait = min(wait, owedRetry)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-d.wake:
			t.Stop()
			if d.owed() {
				return true // this replica's claims are to be taken back
			}
			// A new item (an announce, a reply behind another one of its
			// chat) is often not due for a pass: the delivery of the item
			// before it claims it (DeliverOutbox). Look first.
			floor = 0
		case <-t.C:
			return true
		case <-d.sent:
			t.Stop()
			if d.owed() {
				// A claim of this replica's waits for room (a reply handed
				// while the sends were full, a pass that did not start all it
				// claimed): NextOutboxAt leaves it out, so pass now.
				return true
			}
			floor = 0 // an item due now is passed at once
		}
	}
}

// owed reports whether this replica's claims are to be taken back by the
// next pass, and there is room to send them.
func (d *deliverer) owed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.started && d.inflight < d.limit
}

// owedRetry is how soon a pass that failed (its claims may have been
// committed with the answer lost) is made again, when no send's end or
// wake-up comes first.
const owedRetry = time.Second

// flush makes one last delivery pass during shutdown and waits for the
// sends in flight until ctx ends (each send has its own deadline too).
func (d *deliverer) flush(ctx context.Context) {
	d.pass(ctx)
	done := make(chan struct{})
	go func() { d.sends.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		d.log.Warn("shutdown grace ended with sends in flight; they stay queued for the next start")
	}
}

// pass claims the due messages and starts a send for each: the store
// hands out only the oldest pending message of each destination, so a
// destination's messages go out in order, and each send runs on its own so
// a slow, failing or rate-limited chat never holds up another. It reports
// whether more may be due right away.
func (d *deliverer) pass(ctx context.Context) bool {
	d.mu.Lock()
	inflight := d.inflight
	room := d.limit - inflight
	if room <= 0 {
		d.mu.Unlock()
		d.log.Warn("outbox: too many sends in flight; the rest wait", zap.Int("inflight", inflight))
		return false // a send's end passes again if claims are owed back (idle)
	}
	limit := min(outboxBatch, room)
	reclaim := !d.started
	// A hand or a send's end that asks for the claims back during the
	// transaction clears started again.
	d.started = true
	d.ended = map[int64]bool{}
	d.mu.Unlock()
	// Dead letters are buried (SPEC §27) in the claim's transaction, before
	// it, so a dead item is never claimed. Passes are one at a time (the
	// loop's, then flush's after the loop ended).
	lim := d.limits()
	pctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	got, err := d.db.PassOutbox(pctx, store.Claim{Holder: d.replica, Reclaim: reclaim, Limit: limit}, d.sendsOn(), lim, d.clock.Now())
	cancel()
	d.mu.Lock()
	defer d.mu.Unlock()
	ended := d.ended
	d.ended = nil
	d.buried(got.Dead, lim)
	items := got.Claimed
	if err != nil {
		if ctx.Err() == nil || reclaim {
			if ctx.Err() == nil {
				d.log.Error("read outbox", zap.Error(err))
			}
			// The claim may have been committed with its answer lost (the
			// connection dropped): the next pass takes this replica's own
			// claims back, so those items are not left until a restart.
			d.started = false
		}
		return false
	}
	d.ctx = ctx
	for i := range items {
		it := items[i]
		if ended[it.ID] || d.inflight >= d.limit && !d.sending[it.ID] {
			// Its send ended during the transaction, which may have
			// claimed it before the send let it go or delivered it; or
			// hands took the room meanwhile. Not sent from here: the next
			// pass takes this replica's claims back and reads it afresh.
			d.reclaimLocked()
			continue
		}
		if d.sending[it.ID] {
			// Its send is still in flight here: either this pass took back
			// the claim that send holds, or the send has already let the item
			// go (MarkRetry committed, the retry already due — a mark retried
			// through an outage can commit after its retry time) and is
			// waiting for d.mu, and this pass claimed the item afresh. Then
			// nothing here would send it or let it go, and its destination
			// would be wedged until a restart. So once that send ends, the
			// next pass takes this replica's own claims back.
			d.again[it.ID] = true
			d.log.Debug("outbox item claimed again while its send is in flight", zap.Int64("outboxId", it.ID))
			continue
		}
		d.startLocked(ctx, it)
	}
	return len(items) == limit
}

// hand starts the send of it, which a turn's completion claimed for this
// replica in its own transaction (store.TurnEnd.ClaimReply): a reply goes
// out without a pass of its own. Without room for it, or with no pass
// made yet (or the loop stopped), the next pass takes the claim back.
func (d *deliverer) hand(it store.OutboxItem) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx == nil || d.ctx.Err() != nil || d.inflight >= d.limit || d.sending[it.ID] {
		d.reclaimLocked()
		return
	}
	d.startLocked(d.ctx, it)
}

// reclaim makes the next pass take this replica's own claims back, now.
func (d *deliverer) reclaim() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reclaimLocked()
}

// reclaimLocked is reclaim with d.mu held.
func (d *deliverer) reclaimLocked() {
	d.started = false
	d.wakeLocal()
}

// startLocked starts the send of the claimed item it under d.mu, counted
// in flight.
func (d *deliverer) startLocked(ctx context.Context, it store.OutboxItem) {
	d.sending[it.ID] = true
	d.inflight++
	d.sends.Add(1)
	go func() {
		defer d.sends.Done()
		next, reclaim := d.deliver(ctx, d.channel(it.Origin.Channel), &it)
		d.mu.Lock()
		d.inflight--
		delete(d.sending, it.ID)
		if d.ended != nil {
			d.ended[it.ID] = true
		}
		again := d.again[it.ID] || reclaim
		if again {
			delete(d.again, it.ID)
			d.started = false
		}
		handed := false
		if next != nil {
			// The delivery claimed its destination's next item: it goes
			// out now, without a pass (or the next pass takes it back).
			if !again && ctx.Err() == nil && d.inflight < d.limit && !d.sending[next.ID] {
				d.startLocked(ctx, *next)
				handed = true
			} else {
				d.started, again = false, true
			}
		}
		d.mu.Unlock()
		d.changed()
		switch {
		case again:
			d.wakeLocal() // a pass takes this replica's claims back
		case !handed:
			nudge(d.sent) // the next message to this destination may be due
		}
	}()
}

// buried reports the dead letters a pass made of the items past the
// outbox's limits lim before they would be claimed (SPEC §27): each stops
// blocking its chat, is counted and logged at error level, and waits for
// an operator's retry or drop. Items whose send is in flight here are this
// replica's claims and not buried.
func (d *deliverer) buried(dead []store.OutboxItem, lim store.OutboxLimits) {
	if len(dead) > 0 {
		d.changed()
	}
	for _, it := range dead {
		d.metrics.dead.WithLabelValues(string(it.Origin.Channel)).Inc()
		d.log.Error("message is a dead letter: not retried any more; `herald outbox retry|drop <id>` or the console's outbox view decides",
			zap.Int64("outboxId", it.ID), zap.String("channel", string(it.Origin.Channel)), zap.String("destination", it.Origin.String()),
			zap.String("sessionKey", it.SessionKey), zap.Int("attempts", it.Attempts), zap.Time("createdAt", it.CreatedAt),
			zap.String("lastError", it.LastError), zap.Int("maxAttempts", lim.MaxAttempts), zap.Duration("maxAge", lim.MaxAge))
	}
}

// deliver sends it and records the outcome. A delivery that claimed its
// destination's next item in the same transaction returns it (to be sent
// now); reclaim reports that a write whose outcome is unknown may have
// claimed one unseen (the next pass takes this replica's claims back).
func (d *deliverer) deliver(ctx context.Context, ch channels.Channel, it *store.OutboxItem) (next *store.OutboxItem, reclaim bool) {
	log := d.log.With(itemLogFields(it)...)
	now := d.clock.Now()
	if ch == nil {
		d.retry(ctx, it, now.Add(time.Minute), fmt.Sprintf("channel %q is not enabled", it.Origin.Channel))
		log.Warn("no such channel for a queued message; will retry")
		return nil, false
	}
	// Stopping the delivery loop does not cut a send: an interrupted send
	// would leave its outcome unknown. Each send has its own deadline.
	// Files go after the text, one part each (SPEC §18); a send that
	// carries files gets a deadline per file on top.
	files := it.Files
	var err error
	if !it.FilesKnown {
		if files, err = d.db.OutboxFiles(context.WithoutCancel(ctx), it.ID); err != nil {
			d.retry(ctx, it, now.Add(5*time.Second), "read the message's files: "+err.Error())
			log.Warn("could not read a queued message's files; will retry", zap.Error(err))
			return nil, false
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sendTimeout*time.Duration(1+len(files)))
	var mark *deliveryMark
	if ps, ok := ch.(channels.PartSender); ok {
		err = d.sendParts(sctx, ch, ps, it, files, log)
	} else {
		if strings.TrimSpace(it.Text) != "" || len(files) == 0 {
			if len(files) == 0 {
				// One message delivers the item: a channel that stores it
				// (the web chat's log) marks the item delivered with it,
				// and claims the destination's next item.
				at := d.clock.Now()
				mark = &deliveryMark{id: it.ID, at: at, next: d.nextClaim(at)}
				sctx = context.WithValue(sctx, deliveryMarkKey{}, mark)
			}
			_, span := d.startSpan(sctx, it, it.Text, 1, 1)
			err = ch.Send(sctx, it.Origin, channels.Message{Kind: it.Kind, Text: it.Text, RunID: it.RunID, ID: strconv.FormatInt(it.ID, 10), DraftRef: it.DraftRef})
			endSpan(span, "", err)
		}
		// A channel without part progress (the web chat) drops a file
		// it has already by the part's key.
		for i := 0; err == nil && i < len(files); i++ {
			msg := d.fileMessage(it, files[i], i+2, len(files)+1)
			if fs, ok := ch.(channels.FileSender); ok && fits(fs, files[i]) {
				_, err = fs.SendFile(sctx, it.Origin, msg)
			} else {
				err = ch.Send(sctx, it.Origin, channels.Message{Kind: channels.KindSystem, Text: notSent(ch, files[i]), ID: msg.ID + "-" + strconv.Itoa(msg.Part)})
			}
		}
	}
	cancel()
	// A send can take long (a channel waiting out a short rate limit itself,
	// a slow network): retry delays count from when it returned.
	now = d.clock.Now()
	var ra *channels.RetryAfterError
	switch {
	case err == nil && mark != nil && mark.done:
		next = mark.next.Item
		d.metrics.delivered.WithLabelValues(string(it.Kind)).Inc()
		log.Debug("delivered", zap.Int("attempt", it.Attempts+1))
		d.followed(ctx, mark.followed)
	case err == nil:
		at := d.clock.Now()
		nc := d.nextClaim(at)
		tries := 0
		if err := d.retryWrite(d.writeCtx, "mark delivered", log, func(wctx context.Context) error {
			tries++
			return d.db.DeliverOutbox(context.WithoutCancel(wctx), it.ID, at, nc)
		}); err != nil {
			log.Error("mark delivered", zap.Error(err))
		}
		next, reclaim = nc.Item, tries > 1
		d.metrics.delivered.WithLabelValues(string(it.Kind)).Inc()
		log.Debug("delivered", zap.Int("attempt", it.Attempts+1))
	case errors.Is(err, channels.ErrPermanent):
		reason := err.Error()
		if err := d.retryWrite(d.writeCtx, "mark failed", log, func(wctx context.Context) error {
			return d.db.MarkFailed(context.WithoutCancel(wctx), it.ID, now, reason)
		}); err != nil {
			log.Error("mark failed", zap.Error(err))
		}
		d.metrics.failed.WithLabelValues(string(it.Kind)).Inc()
		log.Error("message rejected by the channel; giving up", zap.Error(err))
	case errors.As(err, &ra):
		d.retry(ctx, it, now.Add(ra.After), err.Error())
		log.Warn("rate limited; will retry", zap.Duration("after", ra.After))
	default:
		backoff := min(time.Second<<min(it.Attempts, 12), outboxMaxBackoff)
		d.retry(ctx, it, now.Add(backoff), err.Error())
		log.Warn("send failed; will retry", zap.Error(err), zap.Duration("after", backoff), zap.Int("attempt", it.Attempts+1))
	}
	// A failed send whose store write was to claim the next item (the web
	// chat's, whose commit may have gone through unanswered) may leave an
	// unseen claim: the next pass takes them back.
	return next, reclaim || err != nil && mark != nil
}

// followed counts, logs and traces the items a delivery's store write
// delivered after its own (webLog.Append: the web chat's items queued
// behind it), as their own sends would have.
func (d *deliverer) followed(ctx context.Context, items []store.OutboxItem) {
	for i := range items {
		d.recordDelivered(ctx, &items[i], true)
	}
}

// recordDelivered is the span, count and debug line of item it, which a
// store write delivered without a send of its own (withPrevious: after
// the item that write delivered).
func (d *deliverer) recordDelivered(ctx context.Context, it *store.OutboxItem, withPrevious bool) {
	_, span := d.startSpan(ctx, it, it.Text, 1, 1)
	endSpan(span, "", nil)
	d.metrics.delivered.WithLabelValues(string(it.Kind)).Inc()
	if ce := d.log.Check(zap.DebugLevel, "delivered"); ce != nil {
		ce.Write(itemLogFields(it, zap.Int("attempt", it.Attempts+1), zap.Bool("withPrevious", withPrevious))...)
	}
}

// itemLogFields are the fields that name outbox item it in the
// deliverer's log lines about it, then more.
func itemLogFields(it *store.OutboxItem, more ...zap.Field) []zap.Field {
	f := make([]zap.Field, 0, 6+len(more))
	f = append(f, zap.Int64("outboxId", it.ID), zap.String("channel", string(it.Origin.Channel)),
		zap.String("sessionKey", it.SessionKey), zap.String("agentId", it.AgentID))
	if it.RunID != "" {
		f = append(f, zap.String("runId", it.RunID))
	}
	f = append(f, telemetry.LogField(it.TraceParent))
	return append(f, more...)
}

// deliveredWith records the delivery of it that a store write made
// itself, in the commit that added the item (a web reply or announce
// stored by its turn's completion or run's end: store.WebDelivery), as a
// send's end would: its span, count and log line, then next, the chat's
// next item claimed with it, goes out now; nothingElse says the write
// added nothing else to the outbox.
func (d *deliverer) deliveredWith(ctx context.Context, it *store.OutboxItem, next *store.OutboxItem, nothingElse bool) {
	d.recordDelivered(ctx, it, false)
	d.changed()
	switch {
	case next != nil:
		d.hand(*next)
	case !nothingElse || d.poll > 0:
		// The write added more (a run's end: a pause notice, due a moment
		// after the claim's now), or another replica's item committed
		// while it ran may be next: look at what is due. In one process a
		// write that added nothing else delivered the last item of its
		// chat (one writer) and claimed nothing after it.
		nudge(d.sent)
	}
}

// deliveryMark is the outbox item a send delivers whole, carried in the
// send's context to a channel's store write (webLog.Append): the message
// is stored and the item marked delivered in one transaction, done then
// set, and the deliverer writes no mark of its own. The write may deliver
// the destination's next items with it (followed); next is then the one
// after them.
type deliveryMark struct {
	id       int64
	at       time.Time
	next     *store.NextClaim   // the destination's next item, claimed with the mark
	done     bool               // set by the write that marked it; read after the send returned
	followed []store.OutboxItem // the items the write delivered after this one
}

type deliveryMarkKey struct{}

// deliveryOf is the item the send of ctx delivers whole (nil for none).
func deliveryOf(ctx context.Context) *deliveryMark {
	m, _ := ctx.Value(deliveryMarkKey{}).(*deliveryMark)
	return m
}

// sendParts splits the message at the channel's limit and sends the parts
// not sent yet, recording each one, so a restart or a retry resumes after
// the last part on the platform. A part whose send started but has no
// recorded outcome (the process died during it) is looked up where the
// channel can (Slack), else re-sent or skipped by the channel's
// uncertainDelivery setting (Telegram), and counted either way.
func (d *deliverer) sendParts(ctx context.Context, ch channels.Channel, ps channels.PartSender, it *store.OutboxItem, files []store.FileRef, log *zap.Logger) error {
	var parts []string
	if strings.TrimSpace(it.Text) != "" {
		parts = channels.Split(it.Text, ps.PartLimit())
	}
	bg := context.WithoutCancel(ctx)
	total := len(parts) + len(files)
	for p := it.PartsSent; p < total; p++ {
		if p >= len(parts) {
			if err := d.sendFilePart(ctx, ch, ps, it, files[p-len(parts)], p, total, log); err != nil {
				return err
			}
			continue
		}
		msg := channels.Message{Kind: it.Kind, Text: parts[p], RunID: it.RunID, ID: strconv.FormatInt(it.ID, 10), Part: p + 1, Parts: total}
		if p == 0 {
			msg.DraftRef = it.DraftRef // the first part replaces the draft
		}
		// Editing a draft into the final text is idempotent: an uncertain
		// edit is simply made again.
		if it.SendingPart == p && msg.DraftRef == "" {
			action := d.uncertain(ctx, ch, it, msg, log)
			d.metrics.uncertain.WithLabelValues(string(it.Origin.Channel), action).Inc()
			if action != "resend" {
				if err := d.db.EndPart(bg, it.ID, p, ""); err != nil {
					return err
				}
				continue
			}
		}
		if err := d.db.BeginPart(bg, it.ID, p); err != nil {
			return err
		}
		_, span := d.startSpan(ctx, it, parts[p], p+1, total)
		pid, err := ps.SendPart(ctx, it.Origin, msg)
		endSpan(span, pid, err)
		if err != nil {
			if ctx.Err() == nil {
				// The platform answered with an error: the part is not there.
				// (A send cut by the deadline stays uncertain.)
				_ = d.db.AbortPart(bg, it.ID)
			}
			return fmt.Errorf("part %d/%d: %w", p+1, total, err)
		}
		if err := d.db.EndPart(bg, it.ID, p, pid); err != nil {
			return err
		}
	}
	return nil
}

// uncertain decides about a part whose send outcome is unknown: "found"
// (a lookup found it on the platform), "skip" (the channel's setting says
// not to risk a duplicate) or "resend".
func (d *deliverer) uncertain(ctx context.Context, ch channels.Channel, it *store.OutboxItem, msg channels.Message, log *zap.Logger) string {
	if f, ok := ch.(channels.PartFinder); ok {
		_, found, err := f.FindPart(ctx, it.Origin, msg)
		switch {
		case err != nil:
			log.Warn("could not look up a part whose delivery is uncertain; sending it again", zap.Int("part", msg.Part), zap.Error(err))
		case found:
			log.Info("part whose delivery was uncertain is already posted", zap.Int("part", msg.Part))
			return "found"
		}
		return "resend"
	}
	if d.uncertainPolicy(it.Origin.Channel) == channels.UncertainSkip {
		_, key := d.uncertainKey(it.Origin.Channel)
		log.Warn(fmt.Sprintf("part whose delivery is uncertain skipped (channels.%s.%s: skip)", it.Origin.Channel, key), zap.Int("part", msg.Part))
		return "skip"
	}
	log.Info("part whose delivery is uncertain sent again", zap.Int("part", msg.Part))
	return "resend"
}

// uncertainPolicy is the channel module's uncertain-delivery policy
// (resend for a channel that is not a module).
func (d *deliverer) uncertainPolicy(name channels.Name) channels.Uncertain {
	p, _ := d.uncertainKey(name)
	return p
}

// startSpan starts the herald.deliver span of one part of a traced
// message, in the trace of the turn or run that wrote it; an untraced
// message (a command's answer) gets none.
func (d *deliverer) startSpan(ctx context.Context, it *store.OutboxItem, text string, part, parts int) (context.Context, trace.Span) {
	if it.TraceParent == "" {
		return ctx, trace.SpanFromContext(context.Background())
	}
	ctx, span := d.tracer.Start(telemetry.Resume(ctx, it.TraceParent), telemetry.SpanDeliver, trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(telemetry.AttrChannel.String(string(it.Origin.Channel)), telemetry.AttrDestination.String(store.Destination(it.Origin)),
			telemetry.AttrOutboxID.Int64(it.ID), telemetry.AttrKind.String(string(it.Kind)), telemetry.AttrPart.Int(part),
			telemetry.AttrParts.Int(parts), telemetry.AttrAttempt.Int(it.Attempts+1), telemetry.AttrSessionKey.String(it.SessionKey),
			telemetry.AttrReplica.String(d.replica))
		if it.RunID != "" {
			span.SetAttributes(telemetry.AttrRunID.String(it.RunID))
		}
		if d.tracer.RecordContent() {
			span.SetAttributes(telemetry.AttrText.String(telemetry.Content(text)))
		}
	}
	return ctx, span
}

// endSpan ends a herald.deliver span with the part's platform id or the
// send's error (a channel's error names the platform's answer, not the
// message).
func endSpan(span trace.Span, platformID string, err error) {
	if span.IsRecording() {
		if platformID != "" {
			span.SetAttributes(telemetry.AttrPlatformID.String(platformID))
		}
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// retry puts the item off until next. A store that does not take that is
// retried (an outage), so the item is not left claimed until a restart.
func (d *deliverer) retry(ctx context.Context, it *store.OutboxItem, next time.Time, reason string) {
	if err := d.retryWrite(d.writeCtx, "mark retry", d.log, func(wctx context.Context) error {
		return d.db.MarkRetry(context.WithoutCancel(wctx), it.ID, next, reason)
	}); err != nil {
		d.log.Error("mark retry", zap.Error(err))
	}
	d.metrics.retried.WithLabelValues(string(it.Kind)).Inc()
}

// fileMessage is the outbound message of file f, part part of parts: its
// caption as text, its bytes streamed from the store.
func (d *deliverer) fileMessage(it *store.OutboxItem, f store.FileRef, part, parts int) channels.Message {
	id := f.ID
	return channels.Message{Kind: it.Kind, Text: f.Caption, RunID: it.RunID, ID: strconv.FormatInt(it.ID, 10), Part: part, Parts: parts,
		File: &channels.OutFile{ID: f.ID, Name: f.Name, MIME: f.MIME, Size: f.Size, Open: func(ctx context.Context) (io.ReadCloser, error) {
			rc, _, err := d.db.OpenFile(ctx, id)
			return rc, err
		}}}
}

// fits reports whether f is within the channel's own upload limit.
func fits(fs channels.FileSender, f store.FileRef) bool {
	limit := fs.FileLimit()
	return limit <= 0 || f.Size <= limit
}

// notSent is the line that says why file f did not go to ch.
func notSent(ch channels.Channel, f store.FileRef) string {
	fs, ok := ch.(channels.FileSender)
	if !ok {
		return fmt.Sprintf("📎 %s was not sent: %s does not take files from Herald.", f.Name, ch.Name())
	}
	return fmt.Sprintf("📎 %s was not sent: it is %s, over %s's upload limit of %s.", f.Name, media.Size(f.Size), ch.Name(), media.Size(fs.FileLimit()))
}

// sendFilePart sends file f as part p (0-based) of total, recorded like a
// text part; a file the channel cannot take goes as the line saying why.
// A file part whose outcome is unknown is looked up where the channel can
// (FileFinder), else skipped or sent again as the text parts are.
func (d *deliverer) sendFilePart(ctx context.Context, ch channels.Channel, ps channels.PartSender, it *store.OutboxItem, f store.FileRef, p, total int, log *zap.Logger) error {
	bg := context.WithoutCancel(ctx)
	msg := d.fileMessage(it, f, p+1, total)
	fs, ok := ch.(channels.FileSender)
	if !ok || !fits(fs, f) {
		log.Warn("file not sent: the channel does not take it", zap.String("file", f.Name), zap.Int64("size", f.Size))
		msg.File, msg.Kind, msg.Text = nil, channels.KindSystem, notSent(ch, f)
	}
	if it.SendingPart == p {
		action := "resend"
		if ff, ok := ch.(channels.FileFinder); ok && msg.File != nil {
			if _, found, err := ff.FindFile(ctx, it.Origin, msg); err == nil && found {
				action = "found"
			}
		} else if d.uncertainPolicy(it.Origin.Channel) == channels.UncertainSkip {
			action = "skip"
		}
		d.metrics.uncertain.WithLabelValues(string(it.Origin.Channel), action).Inc()
		if action != "resend" {
			log.Info("file part whose delivery was uncertain not sent again", zap.Int("part", p+1), zap.String("action", action))
			return d.db.EndPart(bg, it.ID, p, "")
		}
	}
	if err := d.db.BeginPart(bg, it.ID, p); err != nil {
		return err
	}
	_, span := d.startSpan(ctx, it, msg.Text, p+1, total)
	var pid string
	var err error
	if msg.File != nil {
		pid, err = fs.SendFile(ctx, it.Origin, msg)
	} else {
		pid, err = ps.SendPart(ctx, it.Origin, msg)
	}
	endSpan(span, pid, err)
	if err != nil {
		if ctx.Err() == nil {
			_ = d.db.AbortPart(bg, it.ID)
		}
		return fmt.Errorf("part %d/%d (file %s): %w", p+1, total, f.Name, err)
	}
	return d.db.EndPart(bg, it.ID, p, pid)
}

// outboxLimits are the current config's dead-letter limits (SPEC §27).
func (g *Gateway) outboxLimits() store.OutboxLimits {
	o := g.cfg().Outbox
	return store.OutboxLimits{MaxAttempts: o.MaxAttempts, MaxAge: time.Duration(o.MaxAgeHours) * time.Hour}
}

// WakeOutbox asks for a delivery pass now, here and on the other replicas
// (an operator retried an item).
func (g *Gateway) WakeOutbox() { g.outbox.wakeUp() }

// nextClaim asks the write that marks an item delivered at at to claim
// the same chat's next item for this replica, within the outbox's limits.
func (d *deliverer) nextClaim(at time.Time) *store.NextClaim {
	return &store.NextClaim{Holder: d.replica, Limits: d.limits(), Now: at}
}
