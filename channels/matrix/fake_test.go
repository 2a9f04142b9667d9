package matrix

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/heraldhq/herald/channels"
)

// fakeHS is a minimal Matrix client-server API on httptest: enough of
// whoami, login, profile, filter, /sync, send and joined_members to drive
// the adapter without a real homeserver.
type fakeHS struct {
	t   *testing.T
	srv *httptest.Server

	mu        sync.Mutex
	token     string              // the access token it accepts
	firstSync map[string]any      // the body of the first /sync (no since)
	queued    chan []byte         // later /sync bodies, one per response
	members   map[string]int      // room id -> joined member count
	joined    map[string][]string // room id -> joined user ids (overrides members)
	// membersReply, when set, answers joined_members instead when it
	// returns a status other than 0.
	membersReply func() (int, string)
	sendReply    func(n int) (int, http.Header, string) // status, headers, body for the n-th send (1-based)
	sent         []map[string]any                       // contents of sent events, in order
	sendAuth     []string                               // Authorization header of each send
	batch        int
	answered     map[string][]byte // since -> the queued batch answered to it, as a homeserver answers the same since again
	sinces       []string          // the since of each /sync, in order
}

func newFakeHS(t *testing.T) *fakeHS {
	f := &fakeHS{
		t:         t,
		token:     "bot-token",
		firstSync: map[string]any{},
		queued:    make(chan []byte, 16),
		members:   map[string]int{},
		joined:    map[string][]string{},
		answered:  map[string][]byte{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_matrix/client/v3/account/whoami", func(w http.ResponseWriter, r *http.Request) {
		if !f.authorized(w, r) {
			return
		}
		writeJSON(w, 200, map[string]any{"user_id": "@herald:test", "device_id": "DEV"})
	})
	mux.HandleFunc("POST /_matrix/client/v3/login", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Identifier struct{ User string } `json:"identifier"`
			Password   string                `json:"password"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		if req.Identifier.User != "@herald:test" || req.Password != "secret" {
			writeJSON(w, 403, map[string]any{"errcode": "M_FORBIDDEN", "error": "Invalid username or password"})
			return
		}
		writeJSON(w, 200, map[string]any{"user_id": "@herald:test", "access_token": "fresh-token", "device_id": "DEV2"})
	})
	mux.HandleFunc("GET /_matrix/client/v3/profile/{user}/displayname", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"displayname": "Herald Bot"})
	})
	mux.HandleFunc("POST /_matrix/client/v3/user/{user}/filter", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"filter_id": "f1"})
	})
	mux.HandleFunc("GET /_matrix/client/v3/sync", f.handleSync)
	mux.HandleFunc("GET /_matrix/client/v3/rooms/{room}/joined_members", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		n := f.members[r.PathValue("room")]
		ids := f.joined[r.PathValue("room")]
		reply := f.membersReply
		f.mu.Unlock()
		if reply != nil {
			if status, body := reply(); status != 0 {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				_, _ = w.Write([]byte(body))
				return
			}
		}
		joined := map[string]any{}
		for i := range n {
			joined[fmt.Sprintf("@member%d:test", i)] = map[string]any{}
		}
		if ids != nil {
			joined = map[string]any{}
			for _, u := range ids {
				joined[u] = map[string]any{}
			}
		}
		writeJSON(w, 200, map[string]any{"joined": joined})
	})
	mux.HandleFunc("PUT /_matrix/client/v3/rooms/{room}/send/{type}/{txn}", func(w http.ResponseWriter, r *http.Request) {
		var content map[string]any
		_ = json.NewDecoder(r.Body).Decode(&content)
		f.mu.Lock()
		f.sent = append(f.sent, content)
		f.sendAuth = append(f.sendAuth, r.Header.Get("Authorization"))
		n := len(f.sent)
		reply := f.sendReply
		f.mu.Unlock()
		if reply != nil {
			status, hdr, body := reply(n)
			for k, v := range hdr {
				w.Header()[k] = v
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
			return
		}
		writeJSON(w, 200, map[string]any{"event_id": fmt.Sprintf("$sent%d", n)})
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeHS) authorized(w http.ResponseWriter, r *http.Request) bool {
	f.mu.Lock()
	token := f.token
	f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+token {
		writeJSON(w, 401, map[string]any{"errcode": "M_UNKNOWN_TOKEN", "error": "Unknown token"})
		return false
	}
	return true
}

func (f *fakeHS) handleSync(w http.ResponseWriter, r *http.Request) {
	since := r.URL.Query().Get("since")
	f.mu.Lock()
	f.sinces = append(f.sinces, since)
	if body, ok := f.answered[since]; ok {
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		return
	}
	f.batch++
	next := fmt.Sprintf("b%d", f.batch)
	first := f.firstSync
	f.mu.Unlock()
	if r.URL.Query().Get("since") == "" {
		body := map[string]any{"next_batch": next}
		for k, v := range first {
			body[k] = v
		}
		writeJSON(w, 200, body)
		return
	}
	if r.URL.Query().Get("timeout") == "0" {
		writeJSON(w, 200, map[string]any{"next_batch": next})
		return
	}
	select {
	case body := <-f.queued:
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			f.t.Errorf("queued sync body: %v", err)
		}
		m["next_batch"] = next
		b, _ := json.Marshal(m)
		f.mu.Lock()
		f.answered[since] = b
		f.mu.Unlock()
		writeJSON(w, 200, m)
	case <-r.Context().Done():
	case <-time.After(5 * time.Second):
		writeJSON(w, 200, map[string]any{"next_batch": next})
	}
}

// queueSync makes the next long-polling /sync return these rooms.
func (f *fakeHS) queueSync(rooms map[string]any) {
	b, err := json.Marshal(map[string]any{"rooms": rooms})
	if err != nil {
		f.t.Fatal(err)
	}
	f.queued <- b
}

// syncSinces returns the since token of each /sync so far.
func (f *fakeHS) syncSinces() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.sinces...)
}

func (f *fakeHS) sentEvents() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.sent...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// joinedRooms builds the rooms.join part of a /sync body.
func joinedRooms(timelines map[string][]map[string]any) map[string]any {
	join := map[string]any{}
	for room, evts := range timelines {
		join[room] = map[string]any{"timeline": map[string]any{"events": evts}}
	}
	return map[string]any{"join": join}
}

// msg builds an m.room.message event; extra keys are merged into content.
func msg(id, sender, body string, extra map[string]any) map[string]any {
	content := map[string]any{"msgtype": "m.text", "body": body}
	for k, v := range extra {
		content[k] = v
	}
	return map[string]any{"type": "m.room.message", "event_id": id, "sender": sender,
		"origin_server_ts": time.Now().UnixMilli(), "content": content}
}

func inThread(root string) map[string]any {
	return map[string]any{"m.relates_to": map[string]any{"rel_type": "m.thread", "event_id": root,
		"is_falling_back": true, "m.in_reply_to": map[string]any{"event_id": root}}}
}

// startFake starts an adapter on the fake with an open group policy.
func startFake(t *testing.T, f *fakeHS, mutate func(*Options)) (*Adapter, inbox) {
	t.Helper()
	in := make(inbox, 32)
	return startFakeSink(t, f, mutate, in.sink), in
}

// startFakeSink is startFake handing messages to sink.
func startFakeSink(t *testing.T, f *fakeHS, mutate func(*Options), sink channels.Sink) *Adapter {
	t.Helper()
	opts := Options{
		Homeserver:  f.srv.URL,
		AccessToken: "bot-token",
		Access:      channels.Access{GroupPolicy: channels.GroupOpen},
		Logger:      zaptest.NewLogger(t),
	}
	if mutate != nil {
		mutate(&opts)
	}
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	startAdapter(t, a, sink)
	return a
}

// startAdapter starts a with sink, stopped when the test ends.
func startAdapter(t *testing.T, a *Adapter, sink channels.Sink) {
	t.Helper()
	if err := a.Start(context.Background(), sink); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
}
