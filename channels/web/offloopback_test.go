package web_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels/web"
)

// TestRateLimitPerAddressOffLoopback: off loopback the rate limit applies
// to each remote address as well as each client, so one address cannot
// post past it by using new client ids; on loopback it stays per client.
func TestRateLimitPerAddressOffLoopback(t *testing.T) {
	limit := web.RateLimit{PerMinute: 1, Burst: 2}
	for _, off := range []bool{false, true} {
		h := newHarness(t, web.Options{Token: "t", OffLoopback: off, RateLimit: limit}, nil)
		var got []int
		for _, client := range []string{"c1", "c2", "c3"} {
			b, _ := json.Marshal(map[string]string{"client": client, "text": "hi"})
			got = append(got, h.do(t, "POST", "/api/messages", string(b), map[string]string{"Authorization": "Bearer t"}).status)
		}
		want := []int{http.StatusAccepted, http.StatusAccepted, http.StatusAccepted}
		if off {
			want[2] = http.StatusTooManyRequests
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("offLoopback=%v: posts as three clients from one address: %v, want %v", off, got, want)
				break
			}
		}
	}
}

// TestClientSecretOptionalOnLoopback: on loopback no secret is issued or
// needed (the API is as it was), while off loopback the first post issues
// one and the same client without it is refused.
func TestClientSecretOptionalOnLoopback(t *testing.T) {
	h := newHarness(t, web.Options{}, nil)
	if r := h.post(t, "loop", "hi"); r.status != http.StatusAccepted || r.body["clientSecret"] != nil {
		t.Errorf("loopback post: %d %s, want 202 without clientSecret", r.status, r.raw)
	}
	if r := h.post(t, "loop", "again"); r.status != http.StatusAccepted {
		t.Errorf("loopback second post without a secret: %d %s", r.status, r.raw)
	}
	h = newHarness(t, web.Options{Token: "t", OffLoopback: true}, nil)
	auth := map[string]string{"Authorization": "Bearer t"}
	r := h.do(t, "POST", "/api/messages", `{"client":"off","text":"hi"}`, auth)
	secret, _ := r.body["clientSecret"].(string)
	if r.status != http.StatusAccepted || secret == "" {
		t.Fatalf("off-loopback first post: %d %s, want 202 with clientSecret", r.status, r.raw)
	}
	if r := h.do(t, "POST", "/api/messages", `{"client":"off","text":"x"}`, auth); r.status != http.StatusForbidden {
		t.Errorf("off-loopback post without the secret: %d %s, want 403", r.status, r.raw)
	}
	auth[web.ClientSecretHeader] = secret
	if r := h.do(t, "GET", "/api/session?client=off", "", auth); r.body["owner"] != "you" || r.body["secretRequired"] != true {
		t.Errorf("session with the secret: %s", r.raw)
	}
}

// TestLegacyClientNotClaimableOffLoopback: a client with history from
// before client secrets (no secret) is not handed to whoever posts first
// off loopback: the post is refused with 403 saying what to do, no secret
// is issued and the history stays hidden; a new client id works, and on
// loopback the old conversation goes on as before.
func TestLegacyClientNotClaimableOffLoopback(t *testing.T) {
	log := web.NewMemoryLog()
	if _, _, err := log.Append(context.Background(), "legacy", &web.Entry{Role: web.RoleUser, Text: "my old secret plans"}); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, web.Options{Token: "t", OffLoopback: true, Log: log}, nil)
	auth := map[string]string{"Authorization": "Bearer t"}
	r := h.do(t, "POST", "/api/messages", `{"client":"legacy","text":"hi, it's me"}`, auth)
	if r.status != http.StatusForbidden || r.body["clientSecret"] != nil || !strings.Contains(r.raw, "before client secrets") || !strings.Contains(r.raw, "new client id") {
		t.Errorf("off-loopback post to a legacy client: %d %s; want 403 saying to use a new client id, no clientSecret", r.status, r.raw)
	}
	if r := h.do(t, "GET", "/api/messages?client=legacy", "", auth); r.status != http.StatusForbidden || strings.Contains(r.raw, "secret plans") {
		t.Errorf("off-loopback read of a legacy client after the refused post: %d %s; want 403", r.status, r.raw)
	}
	if r := h.do(t, "POST", "/api/messages", `{"client":"fresh","text":"hi"}`, auth); r.status != http.StatusAccepted || r.body["clientSecret"] == nil {
		t.Errorf("off-loopback post to a new client: %d %s; want 202 with clientSecret", r.status, r.raw)
	}

	loop := newHarness(t, web.Options{Log: log}, nil)
	if r := loop.post(t, "legacy", "still me"); r.status != http.StatusAccepted {
		t.Errorf("loopback post to a legacy client: %d %s; want 202 as before", r.status, r.raw)
	}
	if got := loop.list(t, "legacy", 0); len(got) == 0 || got[0].Text != "my old secret plans" {
		t.Errorf("loopback read of a legacy client: %+v", got)
	}
}

// TestProxiedRequestIsOffLoopback: on a loopback listener (a local reverse
// proxy connects from 127.0.0.1 for everyone) a request carrying a
// Forwarded or X-Forwarded-For header gets the off-loopback rules: without
// a token it is refused, a token in the URL is refused, a client needs
// its secret. The header can only tighten: without it the loopback rules
// hold as before.
func TestProxiedRequestIsOffLoopback(t *testing.T) {
	for _, hdr := range []string{"X-Forwarded-For", "Forwarded", "X-Real-IP"} {
		t.Run(hdr, func(t *testing.T) {
			via := map[string]string{hdr: "203.0.113.7"}
			if hdr == "Forwarded" {
				via[hdr] = "for=203.0.113.7;proto=https"
			}
			open := newHarness(t, web.Options{}, nil)
			if r := open.do(t, "GET", "/api/messages?client=c", "", via); r.status != http.StatusForbidden || !strings.Contains(r.raw, "behindProxy") {
				t.Errorf("proxied request, no token configured: %d %s; want 403 naming gateway.http.behindProxy", r.status, r.raw)
			}
			if r := open.do(t, "GET", "/api/messages?client=c", "", nil); r.status != http.StatusOK {
				t.Errorf("direct loopback request, no token configured: %d %s; want 200", r.status, r.raw)
			}

			h := newHarness(t, web.Options{Token: "t"}, nil)
			if r := h.do(t, "GET", "/api/messages?client=c&token=t", "", via); r.status != http.StatusUnauthorized {
				t.Errorf("proxied request with ?token=: %d %s; want 401", r.status, r.raw)
			}
			auth := map[string]string{"Authorization": "Bearer t", hdr: via[hdr]}
			r := h.do(t, "POST", "/api/messages", `{"client":"c","text":"hi"}`, auth)
			secret, _ := r.body["clientSecret"].(string)
			if r.status != http.StatusAccepted || secret == "" {
				t.Fatalf("proxied first post: %d %s; want 202 with clientSecret", r.status, r.raw)
			}
			if r := h.do(t, "GET", "/api/messages?client=c", "", auth); r.status != http.StatusForbidden {
				t.Errorf("proxied read without the client secret: %d %s; want 403", r.status, r.raw)
			}
			if r := h.do(t, "GET", "/api/session?client=c", "", auth); r.body["secretRequired"] != true {
				t.Errorf("proxied session: %s; want secretRequired true", r.raw)
			}
			auth[web.ClientSecretHeader] = secret
			if r := h.do(t, "GET", "/api/messages?client=c", "", auth); r.status != http.StatusOK {
				t.Errorf("proxied read with the client secret: %d %s; want 200", r.status, r.raw)
			}
		})
	}
}

// oneFile serves one file to client "off".
type oneFile struct{}

func (oneFile) OpenFile(_ context.Context, client, id string) (io.ReadCloser, web.File, error) {
	if client != "off" || id != strings.Repeat("a", 64) {
		return nil, web.File{}, web.ErrNoFile
	}
	return io.NopCloser(strings.NewReader("PNGDATA")), web.File{ID: id, Name: "x.png", MIME: "image/png", Size: 7}, nil
}

// TestFileNeedsClientSecretOffLoopback: off loopback a conversation's file
// is served only with the client's secret, like its messages; another
// conversation's file is 404.
func TestFileNeedsClientSecretOffLoopback(t *testing.T) {
	h := newHarness(t, web.Options{Token: "t", OffLoopback: true, Files: oneFile{}}, nil)
	auth := map[string]string{"Authorization": "Bearer t"}
	// A client with no secret yet (a conversation from before client
	// secrets, or none): its files are served to no one off loopback, as
	// its messages are not (issue 35).
	if r := h.do(t, "GET", "/api/files/"+strings.Repeat("a", 64)+"?client=off", "", auth); r.status != http.StatusForbidden {
		t.Errorf("GET a file of a client with no secret yet: %d %q, want 403", r.status, r.raw)
	}
	r := h.do(t, "POST", "/api/messages", `{"client":"off","text":"hi"}`, auth)
	secret, _ := r.body["clientSecret"].(string)
	if secret == "" {
		t.Fatalf("first post: %d %s", r.status, r.raw)
	}
	path := "/api/files/" + strings.Repeat("a", 64) + "?client=off"
	if r := h.do(t, "GET", path, "", auth); r.status != http.StatusForbidden {
		t.Errorf("GET the file without the secret: %d, want 403", r.status)
	}
	auth[web.ClientSecretHeader] = secret
	if r := h.do(t, "GET", path, "", auth); r.status != http.StatusOK || r.raw != "PNGDATA" {
		t.Errorf("GET the file with the secret: %d %q", r.status, r.raw)
	}
	if r := h.do(t, "GET", "/api/files/"+strings.Repeat("b", 64)+"?client=off", "", auth); r.status != http.StatusNotFound {
		t.Errorf("GET a file the conversation does not name: %d, want 404", r.status)
	}
}

// TestJSONFilesBoundedToOneFile: the JSON base64 form is held in memory
// while it is decoded, so a JSON post carries one maxBytes file's worth in
// all: two files that each fit, together over it, are refused with 413
// naming multipart; the same two files as multipart are taken.
func TestJSONFilesBoundedToOneFile(t *testing.T) {
	h := newHarness(t, web.Options{Files: oneFile{}, MaxFileBytes: 400 << 10, SpoolDir: t.TempDir()}, nil)
	data := strings.Repeat("x", 390<<10) // each under 400 KiB, together over it
	enc := base64.StdEncoding.EncodeToString([]byte(data))
	body, _ := json.Marshal(map[string]any{"client": "json-big", "text": "two files", "files": []map[string]string{
		{"name": "a.txt", "mime": "text/plain", "data": enc}, {"name": "b.txt", "mime": "text/plain", "data": enc}}})
	r := h.do(t, "POST", "/api/messages", string(body), nil)
	if r.status != http.StatusRequestEntityTooLarge || !strings.Contains(r.raw, "multipart/form-data") {
		t.Fatalf("JSON post of two 390 KiB files (maxBytes 400 KiB): %d %s; want 413 naming multipart", r.status, r.raw)
	}

	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("client", "json-big")
	_ = mw.WriteField("text", "two files")
	for _, name := range []string{"a.txt", "b.txt"} {
		fw, _ := mw.CreateFormFile("file", name)
		_, _ = fw.Write([]byte(data))
	}
	_ = mw.Close()
	req, _ := http.NewRequest("POST", h.srv.URL+"/api/messages", &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	res, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("the same files as multipart: %s, want 202", res.Status)
	}
	select {
	case in := <-h.inbound:
		if len(in.Attachments) != 2 {
			t.Errorf("multipart post reached the gateway with %d files, want 2", len(in.Attachments))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the multipart post never reached the gateway")
	}
}

// TestCookiesSecureBehindProxy (issue 35): behind a reverse proxy TLS ends
// at the proxy, so the request Herald sees is plain HTTP; the token and
// client-secret cookies are Secure anyway (gateway.http.behindProxy), and
// when a proxy says the client used https. Without either they are not
// (a plain-HTTP loopback page must still get them back).
func TestCookiesSecureBehindProxy(t *testing.T) {
	for _, c := range []struct {
		name   string
		opts   web.Options
		hdr    map[string]string
		secure bool
	}{
		{"behindProxy", web.Options{Token: "t", OffLoopback: true, BehindProxy: true}, nil, true},
		{"X-Forwarded-Proto https", web.Options{Token: "t", OffLoopback: true}, map[string]string{"X-Forwarded-Proto": "https"}, true},
		{"plain http", web.Options{Token: "t", OffLoopback: true}, nil, false},
	} {
		h := newHarness(t, c.opts, nil)
		for _, req := range []struct{ path, body string }{{"/api/login", ""}, {"/api/messages", `{"client":"cookie-c","text":"hi"}`}} {
			r, _ := http.NewRequest("POST", h.srv.URL+req.path, strings.NewReader(req.body))
			r.Header.Set("Authorization", "Bearer t")
			r.Header.Set("Content-Type", "application/json")
			for k, v := range c.hdr {
				r.Header.Set(k, v)
			}
			res, err := h.srv.Client().Do(r)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if len(res.Cookies()) == 0 {
				t.Fatalf("%s: POST %s set no cookie (%s)", c.name, req.path, res.Status)
			}
			for _, ck := range res.Cookies() {
				if ck.Secure != c.secure {
					t.Errorf("%s: POST %s cookie %s Secure=%v, want %v", c.name, req.path, ck.Name, ck.Secure, c.secure)
				}
			}
		}
	}
}
