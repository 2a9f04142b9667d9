package web

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
)

// hub is the per-client broadcast behind the event streams. A wake-up
// either carries the entries this process has just added (added), or asks
// the stream to read what is new from the Log (notify: another replica
// appended, or an append added nothing). A stream writes carried entries
// only when they continue what it has written (the next seqs, with no
// gap), else it reads the Log; so a re-delivered announce (same RunID, no
// new entry) sends nothing, an entry another replica added in between is
// not skipped, and a slow stream never makes Append wait. A wake-up for
// the live state alone (typing, a draft, the sub-agents panel) says so:
// the stream then does not read the Log.
type hub struct {
	mu   sync.Mutex
	subs map[string]map[*sub]struct{} // client → its streams
	live map[string]liveState         // client → typing and draft (SPEC §16)
}

// sub is one stream's subscription.
type sub struct {
	wake chan struct{}
	// entries is set with a wake-up that asks the stream to read the Log,
	// and cleared by the stream when it reads it.
	entries atomic.Bool
	// fresh are the entries added since the stream last took them
	// (guarded by mu): at most maxFresh of them and maxFreshBytes of text;
	// past that they are dropped and entries is set (the Log has them).
	mu         sync.Mutex
	fresh      []Entry
	freshBytes int
}

// Bounds of a stream's carried entries (sub.fresh).
const (
	maxFresh      = 32
	maxFreshBytes = 256 << 10
)

// take returns the carried entries in seq order and forgets them.
func (s *sub) take() []Entry {
	s.mu.Lock()
	fresh := s.fresh
	s.fresh, s.freshBytes = nil, 0
	s.mu.Unlock()
	// Two appends may hand their entries over in the other order.
	slices.SortFunc(fresh, func(a, b Entry) int { return cmp.Compare(a.Seq, b.Seq) })
	return fresh
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

// notify wakes every stream of client to read its new entries from the
// Log. Wake-ups coalesce: a stream that has not yet read the previous one
// gets a single wake-up for both.
func (h *hub) notify(client string) { h.wakeAll(client, true) }

// notifyEvery wakes every open stream to read the Log.
func (h *hub) notifyEvery() {
	h.mu.Lock()
	clients := make([]string, 0, len(h.subs))
	for c := range h.subs {
		clients = append(clients, c)
	}
	h.mu.Unlock()
	for _, c := range clients {
		h.wakeAll(c, true)
	}
}

// added wakes every stream of client with e, then the entries of then, in
// that order: entries the Log has just added in one write (stored: Seq
// and At as the Log returns them).
func (h *hub) added(client string, e *Entry, then []Entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[client] {
		s.mu.Lock()
		s.carryLocked(e)
		for i := range then {
			s.carryLocked(&then[i])
		}
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// carryLocked adds e, as a client is shown it, to the entries s carries,
// or when they are full drops them all and has the stream read the Log.
// s.mu must be held.
func (s *sub) carryLocked(e *Entry) {
	shown := Entry{Seq: e.Seq, Role: e.Role, Text: e.Text, RunID: e.RunID, At: e.At, Files: e.Files}
	if len(s.fresh) < maxFresh && s.freshBytes+len(shown.Text) <= maxFreshBytes {
		s.fresh = append(s.fresh, shown)
		s.freshBytes += len(shown.Text)
	} else {
		s.fresh, s.freshBytes = nil, 0
		s.entries.Store(true)
	}
}

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
