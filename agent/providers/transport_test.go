package providers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// burstServer is an httptest TLS server whose handler holds every request
// until want requests are in it at once (or a deadline passes), and which
// counts the connections it accepted.
type burstServer struct {
	*httptest.Server
	conns  atomic.Int32
	in     atomic.Int32
	want   int32
	all    chan struct{}
	once   sync.Once
	missed atomic.Bool // the deadline passed with fewer than want in
}

func newBurstServer(t *testing.T, h2 bool, streams uint32) *burstServer {
	s := &burstServer{all: make(chan struct{})}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/warm" {
			return
		}
		if s.in.Add(1) >= s.want {
			s.once.Do(func() { close(s.all) })
		}
		select {
		case <-s.all:
		case <-time.After(10 * time.Second):
			s.missed.Store(true)
		}
		w.Write([]byte(r.Proto))
	}))
	s.EnableHTTP2 = h2
	s.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: int(streams)}
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// client is a provider transport trusting s's certificate.
func (s *burstServer) client(t *testing.T) *Transport {
	pool := x509.NewCertPool()
	pool.AddCert(s.Certificate())
	tr := transportFor(0)
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// burst sends n requests at once (after one that lets the transport
// learn the server's protocol) and fails the test on any error.
func (s *burstServer) burst(t *testing.T, tr *Transport, n int, proto string) {
	c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	resp, err := c.Get(s.URL + "/warm")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Proto != proto {
		t.Fatalf("warm-up answered over %s, want %s", resp.Proto, proto)
	}
	s.sendAll(t, c, n)
}

// sendAll sends n requests at once and fails the test on any error, or
// when the server did not hold them all at once.
func (s *burstServer) sendAll(t *testing.T, c *http.Client, n int) {
	s.want = int32(n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := c.Get(s.URL + "/burst")
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		})
	}
	wg.Wait()
	if s.missed.Load() {
		t.Errorf("only %d of %d requests were at the server at once", s.in.Load(), n)
	}
}

// A burst of calls to an HTTP/2 provider beyond its stream limit opens
// about as many connections as the calls need, not one per call: 600
// calls against 100 streams a connection, after the host answered h2.
// net/http's own pool (plain http.Transport) opens one per waiting call
// here (golang/go#27753). (Fewer than 100 streams a connection, the
// client's assumption until the server's SETTINGS arrive, makes the
// server refuse streams, or reset one as a protocol error when the
// client's HEADERS cross its SETTINGS ACK: a test of that, not of the
// dials.)
func TestH2BurstOpensFewConnections(t *testing.T) {
	const n, streams = 600, 100
	s := newBurstServer(t, true, streams)
	s.burst(t, s.client(t), n, "HTTP/2.0")
	// 1 for the warm-up, n/streams needed; a dial whose call got a
	// connection just as it started may still finish.
	if got, max := s.conns.Load(), int32(2*n/streams+1); got > max {
		t.Errorf("%d connections accepted for %d calls over %d streams each, want at most %d", got, n, streams, max)
	}
	t.Logf("%d connections for %d calls, %d streams each", s.conns.Load(), n, streams)
}

// A burst to an HTTP/1.1-only TLS provider is not slowed: each call has
// its connection, and their handshakes run at once, not one after
// another (the server holds every handshake until all have started).
func TestH1BurstDialsInParallel(t *testing.T) {
	const n = 16
	s := newBurstServer(t, false, 0)
	var handshakes atomic.Int32
	var hold atomic.Bool
	started := make(chan struct{})
	var once sync.Once
	s.TLS.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		if !hold.Load() {
			return nil, nil
		}
		// The warm-up's idle connection serves one call of the burst.
		if handshakes.Add(1) >= n-1 {
			once.Do(func() { close(started) })
		}
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Errorf("only %d of %d handshakes in flight at once", handshakes.Load(), n-1)
		}
		return nil, nil
	}
	tr := s.client(t)
	c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	resp, err := c.Get(s.URL + "/warm")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	hold.Store(true)
	s.burst(t, tr, n, "HTTP/1.1")
	if got := s.conns.Load(); got < n { // warm-up's + n-1
		t.Errorf("%d connections for %d calls at once over HTTP/1.1", got, n)
	}
}

// A burst of calls to an HTTP/2 provider far beyond what one connection
// carries is not a thundering herd: each new connection is tried by a
// few waiting calls, not by all of them. 1,000 calls over 100 streams a
// connection need 10 connections; net/http alone (or with only the dial
// gate) hands each new one to every waiting call, which tries it, fails
// and asks again: ~5,000 connection requests here. The count is the
// calls' GetConn events (each a request for a connection).
func TestH2BurstIsNoHerd(t *testing.T) {
	const n, streams = 1000, 100
	s := newBurstServer(t, true, streams)
	tr := s.client(t)
	var asks atomic.Int32
	c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	get := func(path string) {
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			GetConn: func(string) { asks.Add(1) },
		})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
	}
	get("/warm")
	s.want = n
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { get("/burst") })
	}
	wg.Wait()
	if s.missed.Load() {
		t.Fatalf("only %d of %d requests were at the server at once", s.in.Load(), n)
	}
	// Each call asks once; when a connection fills, the few calls let in
	// meanwhile ask again (twice at most: the full one, then a dial).
	if got, max := asks.Load(), int32(n+1+2*maxH2Waiting*(n/streams+1)); got > max {
		t.Errorf("%d connection requests for %d calls, want at most %d", got, n+1, max)
	}
	if got, max := s.conns.Load(), int32(3*n/streams+1); got > max {
		t.Errorf("%d connections accepted for %d calls over %d streams each, want at most %d", got, n, streams, max)
	}
	t.Logf("%d connection requests and %d connections for %d calls, %d streams each", asks.Load(), s.conns.Load(), n, streams)
}

// The first burst to a host whose protocol is not known yet dials about
// once, the other calls waiting for that handshake: the host answering h2
// then carries them all (every h2 connection dialled is kept, so a dial
// per call would stay open).
func TestFirstBurstToNewHostDialsOnce(t *testing.T) {
	const n, streams = 50, 100
	s := newBurstServer(t, true, streams)
	s.sendAll(t, &http.Client{Transport: s.client(t), Timeout: 20 * time.Second}, n)
	// 1, and a few more at a race: a waiting dial wakes when the first
	// handshake ends, before net/http has put that connection in the pool
	// and handed it to the waiting calls, and may go on (one at a time).
	if got, max := s.conns.Load(), int32(n/10); got > max {
		t.Errorf("%d connections for a first burst of %d calls to an h2 host taking %d streams each, want at most %d", got, n, streams, max)
	}
	t.Logf("%d connections for a first burst of %d calls", s.conns.Load(), n)
}

// A call waiting its turn to go into net/http (admit) ends when its
// context does, and the calls let in go on: 100 calls fill the one
// connection (100 streams), the next ones wait for a second connection
// whose handshake the server holds, those beyond maxH2Waiting wait in
// admit; cancelling those returns at once, and once the handshake goes
// on the ones let in are answered.
func TestAdmitWaitEndsWithContext(t *testing.T) {
	const streams = 100
	s := newBurstServer(t, true, streams)
	release := make(chan struct{})
	s.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/warm" {
			s.in.Add(1)
			<-release
		}
		w.Write([]byte(r.Proto))
	})
	var hold atomic.Bool
	handshake := make(chan struct{})
	var freeOnce sync.Once
	free := func() { freeOnce.Do(func() { close(handshake); close(release) }) }
	t.Cleanup(free) // before the server's Close (cleanups run last first), on any failure too
	s.TLS.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		if hold.Load() {
			<-handshake
		}
		return nil, nil
	}
	tr := s.client(t)
	c := &http.Client{Transport: tr}
	resp, err := c.Get(s.URL + "/warm")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	hold.Store(true)
	get := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/burst", nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	// Fill the connection, then the waiting places.
	var wg sync.WaitGroup
	errs := make(chan error, streams+maxH2Waiting+1)
	for range streams + maxH2Waiting {
		wg.Go(func() { errs <- get(context.Background()) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		tr.mu.Lock()
		h := tr.hosts[hostPort(strings.TrimPrefix(s.URL, "https://"))]
		full := h != nil && h.waiting == maxH2Waiting
		tr.mu.Unlock()
		if full && s.in.Load() == streams {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the connection and the waiting places did not fill: %d at the server", s.in.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// One more waits in admit; its context ends.
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- get(ctx) }()
	for {
		tr.mu.Lock()
		queued := len(tr.hosts[hostPort(strings.TrimPrefix(s.URL, "https://"))].queue)
		tr.mu.Unlock()
		if queued == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the call beyond the waiting places is not queued in admit")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the queued call ended with %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the queued call did not end with its context")
	}
	free()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a call let in: %v", err)
		}
	}
}

// Calls to a host whose TLS handshake never answers fail together, each
// by its own handshake timeout, not one after another: a failed dial lets
// the others waiting for it go. firstDialWait is made longer than the
// test so that the wait's cap cannot be what lets them go.
func TestUnansweringHostFailsCallsTogether(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var held sync.WaitGroup
	var conns []net.Conn
	var mu sync.Mutex
	held.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // never answered
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		held.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	old := firstDialWait
	firstDialWait = time.Minute
	t.Cleanup(func() { firstDialWait = old })
	const n, handshake = 10, 500 * time.Millisecond
	tr := transportFor(0)
	tr.TLSHandshakeTimeout = handshake
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if resp, err := c.Get("https://" + ln.Addr().String() + "/"); err == nil {
				resp.Body.Close()
				t.Error("a call to a host that never answers its handshake succeeded")
			}
		})
	}
	wg.Wait()
	// Together: about two handshake timeouts (the first dial's, then the
	// others' at once); one after another it would be n of them.
	if took, max := time.Since(start), 2*handshake+time.Second; took > max {
		t.Errorf("%d calls to a host that never answers took %s to fail, want within %s (one after another: %s)", n, took, max, n*handshake)
	}
}
