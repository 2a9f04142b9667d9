package subagent

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
)

// Focused starts showing run live in thread, which /focus just bound to
// its child (SPEC §24: the child's live output goes to its bound thread),
// when the run is running in this process and the thread is not its own
// (that one shows it already). A later /focus of another thread moves the
// view there; Unfocused stops it. The draft it leaves is finished when
// the run ends (focusEnd).
func (m *Manager) Focused(runID string, thread channels.Origin) {
	if m.d.LiveAt == nil {
		return
	}
	m.mu.Lock()
	lr, ok := m.live[runID]
	if !ok || lr.stopped || lr.run.Status != store.StatusRunning || lr.focusEnded ||
		sameThread(lr.run.Origin, thread) || (lr.focus.Load() != nil && sameThread(lr.focusAt, thread)) {
		m.mu.Unlock()
		return
	}
	old := lr.focus.Swap(nil)
	run := *lr.run
	lr.focusAt = thread
	m.mu.Unlock()
	old.stop()
	p := m.d.LiveAt(thread, &run)
	if p == nil {
		return
	}
	v := &liveView{p: p}
	m.mu.Lock()
	if lr.focusEnded || !sameThread(lr.focusAt, thread) || lr.focus.Load() != nil {
		m.mu.Unlock()
		v.stop() // the run ended, or another /focus came, meanwhile
		return
	}
	lr.focus.Store(v)
	m.mu.Unlock()
}

// Unfocused stops the live view a /focus started in thread, if any (its
// draft keeps the text it showed).
func (m *Manager) Unfocused(thread channels.Origin) {
	m.mu.Lock()
	var views []*liveView
	for _, lr := range m.live {
		if v := lr.focus.Load(); v != nil && sameThread(lr.focusAt, thread) {
			views = append(views, v)
			lr.focus.Store(nil)
			lr.focusAt = channels.Origin{}
		}
	}
	m.mu.Unlock()
	for _, v := range views {
		v.stop()
	}
}

// focusView is the live view a /focus started for lr (nil: none). It
// takes no lock: it is called for every streamed chunk of every run.
func focusView(lr *liveRun) *liveView {
	if lr == nil {
		return nil
	}
	return lr.focus.Load()
}

// focusEndTimeout bounds focusEnd's outbox write.
const focusEndTimeout = 10 * time.Second

// focusEnd stops lr's focus view when its runner returned with outcome
// ("" = cut by a shutdown) and finishes the draft it shows in the focused
// thread, through the outbox: the child's last text and "Status:
// <outcome>" (its announce goes to its own origin, not there).
func (m *Manager) focusEnd(ctx context.Context, lr *liveRun, run *store.Run, outcome string) {
	m.mu.Lock()
	v, at := lr.focus.Swap(nil), lr.focusAt
	lr.focusEnded = true
	m.mu.Unlock()
	if v == nil {
		return
	}
	ref, text := v.stop()
	if ref == "" || text == "" || outcome == "" {
		return
	}
	item := &store.OutboxItem{Origin: at, Kind: channels.KindReply, Text: text + "\n\nStatus: " + outcome, DraftRef: ref,
		CreatedAt: m.d.Clock.Now(), SessionKey: run.RequesterKey, AgentID: run.AgentID}
	// Bounded: a store outage must not hold the run's end (the run's ctx
	// may be cut by a shutdown after the runner returned: not this write).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), focusEndTimeout)
	defer cancel()
	if _, err := m.d.Store.EnqueueOutbox(ctx, item); err != nil {
		m.runLog(run).Warn("could not finish the draft in the focused thread", zap.Error(err)) // runLog: with runId
		return
	}
	m.d.Notify()
}

// sameThread reports whether a and b are the same thread of the same chat.
func sameThread(a, b channels.Origin) bool {
	return a.Channel == b.Channel && a.Account == b.Account && a.ChatID == b.ChatID && a.ThreadID == b.ThreadID
}
