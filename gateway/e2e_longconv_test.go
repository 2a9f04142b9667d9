package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent/llmtest"
)

// TestE2ELongConversationNeverHitsTheWindow: a person sends 200 long
// messages in one web conversation to a model with an 8000-token window
// whose API refuses anything longer with the real context-length error.
// Every turn is answered, no error reaches the person, and the transcript
// holds compaction lines next to every message.
func TestE2ELongConversationNeverHitsTheWindow(t *testing.T) {
	t.Parallel()
	cfg := `{
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k",
    models: [{ id: "small", contextWindow: 8000, maxTokens: 512 }] } } },
  agents: { defaults: { model: "anthropic/small" }, list: [{ id: "main" }] },
  channels: { web: { enabled: true, rateLimit: { perMinute: 100000, burst: 1000 } } },
}`
	tg := newTestGateway(t, cfg, llmtest.ContextLimit(8000, func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "compact summaries") {
			return llmtest.Reply{Text: "The person has been sending long numbered messages; each was acknowledged."}
		}
		f := strings.Fields(c.LastUser())
		return llmtest.Reply{Text: "got message " + f[len(f)-1]}
	}))
	filler := strings.Repeat("A long line in a busy thread. ", 50)
	for i := 1; i <= 200; i++ {
		seq := webPost(t, tg.URL, "long", fmt.Sprintf("%s number %d", filler, i))
		want := fmt.Sprintf("got message %d", i)
		got := waitWeb(t, tg, "long", seq, "assistant", func(string) bool { return true })
		if got.Text != want {
			t.Fatalf("message %d answered %q, want %q", i, got.Text, want)
		}
	}
	for _, m := range webMessages(t, tg.URL, "long", 0) {
		if m.Role == "system" {
			t.Errorf("the person got a system message: %q", m.Text)
		}
	}
	s, err := tg.G.Store().GetSession(t.Context(), "agent:main:web:dm:long")
	if err != nil {
		t.Fatal(err)
	}
	_, entries, err := tg.G.Store().ReadTranscript(context.Background(), s.TranscriptPath)
	if err != nil {
		t.Fatal(err)
	}
	compactions, users := 0, 0
	for _, e := range entries {
		if e.Type == "compaction" {
			compactions++
		} else if e.Role == "user" {
			users++
		}
	}
	if compactions == 0 || users != 200 {
		t.Errorf("transcript: %d compaction lines, %d user messages; want some and 200", compactions, users)
	}
}
