package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/telegram/tgfake"
	"github.com/heraldhq/herald/gateway"
	"github.com/heraldhq/herald/store"
)

// echoModel answers every message with "re: <message>".
var echoModel = llmtest.ByLastUser(func(text string) llmtest.Reply { return llmtest.Reply{Text: "re: " + text} })

// TestE2EDeadLetterUnblocksItsChat (SPEC §27): a reply Telegram answers
// with 500 at every attempt becomes a dead letter after
// outbox.maxAttempts; it is counted and listed as dead, and the chat's
// next reply, queued behind it, goes out. Without dead letters the next
// reply would wait behind it (and the stuck one would go out once the
// platform recovered).
func TestE2EDeadLetterUnblocksItsChat(t *testing.T) {
	t.Parallel()
	tf := tgfake.New(t, tgToken)
	tg := newTestGateway(t, fmt.Sprintf(`{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [{ id: "main" }] },
  channels: { telegram: { enabled: true, botToken: %q, apiUrl: %q, streaming: "off" }, web: { enabled: false } },
  outbox: { maxAttempts: 2 },
}`, tgToken, tf.URL()), echoModel)
	db := tg.G.Store()
	ctx := context.Background()
	tf.FailNext(2, 500, 0) // the first reply's two attempts
	tf.SendText(tgAlice, "private", 0, tgAlice, "first")
	var first store.OutboxItem
	if !waitFor(e2eWait, func() bool {
		items, _ := db.OutboxInState(ctx, store.OutboxPending, 0)
		for _, it := range items {
			if it.Text == "re: first" && it.Attempts >= 1 {
				first = it
				return true
			}
		}
		return false
	}) {
		t.Fatal("the first reply was not attempted")
	}
	tf.SendText(tgAlice, "private", 0, tgAlice, "second")
	sent := waitTelegram(t, tf, 1)
	if len(sent) != 1 || sent[0].Text != "re: second" {
		t.Fatalf("sent %+v; want only the second reply (the first is dead)", sent)
	}
	dead, err := db.OutboxInState(ctx, store.OutboxDead, 0)
	if err != nil || len(dead) != 1 || dead[0].ID != first.ID || dead[0].Attempts != 2 || !strings.Contains(dead[0].LastError, "500") {
		t.Fatalf("dead letters = %+v, %v; want the first reply after 2 attempts with its 500", dead, err)
	}
	if n := tg.metric(t, `herald_outbox_dead_total{channel="telegram"}`); n != 1 {
		t.Errorf("herald_outbox_dead_total{channel=telegram} = %v, want 1", n)
	}
	// An operator's retry sends it (the platform answers again).
	if err := db.RetryOutbox(ctx, first.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	tg.G.WakeOutbox()
	sent = waitTelegram(t, tf, 2)
	if sent[1].Text != "re: first" {
		t.Errorf("after the retry sent %+v; want the first reply last", sent)
	}
}

// TestE2EStaleOwedMessageSkipped (SPEC §27): after a crash (the state
// holds what kill -9 leaves: owed messages claimed by the dead process), a
// message older than intake.maxAgeMinutes is not run — its conversation
// gets the ⏳ line, no model call — while a fresh one behind it is
// answered.
func TestE2EStaleOwedMessageSkipped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := openTestStore(t, dir)
	old := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond)
	for i, it := range []*store.Intake{
		{Text: "stale question", CreatedAt: old, StartedAt: old.Add(time.Second)}, // a turn the crash cut
		{Text: "fresh question", CreatedAt: time.Now()},
	} {
		it.SessionKey, it.AgentID, it.SenderName, it.Mentioned, it.ClaimedBy = "agent:main:web:dm:ann", "main", "ann", true, "killed-replica"
		it.Origin = channels.Origin{Channel: "web", ChatID: "ann", ChatType: channels.ChatDM, SenderID: "ann", MessageID: fmt.Sprint(i)}
		it.PlatformID = "ann/" + it.Origin.MessageID
		if _, err := db.AddIntake(context.Background(), it); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	tg := newTestGatewayIn(t, dir, `{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" } },
  intake: { maxAgeMinutes: 60 },
}`, echoModel)
	waitWeb(t, tg, "ann", 0, "assistant", func(s string) bool { return s == "re: fresh question" })
	want := gateway.StaleLine(old, time.Hour)
	var lines []string
	for _, m := range webMessages(t, tg.URL, "ann", 0) {
		lines = append(lines, m.Role+": "+m.Text)
	}
	if got := strings.Join(lines, "\n"); strings.Count(got, want) != 1 || !strings.Contains(want, "waited longer than 1 hour") {
		t.Errorf("conversation:\n%s\nwant the ⏳ line once: %s", got, want)
	}
	for _, c := range tg.LLM.Requests() {
		if strings.Contains(string(c.Body), "stale question") {
			t.Errorf("the model was called with the stale message")
		}
	}
	if n := tg.LLM.Count(); n != 1 {
		t.Errorf("model calls = %d, want 1 (the fresh message)", n)
	}
}
