package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/store"
)

// The live stream (GET /admin/api/events): server-sent events carrying the
// same objects as the API — "overview", "runs" and "outbox" — each sent
// when it differs from what the stream last sent. It looks when the gateway
// says something changed here (Live.Changed, at most every settle) and
// every poll for what other replicas changed (rebuilding only when a cheap
// fingerprint moved); at idle it only sends a comment every keepAlive.
const (
	settle    = 250 * time.Millisecond
	poll      = 5 * time.Second
	keepAlive = 25 * time.Second
)

// snapshot is what a stream sends, by event name.
func (c *Console) snapshot(ctx context.Context) (map[string]any, error) {
	o, err := c.overviewOf(ctx)
	if err != nil {
		return nil, err
	}
	tree, err := c.runTree(ctx, "")
	if err != nil {
		return nil, err
	}
	var items []store.OutboxItem
	for _, st := range []string{store.OutboxPending, store.OutboxFailed, store.OutboxDead} {
		part, err := c.opts.Store.OutboxInState(ctx, st, maxOutbox)
		if err != nil {
			return nil, err
		}
		items = append(items, part...)
	}
	return map[string]any{"overview": o, "runs": map[string]any{"runs": tree}, "outbox": map[string]any{"items": OutboxItems(items)}}, nil
}

// fingerprint is a cheap summary of what the snapshot shows, for the
// stream's periodic look: the backlog, the owed turns and the active runs.
// While a run is active the snapshot is rebuilt anyway (its runtime grows);
// "" means: rebuild.
func (c *Console) fingerprint(ctx context.Context) string {
	active, err := c.opts.Store.ListRuns(ctx, store.RunFilter{Statuses: []string{store.StatusQueued, store.StatusRunning, store.StatusAnnouncing}})
	if err != nil || len(active) > 0 {
		return ""
	}
	b, err := c.opts.Store.Backlog(ctx)
	if err != nil {
		return ""
	}
	owed, err := c.opts.Store.OwedIntake(ctx)
	if err != nil {
		return ""
	}
	newest, err := c.opts.Store.ListRuns(ctx, store.RunFilter{Limit: 1}) // a run that started and ended between two looks
	if err != nil {
		return ""
	}
	last := ""
	if len(newest) > 0 {
		last = newest[0].ID + "/" + newest[0].Status
	}
	return fmt.Sprintf("%d/%d/%d/%d/%d/%s", b.Pending, b.Failed, b.Dead, b.OldestAt.UnixMilli(), len(owed), last)
}

func (c *Console) events(w http.ResponseWriter, r *http.Request, actor string) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming is not supported here")
		return
	}
	select {
	case <-c.end:
		writeError(w, http.StatusServiceUnavailable, "the gateway is shutting down")
		return
	default:
	}
	c.mu.Lock()
	if c.streams >= maxStreams {
		c.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "too many console event streams are open; close one first")
		return
	}
	c.streams++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.streams--
		c.mu.Unlock()
	}()
	// The stream outlives the server's write timeout.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	fl.Flush()

	changed, stop := c.opts.Live.Changed()
	defer stop()
	ctx := r.Context()
	last := map[string][]byte{}
	send := func() bool {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		snap, err := c.snapshot(sctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("console events: state not read", zap.Error(err))
			}
			return ctx.Err() == nil
		}
		for _, name := range []string{"overview", "runs", "outbox"} {
			b, err := json.Marshal(snap[name])
			if err != nil || bytes.Equal(b, last[name]) {
				continue
			}
			last[name] = b
			if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b); err != nil {
				return false
			}
		}
		fl.Flush()
		return true
	}
	if !send() {
		return
	}
	seen := c.fingerprint(ctx)
	tick := time.NewTicker(poll)
	defer tick.Stop()
	alive := time.NewTicker(keepAlive)
	defer alive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.end:
			return
		case <-alive.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
			continue
		case <-tick.C:
			// Another replica's changes: rebuild only when the summary moved
			// (an idle stream costs four small queries a look).
			if f := c.fingerprint(ctx); f != "" && f == seen {
				continue
			} else {
				seen = f
			}
		case <-changed:
			seen = ""
			// Let a burst of changes settle into one look.
			t := time.NewTimer(settle)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-c.end:
				t.Stop()
				return
			case <-t.C:
			}
		}
		if !send() {
			return
		}
	}
}
