package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
)

// TestE2ETokenMetricsCountSubagents: herald_tokens_* count every model
// call — the top-level turn, the sub-agent's work and its announce step —
// by agent and model; the outbox retry and failure counters exist at zero
// from the start.
func TestE2ETokenMetricsCountSubagents(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, `{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" } },
}`, func(c llmtest.Call) llmtest.Reply {
		last := c.Messages[len(c.Messages)-1]
		if strings.Contains(c.System, "Sub-agent context") {
			if strings.Contains(last.Text, "Announce step") {
				return llmtest.Reply{Text: "Result:\ndone\n\nNotes:\n(none)", Usage: agent.Usage{Input: 1000, Output: 100}}
			}
			return llmtest.Reply{Text: "work", Usage: agent.Usage{Input: 1000, Output: 100}}
		}
		if len(last.ToolResults) > 0 {
			return llmtest.Reply{Text: "spawned", Usage: agent.Usage{Input: 100, Output: 10}}
		}
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn", Args: json.RawMessage(`{"task":"t","label":"x"}`)}},
			Usage: agent.Usage{Input: 100, Output: 10}}
	})
	resp, err := http.Get(tg.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, s := range []string{`herald_outbox_retried_total{kind="announce"} 0`, `herald_outbox_failed_total{kind="assistant"} 0`,
		`herald_intake_refused_total{channel="web",reason="busy"} 0`} {
		if !strings.Contains(string(body), s+"\n") {
			t.Errorf("/metrics at start lacks %q", s)
		}
	}
	seq := webPost(t, tg.URL, "tok", "spawn one")
	waitWeb(t, tg, "tok", seq, "announce", func(string) bool { return true })
	tg.waitDelivered(t, 2)
	in := tg.metric(t, `herald_tokens_input_total{agent="main",model="anthropic/m"}`)
	out := tg.metric(t, `herald_tokens_output_total{agent="main",model="anthropic/m"}`)
	if in != 2200 || out != 220 {
		t.Errorf("tokens in %v / out %v, want 2200 / 220 (two top-level calls and the run's work and announce step)", in, out)
	}
	// herald_outbox_pending counts what waits, not what was sent.
	if got := tg.metric(t, "herald_outbox_pending"); got != 0 {
		t.Errorf("herald_outbox_pending = %v with the reply and announce delivered, want 0", got)
	}
	held := &store.OutboxItem{Origin: channels.Origin{Channel: "web", ChatID: "tok-held"}, Kind: channels.KindAnnounce, Text: "held",
		CreatedAt: time.Now(), NextAttemptAt: time.Now().Add(time.Hour)}
	if _, err := tg.G.Store().EnqueueOutbox(context.Background(), held); err != nil {
		t.Fatal(err)
	}
	if got := tg.metric(t, "herald_outbox_pending"); got != 1 {
		t.Errorf("herald_outbox_pending = %v with one item held for a retry, want 1", got)
	}
}
