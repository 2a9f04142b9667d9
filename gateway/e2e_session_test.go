package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/store"
)

const sessionCmdConfig = `{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k",
    models: [{ id: "first" }, { id: "second" }] } } },
  agents: { defaults: { model: "anthropic/first" }, list: [{ id: "main", models: ["anthropic/first", "anthropic/second"], allowUnpriced: true }] },
  channels: { web: { enabled: true } },
}`

func isSystem(want string) func(string) bool {
	return func(s string) bool { return s == want }
}

// TestE2ESessionCommands drives /new, /model, /think and /compact through
// the web API: after /new the next model call carries none of the old
// history (the old transcript is kept), and a sub-agent of the old session
// still announces in the conversation; /model and /think change what the
// next turn sends; /compact summarises with the model and says by how much.
func TestE2ESessionCommands(t *testing.T) {
	t.Parallel()
	hold := newGate(t)
	gates := map[string]*gate{"alpha": hold}
	research := researchModel(gates)
	tg := newTestGateway(t, sessionCmdConfig, func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "compact summaries") {
			return llmtest.Reply{Text: "The person told a secret word and asked for research."}
		}
		return research(c)
	})
	ctx := context.Background()
	const client = "sess"
	key := "agent:main:web:dm:" + client

	seq := webPost(t, tg.URL, client, "the secret word is PELICAN. "+strings.Repeat("Some long context. ", 200))
	waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return strings.Contains(s, "PELICAN") })
	seq = webPost(t, tg.URL, client, "please research it")
	waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return strings.HasPrefix(s, "Started alpha and beta") })
	waitWeb(t, tg, client, seq, "announce", func(s string) bool { return strings.Contains(s, "Task: beta") })
	before, err := tg.G.Store().GetSession(ctx, key)
	if err != nil {
		t.Fatal(err)
	}

	// /compact: the older turns are summarised by the model.
	seq = webPost(t, tg.URL, client, "/compact the secret")
	compacted := waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.HasPrefix(s, "🧹 Compacted: ") })
	var b, a int
	if _, err := fmt.Sscanf(compacted.Text, "🧹 Compacted: %d → %d tokens.", &b, &a); err != nil || a >= b {
		t.Errorf("/compact said %q", compacted.Text)
	}
	_, entries, err := tg.G.Store().ReadTranscript(context.Background(), before.TranscriptPath)
	if err != nil {
		t.Fatal(err)
	}
	if entries[len(entries)-1].Type != "compaction" {
		t.Errorf("the transcript does not end with a compaction line: %+v", entries[len(entries)-1])
	}
	n := tg.LLM.Count()
	seq = webPost(t, tg.URL, client, "what now?")
	waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return s == "plain answer to: what now?" })
	if first := tg.LLM.Requests()[n].Messages[0].Text; !strings.HasPrefix(first, "[Summary of the earlier conversation") {
		t.Errorf("after /compact the first message sent is %.80q, want the summary", first)
	}

	// /new: a fresh session; alpha (of the old session) still announces here.
	seq = webPost(t, tg.URL, client, "/new")
	waitWeb(t, tg, client, seq, "system", isSystem("🆕 New session started."))
	after, err := tg.G.Store().GetSession(ctx, key)
	if err != nil || after.ID == before.ID || after.TranscriptPath == before.TranscriptPath {
		t.Fatalf("session row after /new: %+v, %v (before id %s)", after, err, before.ID)
	}
	resets, err := tg.G.Store().(*store.DB).SessionResets(ctx, key)
	if err != nil || len(resets) != 1 || resets[0].OldSessionID != before.ID || !strings.HasPrefix(resets[0].OldTranscript, before.TranscriptPath+".reset.") {
		t.Fatalf("session resets = %+v, %v", resets, err)
	}
	var old strings.Builder
	if err := tg.G.Store().TailTranscript(ctx, resets[0].OldTranscript, false, &old); err != nil || !strings.Contains(old.String(), "PELICAN") {
		t.Errorf("the old transcript is not kept: %v", err)
	}
	if _, _, err := tg.G.Store().ReadTranscript(context.Background(), before.TranscriptPath); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the old transcript is still in place: %v", err)
	}
	n = tg.LLM.Count()
	seq = webPost(t, tg.URL, client, "what was the word?")
	waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return s == "plain answer to: what was the word?" })
	call := tg.LLM.Requests()[n]
	if len(call.Messages) != 1 || strings.Contains(string(call.Body), "PELICAN") {
		t.Errorf("after /new the model got %d messages (PELICAN in them: %v); want only the new one", len(call.Messages), strings.Contains(string(call.Body), "PELICAN"))
	}
	hold.open()
	waitWeb(t, tg, client, 0, "announce", func(s string) bool { return strings.Contains(s, "Task: alpha") })

	// /model and /think: the next turn uses them; another client does not.
	seq = webPost(t, tg.URL, client, "/model anthropic/second")
	waitWeb(t, tg, client, seq, "system", isSystem("🤖 Model for this conversation: anthropic/second."))
	seq = webPost(t, tg.URL, client, "/think high")
	waitWeb(t, tg, client, seq, "system", isSystem("🧠 Thinking for this conversation: high."))
	n = tg.LLM.Count()
	seq = webPost(t, tg.URL, client, "and now?")
	waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return s == "plain answer to: and now?" })
	if c := tg.LLM.Requests()[n]; c.Model != "second" || c.ThinkingBudget == 0 {
		t.Errorf("after /model and /think the call used model %q, thinking budget %d", c.Model, c.ThinkingBudget)
	}
	n = tg.LLM.Count()
	seq = webPost(t, tg.URL, "other", "hello")
	waitWeb(t, tg, "other", seq, "assistant", func(s string) bool { return s == "plain answer to: hello" })
	if c := tg.LLM.Requests()[n]; c.Model != "first" || c.ThinkingBudget != 0 {
		t.Errorf("another conversation used model %q, thinking budget %d", c.Model, c.ThinkingBudget)
	}
}
