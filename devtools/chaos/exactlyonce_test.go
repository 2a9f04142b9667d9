package chaos

import (
	"fmt"
	"testing"

	"github.com/heraldhq/herald/channels/slack/slackfake"
	"github.com/heraldhq/herald/devtools/harness"
)

// TestKillBetweenSlackPostAndMark: the gateway is killed after Slack
// accepted its reply but before it heard so (the outbox did not mark it).
// After the restart the reply is found in the thread by its metadata and
// not posted again: Slack shows it once.
func TestKillBetweenSlackPostAndMark(t *testing.T) {
	sf := slackfake.New(t)
	r := newRig(t, 0, harness.Config{MainConcurrent: 2, Subagents: 2, Children: 5, GraceSeconds: 2,
		Channels: fmt.Sprintf("slack: { enabled: true, botToken: %q, appToken: %q, apiUrl: %q, groups: { C1: {} } }",
			slackfake.BotToken, slackfake.AppToken, sf.URL())})
	start, waitUntil := r.start, r.waitUntil
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
	waitUntil("the outbox to settle after the restart", func() bool { return metric(t, gw.Base, `herald_outbox_pending`) == 0 })
	if n := replies(); n != 1 {
		t.Fatalf("Slack shows the reply %d times, want once", n)
	}
	if v := metric(t, gw.Base, `herald_outbox_uncertain_total{action="found",channel="slack"}`); v != 1 {
		t.Errorf("herald_outbox_uncertain_total{found,slack} = %v, want 1", v)
	}
}
