package gateway_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/heraldhq/herald/channels/telegram/tgfake"
	"github.com/heraldhq/herald/store"
)

// telegramE2EConfig: Telegram by long polling against the fake; the forum
// group -100123 is allowed without a mention; private chats are open.
const telegramE2EConfig = `{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [{ id: "main" }] },
  channels: {
    telegram: { enabled: true, botToken: %q, apiUrl: %q, groups: { "-100123": { requireMention: false } } },
    web: { enabled: false },
  },
}`

const (
	tgToken = "7000000001:herald-e2e"
	tgGroup = int64(-100123)
	tgAlice = int64(555)
	tgBob   = int64(556)
	tgK42   = "agent:main:telegram:group:-100123:thread:42"
	tgK43   = "agent:main:telegram:group:-100123:thread:43"
	tgKDM   = "agent:main:telegram:dm:555"
)

func startTelegramE2E(t *testing.T, gates map[string]*gate) (*tgfake.Server, *testGW) {
	t.Helper()
	tf := tgfake.New(t, tgToken)
	tg := newTestGateway(t, fmt.Sprintf(telegramE2EConfig, tgToken, tf.URL()), researchModel(gates))
	return tf, tg
}

// waitTelegram waits for n sent messages and stops the test if they do not come.
func waitTelegram(t *testing.T, tf *tgfake.Server, n int) []tgfake.Sent {
	t.Helper()
	sent := tf.WaitSent(n, e2eWait)
	if t.Failed() {
		t.FailNow()
	}
	return sent
}

// telegramAnnounces checks that each run of the requester was announced in
// exactly one message, to the group's topic; it returns how many announce
// messages were sent in all.
func telegramAnnounces(t *testing.T, tg *testGW, sent []tgfake.Sent, requester string, topic int) int {
	t.Helper()
	runs := tg.runsOf(t, requester)
	var labels []string
	for _, r := range runs {
		labels = append(labels, r.Label)
		if r.Status != store.StatusDone || r.Outcome != "success" {
			t.Errorf("run %s (%s) is %s/%s, want done/success", r.ID, r.Label, r.Status, r.Outcome)
		}
		var found []tgfake.Sent
		for _, s := range sent {
			if strings.Contains(s.Text, "sessionKey "+r.ChildKey+" •") {
				found = append(found, s)
			}
		}
		if len(found) != 1 {
			t.Errorf("run %s (%s) announced in %d messages, want exactly 1: %+v", r.ID, r.Label, len(found), found)
			continue
		}
		if s := found[0]; s.ChatID != tgGroup || s.ThreadID != topic {
			t.Errorf("announce of %s sent to chat %d topic %d, want chat %d topic %d", r.Label, s.ChatID, s.ThreadID, tgGroup, topic)
		}
		checkAnnounce(t, found[0].Text, r.Label)
	}
	slices.Sort(labels)
	if !slices.Equal(labels, []string{"alpha", "beta"}) {
		t.Errorf("runs of %s have labels %q, want [alpha beta]", requester, labels)
	}
	n := 0
	for _, s := range sent {
		if strings.HasPrefix(s.Text, "Status: ") {
			n++
		}
	}
	return n
}

// TestE2ETelegramTopicAnnounces: a request in forum topic 42 gets the reply
// and both announces in topic 42 of that group and nowhere else; messages in
// topic 43 and in a private chat, sent while the sub-agents still work, are
// separate conversations answered in their own place.
func TestE2ETelegramTopicAnnounces(t *testing.T) {
	t.Parallel()
	work := newGate(t)
	tf, tg := startTelegramE2E(t, map[string]*gate{"alpha": work, "beta": work})

	tf.SendText(tgGroup, "supergroup", 42, tgAlice, "please research Go generics")
	sent := waitTelegram(t, tf, 1)
	if s := sent[0]; s.ChatID != tgGroup || s.ThreadID != 42 || !strings.HasPrefix(s.Text, "Started alpha and beta") {
		t.Fatalf("first message = %+v, want the agent's reply in topic 42", s)
	}

	tf.SendText(tgGroup, "supergroup", 43, tgBob, "what is a type parameter?")
	sent = waitTelegram(t, tf, 2)
	if s := sent[1]; s.ChatID != tgGroup || s.ThreadID != 43 || s.Text != "plain answer to: what is a type parameter?" {
		t.Fatalf("second message = %+v, want the plain answer in topic 43", s)
	}
	tf.SendText(tgAlice, "private", 0, tgAlice, "hello in private")
	sent = waitTelegram(t, tf, 3)
	if s := sent[2]; s.ChatID != tgAlice || s.ThreadID != 0 || s.Text != "plain answer to: hello in private" {
		t.Fatalf("third message = %+v, want the plain answer in the private chat", s)
	}

	work.open()
	tg.waitDelivered(t, 5) // three replies, two announces, nothing else anywhere
	sent = tf.Sent()
	if len(sent) != 5 {
		t.Fatalf("%d messages sent, want 5: %+v", len(sent), sent)
	}
	if n := telegramAnnounces(t, tg, sent, tgK42, 42); n != 2 {
		t.Errorf("%d announce messages, want 2", n)
	}
	for _, k := range []string{tgK43, tgKDM} {
		if runs := tg.runsOf(t, k); len(runs) != 0 {
			t.Errorf("%s has %d sub-agent runs, want none", k, len(runs))
		}
	}
	want := []string{tgKDM, tgK42, tgK43}
	slices.Sort(want)
	if keys := tg.sessionKeys(t); !slices.Equal(keys, want) {
		t.Errorf("requester sessions %q, want %q", keys, want)
	}
}

// TestE2ETelegramAnnouncesSurviveFaults: sendMessage answers 429 with
// retry_after 1, then 500 twice, while the announces go out; each announce
// still arrives exactly once in topic 42 and nothing is lost.
func TestE2ETelegramAnnouncesSurviveFaults(t *testing.T) {
	t.Parallel()
	work := newGate(t)
	tf, tg := startTelegramE2E(t, map[string]*gate{"alpha": work, "beta": work})

	tf.SendText(tgGroup, "supergroup", 42, tgAlice, "research this for me")
	waitTelegram(t, tf, 1)
	tf.FailNext(1, 429, 1)
	tf.FailNext(2, 500, 0)
	work.open()

	tg.waitDelivered(t, 3)
	sent := tf.Sent()
	if len(sent) != 3 {
		t.Fatalf("%d messages sent, want the reply and two announces: %+v", len(sent), sent)
	}
	if n := telegramAnnounces(t, tg, sent, tgK42, 42); n != 2 {
		t.Errorf("%d announce messages, want 2", n)
	}
	// The gateway saw the faults: three announce attempts put off, two delivered.
	if n := tg.metric(t, `herald_outbox_retried_total{kind="announce"}`); n < 3 {
		t.Errorf("announce retries = %v, want at least the 3 injected failures", n)
	}
	if n := tg.metric(t, `herald_outbox_delivered_total{kind="announce"}`); n != 2 {
		t.Errorf("announces delivered = %v, want 2", n)
	}
}
