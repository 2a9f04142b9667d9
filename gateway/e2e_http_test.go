package gateway_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestE2EStalledRequestBodyIsCut: a client that sends the headers of a POST
// and then stalls its body does not hold the connection: the gateway closes
// it once the read timeout passes, and serves others meanwhile.
func TestE2EStalledRequestBodyIsCut(t *testing.T) {
	testReadTimeout = testReadTimeoutFor
	tg := newTestGateway(t, `{ gateway: { http: { listen: "127.0.0.1:0" } } }`, nil)
	testReadTimeout = 0
	addr := strings.TrimPrefix(tg.URL, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /api/messages HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"client\":", addr)
	// Another client is served while this one stalls.
	webPost(t, tg.URL, "other", "hello")
	if err := c.SetReadDeadline(time.Now().Add(e2eWait)); err != nil {
		t.Fatal(err)
	}
	// The server gives up on the body: it answers with an error or closes
	// the connection, long before the test's own deadline.
	line, err := bufio.NewReader(c).ReadString('\n')
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the stalled request still holds its connection after %s", e2eWait)
	}
	if err == nil && strings.Contains(line, " 202 ") {
		t.Fatalf("a stalled body was accepted: %q", line)
	}
}

// TestE2EEventStreamOutlivesReadTimeout: the read timeout bounds reading a
// request, not an open /api/events stream.
func TestE2EEventStreamOutlivesReadTimeout(t *testing.T) {
	testReadTimeout = testReadTimeoutFor
	tg := newTestGateway(t, `{ gateway: { http: { listen: "127.0.0.1:0" } } }`, nil)
	testReadTimeout = 0
	addr := strings.TrimPrefix(tg.URL, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /api/events?client=sse1 HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", addr)
	r := bufio.NewReader(c)
	if err := c.SetReadDeadline(time.Now().Add(e2eWait)); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("event stream: %q, %v", line, err)
	}
	// Past the read timeout, a new message still arrives on the stream.
	time.Sleep(2 * testReadTimeoutFor)
	webPost(t, tg.URL, "sse1", "still there")
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("the event stream ended: %v", err)
		}
		if strings.Contains(line, "still there") {
			return
		}
	}
}

// testReadTimeoutFor is the read timeout the tests above give a gateway:
// every request of theirs but the stalled one must be read within it, also
// when a loaded machine leaves the server's goroutine waiting (200 and
// 300 ms leave little room for that under -race on 2 busy cores).
const testReadTimeoutFor = time.Second

// TestE2EMetricsNeedTheTokenOffLoopback: with gateway.http.listen not on
// loopback, /metrics answers 401 without the web token and 200 with it.
func TestE2EMetricsNeedTheTokenOffLoopback(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, `{ gateway: { http: { listen: "0.0.0.0:8790" }, admin: { token: "admin-token" } }, channels: { web: { token: "s3cret-token" } } }`, nil)
	get := func(h string) int {
		req, _ := http.NewRequest("GET", tg.URL+"/metrics", nil)
		if h != "" {
			req.Header.Set("Authorization", h)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get(""); got != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d, want 401", got)
	}
	if got := get("Bearer wrong"); got != http.StatusUnauthorized {
		t.Errorf("/metrics with a wrong token: %d, want 401", got)
	}
	if got := get("Bearer s3cret-token"); got != http.StatusOK {
		t.Errorf("/metrics with the token: %d, want 200", got)
	}
}
