package gateway_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels"
	_ "github.com/heraldhq/herald/channels/all" // the channel modules the tests configure
	"github.com/heraldhq/herald/channels/telegram/tgfake"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/gateway"
)

// echoConfig is the section channels.echo of the throwaway module below.
type echoConfig struct {
	config.ChannelCommon
	Room  string `json:"room"`
	Limit int    `json:"limit"`
}

func (c *echoConfig) Common() *config.ChannelCommon { return &c.ChannelCommon }
func (c *echoConfig) Defaults() {
	if c.Limit == 0 {
		c.Limit = 4096
	}
}
func (c *echoConfig) Validate(s *config.Section) {
	if c.Enabled && c.Room == "" {
		s.Missing("room", "the enabled echo channel needs a room")
	}
}

// echoAdapter is a platform adapter that lives in memory: the test pushes
// messages in through the sink the gateway gave it, and every part the
// outbox delivers lands in sent.
type echoAdapter struct {
	opts  *echoConfig
	state channels.KV

	mu   sync.Mutex
	sink channels.Sink
	sent []channels.Message
	to   []channels.Origin
	got  chan struct{}
	// started is closed by Start: the gateway starts its channels on
	// their own goroutines, so a message is pushed only after it.
	started chan struct{}
}

var (
	_ channels.Channel    = (*echoAdapter)(nil)
	_ channels.PartSender = (*echoAdapter)(nil)
)

func (a *echoAdapter) Name() channels.Name { return "echo" }

func (a *echoAdapter) Start(ctx context.Context, sink channels.Sink) error {
	a.mu.Lock()
	a.sink = sink
	if a.started != nil {
		close(a.started)
		a.started = nil
	}
	a.mu.Unlock()
	// Resume state goes to the adapter's own namespaced store.
	return a.state.Set(ctx, "cursor", "started")
}

func (a *echoAdapter) Stop(context.Context) error { return nil }

func (a *echoAdapter) Send(ctx context.Context, to channels.Origin, msg channels.Message) error {
	return fmt.Errorf("echo: Send called: every delivery goes through SendPart")
}

func (a *echoAdapter) PartLimit() int { return a.opts.Limit }

func (a *echoAdapter) SendPart(_ context.Context, to channels.Origin, msg channels.Message) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sent = append(a.sent, msg)
	a.to = append(a.to, to)
	select {
	case a.got <- struct{}{}:
	default:
	}
	return fmt.Sprintf("echo-%d", len(a.sent)), nil
}

func (a *echoAdapter) push(t *testing.T, text string) {
	t.Helper()
	a.mu.Lock()
	started := a.started
	a.mu.Unlock()
	if started != nil {
		select {
		case <-started:
		case <-time.After(e2eWait):
			t.Fatal("the gateway did not start the echo channel")
		}
	}
	a.mu.Lock()
	sink := a.sink
	a.mu.Unlock()
	in := channels.Inbound{Origin: channels.Origin{Channel: "echo", ChatID: a.opts.Room, ChatType: channels.ChatDM, SenderID: "u1", MessageID: "m1"},
		SenderName: "Uma", Text: text, At: time.Now()}
	if err := sink(context.Background(), in); err != nil {
		t.Fatalf("sink: %v", err)
	}
}

// TestThrowawayChannelModule: a channel module registered from a test
// package — nothing of it in config, gateway or cmd — is configured from
// its own section, built by the gateway, and carries a message end to end:
// in through the sink, a turn on the fake model, the reply out through
// PartSender split at the module's limit; its resume state lands under its
// own prefix in the store.
func TestThrowawayChannelModule(t *testing.T) {
	var built *echoAdapter
	channels.Register(channels.Module{
		Name:    "echo",
		Options: func() config.ChannelOptions { return &echoConfig{} },
		New: func(d channels.Deps) (channels.Channel, error) {
			built = &echoAdapter{opts: d.Options.(*echoConfig), state: d.State, got: make(chan struct{}, 1), started: make(chan struct{})}
			return built, nil
		},
	})
	t.Cleanup(func() { channels.Unregister("echo") })

	reply := strings.Repeat("pong ", 12) + "done" // 64 characters: two parts at limit 40
	cfgText := func(echo string) string {
		return `{
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [{ id: "main" }] },
  channels: { echo: ` + echo + `, web: { enabled: false } },
}`
	}
	tg := newTestGateway(t, cfgText(`{ enabled: true, room: "r1", limit: 40 }`), llmtest.ByLastUser(func(text string) llmtest.Reply { return llmtest.Reply{Text: reply} }))
	if built == nil {
		t.Fatal("the gateway did not build the registered channel")
	}
	built.push(t, "ping")
	tg.waitDelivered(t, 1)

	built.mu.Lock()
	sent, to := built.sent, built.to
	built.mu.Unlock()
	var texts []string
	for _, m := range sent {
		texts = append(texts, m.Text)
	}
	if len(sent) != 2 || strings.Join(texts, "") != reply || sent[0].Part != 1 || sent[1].Parts != 2 {
		t.Fatalf("parts sent = %q, want the reply %q in 2 parts", texts, reply)
	}
	if to[0].Channel != "echo" || to[0].ChatID != "r1" {
		t.Errorf("reply went to %v, want the echo room r1", to[0])
	}
	if keys := tg.sessionKeys(t); len(keys) != 1 || keys[0] != "agent:main:echo:dm:r1" {
		t.Errorf("session keys = %v", keys)
	}
	v, ok, err := tg.G.Store().GetKV(context.Background(), "echo.cursor")
	if err != nil || !ok || v != "started" {
		t.Errorf("echo.cursor in the store = %q, %v, %v; want the adapter's state under its prefix", v, ok, err)
	}
	if got := tg.metric(t, `herald_channel_up{channel="echo"}`); got != 1 {
		t.Errorf("herald_channel_up{channel=\"echo\"} = %v, want 1", got)
	}
}

// TestThrowawayChannelModuleReload: reload loops over the registry too —
// a module's bad section is refused with its key path and the old config
// kept, a changed one rebuilds the adapter, a disabled one stops it.
func TestThrowawayChannelModuleReload(t *testing.T) {
	var builds []*echoAdapter
	channels.Register(channels.Module{
		Name:    "echo",
		Options: func() config.ChannelOptions { return &echoConfig{} },
		New: func(d channels.Deps) (channels.Channel, error) {
			a := &echoAdapter{opts: d.Options.(*echoConfig), state: d.State, got: make(chan struct{}, 1), started: make(chan struct{})}
			builds = append(builds, a)
			return a, nil
		},
	})
	t.Cleanup(func() { channels.Unregister("echo") })
	cfgText := func(echo string) string {
		return `{
  models: { providers: { demo: { api: "demo" } } },
  channels: { echo: ` + echo + `, web: { enabled: false } },
}`
	}
	tg := newTestGateway(t, cfgText(`{ enabled: true, room: "r1" }`), nil)
	ctx := context.Background()
	load := func(text string) func() (*config.Config, error) {
		return func() (*config.Config, error) {
			cfg, err := config.Parse("herald.json5", []byte(text), func(string) (string, bool) { return "", false })
			if err != nil {
				return nil, err
			}
			return cfg, cfg.Validate()
		}
	}
	bad := tg.G.Reload(ctx, load(cfgText(`{ enabled: true }`)))
	if bad.Result != "rejected" || !strings.Contains(strings.Join(bad.Errors, "\n"), "channels.echo.room: missing") {
		t.Fatalf("reload with a bad echo section = %+v, want rejected naming channels.echo.room", bad)
	}
	if len(builds) != 1 {
		t.Fatalf("%d adapters built; a rejected reload must build none", len(builds))
	}
	res := tg.G.Reload(ctx, load(cfgText(`{ enabled: true, room: "r2" }`)))
	if res.Result != "ok" || !slices.Contains(res.Changed, "channels.echo (reconnected)") || len(builds) != 2 || builds[1].opts.Room != "r2" {
		t.Fatalf("reload with a new room = %+v (%d builds)", res, len(builds))
	}
	res = tg.G.Reload(ctx, load(cfgText(`{ enabled: false, room: "r2" }`)))
	if res.Result != "ok" || !slices.Contains(res.Changed, "channels.echo (stopped)") || len(builds) != 2 {
		t.Fatalf("reload with echo off = %+v (%d builds)", res, len(builds))
	}
}

// TestTelegramOffsetFromEarlierRelease: the Telegram module keeps its
// getUpdates offset through its namespaced store under the key earlier
// releases wrote (telegram.offset), so a state from before the registry
// resumes where it was: the update the old offset confirmed is not run
// again, the next one is, and the offset moves on under the same key.
func TestTelegramOffsetFromEarlierRelease(t *testing.T) {
	tf := tgfake.New(t, tgToken)
	tf.SendText(tgAlice, "private", 0, tgAlice, "taken before the upgrade") // update 100000
	tf.SendText(tgAlice, "private", 0, tgAlice, "sent while it was down")   // update 100001

	dir := t.TempDir()
	db := openTestStore(t, dir)
	if err := db.SetKV(context.Background(), "telegram.offset", "100001"); err != nil {
		t.Fatal(err)
	}
	db.Close()

	tg := newTestGatewayIn(t, dir, fmt.Sprintf(`{
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [{ id: "main" }] },
  channels: { telegram: { enabled: true, botToken: %q, apiUrl: %q }, web: { enabled: false } },
}`, tgToken, tf.URL()), llmtest.ByLastUser(func(text string) llmtest.Reply { return llmtest.Reply{Text: "answer to " + text} }))
	sent := tf.WaitSent(1, e2eWait)
	if len(sent) != 1 || !strings.Contains(sent[0].Text, "answer to sent while it was down") {
		t.Fatalf("sent = %+v, want one answer, to the update after the stored offset", sent)
	}
	if !waitFor(e2eWait, func() bool {
		v, _, _ := tg.G.Store().GetKV(context.Background(), "telegram.offset")
		return v == "100002"
	}) {
		v, _, err := tg.G.Store().GetKV(context.Background(), "telegram.offset")
		t.Fatalf("telegram.offset = %q (%v), want 100002", v, err)
	}
	if got := tf.Sent(); len(got) != 1 {
		t.Errorf("%d messages sent, want 1: %+v", len(got), got)
	}
}

// echoChecker is an echo adapter that can check its endpoint.
type echoChecker struct{ echoAdapter }

func (a *echoChecker) Check(context.Context) []channels.Check {
	return []channels.Check{{Name: "echo room " + a.opts.Room, Status: channels.CheckOK}}
}

// TestThrowawayChannelModuleDoctor: `herald doctor` checks every enabled
// module — by its Check when it has one, else by its adapter's Checker —
// and a disabled one not at all.
func TestThrowawayChannelModuleDoctor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check func(context.Context, channels.Deps) []channels.Check
		want  string
	}{
		{"adapter Checker", nil, "echo room r1"},
		{"module Check", func(_ context.Context, d channels.Deps) []channels.Check {
			return []channels.Check{{Name: "echo module " + d.Options.(*echoConfig).Room, Status: channels.CheckWarn}}
		}, "echo module r1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			channels.Register(channels.Module{
				Name:    "echo",
				Options: func() config.ChannelOptions { return &echoConfig{} },
				New: func(d channels.Deps) (channels.Channel, error) {
					return &echoChecker{echoAdapter{opts: d.Options.(*echoConfig), state: d.State}}, nil
				},
				Check: tc.check,
			})
			t.Cleanup(func() { channels.Unregister("echo") })
			for _, on := range []bool{true, false} {
				cfg, err := config.Parse("herald.json5", []byte(fmt.Sprintf(`{ models: { providers: { demo: { api: "demo" } } }, channels: { echo: { enabled: %t, room: "r1" } } }`, on)),
					func(string) (string, bool) { return "", false })
				if err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, c := range gateway.Doctor(context.Background(), cfg, t.TempDir()) {
					names = append(names, c.Name)
				}
				if got := slices.Contains(names, tc.want); got != on {
					t.Errorf("enabled %v: checks %v; want %q among them: %v", on, names, tc.want, on)
				}
			}
		})
	}
}
