package tools

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/heraldhq/herald/netguard"
)

// allowLoopback is the policy of tests whose fake sites run on loopback.
func allowLoopback(t *testing.T) *netguard.Policy {
	t.Helper()
	p, err := netguard.NewPolicy([]string{"127.0.0.1/32"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// countingServer answers "secret" on listen and counts the requests it saw.
func countingServer(t *testing.T, listen string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", listen, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte("secret of another conversation"))
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &hits
}

// With the default policy, web_fetch refuses every internal address — also
// behind a host name or a redirect — with a result the model can act on,
// and the internal server never sees a request.
func TestWebFetchRefusesInternalAddresses(t *testing.T) {
	internal, hits := countingServer(t, "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(internal.Listener.Addr().String())
	second, hits2 := countingServer(t, "127.0.0.2:0")
	// A site the operator allowed (10.x would be the real case; here the
	// allowed range is 127.0.0.1/32) that redirects to another internal one.
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, second.URL+"/api/messages?client=other", http.StatusFound)
	}))
	t.Cleanup(redirector.Close)

	strict := NewWebFetch(Options{})
	for _, tc := range []struct{ name, url, want string }{
		{"loopback", internal.URL + "/api/messages?client=other", "127.0.0.1 is a loopback address"},
		{"another loopback address", second.URL + "/", "127.0.0.2 is a loopback address"},
		{"IPv6 loopback", "http://[::1]:" + port + "/", "::1 is a loopback address"},
		{"cloud metadata", "http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"},
		{"private", "http://10.0.0.1/", "10.0.0.1 is a private (RFC 1918) address"},
		{"name resolving to loopback", "http://localhost:" + port + "/", "localhost resolves to"},
		{"IPv4-mapped IPv6", "http://[::ffff:127.0.0.1]:" + port + "/", "127.0.0.1, a loopback address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := strict.Call(context.Background(), agentCC(), json.RawMessage(`{"url":"`+tc.url+`"}`))
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "tools.webFetch.allowPrivate") {
				t.Fatalf("got %v, want a refusal saying %q and naming tools.webFetch.allowPrivate", err, tc.want)
			}
		})
	}
	t.Run("redirect from an allowed host", func(t *testing.T) {
		_, err := NewWebFetch(Options{Egress: allowLoopback(t)}).Call(context.Background(), agentCC(),
			json.RawMessage(`{"url":"`+redirector.URL+`/start"}`))
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "127.0.0.2 is a loopback address") {
			t.Fatalf("got %v, want the redirect to 127.0.0.2 refused", err)
		}
	})
	if hits.Load() != 0 || hits2.Load() != 0 {
		t.Errorf("internal servers saw %d and %d requests, want none", hits.Load(), hits2.Load())
	}

	// An operator-allowed range works.
	out, err := NewWebFetch(Options{Egress: allowLoopback(t)}).Call(context.Background(), agentCC(),
		json.RawMessage(`{"url":"`+internal.URL+`/"}`))
	if err != nil || !strings.Contains(out, "secret of another conversation") {
		t.Fatalf("allowed fetch: %q, %v", out, err)
	}
}

func TestWebFetchRedirectCap(t *testing.T) {
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, srv.URL+"/again", http.StatusFound)
	}))
	t.Cleanup(srv.Close)
	_, err := NewWebFetch(Options{Egress: allowLoopback(t)}).Call(context.Background(), agentCC(), json.RawMessage(`{"url":"`+srv.URL+`/"}`))
	if err == nil || !strings.Contains(err.Error(), "stopped after 5 redirects") {
		t.Fatalf("got %v, want the redirect cap", err)
	}
}
