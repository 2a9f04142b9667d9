package web

import "sync"

// hub is the per-client broadcast behind the event streams. It carries no
// entries, only a wake-up: a woken stream reads what is new from the Log, so
// a re-delivered announce (same RunID, no new entry) sends nothing and a
// slow stream never makes Append wait.
type hub struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{} // client → wake channels
	live map[string]liveState                  // client → typing and draft (SPEC §16)
}

func newHub() *hub {
	return &hub{subs: make(map[string]map[chan struct{}]struct{})}
}

// subscribe registers a wake channel for client; call the returned func to
// unregister it.
func (h *hub) subscribe(client string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	set := h.subs[client]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		h.subs[client] = set
	}
	set[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs[client], ch)
		if len(h.subs[client]) == 0 {
			delete(h.subs, client)
		}
		h.mu.Unlock()
	}
}

// notify wakes every stream of client. Wake-ups coalesce: a stream that has
// not yet read the previous one gets a single wake-up for both.
func (h *hub) notify(client string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[client] {
		select {
		case ch <- struct{}{}:
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
	h.notify(client)
}

// liveOf returns the live state of client.
func (h *hub) liveOf(client string) liveState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.live[client]
}
