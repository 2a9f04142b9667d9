package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/llmtest"
)

// sseEvent is one server-sent event of /api/events.
type sseEvent struct {
	Name, Data string
}

// openEvents reads the client's /api/events stream into a channel until
// the test ends.
func openEvents(t *testing.T, base, client string) <-chan sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/events?client="+client, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	out := make(chan sseEvent, 1024)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); resp.Body.Close(); <-done })
	go func() {
		defer close(done)
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.Data != "" {
					out <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.Name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.Data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return out
}

// TestE2EWebStreamsTheReply: with a streaming model, the web chat's event
// stream shows the agent typing, then delta events whose text grows to the
// reply, then the reply once as a message, then typing ends. With
// streaming "off" only the message comes.
func TestE2EWebStreamsTheReply(t *testing.T) {
	t.Parallel()
	const reply = "Streaming makes the wait visible: one piece, another piece, and the last piece."
	for _, mode := range []string{"edit", "off"} {
		t.Run(mode, func(t *testing.T) {
			cfg := strings.Replace(sessionCmdConfig, "web: { enabled: true }", `web: { enabled: true, streaming: "`+mode+`" }`, 1)
			// The fake writes the next piece only once the test saw the
			// previous one arrive as a delta (with streaming off: at once).
			sawDelta := make(chan struct{}, 8)
			tg := newTestGateway(t, cfg, func(c llmtest.Call) llmtest.Reply {
				return llmtest.Reply{Text: reply, BeforePiece: func(i int) {
					if i == 0 || mode == "off" {
						return
					}
					select {
					case <-sawDelta:
					case <-time.After(e2eWait):
					}
				}}
			})
			events := openEvents(t, tg.URL, "live")
			webPost(t, tg.URL, "live", "tell me")
			var deltas []string
			var typing []bool
			final := 0
			deadline := time.After(e2eWait)
			for final == 0 || (mode == "edit" && (len(typing) == 0 || typing[len(typing)-1])) {
				select {
				case ev, ok := <-events:
					if !ok {
						t.Fatal("event stream ended")
					}
					switch ev.Name {
					case "delta":
						var d struct{ Text string }
						json.Unmarshal([]byte(ev.Data), &d)
						deltas = append(deltas, d.Text)
						sawDelta <- struct{}{}
					case "typing":
						var d struct{ Active bool }
						json.Unmarshal([]byte(ev.Data), &d)
						typing = append(typing, d.Active)
					default:
						var m struct{ Role, Text string }
						json.Unmarshal([]byte(ev.Data), &m)
						if m.Role == "assistant" {
							if m.Text != reply {
								t.Errorf("final message %q", m.Text)
							}
							final++
						}
					}
				case <-deadline:
					t.Fatalf("stream so far: deltas %q, typing %v, final %d", deltas, typing, final)
				}
			}
			if mode == "off" {
				if len(deltas) > 0 || len(typing) > 0 {
					t.Errorf("streaming off still sent deltas %q and typing %v", deltas, typing)
				}
				return
			}
			if len(typing) < 2 || !typing[0] || typing[len(typing)-1] {
				t.Errorf("typing events %v; want on … off", typing)
			}
			// The last piece may come only as the final message.
			if len(deltas) < 2 || !strings.HasPrefix(reply, deltas[len(deltas)-1]) || len(deltas) > 3 {
				t.Errorf("deltas %q; want several, each a beginning of the reply", deltas)
			}
			for i := 1; i < len(deltas); i++ {
				if !strings.HasPrefix(deltas[i], deltas[i-1]) {
					t.Errorf("delta %q does not continue %q", deltas[i], deltas[i-1])
				}
			}
			if got := tg.LLM.Requests()[0]; !got.Stream {
				t.Error("the model was not asked to stream")
			}
			msgs := webMessages(t, tg.URL, "live", 0)
			if n := len(msgs); n != 2 {
				t.Errorf("the conversation holds %d messages, want the question and one reply", n)
			}
		})
	}
}

// TestE2EWebStreamShowsWhatTheLogHolds: the entries an open event stream
// shows as they are added (the person's message with its file, the
// replies) are, byte for byte, what a stream opened afterwards reads back
// from the store: same seq, time, text, HTML and file links.
func TestE2EWebStreamShowsWhatTheLogHolds(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, filesE2EConfig, llmtest.Text("**ok** — done"))
	const client = "same-events"
	live := openEvents(t, tg.URL, client)
	body, _ := json.Marshal(map[string]any{"client": client, "text": "look", "files": []map[string]string{
		{"name": "note.txt", "mime": "text/plain", "data": base64.StdEncoding.EncodeToString([]byte("a note"))},
	}})
	resp, err := http.Post(tg.URL+"/api/messages", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST with a file: %s", resp.Status)
	}
	// entries reads stream's entries (no event name) until the n-th reply.
	entries := func(stream <-chan sseEvent, replies int) []string {
		t.Helper()
		var got []string
		deadline := time.After(e2eWait)
		for replies > 0 {
			select {
			case ev, ok := <-stream:
				if !ok {
					t.Fatalf("event stream ended after %q", got)
				}
				if ev.Name != "" {
					continue
				}
				got = append(got, ev.Data)
				var m struct{ Role string }
				json.Unmarshal([]byte(ev.Data), &m)
				if m.Role == "assistant" {
					replies--
				}
			case <-deadline:
				t.Fatalf("entries so far: %q", got)
			}
		}
		return got
	}
	first := entries(live, 1)
	webPost(t, tg.URL, client, "and again")
	shown := append(first, entries(live, 1)...)
	if len(shown) != 4 || !strings.Contains(shown[0], `"url":`) || !strings.Contains(shown[1], `"html":`) {
		t.Fatalf("live entries %q; want the message with its file's link, the reply with its HTML, the second message and reply", shown)
	}
	back := entries(openEvents(t, tg.URL, client), 2)
	if !slices.Equal(back, shown) {
		t.Errorf("read back from the store:\n%q\nthe live stream showed:\n%q", back, shown)
	}
}
