package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// webOffConfig: the web chat on a listener that is not loopback (the
// test's listener is, but the config says otherwise, which is what the
// gateway goes by), with a token and room for 9 event streams.
const webOffConfig = `{
  gateway: { http: { listen: "0.0.0.0:8790" }, admin: { token: "admin-token" } },
  models: { providers: { demo: { api: "demo", models: [{ id: "demo" }] } } },
  agents: { defaults: { model: "demo/demo" } },
  channels: { web: { token: "s3cret-token", maxStreams: 9 } },
}`

// webReq makes one request to the gateway and returns the response with its
// body read.
func webReq(t *testing.T, method, url string, body []byte, header map[string]string, cookies ...*http.Cookie) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestE2EWebOffLoopback: off loopback a conversation belongs to the browser
// that started it. Its first post returns clientSecret (and sets an
// HttpOnly SameSite=Strict cookie); reading, following or posting to it
// without the secret is 403. The token works in the Authorization header
// and the page's cookie, never in the URL. Event streams are capped (8 per
// client, channels.web.maxStreams in all). /mcp needs the token; /readyz
// without it tells only whether the gateway is ready.
func TestE2EWebOffLoopback(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, webOffConfig, nil)
	bearer := map[string]string{"Authorization": "Bearer s3cret-token"}
	post := func(client string, header map[string]string, cookies ...*http.Cookie) (*http.Response, string) {
		b, _ := json.Marshal(map[string]string{"client": client, "text": "hello"})
		return webReq(t, "POST", tg.URL+"/api/messages", b, header, cookies...)
	}
	with := func(h map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for hk, hv := range h {
			out[hk] = hv
		}
		return out
	}

	resp, body := post("alice", bearer)
	var first struct {
		SessionKey   string `json:"sessionKey"`
		ClientSecret string `json:"clientSecret"`
	}
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal([]byte(body), &first) != nil || len(first.ClientSecret) < 32 {
		t.Fatalf("first post: %s %s, want 202 with a clientSecret", resp.Status, body)
	}
	var secretCookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "herald_client_alice" {
			secretCookie = c
		}
	}
	if secretCookie == nil || secretCookie.Value != first.ClientSecret || !secretCookie.HttpOnly || secretCookie.SameSite != http.SameSiteStrictMode {
		t.Errorf("first post's cookie %+v, want herald_client_alice=<clientSecret>, HttpOnly, SameSite=Strict", secretCookie)
	}
	withSecret := with(bearer, "X-Herald-Client-Secret", first.ClientSecret)

	for _, c := range []struct {
		name    string
		method  string
		path    string
		header  map[string]string
		cookies []*http.Cookie
		want    int
	}{
		{"list without the secret", "GET", "/api/messages?client=alice", bearer, nil, 403},
		{"list with a wrong secret", "GET", "/api/messages?client=alice", with(bearer, "X-Herald-Client-Secret", "guess"), nil, 403},
		{"list with the secret", "GET", "/api/messages?client=alice", withSecret, nil, 200},
		{"list with the page's cookie", "GET", "/api/messages?client=alice", bearer, []*http.Cookie{secretCookie}, 200},
		{"events without the secret", "GET", "/api/events?client=alice", bearer, nil, 403},
		{"events of a client not started", "GET", "/api/events?client=nobody", bearer, nil, 403},
		{"token in the URL", "GET", "/api/messages?client=alice&token=s3cret-token", map[string]string{"X-Herald-Client-Secret": first.ClientSecret}, nil, 401},
		{"mcp without the token", "GET", "/mcp", nil, nil, 401},
		{"mcp with the token", "GET", "/mcp", bearer, nil, 200},
		{"metrics with the token in the URL", "GET", "/metrics?token=s3cret-token", nil, nil, 401},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := webReq(t, c.method, tg.URL+c.path, nil, c.header, c.cookies...)
			if resp.StatusCode != c.want {
				t.Errorf("%s %s: %s %s, want %d", c.method, c.path, resp.Status, body, c.want)
			}
		})
	}
	if resp, body := post("alice", bearer); resp.StatusCode != http.StatusForbidden {
		t.Errorf("another browser's post into alice's conversation: %s %s, want 403", resp.Status, body)
	}
	if resp, body := post("alice", withSecret); resp.StatusCode != http.StatusAccepted || strings.Contains(body, "clientSecret") {
		t.Errorf("alice's second post: %s %s, want 202 without a new secret", resp.Status, body)
	}

	// The page trades the token for a cookie; the cookie then stands for it.
	resp, _ = webReq(t, "POST", tg.URL+"/api/login", nil, bearer)
	var tokenCookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "herald_token" {
			tokenCookie = c
		}
	}
	if tokenCookie == nil || strings.Contains(tokenCookie.Value, "s3cret-token") || !tokenCookie.HttpOnly || tokenCookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("POST /api/login cookie %+v, want an HttpOnly SameSite=Strict herald_token that is not the token", tokenCookie)
	}
	if resp, body := webReq(t, "GET", tg.URL+"/api/messages?client=alice", nil, nil, tokenCookie, secretCookie); resp.StatusCode != http.StatusOK {
		t.Errorf("list with the page's cookies: %s %s", resp.Status, body)
	}

	// /readyz: the bare status for anyone, the details with the token.
	if _, body := webReq(t, "GET", tg.URL+"/readyz", nil, nil); strings.Contains(body, "checks") || !strings.Contains(body, `"ready"`) {
		t.Errorf("/readyz without the token: %s, want only the ready flag", body)
	}
	if _, body := webReq(t, "GET", tg.URL+"/readyz", nil, bearer); !strings.Contains(body, "channel:web") {
		t.Errorf("/readyz with the token: %s, want the checks", body)
	}

	// Streams: 8 for alice, the 9th of hers refused; bob gets the last of
	// the 9 the config allows, and then no one gets one.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(client string, header map[string]string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", tg.URL+"/api/events?client="+client, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
		} else {
			t.Cleanup(func() { resp.Body.Close() })
		}
		return resp.StatusCode
	}
	for i := range 8 {
		if got := open("alice", withSecret); got != http.StatusOK {
			t.Fatalf("alice's stream %d: %d, want 200", i+1, got)
		}
	}
	if got := open("alice", withSecret); got != http.StatusTooManyRequests {
		t.Errorf("alice's 9th stream: %d, want 429", got)
	}
	resp, body = post("bob", bearer)
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal([]byte(body), &first) != nil {
		t.Fatalf("bob's first post: %s %s", resp.Status, body)
	}
	bob := with(bearer, "X-Herald-Client-Secret", first.ClientSecret)
	if got := open("bob", bob); got != http.StatusOK {
		t.Errorf("bob's stream (the 9th in all): %d, want 200", got)
	}
	if got := open("bob", bob); got != http.StatusTooManyRequests {
		t.Errorf("a 10th stream with channels.web.maxStreams 9: %d, want 429", got)
	}
}

// TestE2EBehindProxy: behind a local reverse proxy the listener is
// 127.0.0.1, yet the world reaches it. With gateway.http.behindProxy the
// off-loopback rules hold for every request (even one without forwarding
// headers, as nginx sends by default): token needed, never in the URL,
// clients need their secret, /metrics needs the token. Without the
// setting, a request carrying X-Forwarded-For gets the same rules, and
// one without keeps the loopback rules.
func TestE2EBehindProxy(t *testing.T) {
	t.Parallel()
	const cfg = `{
  gateway: { http: { listen: "127.0.0.1:0", behindProxy: %s }, admin: { token: "admin-token" } },
  models: { providers: { demo: { api: "demo", models: [{ id: "demo" }] } } },
  agents: { defaults: { model: "demo/demo" } },
  channels: { web: { token: "s3cret-token" } },
}`
	for _, behind := range []bool{true, false} {
		name := map[bool]string{true: "behindProxy", false: "forwarded header"}[behind]
		t.Run(name, func(t *testing.T) {
			tg := newTestGateway(t, strings.Replace(cfg, "%s", map[bool]string{true: "true", false: "false"}[behind], 1), nil)
			via := map[string]string{}
			if !behind {
				via["X-Forwarded-For"] = "203.0.113.7"
			}
			with := func(k, v string) map[string]string {
				m := map[string]string{k: v}
				for k, v := range via {
					m[k] = v
				}
				return m
			}
			if resp, body := webReq(t, "GET", tg.URL+"/api/messages?client=c&token=s3cret-token", nil, via); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("token in the URL: %d %s; want 401", resp.StatusCode, body)
			}
			if resp, body := webReq(t, "GET", tg.URL+"/metrics", nil, via); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("/metrics without the token: %d %.200s; want 401", resp.StatusCode, body)
			}
			b, _ := json.Marshal(map[string]string{"client": "c", "text": "hello"})
			resp, body := webReq(t, "POST", tg.URL+"/api/messages", b, with("Authorization", "Bearer s3cret-token"))
			if resp.StatusCode != http.StatusAccepted || !strings.Contains(body, "clientSecret") {
				t.Fatalf("first post: %d %s; want 202 with clientSecret", resp.StatusCode, body)
			}
			if resp, body := webReq(t, "GET", tg.URL+"/api/messages?client=c", nil, with("Authorization", "Bearer s3cret-token")); resp.StatusCode != http.StatusForbidden {
				t.Errorf("read without the client secret: %d %s; want 403", resp.StatusCode, body)
			}
			if !behind {
				// Straight to the loopback listener, no proxy: as before.
				if resp, body := webReq(t, "GET", tg.URL+"/metrics", nil, nil); resp.StatusCode != http.StatusOK {
					t.Errorf("/metrics on loopback without a proxy header: %d %.200s; want 200", resp.StatusCode, body)
				}
			}
		})
	}
}
