package web

import "sync"

// hub is the per-client broadcast behind the event streams. It carries no
// entries, only a wake-up: a woken stream reads what is new from the Log, so
// a re-delivered announce (same RunID, no new entry) sends nothing and a
// slow stream never makes Append wait.
type hub struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{} // client → wake channels
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
