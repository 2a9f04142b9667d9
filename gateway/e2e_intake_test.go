package gateway_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/heraldhq/herald/agent/llmtest"
)

// rawPost posts and returns the status and Retry-After header.
func rawPost(t *testing.T, base, client, text string) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"client": client, "text": text})
	resp, err := http.Post(base+"/api/messages", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// TestE2EBusyIntakeIsRefusedAndNothingAcknowledgedIsLost: with the main
// lane full and its queue at the cap, a new message gets 429 with
// Retry-After and a "busy" line in its chat; every message that got a 202
// is still answered once the model answers again.
func TestE2EBusyIntakeIsRefusedAndNothingAcknowledgedIsLost(t *testing.T) {
	t.Parallel()
	g := newGate(t)
	var calls atomic.Int32
	tg := newTestGateway(t, `{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m", maxConcurrent: 1, maxQueued: 2 } },
  channels: { web: { rateLimit: { perMinute: -1 } } },
}`, llmtest.ByLastUser(func(text string) llmtest.Reply {
		calls.Add(1)
		g.wait() // the model hangs until the test opens the gate
		return llmtest.Reply{Text: "answer to " + text}
	}))

	webPost(t, tg.URL, "c0", "running")
	waitFor(e2eWait, func() bool { return calls.Load() == 1 }) // c0's turn holds the one slot
	webPost(t, tg.URL, "c1", "queued one")
	webPost(t, tg.URL, "c2", "queued two")
	status, retry := rawPost(t, tg.URL, "c3", "one too many")
	if status != http.StatusTooManyRequests {
		t.Fatalf("POST beyond the cap: %d, want 429", status)
	}
	if n, err := strconv.Atoi(retry); err != nil || n < 1 {
		t.Errorf("Retry-After %q, want seconds ≥ 1", retry)
	}
	waitText(t, tg, "c3", "Busy right now")
	if v := tg.metric(t, `herald_intake_refused_total{channel="web",reason="busy"}`); v != 1 {
		t.Errorf("refused metric = %v, want 1", v)
	}

	g.open()
	for client, text := range map[string]string{"c0": "running", "c1": "queued one", "c2": "queued two"} {
		waitText(t, tg, client, "answer to "+text)
	}
	for _, m := range webMessages(t, tg.URL, "c3", 0) {
		if strings.Contains(m.Text, "answer to") {
			t.Errorf("the refused message was answered: %q", m.Text)
		}
	}
}

// TestE2EWebRateLimitPerClient: one client posting faster than
// channels.web.rateLimit gets 429 with Retry-After; another client is not
// held back; refusals are counted.
func TestE2EWebRateLimitPerClient(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, `{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" } },
  channels: { web: { rateLimit: { perMinute: 6, burst: 3 } } },
}`, llmtest.Text("ok"))
	for i := range 3 {
		webPost(t, tg.URL, "fast", "message "+strconv.Itoa(i))
	}
	status, retry := rawPost(t, tg.URL, "fast", "one more")
	if status != http.StatusTooManyRequests {
		t.Fatalf("4th post within the burst of 3: %d, want 429", status)
	}
	if n, err := strconv.Atoi(retry); err != nil || n < 1 || n > 10 {
		t.Errorf("Retry-After %q, want about 10 s (6 a minute)", retry)
	}
	if status, _ := rawPost(t, tg.URL, "calm", "hello"); status != http.StatusAccepted {
		t.Errorf("another client: %d, want 202", status)
	}
	if v := tg.metric(t, `herald_intake_refused_total{channel="web",reason="rate_limited"}`); v != 1 {
		t.Errorf("rate-limited metric = %v, want 1", v)
	}
}
