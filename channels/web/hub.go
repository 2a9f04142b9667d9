package web

import (
	"sync"
	"sync/atomic"
)

// hub is the per-client broadcast behind the event streams. It carries no
// entries, only a wake-up: a woken stream reads what is new from the Log, so
// a re-delivered announce (same RunID, no new entry) sends nothing and a
// slow stream never makes Append wait. A wake-up for the live state alone
// (typing, a draft, the sub-agents panel) says so: the stream then does
// not read the Log.
type hub struct {
	mu   sync.Mutex
	subs map[string]map[*sub]struct{} // client → its streams
	live map[string]liveState         // client → typing and draft (SPEC §16)
}

// sub is one stream's subscription.
type sub struct {
	wake chan struct{}
	// entries is set with a wake-up for new entries, and cleared by the
	// stream when it reads them.
	entries atomic.Bool
}

func newHub() *hub {
	return &hub{subs: make(map[string]map[*sub]struct{})}
}

// subscribe registers a stream of client; call the returned func to
// unregister it. The subscription starts with entries set: the stream
// reads what it missed first.
func (h *hub) subscribe(client string) (*sub, func()) {
	s := &sub{wake: make(chan struct{}, 1)}
	s.entries.Store(true)
	h.mu.Lock()
	set := h.subs[client]
	if set == nil {
		set = make(map[*sub]struct{})
		h.subs[client] = set
	}
	set[s] = struct{}{}
	h.mu.Unlock()
	return s, func() {
		h.mu.Lock()
		delete(h.subs[client], s)
		if len(h.subs[client]) == 0 {
			delete(h.subs, client)
		}
		h.mu.Unlock()
	}
}

// notify wakes every stream of client to read its new entries. Wake-ups
// coalesce: a stream that has not yet read the previous one gets a single
// wake-up for both.
func (h *hub) notify(client string) { h.wakeAll(client, true) }

// wakeAll wakes every stream of client; with entries, to read the Log too.
func (h *hub) wakeAll(client string, entries bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[client] {
		if entries {
			s.entries.Store(true)
		}
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// liveState is what a client's chat shows while a turn runs: that the
// agent is writing, and the reply so far. It is not stored: a stream that
// connects late gets the current state, not its history.
type liveState struct {
	typing bool
	draft  string
	runs   string // the sub-agents panel, JSON {"runs":[…]}; "" = none
	ver    int64  // increases with every change
}

// setLive changes the live state of client and wakes its streams.
func (h *hub) setLive(client string, change func(*liveState)) {
	h.mu.Lock()
	if h.live == nil {
		h.live = make(map[string]liveState)
	}
	st := h.live[client]
	change(&st)
	st.ver++
	if !st.typing && st.draft == "" && st.runs == "" {
		delete(h.live, client) // nothing to show: keep no state per idle client
	} else {
		h.live[client] = st
	}
	h.mu.Unlock()
	h.wakeAll(client, false)
}

// liveOf returns the live state of client.
func (h *hub) liveOf(client string) liveState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.live[client]
}
