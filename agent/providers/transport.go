package providers

import (
	"net/http"
	"time"

	"github.com/heraldhq/herald/store"
)

// sharedTransport is the connection pool of every provider without an
// HTTPClient of its own. http.DefaultTransport keeps only two idle
// connections per host, so with many runs in flight against one
// provider almost every call dialled a new connection and closed it
// after (docs/performance.md: connection churn under load). Calls come
// in waves — a run's work turn, then its announce step — so a larger
// idle pool lets the next wave reuse the last one's connections.
var sharedTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 4096
	t.MaxIdleConnsPerHost = 1024
	t.IdleConnTimeout = 30 * time.Second
	return t
}()

// transportFor is the connection pool of one provider: the shared pool's
// settings with at most maxConns connections open to it at once (0: a
// quarter of the process's open-file limit, so runs in flight cannot take
// every descriptor). A call finding them all busy waits for a free one;
// HTTP/2 providers multiplex calls over them.
func transportFor(maxConns int) *http.Transport {
	t := sharedTransport.Clone()
	if maxConns <= 0 {
		maxConns = DefaultMaxConnections()
	}
	t.MaxConnsPerHost = maxConns
	t.MaxIdleConnsPerHost = min(t.MaxIdleConnsPerHost, maxConns)
	return t
}

// DefaultMaxConnections is models.providers.<id>.maxConnections when unset:
// a quarter of the open-file limit (RLIMIT_NOFILE), at least 16; 1024 where
// the limit cannot be read.
func DefaultMaxConnections() int {
	_, limit := store.Descriptors()
	if limit == 0 || limit > 1<<30 {
		return 1024
	}
	return max(int(limit/4), 16)
}
