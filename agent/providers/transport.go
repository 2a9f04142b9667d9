package providers

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
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
var sharedTransport = func() *Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 4096
	t.MaxIdleConnsPerHost = 1024
	t.IdleConnTimeout = 30 * time.Second
	return newTransport(t)
}()

// transportFor is the connection pool of one provider: the shared pool's
// settings with at most maxConns connections open to it at once (0: a
// quarter of the process's open-file limit, so runs in flight cannot take
// every descriptor). A call finding them all busy waits for a free one;
// HTTP/2 providers multiplex calls over them.
func transportFor(maxConns int) *Transport {
	if maxConns <= 0 {
		maxConns = DefaultMaxConnections()
	}
	t := sharedTransport.Transport.Clone()
	t.MaxConnsPerHost = maxConns
	t.MaxIdleConnsPerHost = min(t.MaxIdleConnsPerHost, maxConns)
	return newTransport(t)
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

// Transport is a provider's http.Transport with one new TLS connection
// in flight at a time to a host that answered with HTTP/2 (ALPN h2).
//
// Without it a burst of calls to an HTTP/2 provider whose connections
// are all at their stream limit dials one connection per waiting call:
// net/http asks the HTTP/2 pool, finds no room, and queues a dial for
// every call (golang/go#27753). The first connection to finish is handed
// to every waiting call (Transport.tryPutIdleConn delivers an HTTP/2
// connection to all of them), but the other dials are not cancelled:
// they finish their TLS handshakes and are closed, or kept as extra
// connections. With the spawns of one model response started together
// that was 3,000–5,000 descriptors and 13 % of CPU in TLS handshakes on
// the 10,000-run load (docs/performance.md).
//
// Here a dial to a host known to speak h2 waits while another dial to it
// is in flight. It gives up (its result would be thrown away) as soon as
// the call it was made for has moved on: the call got a connection, is
// asking again, or ended. Hosts that answered with HTTP/1.1, or whose
// protocol is not known yet, dial as before, one connection per call:
// nothing waits there. The connection bound (MaxConnsPerHost) is
// net/http's, unchanged.
type Transport struct {
	*http.Transport

	mu    sync.Mutex
	hosts map[string]*dialHost // by host:port
}

// dialHost is what the transport knows of one host's dials.
type dialHost struct {
	h2      bool          // the last handshake negotiated h2
	dialing int           // dials in flight
	ended   chan struct{} // closed when a dial ends (then replaced)
}

// maxH2Dials is how many dials may be in flight to an HTTP/2 host.
const maxH2Dials = 1

// errDialNotNeeded ends a dial whose call got a connection another way.
// net/http drops it: the call it was made for has its answer already.
var errDialNotNeeded = errors.New("providers: dial not needed, the call has a connection")

// newTransport wraps base, which it takes over.
func newTransport(base *http.Transport) *Transport {
	t := &Transport{Transport: base, hosts: map[string]*dialHost{}}
	t.Transport.DialTLSContext = t.dialTLS
	// A custom TLS dialer turns automatic HTTP/2 off unless forced
	// (http.DefaultTransport forces it; kept explicit here).
	t.Transport.ForceAttemptHTTP2 = true
	return t
}

// RoundTrip sends req, marking its context so that a dial made for it
// can tell when the call no longer waits for that dial.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	c := &callState{}
	ctx := context.WithValue(req.Context(), callKey{}, c)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GetConn: func(string) { c.moved() },
		GotConn: func(httptrace.GotConnInfo) { c.moved() },
	})
	defer c.moved()
	return t.Transport.RoundTrip(req.WithContext(ctx))
}

type callKey struct{}

// callState tells a dial that the call it was made for has moved on:
// net/http asks for a connection afresh (GetConn), got one (GotConn), or
// the call ended. Each of these happens only after the connection
// request the dial serves was answered or given up.
type callState struct {
	mu   sync.Mutex
	next chan struct{} // closed at the next move; nil until watched
}

func (c *callState) moved() {
	c.mu.Lock()
	if c.next != nil {
		close(c.next)
		c.next = nil
	}
	c.mu.Unlock()
}

// watch returns a channel closed when the call moves on from now.
func (c *callState) watch() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.next == nil {
		c.next = make(chan struct{})
	}
	return c.next
}

// dialTLS is the transport's DialTLSContext: it waits its turn at an
// HTTP/2 host, then dials TCP and makes the TLS handshake as net/http
// would (same dialer, TLS config, ALPN offer and handshake timeout), and
// notes which protocol the host chose.
func (t *Transport) dialTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	var moved <-chan struct{}
	if c, ok := ctx.Value(callKey{}).(*callState); ok {
		moved = c.watch()
	}
	t.mu.Lock()
	h := t.hosts[addr]
	if h == nil {
		h = &dialHost{ended: make(chan struct{})}
		t.hosts[addr] = h
	}
	for h.h2 && h.dialing >= maxH2Dials {
		ended := h.ended
		t.mu.Unlock()
		select {
		case <-ended:
		case <-moved:
			return nil, errDialNotNeeded
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		t.mu.Lock()
	}
	h.dialing++
	t.mu.Unlock()

	conn, err := t.handshake(ctx, network, addr)

	t.mu.Lock()
	h.dialing--
	if err == nil {
		h.h2 = conn.ConnectionState().NegotiatedProtocol == "h2"
	}
	close(h.ended)
	h.ended = make(chan struct{})
	t.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return conn, nil
}

func (t *Transport) handshake(ctx context.Context, network, addr string) (*tls.Conn, error) {
	dial := t.Transport.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	raw, err := dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cfg := t.Transport.TLSClientConfig.Clone()
	if cfg == nil {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			raw.Close()
			return nil, err
		}
		cfg.ServerName = host
	}
	if d := t.Transport.TLSHandshakeTimeout; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	return conn, nil
}
