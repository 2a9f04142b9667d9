package providers

import (
	"net/http"
	"time"
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
