package providers

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/config"
)

// DefaultKeyRest is how long a key answered with 429 rests when the
// answer carries no retry-after (SPEC §20).
const DefaultKeyRest = 60 * time.Second

// keyPool hands out a provider's API keys in turn (SPEC §20): a key
// answered with 429 rests for the retry-after, a key refused with 401/403
// is set aside until the provider is built again (a reload). Keys are
// named by position ("key 2 of 3"), never by value.
type keyPool struct {
	mu    sync.Mutex
	keys  []string
	next  int         // guarded by mu
	rest  []time.Time // resting until; guarded by mu
	aside []bool      // refused; guarded by mu
	now   func() time.Time
}

func newKeyPool(keys []config.Secret) *keyPool {
	p := &keyPool{now: time.Now}
	for _, k := range keys {
		p.keys = append(p.keys, k.Value())
	}
	p.rest = make([]time.Time, len(p.keys))
	p.aside = make([]bool, len(p.keys))
	return p
}

// several reports whether there is more than one key to turn between.
// values are the keys themselves, only to cut them out of messages.
func (p *keyPool) values() []string {
	if p == nil {
		return nil
	}
	return p.keys
}

// count is how many keys the pool has (0: the client's own credentials).
func (p *keyPool) count() int {
	if p == nil {
		return 0
	}
	return len(p.keys)
}

func (p *keyPool) several() bool { return p != nil && len(p.keys) > 1 }

// pick returns the next usable key (i is its index, -1 when the provider
// has no key); wait > 0 when every usable key rests (the earliest is
// returned and must be waited for); ok false when every key is set aside.
func (p *keyPool) pick() (i int, key string, wait time.Duration, ok bool) {
	if p == nil || len(p.keys) == 0 {
		return -1, "", 0, true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	best := -1
	for n := range len(p.keys) {
		j := (p.next + n) % len(p.keys)
		if p.aside[j] {
			continue
		}
		if !p.rest[j].After(now) {
			p.next = (j + 1) % len(p.keys)
			return j, p.keys[j], 0, true
		}
		if best < 0 || p.rest[j].Before(p.rest[best]) {
			best = j
		}
	}
	if best < 0 {
		return -1, "", 0, false
	}
	p.next = (best + 1) % len(p.keys)
	return best, p.keys[best], p.rest[best].Sub(now), true
}

// restKey makes key i rest for d.
func (p *keyPool) restKey(i int, d time.Duration) {
	if p == nil || i < 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rest[i] = p.now().Add(d)
}

// setAside takes key i out of turn until a reload.
func (p *keyPool) setAside(i int) {
	if p == nil || i < 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.aside[i] = true
}

// anyLeft reports whether some key is not set aside (it may rest).
func (p *keyPool) anyLeft() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for j := range p.keys {
		if !p.aside[j] {
			return true
		}
	}
	return false
}

// name is "key 2 of 3".
func (p *keyPool) name(i int) string {
	if p == nil || i < 0 {
		return "no key"
	}
	return fmt.Sprintf("key %d of %d", i+1, len(p.keys))
}

// KeyState is one key's state, for /status and doctor (never its value).
type KeyState struct {
	Position  int // 1-based
	SetAside  bool
	RestUntil time.Time // zero when not resting
}

// states lists the keys' states.
func (p *keyPool) states() []KeyState {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	out := make([]KeyState, len(p.keys))
	for j := range p.keys {
		out[j] = KeyState{Position: j + 1, SetAside: p.aside[j]}
		if p.rest[j].After(now) {
			out[j].RestUntil = p.rest[j]
		}
	}
	return out
}

// asideList names the keys set aside ("1, 3").
func (p *keyPool) asideList() string {
	var s []string
	for _, k := range p.states() {
		if k.SetAside {
			s = append(s, fmt.Sprint(k.Position))
		}
	}
	return strings.Join(s, ", ")
}
