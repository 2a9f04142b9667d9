package gateway_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/store"
)

// TestE2EUnreadableHistoryIsNotAFreshStart: when a conversation's
// transcript has a damaged line in the middle, the person is told in one
// line and the model is not called with an empty history; a torn last
// line (a crash mid-write) is still repaired and the turn answered.
func TestE2EUnreadableHistoryIsNotAFreshStart(t *testing.T) {
	t.Parallel()
	sqliteOnly(t) // damages a transcript file
	const header = `{"type":"session","version":1,"sessionKey":"K","sessionId":"ID","agentId":"main","createdAt":"2026-11-21T20:00:00Z"}` + "\n"
	const line = `{"type":"message","role":"user","content":"earlier","timestamp":"2026-11-21T20:00:01Z"}` + "\n"
	stateDir := t.TempDir()
	seed := func(client, id, content string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		db, err := store.Open(ctx, stateDir)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		key := "agent:main:web:dm:" + client
		path := db.TranscriptPath("main", id)
		row := &store.Session{Key: key, ID: id, AgentID: "main", Kind: store.KindMain, TranscriptPath: path}
		if _, err := db.EnsureSession(ctx, row); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		content = strings.ReplaceAll(strings.ReplaceAll(content, `"K"`, `"`+key+`"`), `"ID"`, `"`+id+`"`)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	seed("broken", "11111111-1111-1111-1111-111111111111", header+"{not json\n"+line)
	seed("torn", "22222222-2222-2222-2222-222222222222", header+line+`{"type":"message","role":"assis`)

	tg := newTestGatewayIn(t, stateDir, `{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" } },
}`, llmtest.ByLastUser(func(text string) llmtest.Reply { return llmtest.Reply{Text: "answer to " + text} }))

	seq := webPost(t, tg.URL, "broken", "hello again")
	got := waitWeb(t, tg, "broken", seq, "system", func(string) bool { return true })
	if !strings.Contains(got.Text, "history could not be read") {
		t.Errorf("broken history: %q, want the one-line notice", got.Text)
	}
	seq = webPost(t, tg.URL, "torn", "still there?")
	// The earlier user line (kept from the torn transcript) and the new one
	// reach the model together, as one user turn of two text blocks.
	waitWeb(t, tg, "torn", seq, "assistant", func(s string) bool { return s == "answer to still there?" })
	for _, c := range tg.LLM.Requests() {
		if c.LastUser() == "still there?" && (len(c.Messages) != 2 || c.Messages[0].Text != "earlier") {
			t.Errorf("the torn conversation's model call got %+v, want the earlier line, then the new one", c.Messages)
		}
		if strings.Contains(string(c.Body), "hello again") {
			t.Fatalf("the model was called for the conversation whose history is unreadable:\n%s", c.Body)
		}
	}
}
