package slack

import (
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

func (s *boundedSet) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.items[key]
	return ok
}

// progressMap remembers how many parts of a multi-part message were posted,
// so a retried Send continues after the last posted part.
type progressMap struct {
	mu    sync.Mutex
	max   int
	items map[string]progress
	order []string
}

type progress struct {
	posted int
	at     time.Time
}

func newProgressMap(max int) *progressMap {
	return &progressMap{max: max, items: make(map[string]progress, max)}
}

// get returns the parts posted under key, ignoring entries older than ttl
// (ttl <= 0: no expiry).
func (p *progressMap) get(key string, now time.Time, ttl time.Duration) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.items[key]
	if !ok || (ttl > 0 && now.Sub(e.at) > ttl) {
		return 0
	}
	return e.posted
}

func (p *progressMap) set(key string, posted int, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.items[key]; !ok {
		p.order = append(p.order, key)
	}
	p.items[key] = progress{posted: posted, at: now}
	for len(p.order) > p.max {
		delete(p.items, p.order[0])
		p.order = p.order[1:]
	}
}

func (p *progressMap) delete(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.items[key]; !ok {
		return
	}
	delete(p.items, key)
	for i, k := range p.order {
		if k == key {
			p.order = append(p.order[:i], p.order[i+1:]...)
			break
		}
	}
}
