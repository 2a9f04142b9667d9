package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
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

// shared is one state read the open streams share: a stream asking for a
// read started at or after since gets the last one that did (waiting for it
// if it is still running) instead of making its own.
type shared[T any] struct {
	mu   sync.Mutex
	last *sharedRead[T]
}

type sharedRead[T any] struct {
	started time.Time
	done    chan struct{}
	val     T
	err     error
}

// get returns a read started at or after since, made by read if there is
// none. A read runs detached from the asking stream (it may end first) but
// within readTimeout.
func (s *shared[T]) get(ctx context.Context, since time.Time, read func(context.Context) (T, error)) (T, error) {
	s.mu.Lock()
	r := s.last
	if r == nil || r.started.Before(since) {
		r = &sharedRead[T]{started: time.Now(), done: make(chan struct{})}
		s.last = r
		s.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
		r.val, r.err = read(rctx)
		cancel()
		close(r.done)
		return r.val, r.err
	}
	s.mu.Unlock()
	select {
	case <-r.done:
		return r.val, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// readTimeout bounds one state read of the stream.
const readTimeout = 10 * time.Second

// nextPoll is when a stream looks next: on the wall clock's multiples of
// poll, the same instant for every stream, so that they share the look.
func nextPoll(poll time.Duration) time.Time {
	return time.Now().Truncate(poll).Add(poll)
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
	fingerprint := func(since time.Time) string {
		f, _ := c.fingerprints.get(ctx, since, func(ctx context.Context) (string, error) { return c.fingerprint(ctx), nil })
		return f
	}
	// seen is the fingerprint of the state last sent; it is taken before
	// the snapshot, so a change in between is seen at the next look.
	var seen string
	send := func(since time.Time, f string) bool {
		snap, err := c.snapshots.get(ctx, since, c.snapshot)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("console events: state not read", zap.Error(err))
			}
			return ctx.Err() == nil
		}
		seen = f
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
	since := time.Now()
	if !send(since, fingerprint(since)) {
		return
	}
	tick := time.NewTimer(time.Until(nextPoll(c.poll)))
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
			// (an idle stream costs four small queries a look, shared by
			// the streams looking at the same instant).
			since = time.Now().Truncate(c.poll)
			tick.Reset(time.Until(nextPoll(c.poll)))
			if f := fingerprint(since); f != "" && f == seen {
				continue
			}
		case <-changed:
			since = time.Now()
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
		if !send(since, fingerprint(since)) {
			return
		}
	}
}
