package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels/telegram/tgfake"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/gateway"
)

// reloadConfig: web chat and Telegram (long polling against the fake), two
// models on one fake Anthropic API; %[3]s is the main agent's model and
// %[4]s extra Telegram settings.
const reloadConfig = `{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k",
    models: [{ id: "first" }, { id: "second" }] } } },
  agents: { defaults: { model: "anthropic/%[3]s", maxConcurrent: 2 }, list: [{ id: "main" }] },
  channels: {
    telegram: { enabled: true, botToken: %[1]q, apiUrl: %[2]q %[4]s },
    web: { enabled: true },
  },
}`

// TestE2EReloadKeepsTurnsAndConnections reloads a running gateway: a turn
// in flight during the reload finishes on the model it started with, the
// next turn uses the reloaded model, an invalid config is rejected with the
// old one kept, Telegram keeps its connection when its settings did not
// change and is reconnected (and still answers) when they did, and
// herald_config_reloads_total counts both results.
func TestE2EReloadKeepsTurnsAndConnections(t *testing.T) {
	t.Parallel()
	hold := newGate(t)
	var mu sync.Mutex
	modelOf := map[string]string{} // user text → model that answered it
	entered := make(chan struct{}, 1)
	tf := tgfake.New(t, tgToken)
	cfgText := func(model, telegramExtra string) string {
		return fmt.Sprintf(reloadConfig, tgToken, tf.URL(), model, telegramExtra)
	}
	tg := newTestGateway(t, cfgText("first", ""), func(c llmtest.Call) llmtest.Reply {
		last := c.LastUser()
		mu.Lock()
		modelOf[last] = c.Model
		mu.Unlock()
		if last == "slow question" {
			entered <- struct{}{}
			hold.wait()
		}
		return llmtest.Reply{Text: "answer to " + last + " from " + c.Model}
	})
	load := func(src string) func() (*config.Config, error) {
		return func() (*config.Config, error) {
			src = strings.ReplaceAll(src, "{{llm}}", tg.LLM.URL)
			cfg, err := config.Parse("reloaded.json5", []byte(src), func(string) (string, bool) { return "", false })
			if err != nil {
				return nil, err
			}
			return cfg, cfg.Validate()
		}
	}
	ctx := context.Background()

	webPost(t, tg.URL, "ann", "slow question")
	<-entered // the turn is waiting on its model call

	res := tg.G.Reload(ctx, load(cfgText("second", "")))
	if res.Result != "ok" || !slices.Contains(res.Changed, "agents") || slices.ContainsFunc(res.Changed, func(s string) bool { return strings.HasPrefix(s, "channels.") }) {
		t.Fatalf("reload to model second = %+v, want ok with agents changed and no channel touched", res)
	}
	hold.open()
	waitWebReply(t, tg, "ann", "answer to slow question from first")

	webPost(t, tg.URL, "bob", "after the reload")
	waitWebReply(t, tg, "bob", "answer to after the reload from second")

	// An invalid config is rejected and the running one stays.
	bad := tg.G.Reload(ctx, load(strings.Replace(cfgText("first", ""), "maxConcurrent: 2", "maxConcurrent: \"lots\"", 1)))
	if bad.Result != "rejected" || len(bad.Errors) == 0 || !strings.Contains(strings.Join(bad.Errors, "\n"), "maxConcurrent") {
		t.Fatalf("invalid reload = %+v, want rejected naming maxConcurrent", bad)
	}
	broken := tg.G.Reload(ctx, func() (*config.Config, error) { return nil, errors.New("herald.json5:3:7: unexpected '}'") })
	if broken.Result != "rejected" || broken.Errors[0] != "herald.json5:3:7: unexpected '}'" {
		t.Fatalf("unparsable reload = %+v", broken)
	}
	webPost(t, tg.URL, "cid", "still second?")
	waitWebReply(t, tg, "cid", "answer to still second? from second")

	// Telegram settings changed: the channel is reconnected and answers.
	res = tg.G.Reload(ctx, load(cfgText("second", `, allowFrom: ["555"]`)))
	if res.Result != "ok" || !slices.Contains(res.Changed, "channels.telegram (reconnected)") {
		t.Fatalf("reload with new telegram settings = %+v", res)
	}
	tf.SendText(tgAlice, "private", 0, tgAlice, "hello telegram")
	sent := waitTelegram(t, tf, 1)
	if sent[0].ChatID != tgAlice || sent[0].Text != "answer to hello telegram from second" {
		t.Errorf("telegram after reconnect sent %+v", sent[0])
	}
	// The new allowFrom applies: someone else is not answered.
	tf.SendText(tgBob, "private", 0, tgBob, "am I allowed?")
	tf.SendText(tgAlice, "private", 0, tgAlice, "second message")
	sent = waitTelegram(t, tf, 2)
	if sent[1].Text != "answer to second message from second" {
		t.Errorf("after a refused sender, telegram sent %+v", sent[1])
	}
	mu.Lock()
	_, bobSeen := modelOf["am I allowed?"]
	mu.Unlock()
	if bobSeen {
		t.Error("a sender outside the reloaded allowFrom reached the model")
	}

	if ok, rejected := tg.metric(t, `herald_config_reloads_total{result="ok"}`), tg.metric(t, `herald_config_reloads_total{result="rejected"}`); ok != 2 || rejected != 2 {
		t.Errorf("herald_config_reloads_total ok=%v rejected=%v, want 2 and 2", ok, rejected)
	}
	last, found, err := gateway.LastReload(ctx, tg.G.Store(), tg.G.ReplicaID())
	if err != nil || !found || last.Seq != 4 || last.Result != "ok" {
		t.Errorf("recorded reload = %+v, %v, %v; want the fourth, ok", last, found, err)
	}
}

// waitWebReply waits until the web client's conversation has an assistant
// message with exactly text.
func waitWebReply(t *testing.T, tg *testGW, client, text string) {
	t.Helper()
	var got []string
	if !waitFor(e2eWait, func() bool {
		got = got[:0]
		for _, m := range webMessages(t, tg.URL, client, 0) {
			got = append(got, m.Role+": "+m.Text)
			if m.Role == "assistant" && m.Text == text {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("web client %s never got %q; conversation: %q", client, text, got)
	}
}

// TestReloadReportsStateNeedsRestart: where the state lives and the
// replica's name are read at start; a reload that changes them says a
// restart is needed and keeps the gateway running on what it opened.
func TestReloadReportsStateNeedsRestart(t *testing.T) {
	tg := newTestGateway(t, webE2EConfig, nil)
	changed := strings.Replace(webE2EConfig, "gateway: { shutdownGraceSeconds: 5 },",
		`gateway: { shutdownGraceSeconds: 5, replicaId: "elsewhere" }, state: { leaseSeconds: 30 },`, 1)
	res := tg.G.Reload(context.Background(), func() (*config.Config, error) {
		cfg, err := config.Parse("reloaded.json5", []byte(changed), func(string) (string, bool) { return "", false })
		if err != nil {
			return nil, err
		}
		return cfg, cfg.Validate()
	})
	if res.Result != "ok" || !slices.Contains(res.NeedsRestart, "state") || !slices.Contains(res.NeedsRestart, "gateway.replicaId") {
		t.Fatalf("reload changing state and replicaId = %+v, want both in needsRestart", res)
	}
	seq := webPost(t, tg.URL, "after", "hello")
	waitWeb(t, tg, "after", seq, "assistant", func(string) bool { return true })
}
