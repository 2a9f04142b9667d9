package gateway

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent"
)

// typingEvery repeats a typing notice while a turn runs (Telegram's lasts
// 5 s, Matrix's is sent with a 30 s timeout).
const typingEvery = 4 * time.Second

// editDraftEvery: a Drafter this slow or slower posts and edits messages.
const editDraftEvery = 500 * time.Millisecond

// liveCallTimeout bounds one typing or draft call to a platform.
const liveCallTimeout = 5 * time.Second

// liveReply shows a running turn in its chat (SPEC §16): typing while it
// runs and, on a channel that drafts, the reply as the model writes it. One
// goroutine, owned by the turn (stop waits for it), makes every platform
// call, so a slow platform never holds up the model's stream; drafts are
// throttled to the channel's DraftEvery and only the latest text is sent.
type liveReply struct {
	// save records the draft's ref with the owed message (or the run),
	// so a turn resumed after a crash edits the same draft; nil: kept in
	// memory only.
	save    func(ctx context.Context, ref string) error
	ch      channels.Channel
	to      channels.Origin
	log     *zap.Logger
	typer   channels.Typer
	drafter channels.Drafter

	mu    sync.Mutex
	text  string // the latest text of the reply; guarded by mu
	dirty bool   // text not yet drafted; guarded by mu
	ref   string // what the last Draft returned; guarded by mu

	wake chan struct{}
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

// startLive starts showing the turn of the owed message it in its chat;
// nil when the channel shows nothing live or channels.<name>.streaming is
// "off". A turn resumed after a crash goes on with the draft it had.
func (g *Gateway) startLive(cfg *config.Config, it store.Intake, log *zap.Logger) *liveReply {
	return g.startLiveAt(cfg, it.Origin, it.DraftRef, func(ctx context.Context, ref string) error {
		return g.db.SetIntakeDraft(ctx, it.ID, ref)
	}, log)
}

// startLiveAt starts showing a turn or run live at to, going on with the
// draft ref ("" = none); save records a new draft's ref.
func (g *Gateway) startLiveAt(cfg *config.Config, to channels.Origin, ref string, save func(context.Context, string) error, log *zap.Logger) *liveReply {
	ch := g.channel(to.Channel)
	if ch == nil || cfg.ChannelStreaming(string(to.Channel)) == "off" {
		return nil
	}
	l := &liveReply{save: save, ch: ch, to: to, log: log, ref: ref,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	l.typer, _ = ch.(channels.Typer)
	l.drafter, _ = ch.(channels.Drafter)
	if l.typer == nil && l.drafter == nil {
		return nil
	}
	go l.run()
	return l
}

// onText is the turn's agent.Turn.OnText: it records the text and wakes
// the loop; it never blocks the model's stream.
func (l *liveReply) onText(text string) {
	l.mu.Lock()
	l.text, l.dirty = text, true
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// textHook is onText when the channel drafts, else nil (no streaming).
func (l *liveReply) textHook() func(string) {
	if l == nil || l.drafter == nil {
		return nil
	}
	return l.onText
}

// stop ends the live view (typing off) and waits for the loop; it returns
// the draft's ref for the final delivery ("" when nothing was drafted).
func (l *liveReply) stop() string {
	if l == nil {
		return ""
	}
	l.once.Do(func() { close(l.quit) })
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ref
}

func (l *liveReply) run() {
	defer close(l.done)
	typing := func(on bool) {
		if l.typer == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), liveCallTimeout)
		defer cancel()
		if err := l.typer.Typing(ctx, l.to, on); err != nil {
			l.log.Debug("typing notice failed", zap.Bool("on", on), zap.Error(err))
		}
	}
	typing(true)
	defer typing(false)
	tick := time.NewTicker(typingEvery)
	defer tick.Stop()
	var last time.Time
	var pending <-chan time.Time // a throttled draft waiting for its time
	for {
		select {
		case <-l.quit:
			return
		case <-tick.C:
			typing(true)
		case <-l.wake:
			if last.IsZero() && l.drafter.DraftEvery() >= editDraftEvery {
				// On a channel that drafts by posting and editing messages,
				// the first draft waits DraftEvery too: a reply written
				// faster than that is simply posted when it is done. (The
				// web chat's deltas cost nothing and start at once.)
				last = time.Now()
			}
			if wait := l.drafter.DraftEvery() - time.Since(last); wait > 0 {
				if pending == nil {
					pending = time.After(wait)
				}
				continue
			}
			pending = l.draftAt(&last)
		case <-pending:
			pending = l.draftAt(&last)
		}
	}
}

// draftAt drafts now and returns when to try again (nil: when new text
// comes): a failed draft is retried after DraftEvery, a rate-limited one
// after the platform's Retry-After.
func (l *liveReply) draftAt(last *time.Time) <-chan time.Time {
	backoff, failed := l.draft()
	*last = time.Now().Add(backoff)
	if !failed {
		return nil
	}
	return time.After(l.drafter.DraftEvery() + backoff)
}

// draft sends the latest text, if it changed since the last draft. It
// returns how much longer than DraftEvery to wait before the next one (a
// platform's Retry-After) and whether it failed.
func (l *liveReply) draft() (backoff time.Duration, failed bool) {
	l.mu.Lock()
	text, dirty, ref := l.text, l.dirty, l.ref
	l.dirty = false
	l.mu.Unlock()
	if !dirty || text == "" {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), liveCallTimeout)
	defer cancel()
	newRef, err := l.drafter.Draft(ctx, l.to, ref, text)
	if err != nil {
		l.mu.Lock()
		l.dirty = true // the next draft sends the latest text again
		l.mu.Unlock()
		var ra *channels.RetryAfterError
		if errors.As(err, &ra) {
			l.log.Info("draft update rate limited", zap.Duration("retryAfter", ra.After))
			return ra.After, true
		}
		l.log.Debug("draft update failed", zap.Error(err))
		return 0, true
	}
	l.mu.Lock()
	l.ref = newRef
	l.mu.Unlock()
	if newRef != "" && newRef != ref && l.save != nil {
		// Kept with the owed message: a turn resumed after a crash edits
		// this draft, and the final reply replaces it.
		if err := l.save(ctx, newRef); err != nil {
			l.log.Warn("could not record the draft of the reply", zap.Error(err))
		}
	}
	return 0, false
}

// runLive shows a running sub-agent in its own thread (subagent.Deps.Live,
// SPEC §16, §24) with the live reply of a top-level turn; nil when the
// channel shows nothing live.
func (g *Gateway) runLive(run *store.Run, draftRef string) subagent.Progress {
	id := run.ID
	l := g.startLiveAt(g.cfg(), run.Origin, draftRef, func(ctx context.Context, ref string) error {
		return g.db.SetRunDraft(ctx, id, ref)
	}, g.log.With(zap.String("runId", run.ID)))
	if l == nil {
		return nil
	}
	return runProgress{l}
}

// runLiveAt shows a running sub-agent in thread, which /focus bound to
// its child (subagent.Deps.LiveAt, SPEC §24); its draft is kept in
// memory only. nil when the channel shows nothing live.
func (g *Gateway) runLiveAt(thread channels.Origin, run *store.Run) subagent.Progress {
	l := g.startLiveAt(g.cfg(), thread, "", nil, g.log.With(zap.String("runId", run.ID), zap.Stringer("focus", thread)))
	if l == nil {
		return nil
	}
	return runProgress{l}
}

// runProgress is a liveReply as a run's subagent.Progress.
type runProgress struct{ l *liveReply }

func (p runProgress) Text(text string) {
	if p.l.drafter != nil {
		p.l.onText(text)
	}
}

func (p runProgress) Stop() string { return p.l.stop() }
