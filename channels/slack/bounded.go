package slack

import (
	"sync"
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

func (s *boundedSet) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.items[key]
	return ok
}
