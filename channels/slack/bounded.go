package slack

import (
	"errors"
	"slices"
	"sync"
	"time"
)

// boundedSet is a set of strings that forgets its oldest members beyond a
// fixed size.
type boundedSet struct {
	mu    sync.Mutex
	max   int
	items map[string]struct{}
	order []string // insertion order, oldest first
}

func newBoundedSet(max int) *boundedSet {
	return &boundedSet{max: max, items: make(map[string]struct{}, max)}
}

// add inserts key and reports whether it was new.
func (s *boundedSet) add(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.items[key]; ok {
		return false
	}
	s.items[key] = struct{}{}
	s.order = append(s.order, key)
	for len(s.order) > s.max {
		delete(s.items, s.order[0])
		s.order = s.order[1:]
	}
	return true
}

// remove forgets key, so the same key is new again.
func (s *boundedSet) remove(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.items[key]; !ok {
		return
	}
	delete(s.items, key)
	s.order = slices.DeleteFunc(s.order, func(k string) bool { return k == key })
}

func (s *boundedSet) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.items[key]
	return ok
}

// replaySet remembers the signatures of the signed requests accepted
// within the replay window, so a replayed request (same signature, so same
// timestamp and body) is recognised. An entry is dropped once its
// timestamp has left the window: verify refuses such a request anyway.
// It holds at most max entries; when that many requests inside the window
// are remembered, add refuses new ones rather than forget one that a
// replay could still reuse.
type replaySet struct {
	mu     sync.Mutex
	max    int
	window time.Duration
	until  map[string]time.Time // signature → when it leaves the window
	order  []string             // insertion order, oldest first
}

// errReplayFull: the set holds max signatures still inside the window.
var errReplayFull = errors.New("too many signed requests inside the replay window")

func newReplaySet(max int, window time.Duration) *replaySet {
	return &replaySet{max: max, window: window, until: make(map[string]time.Time)}
}

// add records sig, signed at ts, and reports whether it was new. It
// returns errReplayFull when the set is full of live entries.
func (s *replaySet) add(sig string, ts, now time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.until[sig]; ok {
		return false, nil
	}
	// Drop entries that left the window. Timestamps may arrive out of
	// order, so expired entries behind a live one wait for the next pass
	// that reaches them (the cap still bounds the set).
	for len(s.order) > 0 && !now.Before(s.until[s.order[0]]) {
		delete(s.until, s.order[0])
		s.order = s.order[1:]
	}
	if len(s.order) >= s.max {
		for _, k := range s.order {
			if !now.Before(s.until[k]) {
				delete(s.until, k)
			}
		}
		s.order = slices.DeleteFunc(s.order, func(k string) bool { _, ok := s.until[k]; return !ok })
		if len(s.order) >= s.max {
			return false, errReplayFull
		}
	}
	s.until[sig] = ts.Add(s.window)
	s.order = append(s.order, sig)
	return true, nil
}
