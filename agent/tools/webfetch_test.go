package tools

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// newWebServer is a fake site: /page (HTML), /text, /big (1 MB of text),
// /missing (404), /image (PNG bytes), /redirect (→ /text).
func newWebServer(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(`<!doctype html><html><head><title>Hello &amp; welcome</title>
<style>body{color:red}</style><script>var secret = 1;</script></head>
<body><h1>Heading</h1><p>First&nbsp;para with <b>bold</b> text.</p><!-- hidden --><p>Second</p></body></html>`))
	})
	mux.HandleFunc("/text", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			t.Errorf("web_fetch used %s, want GET", r.Method)
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("plain body"))
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte(strings.Repeat("x", 1<<20)))
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte("no such page"))
	})
	mux.HandleFunc("/image", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte("\x89PNG\r\n\x1a\n\x00\x00"))
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/text", http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestWebFetch(t *testing.T) {
	srv := newWebServer(t)
	tool := NewWebFetch(Options{Egress: allowLoopback(t), FetchMaxBytes: 1000})
	tests := []struct {
		name      string
		args      map[string]any
		status    int
		content   string
		truncated bool
		note      string
	}{
		{"html as text", map[string]any{"url": srv.URL + "/page"}, 200,
			"Hello & welcome\n\nHeading\n\nFirst para with bold text.\n\nSecond", false, ""},
		{"plain text", map[string]any{"url": srv.URL + "/text"}, 200, "plain body", false, ""},
		{"size cap from config", map[string]any{"url": srv.URL + "/big"}, 200, strings.Repeat("x", 1000), true, ""},
		{"call lowers cap", map[string]any{"url": srv.URL + "/big", "maxBytes": 10}, 200, strings.Repeat("x", 10), true, ""},
		{"call cannot raise cap", map[string]any{"url": srv.URL + "/big", "maxBytes": 1 << 30}, 200, strings.Repeat("x", 1000), true, ""},
		{"404 reported", map[string]any{"url": srv.URL + "/missing"}, 404, "no such page", false, ""},
		{"binary not shown", map[string]any{"url": srv.URL + "/image"}, 200, "", false, "binary content (image/png"},
		{"redirect followed", map[string]any{"url": srv.URL + "/redirect"}, 200, "plain body", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := call(t, tool, agentCC(), tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if res["status"] != float64(tt.status) || res["content"] != tt.content || res["truncated"] != tt.truncated {
				t.Fatalf("got %v", res)
			}
			if note, _ := res["note"].(string); !strings.HasPrefix(note, tt.note) {
				t.Fatalf("note %q, want prefix %q", note, tt.note)
			}
		})
	}
}

func TestWebFetchRefusals(t *testing.T) {
	tool := NewWebFetch(Options{Egress: allowLoopback(t)})
	tests := []struct {
		name string
		raw  string
		want string
	}{
		{"file scheme", `{"url":"file:///etc/passwd"}`, `only http and https URLs can be fetched, not "file:"`},
		{"ftp scheme", `{"url":"ftp://example.com/x"}`, `not "ftp:"`},
		{"no scheme", `{"url":"example.com"}`, "only http and https"},
		{"no host", `{"url":"http:///path"}`, "has no host"},
		{"missing url", `{}`, `missing required field "url"`},
		{"bad maxBytes", `{"url":"http://x","maxBytes":"lots"}`, `field "maxBytes" must be an integer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tool.Call(context.Background(), agentCC(), json.RawMessage(tt.raw))
			if !errors.Is(err, ErrBadArguments) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want ErrBadArguments containing %q", err, tt.want)
			}
		})
	}
}

func TestWebFetchUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, err := NewWebFetch(Options{Egress: allowLoopback(t)}).Call(context.Background(), agentCC(), json.RawMessage(`{"url":"`+url+`/x"}`))
	if err == nil || !strings.Contains(err.Error(), "fetch "+url+"/x") {
		t.Fatalf("want a fetch error naming the URL, got %v", err)
	}
}

func TestWebFetchTimeCap(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers
	}))
	t.Cleanup(srv.Close)
	tool := NewWebFetch(Options{Egress: allowLoopback(t), FetchTimeout: 50 * time.Millisecond})
	_, err := tool.Call(context.Background(), agentCC(), json.RawMessage(`{"url":"`+srv.URL+`/slow"}`))
	if err == nil || !strings.Contains(err.Error(), "no answer within 50ms") {
		t.Fatalf("want a time-cap error, got %v", err)
	}
}
