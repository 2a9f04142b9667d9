package web

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimit bounds how fast one client may post (POST /api/messages):
// PerMinute messages a minute on average, Burst at once. Zero PerMinute
// means no limit.
type RateLimit struct {
	PerMinute int
	Burst     int
}

// maxLimiters bounds the per-client limiters kept in memory; past it the
// ones idle longest are dropped (a dropped client starts with a full burst).
const maxLimiters = 10000

type clientLimiter struct {
	lim  *rate.Limiter
	seen time.Time
}

// limiters holds one token bucket per client.
type limiters struct {
	cfg RateLimit
	mu  sync.Mutex
	m   map[string]*clientLimiter
}

func newLimiters(cfg RateLimit) *limiters {
	return &limiters{cfg: cfg, m: map[string]*clientLimiter{}}
}

// allow reports whether client may post now; when not, how long to wait.
func (l *limiters) allow(client string, now time.Time) (bool, time.Duration) {
	if l == nil || l.cfg.PerMinute <= 0 {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.m[client]
	if !ok {
		if len(l.m) >= maxLimiters {
			l.evictLocked(now)
		}
		c = &clientLimiter{lim: rate.NewLimiter(rate.Limit(float64(l.cfg.PerMinute)/60), max(l.cfg.Burst, 1))}
		l.m[client] = c
	}
	c.seen = now
	r := c.lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// evictLocked drops the limiters idle for more than a minute, or if none
// are, the oldest half.
func (l *limiters) evictLocked(now time.Time) {
	for k, c := range l.m {
		if now.Sub(c.seen) > time.Minute {
			delete(l.m, k)
		}
	}
	if len(l.m) < maxLimiters {
		return
	}
	n := 0
	for k := range l.m {
		delete(l.m, k)
		if n++; n >= maxLimiters/2 {
			return
		}
	}
}
