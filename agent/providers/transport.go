package providers

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"github.com/heraldhq/herald/store"
)

// transportFor is the connection pool of one provider without an
// HTTPClient of its own: at most maxConns connections open to it at once
// (0: a quarter of the process's open-file limit, so runs in flight cannot
// take every descriptor). A call finding them all busy waits for a free
// one; HTTP/2 providers multiplex calls over them.
//
// http.DefaultTransport keeps only two idle connections per host, so with
// many runs in flight against one provider almost every call dialled a
// new connection and closed it after (docs/performance.md: connection
// churn under load). Calls come in waves — a run's work turn, then its
// announce step — so a larger idle pool lets the next wave reuse the last
// one's connections.
func transportFor(maxConns int) *Transport {
	if maxConns <= 0 {
		maxConns = DefaultMaxConnections()
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 4096
	t.MaxIdleConnsPerHost = min(1024, maxConns)
	t.IdleConnTimeout = 30 * time.Second
	t.MaxConnsPerHost = maxConns
	return newTransport(t)
}

// DefaultMaxConnections is models.providers.<id>.maxConnections when unset:
// a quarter of the open-file limit (RLIMIT_NOFILE), at least 16; 1024 where
// the limit cannot be read.
func DefaultMaxConnections() int {
	// The limit alone: Descriptors also lists /proc/self/fd, once per
	// provider at start.
	limit := store.DescriptorLimit()
	if limit == 0 || limit > 1<<30 {
		return 1024
	}
	return max(int(limit/4), 16)
}

// Transport is a provider's http.Transport that opens as many HTTP/2
// connections as the calls waiting need, keeps every one it opens, and
// lets a bounded number of calls wait inside net/http for a stream.
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
// Here a dial to a host known to speak h2 waits while the dials in
// flight cover the calls waiting (h2Dials: their number beyond the free
// streams, over the server's streams a connection; one at least, eight
// at most), and every connection dialled goes into the transport's own
// HTTP/2 pool (h2Pool; net/http's keeps one only when all others are
// full, so of dials made at once all but one were closed). A waiting
// dial gives up as soon as the call it was made for has moved on: the
// call got a connection, is asking again, or ended. Calls to an h2 host
// go into net/http a few at a time (admit). Hosts that answered with
// HTTP/1.1 dial as before, one connection per call: nothing waits there.
// To a host not known yet the first dial goes first and the others wait
// for it at most firstDialWait; after a failed dial none waits. The
// connection bound (MaxConnsPerHost, maxConnections) is net/http's: it
// bounds HTTP/1.1 connections and dials, not the HTTP/2 connections this
// pool keeps (net/http stops counting one when a call finds it full).
type Transport struct {
	*http.Transport

	mu    sync.Mutex
	hosts map[string]*dialHost // by host:port
	pool  *h2Pool
}

// dialHost is what the transport knows of one host's dials and calls.
type dialHost struct {
	h2      bool          // the last handshake negotiated h2
	known   bool          // a handshake finished: h2 says the protocol
	failed  bool          // the last dial failed: no dial waits for another until one succeeds
	firstAt time.Time     // when the first dial to a host not known yet started
	dialing int           // dials in flight
	ended   chan struct{} // closed when a dial ends (then replaced)

	// An HTTP/2 host's calls without a stream yet (admit): how many are
	// in net/http, and the ones waiting to go in, oldest first.
	waiting int
	queue   []chan struct{}
}

// maxH2Dials is how many dials may be in flight to an HTTP/2 host at
// most (h2Dials).
const maxH2Dials = 8

// firstDialWait is how long a dial to a host not known yet waits for
// the first one's handshake before it goes on anyway.
var firstDialWait = time.Second

// maxH2Waiting is how many calls to an HTTP/2 host may be inside
// net/http at once without a stream yet (admit).
const maxH2Waiting = 16

// errDialNotNeeded ends a dial whose call got a connection another way.
// net/http drops it: the call it was made for has its answer already.
var errDialNotNeeded = errors.New("providers: dial not needed, the call has a connection")

// newTransport wraps base, which it takes over.
func newTransport(base *http.Transport) *Transport {
	t := &Transport{Transport: base, hosts: map[string]*dialHost{}, pool: &h2Pool{conns: map[string][]*http2.ClientConn{}}}
	t.Transport.DialTLSContext = t.dialTLS
	// A custom TLS dialer turns automatic HTTP/2 off unless forced
	// (http.DefaultTransport forces it; kept explicit here).
	t.Transport.ForceAttemptHTTP2 = true
	// HTTP/2 is x/net's, as net/http's bundled copy is, with a pool of
	// connections of its own: net/http's keeps a new connection only
	// when every other one to its host is full (addConnIfNeeded), so of
	// the dials made at once for a burst all but one were thrown away,
	// and a burst needing 40 connections dialled them one after another.
	// This pool keeps every connection dialled; dialTLS decides how many
	// are dialled at once.
	t2, err := http2.ConfigureTransports(base)
	if err != nil {
		// base came with an HTTP/2 of its own: keep it, without the pool.
		return t
	}
	t2.ConnPool = t.pool
	base.TLSNextProto["h2"] = func(authority string, c *tls.Conn) http.RoundTripper {
		cc, err := t2.NewClientConn(c)
		if err != nil {
			go c.Close()
			return erringRoundTripper{err}
		}
		t.pool.add(hostPort(authority), cc)
		return t2
	}
	return t
}

// CloseIdleConnections closes the connections carrying no call, HTTP/2
// ones included.
func (t *Transport) CloseIdleConnections() {
	t.Transport.CloseIdleConnections()
	t.pool.closeIdle()
}

// h2Pool is the HTTP/2 connections of a Transport, by host:port. A call
// takes a stream on the first one with room (GetClientConn), or is told
// there is none (http2.ErrNoCachedConn), and net/http then dials: every
// connection dialled is added here and kept until it closes.
type h2Pool struct {
	mu    sync.Mutex
	conns map[string][]*http2.ClientConn
}

var _ http2.ClientConnPool = (*h2Pool)(nil)

// GetClientConn reserves a stream for req on a connection to addr with
// room, the newest first (during a burst the newest has room).
//
// The stream reserved, the call leaves admit's count (its writer's
// WroteHeaders would come later: under load, much later, and the calls
// behind it would wait for that).
func (p *h2Pool) GetClientConn(req *http.Request, addr string) (*http2.ClientConn, error) {
	p.mu.Lock()
	var cc *http2.ClientConn
	conns := p.conns[addr]
	for i := len(conns) - 1; i >= 0; i-- {
		if conns[i].ReserveNewRequest() {
			cc = conns[i]
			break
		}
	}
	p.mu.Unlock()
	if cc == nil {
		return nil, http2.ErrNoCachedConn
	}
	if c, ok := req.Context().Value(callKey{}).(*callState); ok && c.leave != nil {
		c.leave()
	}
	return cc, nil
}

// MarkDead drops cc (it closed, or will take no more calls).
func (p *h2Pool) MarkDead(cc *http2.ClientConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, conns := range p.conns {
		if i := slices.Index(conns, cc); i >= 0 {
			conns = slices.Delete(conns, i, i+1)
			if len(conns) == 0 {
				delete(p.conns, addr)
			} else {
				p.conns[addr] = conns
			}
			return
		}
	}
}

func (p *h2Pool) add(addr string, cc *http2.ClientConn) {
	p.mu.Lock()
	p.conns[addr] = append(p.conns[addr], cc)
	p.mu.Unlock()
}

// room returns how many streams a connection to addr takes (the
// server's SETTINGS_MAX_CONCURRENT_STREAMS as last seen; 100, the spec's
// suggested least, before any) and how many are free on them all. It
// takes the connections' locks, which a connection's writer holds while
// it reports WroteHeaders (leave, under t.mu): never called with t.mu
// held.
func (p *h2Pool) room(addr string) (per, free int) {
	p.mu.Lock()
	conns := slices.Clone(p.conns[addr])
	p.mu.Unlock()
	per = 100
	for _, cc := range conns {
		st := cc.State()
		if st.Closed || st.Closing {
			continue
		}
		n := 100 // its SETTINGS not seen yet: what the client assumes until then
		if st.MaxConcurrentStreams > 0 {
			n = int(min(st.MaxConcurrentStreams, 1<<20))
			per = n
		}
		free += max(n-st.StreamsActive-st.StreamsReserved-st.StreamsPending, 0)
	}
	return per, free
}

func (p *h2Pool) closeIdle() {
	p.mu.Lock()
	var idle []*http2.ClientConn
	for _, conns := range p.conns {
		for _, cc := range conns {
			if st := cc.State(); st.StreamsActive == 0 && st.StreamsReserved == 0 && st.StreamsPending == 0 {
				idle = append(idle, cc)
			}
		}
	}
	p.mu.Unlock()
	for _, cc := range idle {
		cc.Close() // its read loop then calls MarkDead
	}
}

// erringRoundTripper is the HTTP/2 upgrade's answer when the connection
// could not be set up: net/http returns its error to the call
// (RoundTripErr, as for x/net's own).
type erringRoundTripper struct{ err error }

func (e erringRoundTripper) RoundTripErr() error                             { return e.err }
func (e erringRoundTripper) RoundTrip(*http.Request) (*http.Response, error) { return nil, e.err }

// hostPort is authority with its port (443 when it has none).
func hostPort(authority string) string {
	if _, _, err := net.SplitHostPort(authority); err == nil {
		return authority
	}
	return net.JoinHostPort(strings.Trim(authority, "[]"), "443")
}

// RoundTrip sends req, marking its context so that a dial made for it
// can tell when the call no longer waits for that dial. A call to an
// HTTP/2 host goes in when admit lets it.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	leave, err := t.admit(req)
	if err != nil {
		return nil, err
	}
	defer leave()
	c := &callState{leave: leave}
	ctx := context.WithValue(req.Context(), callKey{}, c)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GetConn:      func(string) { c.moved() },
		GotConn:      func(httptrace.GotConnInfo) { c.moved() },
		WroteHeaders: leave, // the call has its stream (h2Pool.GetClientConn says so first)
	})
	defer c.moved()
	return t.Transport.RoundTrip(req.WithContext(ctx))
}

// admit lets a call to a host known to speak HTTP/2 into net/http only
// while fewer than maxH2Waiting of its calls are in there without a
// stream; the others wait their turn here, oldest first. leave (called
// once the call has its stream — h2Pool.GetClientConn reserved it — or
// has ended) lets the next one in.
// Calls to other hosts go in at once.
//
// Without it, a burst of calls beyond what the host's connections carry
// is a thundering herd: net/http hands each new HTTP/2 connection to
// every call waiting for one (Transport.tryPutIdleConn), each of them
// tries it, all but the connection's free streams fail, drop it and ask
// for a connection again, with a dial each. With 10,000 sub-agents
// starting at once against 250 streams a connection that was 40 rounds
// of some thousands of calls, about a fifth of the gateway's CPU while
// they started (docs/performance.md). Here each new connection is tried
// by at most maxH2Waiting calls, and the next ones find its free streams
// as they come in. The calls waiting here are calls in flight already
// (each its run's goroutine), so the queue is bounded by them.
func (t *Transport) admit(req *http.Request) (leave func(), err error) {
	if req.URL.Scheme != "https" {
		return noLeave, nil
	}
	addr := hostPort(req.URL.Host)
	t.mu.Lock()
	h := t.hosts[addr]
	if h == nil || !h.h2 {
		t.mu.Unlock()
		return noLeave, nil
	}
	if h.waiting < maxH2Waiting && len(h.queue) == 0 {
		h.waiting++
		t.mu.Unlock()
		return t.leaver(h), nil
	}
	turn := make(chan struct{})
	h.queue = append(h.queue, turn)
	t.mu.Unlock()
	select {
	case <-turn:
		return t.leaver(h), nil
	case <-req.Context().Done():
		t.mu.Lock()
		if i := slices.Index(h.queue, turn); i >= 0 {
			h.queue = slices.Delete(h.queue, i, i+1)
			t.mu.Unlock()
		} else { // let in just now: pass the place on
			t.mu.Unlock()
			t.leaver(h)()
		}
		return nil, req.Context().Err()
	}
}

func noLeave() {}

// leaver returns the leave of a call let in at h: the first call lets the
// oldest waiting call in, in its place.
func (t *Transport) leaver(h *dialHost) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if len(h.queue) == 0 {
				h.waiting--
				return
			}
			close(h.queue[0])
			h.queue[0] = nil
			h.queue = h.queue[1:]
		})
	}
}

type callKey struct{}

// callState tells a dial that the call it was made for has moved on:
// net/http asks for a connection afresh (GetConn), got one (GotConn), or
// the call ended. Each of these happens only after the connection
// request the dial serves was answered or given up.
type callState struct {
	leave func() // admit's: the call has its stream
	mu    sync.Mutex
	next  chan struct{} // closed at the next move; nil until watched
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
	per, free := t.pool.room(addr) // not under t.mu: it takes the connections' locks
	t.mu.Lock()
	h := t.hosts[addr]
	if h == nil {
		h = &dialHost{ended: make(chan struct{})}
		t.hosts[addr] = h
	}
	// A host not known yet: one dial first, the others wait for it (it
	// tells whether the rest wait for streams or dial at once), at most
	// firstDialWait: a host that does not answer must not have its calls'
	// dials made one after another. Every h2 connection dialled is kept,
	// so a first burst would keep one per call. After a failed dial
	// nothing waits (each call dials, and fails, on its own) until a dial
	// succeeds again.
	for {
		var timer <-chan time.Time
		if h.failed {
			break
		}
		if h.h2 {
			if h.dialing < h2Dials(h, per, free) {
				break
			}
		} else if h.known || h.dialing == 0 {
			break // HTTP/1.1: one connection per call, at once
		} else { // not known yet, its first dial in flight
			left := firstDialWait - time.Since(h.firstAt)
			if left <= 0 {
				break
			}
			timer = time.After(left)
		}
		ended := h.ended
		t.mu.Unlock()
		select {
		case <-ended:
		case <-timer:
		case <-moved:
			return nil, errDialNotNeeded
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		per, free = t.pool.room(addr)
		t.mu.Lock()
	}
	if !h.known && h.dialing == 0 {
		h.firstAt = time.Now()
	}
	h.dialing++
	t.mu.Unlock()

	conn, err := t.handshake(ctx, network, addr)

	t.mu.Lock()
	h.dialing--
	h.failed = err != nil
	if err == nil {
		h.h2, h.known = conn.ConnectionState().NegotiatedProtocol == "h2", true
	}
	close(h.ended)
	h.ended = make(chan struct{})
	t.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// h2Dials is how many dials may be in flight to HTTP/2 host h: as many
// as its calls waiting for a stream need beyond the free streams of its
// connections (a connection takes per of them), at least 1, at most
// maxH2Dials. t.mu is held.
func h2Dials(h *dialHost, per, free int) int {
	need := h.waiting + len(h.queue) - free
	return min(max((need+per-1)/per, 1), maxH2Dials)
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
	if len(cfg.NextProtos) == 0 { // a config set after newTransport
		cfg.NextProtos = []string{"h2", "http/1.1"}
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
