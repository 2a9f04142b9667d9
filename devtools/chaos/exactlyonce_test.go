package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels/slack/slackfake"
	"github.com/heraldhq/herald/devtools/harness"
)

// TestKillBetweenSlackPostAndMark: the gateway is killed after Slack
// accepted its reply but before it heard so (the outbox did not mark it).
// After the restart the reply is found in the thread by its metadata and
// not posted again: Slack shows it once.
func TestKillBetweenSlackPostAndMark(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin, err := harness.BuildHerald(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	model, err := harness.StartModel(harness.ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	sf := slackfake.New(t)
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	cfgPath, stateDir, logPath := filepath.Join(dir, "herald.json5"), filepath.Join(dir, "state"), filepath.Join(dir, "gateway.log")
	cfg := harness.Config{Listen: addr, ModelURL: model.URL, MainConcurrent: 2, Subagents: 2, Children: 5, GraceSeconds: 2,
		Channels: fmt.Sprintf("slack: { enabled: true, botToken: %q, appToken: %q, apiUrl: %q, groups: { C1: {} } }",
			slackfake.BotToken, slackfake.AppToken, sf.URL())}
	if err := cfg.Write(cfgPath); err != nil {
		t.Fatal(err)
	}
	start := func() *harness.Gateway {
		gw, err := harness.StartGateway(bin, cfgPath, stateDir, logPath, "http://"+addr)
		if err != nil {
			t.Fatal(err)
		}
		if err := gw.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		return gw
	}
	const thread = "1700000000.000500"
	replies := func() int {
		n := 0
		for _, p := range sf.Posted() {
			if p.ThreadTS == thread && p.Text == "ack once" {
				n++
			}
		}
		return n
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; gateway log:\n%s", what, tail(logPath))
			}
		}
	}

	gw := start()
	waitUntil("the Slack connection", sf.Connected)
	sf.HoldNextPosts(1)
	if _, err := sf.TryMention("C1", "U1", "SAY once", thread); err != nil {
		t.Fatal(err)
	}
	waitUntil("the reply to reach Slack", func() bool { return replies() == 1 })
	if err := gw.Kill(); err != nil { // Slack has the post; the gateway never heard
		t.Fatal(err)
	}

	gw = start()
	defer func() { _ = gw.Kill() }()
	waitUntil("the outbox to settle after the restart", func() bool { return metric(t, gw.Base, `herald_outbox_pending`) == 0 })
	if n := replies(); n != 1 {
		t.Fatalf("Slack shows the reply %d times, want once", n)
	}
	if v := metric(t, gw.Base, `herald_outbox_uncertain_total{action="found",channel="slack"}`); v != 1 {
		t.Errorf("herald_outbox_uncertain_total{found,slack} = %v, want 1", v)
	}
}

// metric reads one sample from /metrics (-1 when absent).
func metric(t *testing.T, base, sample string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}
