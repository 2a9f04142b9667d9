package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/web"
)

// harness is a started adapter on an httptest server with a recording sink.
type harness struct {
	a       *web.Adapter
	srv     *httptest.Server
	log     *web.MemoryLog
	inbound chan channels.Inbound
}

func newHarness(t *testing.T, opts web.Options, sink func(h *harness) channels.Sink) *harness {
	t.Helper()
	h := &harness{log: web.NewMemoryLog(), inbound: make(chan channels.Inbound, 100)}
	if opts.Log == nil {
		opts.Log = h.log
	}
	a, err := web.New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.a = a
	s := func(ctx context.Context, in channels.Inbound) error { h.inbound <- in; return nil }
	if sink != nil {
		s = sink(h)
	}
	if err := a.Start(context.Background(), s); err != nil {
		t.Fatalf("Start: %v", err)
	}
	h.srv = httptest.NewServer(a.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		h.srv.Close()
	})
	return h
}

type reply struct {
	status int
	body   map[string]any
	raw    string
}

func (h *harness) do(t *testing.T, method, path, body string, hdr map[string]string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := reply{status: res.StatusCode, raw: string(raw)}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			t.Fatalf("%s %s: answer is not a JSON object: %v: %s", method, path, err, raw)
		}
	}
	return r
}

func (h *harness) post(t *testing.T, client, text string) reply {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"client": client, "text": text})
	return h.do(t, "POST", "/api/messages", string(b), nil)
}

func (h *harness) list(t *testing.T, client string, after int64) []web.Entry {
	t.Helper()
	r := h.do(t, "GET", fmt.Sprintf("/api/messages?client=%s&after=%d", client, after), "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /api/messages: status %d: %s", r.status, r.raw)
	}
	var out struct {
		Messages []web.Entry `json:"messages"`
	}
	if err := json.Unmarshal([]byte(r.raw), &out); err != nil {
		t.Fatal(err)
	}
	return out.Messages
}

func keys(m map[string]any) []string {
	var k []string
	for key := range m {
		k = append(k, key)
	}
	slices.Sort(k)
	return k
}

func TestPostMessage(t *testing.T) {
	h := newHarness(t, web.Options{SessionKey: func(c string) string { return "agent:main:web:dm:" + c }}, nil)
	long := strings.Repeat("a", web.MaxTextBytes)
	tests := []struct {
		name      string
		body      string
		status    int
		errSubstr string
	}{
		{"ok", `{"client":"c1","text":"hello"}`, 202, ""},
		{"text at the limit", `{"client":"c1","text":"` + long + `"}`, 202, ""},
		{"text over the limit", `{"client":"c1","text":"` + long + `b"}`, 400, "limit"},
		{"empty text", `{"client":"c1","text":""}`, 400, "text is empty"},
		{"blank text", `{"client":"c1","text":" \n\t"}`, 400, "text is empty"},
		{"missing text", `{"client":"c1"}`, 400, "text is empty"},
		{"missing client", `{"text":"hi"}`, 400, "client"},
		{"client with a space", `{"client":"a b","text":"hi"}`, 400, "client"},
		{"client with a slash", `{"client":"a/b","text":"hi"}`, 400, "client"},
		{"client of 65 chars", `{"client":"` + strings.Repeat("x", 65) + `","text":"hi"}`, 400, "client"},
		{"client of 64 chars", `{"client":"` + strings.Repeat("x", 64) + `","text":"hi"}`, 202, ""},
		{"not JSON", `client=c1&text=hi`, 400, "JSON"},
		{"wrong type", `{"client":1,"text":"hi"}`, 400, "JSON"},
		{"two objects", `{"client":"c1","text":"a"}{"client":"c1","text":"b"}`, 400, "single"},
		{"body too large", `{"client":"c1","text":"` + strings.Repeat("a", 300<<10) + `"}`, 413, "larger"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do(t, "POST", "/api/messages", tt.body, nil)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.raw)
			}
			if tt.status == 202 {
				if got := keys(r.body); !slices.Equal(got, []string{"seq", "sessionKey"}) {
					t.Fatalf("answer fields %v, want [seq sessionKey]: %s", got, r.raw)
				}
				if !strings.HasPrefix(r.body["sessionKey"].(string), "agent:main:web:dm:") {
					t.Errorf("sessionKey %v", r.body["sessionKey"])
				}
				return
			}
			if got := keys(r.body); !slices.Equal(got, []string{"error"}) {
				t.Fatalf("error answer fields %v, want [error]: %s", got, r.raw)
			}
			if msg, _ := r.body["error"].(string); !strings.Contains(msg, tt.errSubstr) {
				t.Errorf("error %q does not mention %q", msg, tt.errSubstr)
			}
		})
	}
}

func TestPostReachesSinkAndIsStored(t *testing.T) {
	h := newHarness(t, web.Options{SessionKey: func(c string) string { return "agent:ops:web:dm:" + c }}, nil)
	r1 := h.post(t, "alice_1", "first")
	r2 := h.post(t, "alice_1", "second\nline")
	if r1.status != 202 || r2.status != 202 {
		t.Fatalf("status %d, %d", r1.status, r2.status)
	}
	if r1.body["seq"] != float64(1) || r2.body["seq"] != float64(2) {
		t.Fatalf("seqs %v, %v, want 1, 2", r1.body["seq"], r2.body["seq"])
	}
	if r1.body["sessionKey"] != "agent:ops:web:dm:alice_1" {
		t.Fatalf("sessionKey %v", r1.body["sessionKey"])
	}
	for _, want := range []string{"first", "second\nline"} {
		select {
		case in := <-h.inbound:
			wantOrigin := channels.Origin{Channel: "web", ChatID: "alice_1", ChatType: "dm", SenderID: "alice_1", MessageID: in.Origin.MessageID}
			if in.Origin != wantOrigin || in.Text != want || !in.Mentioned {
				t.Fatalf("inbound %+v, want origin %+v text %q mentioned", in, wantOrigin, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no inbound for %q", want)
		}
	}
	got := h.list(t, "alice_1", 0)
	if len(got) != 2 || got[0].Role != "user" || got[0].Text != "first" || got[1].Text != "second\nline" {
		t.Fatalf("stored %+v", got)
	}
}

func TestListMessages(t *testing.T) {
	h := newHarness(t, web.Options{}, nil)
	ctx := context.Background()
	to := channels.Origin{Channel: "web", ChatID: "bob", ChatType: "dm"}
	h.post(t, "bob", "hi")
	if err := h.a.Send(ctx, to, channels.Message{Kind: channels.KindReply, Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	if err := h.a.Send(ctx, to, channels.Message{Kind: channels.KindAnnounce, Text: "Status: success", RunID: "run-1"}); err != nil {
		t.Fatal(err)
	}
	if err := h.a.Send(ctx, to, channels.Message{Kind: channels.KindSystem, Text: "⚙️ ok"}); err != nil {
		t.Fatal(err)
	}

	t.Run("field names", func(t *testing.T) {
		r := h.do(t, "GET", "/api/messages?client=bob", "", nil)
		if got := keys(r.body); !slices.Equal(got, []string{"messages"}) {
			t.Fatalf("fields %v: %s", got, r.raw)
		}
		msgs := r.body["messages"].([]any)
		if len(msgs) != 4 {
			t.Fatalf("%d messages, want 4: %s", len(msgs), r.raw)
		}
		wantKeys := [][]string{
			{"at", "role", "seq", "text"},
			{"at", "html", "role", "seq", "text"}, // an assistant reply also comes rendered
			{"at", "role", "runId", "seq", "text"},
			{"at", "role", "seq", "text"},
		}
		wantRoles := []string{"user", "assistant", "announce", "system"}
		for i, m := range msgs {
			m := m.(map[string]any)
			if got := keys(m); !slices.Equal(got, wantKeys[i]) {
				t.Errorf("message %d fields %v, want %v", i, got, wantKeys[i])
			}
			if m["role"] != wantRoles[i] || m["seq"] != float64(i+1) {
				t.Errorf("message %d: role %v seq %v", i, m["role"], m["seq"])
			}
			if _, err := time.Parse(time.RFC3339, m["at"].(string)); err != nil {
				t.Errorf("message %d: at is not RFC 3339: %v", i, err)
			}
		}
	})

	tests := []struct {
		query  string
		status int
		seqs   []int64
	}{
		{"client=bob", 200, []int64{1, 2, 3, 4}},
		{"client=bob&after=0", 200, []int64{1, 2, 3, 4}},
		{"client=bob&after=2", 200, []int64{3, 4}},
		{"client=bob&after=4", 200, []int64{}},
		{"client=bob&after=99", 200, []int64{}},
		{"client=bob&after=1&limit=2", 200, []int64{2, 3}},
		{"client=nobody", 200, []int64{}},
		{"client=bob&after=-1", 400, nil},
		{"client=bob&after=x", 400, nil},
		{"client=bob&limit=0", 400, nil},
		{"client=", 400, nil},
		{"client=a%20b", 400, nil},
		{"", 400, nil},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			r := h.do(t, "GET", "/api/messages?"+tt.query, "", nil)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.raw)
			}
			if tt.status != 200 {
				if _, ok := r.body["error"].(string); !ok {
					t.Fatalf("no error field: %s", r.raw)
				}
				return
			}
			msgs, ok := r.body["messages"].([]any)
			if !ok {
				t.Fatalf("messages is not an array (null?): %s", r.raw)
			}
			var seqs []int64
			for _, m := range msgs {
				seqs = append(seqs, int64(m.(map[string]any)["seq"].(float64)))
			}
			if !slices.Equal(seqs, tt.seqs) && !(len(seqs) == 0 && len(tt.seqs) == 0) {
				t.Fatalf("seqs %v, want %v", seqs, tt.seqs)
			}
		})
	}
}

func TestSend(t *testing.T) {
	h := newHarness(t, web.Options{}, nil)
	ctx := context.Background()
	to := channels.Origin{Channel: "web", ChatID: "carol", ChatType: "dm"}

	t.Run("announce re-delivered with the same run id is shown once", func(t *testing.T) {
		msg := channels.Message{Kind: channels.KindAnnounce, Text: "Status: success\nTask: x", RunID: "3f2a9c1b-0000"}
		for range 3 {
			if err := h.a.Send(ctx, to, msg); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.a.Send(ctx, to, channels.Message{Kind: channels.KindAnnounce, Text: "Status: error", RunID: "other"}); err != nil {
			t.Fatal(err)
		}
		got := h.list(t, "carol", 0)
		if len(got) != 2 || got[0].RunID != "3f2a9c1b-0000" || got[1].RunID != "other" {
			t.Fatalf("entries %+v, want the two runs once each", got)
		}
	})

	t.Run("long messages are not split", func(t *testing.T) {
		text := strings.Repeat("line of text\n", 2000)
		if err := h.a.Send(ctx, to, channels.Message{Kind: channels.KindReply, Text: text}); err != nil {
			t.Fatal(err)
		}
		got := h.list(t, "carol", 2)
		if len(got) != 1 || got[0].Text != text || got[0].Role != "assistant" {
			t.Fatalf("got %d entries", len(got))
		}
	})

	errTests := []struct {
		name string
		to   channels.Origin
		msg  channels.Message
	}{
		{"bad client id", channels.Origin{Channel: "web", ChatID: "no/slash"}, channels.Message{Text: "x"}},
		{"empty client id", channels.Origin{Channel: "web"}, channels.Message{Text: "x"}},
		{"other channel", channels.Origin{Channel: "slack", ChatID: "C1"}, channels.Message{Text: "x"}},
		{"unknown kind", to, channels.Message{Kind: "shout", Text: "x"}},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			err := h.a.Send(ctx, tt.to, tt.msg)
			if !errors.Is(err, channels.ErrPermanent) {
				t.Fatalf("err %v, want ErrPermanent", err)
			}
		})
	}
}

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	id   string
	data string
}

// openEvents opens /api/events and returns parsed events and comments.
func openEvents(t *testing.T, h *harness, query string, hdr map[string]string) (events <-chan sseEvent, comments <-chan string, closeFn func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", h.srv.URL+"/api/events?"+query, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := h.srv.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		cancel()
		t.Fatalf("GET /api/events: %d %s: %s", res.StatusCode, res.Header.Get("Content-Type"), b)
	}
	ev := make(chan sseEvent, 100)
	cm := make(chan string, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ev)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var cur sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur.data != "" {
					ev <- cur
				}
				cur = sseEvent{}
			case strings.HasPrefix(line, ":"):
				select {
				case cm <- line:
				default:
				}
			case strings.HasPrefix(line, "id: "):
				cur.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				cur.data += strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	closeFn = func() {
		cancel()
		res.Body.Close()
		<-done
	}
	t.Cleanup(closeFn)
	return ev, cm, closeFn
}

func next(t *testing.T, ev <-chan sseEvent) web.Entry {
	t.Helper()
	select {
	case e, ok := <-ev:
		if !ok {
			t.Fatal("event stream ended")
		}
		var entry web.Entry
		if err := json.Unmarshal([]byte(e.data), &entry); err != nil {
			t.Fatalf("event data %q: %v", e.data, err)
		}
		if e.id != strconv.FormatInt(entry.Seq, 10) {
			t.Fatalf("event id %q, but seq %d", e.id, entry.Seq)
		}
		return entry
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	return web.Entry{}
}

func TestEvents(t *testing.T) {
	h := newHarness(t, web.Options{}, nil)
	ctx := context.Background()
	to := channels.Origin{Channel: "web", ChatID: "dave", ChatType: "dm"}
	h.post(t, "dave", "one")
	h.post(t, "dave", "two")

	t.Run("history then live", func(t *testing.T) {
		ev, _, _ := openEvents(t, h, "client=dave", nil)
		if e := next(t, ev); e.Seq != 1 || e.Text != "one" || e.Role != "user" {
			t.Fatalf("first %+v", e)
		}
		if e := next(t, ev); e.Seq != 2 {
			t.Fatalf("second %+v", e)
		}
		if err := h.a.Send(ctx, to, channels.Message{Kind: channels.KindReply, Text: "three"}); err != nil {
			t.Fatal(err)
		}
		if e := next(t, ev); e.Seq != 3 || e.Text != "three" || e.Role != "assistant" {
			t.Fatalf("live %+v", e)
		}
		// A re-delivered announce appears once.
		for range 2 {
			if err := h.a.Send(ctx, to, channels.Message{Kind: channels.KindAnnounce, Text: "Status: success", RunID: "r1"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.a.Send(ctx, to, channels.Message{Kind: channels.KindSystem, Text: "after"}); err != nil {
			t.Fatal(err)
		}
		if e := next(t, ev); e.Seq != 4 || e.RunID != "r1" {
			t.Fatalf("announce %+v", e)
		}
		if e := next(t, ev); e.Seq != 5 || e.Text != "after" {
			t.Fatalf("after the duplicate, got %+v, want seq 5 'after'", e)
		}
	})

	t.Run("resume with after", func(t *testing.T) {
		ev, _, _ := openEvents(t, h, "client=dave&after=3", nil)
		if e := next(t, ev); e.Seq != 4 {
			t.Fatalf("got seq %d, want 4", e.Seq)
		}
	})

	t.Run("Last-Event-ID wins over after", func(t *testing.T) {
		ev, _, _ := openEvents(t, h, "client=dave&after=1", map[string]string{"Last-Event-ID": "4"})
		if e := next(t, ev); e.Seq != 5 {
			t.Fatalf("got seq %d, want 5", e.Seq)
		}
	})

	t.Run("bad resume points", func(t *testing.T) {
		for _, tc := range []struct{ query, lastID string }{
			{"client=dave&after=x", ""},
			{"client=dave", "-3"},
			{"client=", ""},
		} {
			r := h.do(t, "GET", "/api/events?"+tc.query, "", map[string]string{"Last-Event-ID": tc.lastID})
			if r.status != 400 || r.body["error"] == nil {
				t.Errorf("%s (Last-Event-ID %q): status %d %s, want 400 with error", tc.query, tc.lastID, r.status, r.raw)
			}
		}
	})

	t.Run("other clients' messages are not streamed", func(t *testing.T) {
		ev, _, _ := openEvents(t, h, "client=erin", nil)
		h.post(t, "dave", "for dave")
		h.post(t, "erin", "for erin")
		if e := next(t, ev); e.Text != "for erin" || e.Seq != 1 {
			t.Fatalf("erin got %+v", e)
		}
	})
}

func TestEventsHeartbeat(t *testing.T) {
	h := newHarness(t, web.Options{Heartbeat: 20 * time.Millisecond}, nil)
	_, comments, _ := openEvents(t, h, "client=hb", nil)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case c := <-comments:
			if c == ": heartbeat" {
				return
			}
		case <-deadline:
			t.Fatal("no heartbeat comment on an idle stream")
		}
	}
}

func TestStopEndsStreamsAndRefusesPosts(t *testing.T) {
	h := newHarness(t, web.Options{}, nil)
	ev, _, _ := openEvents(t, h, "client=frank", nil)
	h.post(t, "frank", "x")
	next(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.a.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case _, ok := <-ev:
		if ok {
			t.Fatal("event after Stop")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("event stream still open after Stop")
	}
	if r := h.post(t, "frank", "late"); r.status != http.StatusServiceUnavailable || r.body["error"] == nil {
		t.Fatalf("post after Stop: %d %s, want 503 with error", r.status, r.raw)
	}
	// History stays readable.
	if got := h.list(t, "frank", 0); len(got) != 1 {
		t.Fatalf("history after Stop: %+v", got)
	}
}

func TestStartContextEndsAdapter(t *testing.T) {
	a, err := web.New(web.Options{Log: web.NewMemoryLog()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	body := `{"client":"g","text":"hi"}`
	res, err := http.Post(srv.URL+"/api/messages", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("post before Start: %d, want 503", res.StatusCode)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.Start(ctx, func(context.Context, channels.Inbound) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := a.Health(); err != nil {
		t.Fatalf("Health after Start: %v", err)
	}
	cancel()
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a.Health() == nil {
		t.Fatal("healthy after its context ended")
	}
}

func TestToken(t *testing.T) {
	h := newHarness(t, web.Options{Token: "s3cret"}, nil)
	tests := []struct {
		name   string
		method string
		path   string
		hdr    map[string]string
		status int
	}{
		{"post without token", "POST", "/api/messages", nil, 401},
		{"post with bearer", "POST", "/api/messages", map[string]string{"Authorization": "Bearer s3cret"}, 202},
		{"post with lower-case scheme", "POST", "/api/messages", map[string]string{"Authorization": "bearer s3cret"}, 202},
		{"post with query token", "POST", "/api/messages?token=s3cret", nil, 202},
		{"post with wrong bearer", "POST", "/api/messages", map[string]string{"Authorization": "Bearer nope"}, 401},
		{"post with basic auth", "POST", "/api/messages", map[string]string{"Authorization": "Basic czNjcmV0"}, 401},
		{"list without token", "GET", "/api/messages?client=tok", nil, 401},
		{"list with query token", "GET", "/api/messages?client=tok&token=s3cret", nil, 200},
		{"list with wrong query token", "GET", "/api/messages?client=tok&token=s3cre", nil, 401},
		{"events without token", "GET", "/api/events?client=tok", nil, 401},
		{"session without token", "GET", "/api/session?client=tok", nil, 401},
		{"page without token", "GET", "/", nil, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := ""
			if tt.method == "POST" {
				body = `{"client":"tok","text":"hi"}`
			}
			r := h.do(t, tt.method, tt.path, body, tt.hdr)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.raw)
			}
			if tt.status == 401 {
				if msg, _ := r.body["error"].(string); !strings.Contains(msg, "token") {
					t.Fatalf("401 error %q does not say token", msg)
				}
			}
		})
	}
	t.Run("events with query token", func(t *testing.T) {
		ev, _, _ := openEvents(t, h, "client=tok&token=s3cret", nil)
		if e := next(t, ev); e.Seq != 1 {
			t.Fatalf("got %+v", e)
		}
	})
}

func TestHostAndOriginChecks(t *testing.T) {
	h := newHarness(t, web.Options{}, nil)
	tests := []struct {
		name   string
		method string
		path   string
		hdr    map[string]string
		status int
	}{
		{"loopback host", "GET", "/api/messages?client=h", map[string]string{"Host": "127.0.0.1:1"}, 200},
		{"localhost", "GET", "/api/messages?client=h", map[string]string{"Host": "localhost:8790"}, 200},
		{"foreign host name without a token", "GET", "/api/messages?client=h", map[string]string{"Host": "evil.example:8790"}, 403},
		{"foreign host name, page", "GET", "/", map[string]string{"Host": "evil.example"}, 403},
		{"cross-site post", "POST", "/api/messages", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, 403},
		{"same-origin post", "POST", "/api/messages", map[string]string{"Sec-Fetch-Site": "same-origin"}, 202},
		{"put", "PUT", "/api/messages", nil, 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := ""
			if tt.method != "GET" {
				body = `{"client":"h","text":"hi"}`
			}
			req, _ := http.NewRequest(tt.method, h.srv.URL+tt.path, strings.NewReader(body))
			for k, v := range tt.hdr {
				if k == "Host" {
					req.Host = v
					continue
				}
				req.Header.Set(k, v)
			}
			res, err := h.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.status, b)
			}
		})
	}
	// With a token the Host does not matter (the gateway binds beyond loopback).
	ht := newHarness(t, web.Options{Token: "t"}, nil)
	req, _ := http.NewRequest("GET", ht.srv.URL+"/api/messages?client=h&token=t", nil)
	req.Host = "chat.example.org"
	res, err := ht.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("token and foreign host: %d, want 200", res.StatusCode)
	}
}

func TestPageAndSession(t *testing.T) {
	h := newHarness(t, web.Options{SessionKey: func(c string) string { return "agent:x:web:dm:" + c }}, nil)
	r := h.do(t, "GET", "/", "", nil)
	if r.status != 200 {
		t.Fatalf("GET /: %d", r.status)
	}
	for _, want := range []string{`id="input"`, `id="send"`, `id="messages"`, "EventSource"} {
		if !strings.Contains(r.raw, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if strings.Contains(r.raw, "http://") || strings.Contains(r.raw, "https://") {
		t.Errorf("page refers to an external asset")
	}
	if r := h.do(t, "GET", "/nothing-here", "", nil); r.status != 404 {
		t.Errorf("GET /nothing-here: %d, want 404", r.status)
	}
	s := h.do(t, "GET", "/api/session?client=zed", "", nil)
	if s.status != 200 || s.body["sessionKey"] != "agent:x:web:dm:zed" || s.body["client"] != "zed" {
		t.Fatalf("session: %d %s", s.status, s.raw)
	}
}

func TestConcurrentClientsIsolated(t *testing.T) {
	// The sink answers every message through Send, as the gateway would.
	h := newHarness(t, web.Options{}, func(h *harness) channels.Sink {
		return func(ctx context.Context, in channels.Inbound) error {
			if err := h.a.Send(ctx, in.Origin, channels.Message{Kind: channels.KindReply, Text: "echo: " + in.Text}); err != nil {
				t.Errorf("Send: %v", err)
			}
			return nil
		}
	})
	const clients, per = 8, 10
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			client := fmt.Sprintf("client-%d", c)
			for i := range per {
				b, _ := json.Marshal(map[string]string{"client": client, "text": fmt.Sprintf("%s msg %d", client, i)})
				res, err := h.srv.Client().Post(h.srv.URL+"/api/messages", "application/json", strings.NewReader(string(b)))
				if err != nil {
					t.Error(err)
					return
				}
				res.Body.Close()
				if res.StatusCode != 202 {
					t.Errorf("%s: status %d", client, res.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	for c := range clients {
		client := fmt.Sprintf("client-%d", c)
		got := h.list(t, client, 0)
		if len(got) != 2*per {
			t.Fatalf("%s has %d entries, want %d", client, len(got), 2*per)
		}
		for i, e := range got {
			if e.Seq != int64(i+1) {
				t.Fatalf("%s: entry %d has seq %d", client, i, e.Seq)
			}
			if !strings.Contains(e.Text, client+" msg ") {
				t.Fatalf("%s sees %q", client, e.Text)
			}
		}
		// Each message and its echo, in any interleaving (a reply may land
		// after the client's next message).
		var users, replies []string
		for _, e := range got {
			switch e.Role {
			case "user":
				users = append(users, e.Text)
			case "assistant":
				replies = append(replies, strings.TrimPrefix(e.Text, "echo: "))
			}
		}
		slices.Sort(users)
		slices.Sort(replies)
		if len(users) != per || !slices.Equal(users, replies) {
			t.Fatalf("%s: users %q, replies %q", client, users, replies)
		}
	}
}

func TestMemoryLog(t *testing.T) {
	ctx := context.Background()
	l := web.NewMemoryLog()
	add := func(client, text, run string) int64 {
		seq, added, err := l.Append(ctx, client, &web.Entry{Role: "assistant", Text: text, RunID: run})
		if err != nil {
			t.Fatal(err)
		}
		if dup := text == "dup"; added == dup {
			t.Fatalf("append %q: added %v, want %v", text, added, !dup)
		}
		return seq
	}
	if s := add("a", "1", ""); s != 1 {
		t.Fatalf("first seq %d", s)
	}
	if s := add("a", "2", "run"); s != 2 {
		t.Fatalf("second seq %d", s)
	}
	if s := add("a", "dup", "run"); s != 2 {
		t.Fatalf("duplicate run seq %d, want 2", s)
	}
	if s := add("b", "other", "run"); s != 1 {
		t.Fatalf("same run id for another client: seq %d, want 1", s)
	}
	if s := add("a", "3", ""); s != 3 {
		t.Fatalf("third seq %d", s)
	}
	got, _ := l.After(ctx, "a", 1, 1)
	if len(got) != 1 || got[0].Text != "2" {
		t.Fatalf("After(1, 1) = %+v", got)
	}
	got, _ = l.After(ctx, "a", 0, 0)
	if len(got) != 3 || got[2].Text != "3" {
		t.Fatalf("After(0, 0) = %+v", got)
	}
}

func TestWhitespaceTokenRefused(t *testing.T) {
	if _, err := web.New(web.Options{Log: web.NewMemoryLog(), Token: "   "}); err == nil {
		t.Fatal("web.New accepted a token of only spaces")
	}
}

// EndStreams ends open event streams (so an HTTP server shutting down is
// not held by them); posting still works.
func TestEndStreamsClosesOpenStreams(t *testing.T) {
	h := newHarness(t, web.Options{}, nil)
	events, _, closeFn := openEvents(t, h, "client=ender", nil)
	defer closeFn()
	h.a.EndStreams()
	select {
	case _, open := <-events:
		for open {
			_, open = <-events
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the event stream stayed open after EndStreams")
	}
}

// countingLog counts the reads of the conversation.
type countingLog struct {
	*web.MemoryLog
	reads atomic.Int64
}

func (l *countingLog) After(ctx context.Context, client string, after int64, limit int) ([]web.Entry, error) {
	l.reads.Add(1)
	return l.MemoryLog.After(ctx, client, after, limit)
}

// A stream woken for the live state (typing on and off) writes it without
// reading the conversation again; a new entry is streamed without being
// read back either.
func TestEventsLiveStateReadsNoEntries(t *testing.T) {
	log := &countingLog{MemoryLog: web.NewMemoryLog()}
	h := newHarness(t, web.Options{Log: log}, nil)
	ctx := context.Background()
	to := channels.Origin{Channel: "web", ChatID: "fay", ChatType: "dm"}
	ev, _, _ := openEvents(t, h, "client=fay", nil)
	waitData := func(want string) {
		t.Helper()
		select {
		case e := <-ev:
			if e.data != want {
				t.Fatalf("event data %s, want %s", e.data, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event %s", want)
		}
	}
	for range 3 {
		if err := h.a.Typing(ctx, to, true); err != nil {
			t.Fatal(err)
		}
		waitData(`{"active":true}`)
		if err := h.a.Typing(ctx, to, false); err != nil {
			t.Fatal(err)
		}
		waitData(`{"active":false}`)
	}
	if n := log.reads.Load(); n != 1 {
		t.Errorf("%d reads of the conversation for six typing changes; want the stream's first one only", n)
	}
	if err := h.a.Send(ctx, to, channels.Message{Kind: channels.KindReply, Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	if e := next(t, ev); e.Text != "hi" || e.Seq != 1 {
		t.Fatalf("entry %+v, want the reply", e)
	}
	if n := log.reads.Load(); n != 1 {
		t.Errorf("%d reads of the conversation after a new entry; want it written without being read back", n)
	}
}

// A new entry goes to the open streams as it was added, without being
// read back; an append that added nothing (a re-delivered announce) shows
// nothing, and an entry added elsewhere (another replica) before a new
// one is read from the Log first, so nothing is skipped. A stream opened
// afterwards shows the same events.
func TestEventsWriteAddedEntriesInOrder(t *testing.T) {
	log := &countingLog{MemoryLog: web.NewMemoryLog()}
	h := newHarness(t, web.Options{Log: log}, nil)
	ctx := context.Background()
	to := channels.Origin{Channel: "web", ChatID: "gil", ChatType: "dm"}
	ev, _, _ := openEvents(t, h, "client=gil", nil)
	var seen []sseEvent
	want := func(seq int64, text string) {
		t.Helper()
		var raw sseEvent
		select {
		case raw = <-ev:
		case <-time.After(10 * time.Second):
			t.Fatalf("no event; want %d %q", seq, text)
		}
		var e web.Entry
		if err := json.Unmarshal([]byte(raw.data), &e); err != nil || e.Seq != seq || e.Text != text || raw.id != strconv.FormatInt(seq, 10) {
			t.Fatalf("event %+v (%v); want %d %q", raw, err, seq, text)
		}
		seen = append(seen, raw)
	}
	send := func(msg channels.Message) {
		t.Helper()
		if err := h.a.Send(ctx, to, msg); err != nil {
			t.Fatal(err)
		}
	}
	send(channels.Message{Kind: channels.KindReply, Text: "**one**"})
	want(1, "**one**")
	send(channels.Message{Kind: channels.KindAnnounce, Text: "two", RunID: "r1"})
	want(2, "two")
	if n := log.reads.Load(); n != 1 {
		t.Errorf("%d reads of the conversation; want the stream's first one only", n)
	}
	// Another replica's entry, not announced here; then one of ours.
	if _, _, err := log.Append(ctx, "gil", &web.Entry{Role: web.RoleSystem, Text: "three", At: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	send(channels.Message{Kind: channels.KindReply, Text: "four"})
	want(3, "three")
	want(4, "four")
	send(channels.Message{Kind: channels.KindAnnounce, Text: "two again", RunID: "r1"})
	send(channels.Message{Kind: channels.KindReply, Text: "five"})
	want(5, "five")
	again, _, closeAgain := openEvents(t, h, "client=gil", nil)
	defer closeAgain()
	for i, first := range seen {
		select {
		case e := <-again:
			if e != first {
				t.Errorf("event %d read back from the Log = %+v; the live stream wrote %+v", i, e, first)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event %d on the second stream", i)
		}
	}
}

// followingLog is a Log that stores, with an entry whose text is "lead",
// the entries queued behind it in the same write, as the gateway's Log
// does with a chat's outbox backlog (Entry.Then); redelivered names the
// one among them found stored already.
type followingLog struct {
	*countingLog
	behind      []string
	redelivered string
}

func (l *followingLog) Append(ctx context.Context, client string, e *web.Entry) (int64, bool, error) {
	seq, added, err := l.countingLog.Append(ctx, client, e)
	if err != nil || e.Text != "lead" {
		return seq, added, err
	}
	for _, text := range l.behind {
		f := web.Entry{Role: web.RoleAnnounce, Text: text, RunID: "run-" + text, At: time.Now().UTC()}
		_, fadded, err := l.countingLog.Append(ctx, client, &f)
		if err != nil {
			return 0, false, err
		}
		added = added && fadded
		e.Then = append(e.Then, f)
	}
	return seq, added, nil
}

// The entries the Log stored behind a sent one in the same write go to
// the open streams with it, in order, without reading the conversation;
// when one of them was there already, the streams read the Log and show
// the new ones in order.
func TestEventsWriteEntriesStoredBehindASend(t *testing.T) {
	log := &followingLog{countingLog: &countingLog{MemoryLog: web.NewMemoryLog()}, behind: []string{"a1", "a2"}}
	h := newHarness(t, web.Options{Log: log}, nil)
	ctx := context.Background()
	to := channels.Origin{Channel: "web", ChatID: "hal", ChatType: "dm"}
	ev, _, _ := openEvents(t, h, "client=hal", nil)
	want := func(seq int64, text string) {
		t.Helper()
		select {
		case raw := <-ev:
			var e web.Entry
			if err := json.Unmarshal([]byte(raw.data), &e); err != nil || e.Seq != seq || e.Text != text {
				t.Fatalf("event %+v (%v); want %d %q", raw, err, seq, text)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event; want %d %q", seq, text)
		}
	}
	if err := h.a.Send(ctx, to, channels.Message{Kind: channels.KindReply, Text: "lead"}); err != nil {
		t.Fatal(err)
	}
	want(1, "lead")
	want(2, "a1")
	want(3, "a2")
	if n := log.reads.Load(); n != 1 {
		t.Errorf("%d reads of the conversation; want the stream's first one only", n)
	}
	// a1 is there already (a re-delivered announce): a3 is new.
	log.behind = []string{"a1", "a3"}
	if err := h.a.Send(ctx, to, channels.Message{Kind: channels.KindReply, Text: "lead"}); err != nil {
		t.Fatal(err)
	}
	want(4, "lead")
	want(5, "a3")
}
