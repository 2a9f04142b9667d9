package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
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

type deliverer struct {
	g    *Gateway
	log  *zap.Logger
	wake chan struct{}
	mu   sync.Mutex // one delivery pass at a time

	// blocked holds, per channel, the destinations (chat + thread) that must
	// wait until a time: a message to them was rate-limited or failed, and
	// later messages to the same place must not overtake it. Each channel's
	// map is used only by that channel's delivery goroutine, during a pass.
	blocked map[channels.Name]map[string]time.Time
}

func newDeliverer(g *Gateway) *deliverer {
	return &deliverer{g: g, log: g.log.Named("outbox"), wake: make(chan struct{}, 1),
		blocked: make(map[channels.Name]map[string]time.Time)}
}

// wakeUp asks for a delivery pass now.
func (d *deliverer) wakeUp() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *deliverer) run(ctx context.Context) {
	for {
		full := d.pass(ctx)
		if ctx.Err() != nil {
			return
		}
		if full {
			continue
		}
		wait := time.Minute
		if next, ok, err := d.g.db.NextOutboxAt(ctx); err == nil && ok {
			wait = min(wait, max(next.Sub(d.g.clock.Now()), 5*time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-d.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// flush makes one last delivery pass during shutdown.
func (d *deliverer) flush(ctx context.Context) { d.pass(ctx) }

// pass delivers what is due: channels in parallel, each channel's messages
// in order. It reports whether there may be more due right away.
func (d *deliverer) pass(ctx context.Context) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	items, err := d.g.db.DueOutbox(ctx, d.g.clock.Now(), outboxBatch)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Error("read outbox", zap.Error(err))
		}
		return false
	}
	byChannel := make(map[channels.Name][]store.OutboxItem)
	for _, it := range items {
		byChannel[it.Origin.Channel] = append(byChannel[it.Origin.Channel], it)
	}
	var wg sync.WaitGroup
	for name, list := range byChannel {
		blocked, ok := d.blocked[name]
		if !ok {
			blocked = make(map[string]time.Time)
			d.blocked[name] = blocked
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch := d.g.channels[name]
			for i := range list {
				d.deliver(ctx, ch, &list[i], blocked)
			}
		}()
	}
	wg.Wait()
	return len(items) == outboxBatch
}

func (d *deliverer) deliver(ctx context.Context, ch channels.Channel, it *store.OutboxItem, blocked map[string]time.Time) {
	log := d.log.With(zap.Int64("outboxId", it.ID), zap.String("channel", string(it.Origin.Channel)))
	if it.RunID != "" {
		log = log.With(zap.String("runId", it.RunID))
	}
	now := d.g.clock.Now()
	// Keep one destination's messages in order: once one is rate-limited,
	// the rest wait with it.
	dest := it.Origin.String()
	if until, ok := blocked[dest]; ok {
		if now.Before(until) {
			if err := d.g.db.PostponeOutbox(context.WithoutCancel(ctx), it.ID, until); err != nil {
				log.Error("postpone", zap.Error(err))
			}
			return
		}
		delete(blocked, dest)
	}
	if ch == nil {
		d.retry(ctx, it, now.Add(time.Minute), fmt.Sprintf("channel %q is not enabled", it.Origin.Channel))
		log.Warn("no such channel for a queued message; will retry")
		return
	}
	sctx, cancel := context.WithTimeout(ctx, sendTimeout)
	err := ch.Send(sctx, it.Origin, channels.Message{Kind: it.Kind, Text: it.Text, RunID: it.RunID})
	cancel()
	// A send can take long (a channel waiting out a short rate limit itself,
	// a slow network): retry delays count from when it returned.
	now = d.g.clock.Now()
	var ra *channels.RetryAfterError
	switch {
	case err == nil:
		delete(blocked, dest)
		if err := d.g.db.MarkDelivered(context.WithoutCancel(ctx), it.ID, d.g.clock.Now()); err != nil {
			log.Error("mark delivered", zap.Error(err))
		}
		d.g.metrics.delivered.WithLabelValues(string(it.Kind)).Inc()
		log.Debug("delivered", zap.Int("attempt", it.Attempts+1))
	case errors.Is(err, channels.ErrPermanent):
		delete(blocked, dest)
		if err := d.g.db.MarkFailed(context.WithoutCancel(ctx), it.ID, now, err.Error()); err != nil {
			log.Error("mark failed", zap.Error(err))
		}
		d.g.metrics.failed.WithLabelValues(string(it.Kind)).Inc()
		log.Error("message rejected by the channel; giving up", zap.Error(err))
	case errors.As(err, &ra):
		until := now.Add(ra.After)
		blocked[dest] = until
		d.retry(ctx, it, until, err.Error())
		log.Warn("rate limited; will retry", zap.Duration("after", ra.After))
	default:
		backoff := min(time.Second<<min(it.Attempts, 12), outboxMaxBackoff)
		blocked[dest] = now.Add(backoff)
		d.retry(ctx, it, now.Add(backoff), err.Error())
		log.Warn("send failed; will retry", zap.Error(err), zap.Duration("after", backoff), zap.Int("attempt", it.Attempts+1))
	}
}

func (d *deliverer) retry(ctx context.Context, it *store.OutboxItem, next time.Time, reason string) {
	if err := d.g.db.MarkRetry(context.WithoutCancel(ctx), it.ID, next, reason); err != nil {
		d.log.Error("mark retry", zap.Error(err))
	}
	d.g.metrics.retried.WithLabelValues(string(it.Kind)).Inc()
}
