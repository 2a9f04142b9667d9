package gateway_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/heraldhq/herald/channels/slack/slackfake"
	"github.com/heraldhq/herald/store"
)

// slackE2EConfig: Slack in Socket Mode against the fake, channel C1
// allowed (a mention is required), the fake LLM as the only model.
const slackE2EConfig = `{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [{ id: "main" }] },
  channels: {
    slack: { enabled: true, botToken: %q, appToken: %q, apiUrl: %q, groups: { C1: {} } },
    web: { enabled: false },
  },
}`

const (
	slackT1 = "1700000001.000100"
	slackT2 = "1700000002.000200"
	slackK1 = "agent:main:slack:group:C1:thread:" + slackT1
	slackK2 = "agent:main:slack:group:C1:thread:" + slackT2
)

func startSlackE2E(t *testing.T, gates map[string]*gate) (*slackfake.Server, *testGW) {
	t.Helper()
	sf := slackfake.New(t)
	tg := newTestGateway(t, fmt.Sprintf(slackE2EConfig, slackfake.BotToken, slackfake.AppToken, sf.URL()), researchModel(gates))
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("the gateway's Slack channel did not connect over Socket Mode")
	}
	return sf, tg
}

// slackAnnounces checks that each of the requester's runs was announced in
// exactly one post, and that post is in C1, thread T; it returns the
// number of announce posts.
func slackAnnounces(t *testing.T, tg *testGW, posts []slackfake.Post, requester, thread string) int {
	t.Helper()
	runs := tg.runsOf(t, requester)
	var labels []string
	for _, r := range runs {
		labels = append(labels, r.Label)
		if r.Origin.ThreadID != thread || r.Status != store.StatusDone || r.Outcome != "success" {
			t.Errorf("run %s (%s): thread %q, status %s/%s; want thread %s, done/success", r.ID, r.Label, r.Origin.ThreadID, r.Status, r.Outcome, thread)
		}
		var found []slackfake.Post
		for _, p := range posts {
			if strings.Contains(p.Text, "sessionKey "+r.ChildKey+" •") {
				found = append(found, p)
			}
		}
		if len(found) != 1 {
			t.Errorf("run %s (%s) announced in %d posts, want exactly 1: %+v", r.ID, r.Label, len(found), found)
			continue
		}
		if p := found[0]; p.Channel != "C1" || p.ThreadTS != thread {
			t.Errorf("announce of %s posted to %s thread %q, want C1 thread %s", r.Label, p.Channel, p.ThreadTS, thread)
		}
		checkAnnounce(t, found[0].Text, r.Label)
	}
	slices.Sort(labels)
	if !slices.Equal(labels, []string{"alpha", "beta"}) {
		t.Errorf("runs of %s have labels %q, want [alpha beta]", requester, labels)
	}
	n := 0
	for _, p := range posts {
		if strings.HasPrefix(p.Text, "Status: ") {
			n++
		}
	}
	return n
}

// TestE2ESlackThreadAnnounces: a mention asking for research in thread T1
// of C1 gets the agent's reply and both sub-agents' announces in T1 and
// nowhere else; a mention in thread T2, sent while the sub-agents still
// work, is a separate conversation with its own session and reply in T2.
func TestE2ESlackThreadAnnounces(t *testing.T) {
	t.Parallel()
	work := newGate(t)
	sf, tg := startSlackE2E(t, map[string]*gate{"alpha": work, "beta": work})

	sf.SendMention("C1", slackfake.UserID, "please research Go generics", slackT1)
	posts := sf.WaitPosts(1, e2eWait)
	if t.Failed() {
		t.FailNow()
	}
	if p := posts[0]; p.Channel != "C1" || p.ThreadTS != slackT1 || !strings.HasPrefix(p.Text, "Started alpha and beta") {
		t.Fatalf("first post = %+v, want the agent's reply in C1 thread %s", p, slackT1)
	}

	// The sub-agents are still working: another thread is not held up.
	sf.SendMention("C1", slackfake.UserID, "what is a type parameter?", slackT2)
	posts = sf.WaitPosts(2, e2eWait)
	if t.Failed() {
		t.FailNow()
	}
	if p := posts[1]; p.Channel != "C1" || p.ThreadTS != slackT2 || !strings.Contains(p.Text, "plain answer to:") || !strings.Contains(p.Text, "what is a type parameter?") {
		t.Fatalf("second post = %+v, want the plain answer in C1 thread %s", p, slackT2)
	}

	work.open()
	tg.waitDelivered(t, 4) // two replies, two announces, nothing else anywhere
	posts = sf.Posted()
	if len(posts) != 4 {
		t.Fatalf("%d posts, want 4: %+v", len(posts), posts)
	}
	if n := slackAnnounces(t, tg, posts, slackK1, slackT1); n != 2 {
		t.Errorf("%d announce posts, want 2", n)
	}
	if runs := tg.runsOf(t, slackK2); len(runs) != 0 {
		t.Errorf("thread T2 has %d sub-agent runs, want none", len(runs))
	}
	if keys := tg.sessionKeys(t); !slices.Equal(keys, []string{slackK1, slackK2}) {
		t.Errorf("requester sessions %q, want [%s %s]", keys, slackK1, slackK2)
	}
}

// TestE2ESlackAnnouncesSurviveFaults: chat.postMessage answers 429 with
// Retry-After: 1 twice, then 500 twice, while the announces go out; each
// announce still lands exactly once in its thread and nothing is lost.
func TestE2ESlackAnnouncesSurviveFaults(t *testing.T) {
	t.Parallel()
	alpha, beta := newGate(t), newGate(t)
	sf, tg := startSlackE2E(t, map[string]*gate{"alpha": alpha, "beta": beta})

	sf.SendMention("C1", slackfake.UserID, "research this for me", slackT1)
	sf.WaitPosts(1, e2eWait)
	if t.Failed() {
		t.FailNow()
	}
	base := sf.PostCalls()

	// alpha's announce meets the rate limit (the adapter waits out the
	// first 429 itself, the second goes back to the outbox) ...
	sf.FailNext(2, 429, "1")
	alpha.open()
	if !waitFor(e2eWait, func() bool { return sf.PostCalls() >= base+2 }) {
		t.Fatalf("chat.postMessage called %d times after the reply, want 2 rate-limited calls", sf.PostCalls()-base)
	}
	// ... then server errors; beta is still held, so whichever announce is
	// next meets them.
	sf.FailNext(2, 500, "")
	beta.open()

	tg.waitDelivered(t, 3)
	posts := sf.Posted()
	if len(posts) != 3 {
		t.Fatalf("%d posts, want the reply and two announces: %+v", len(posts), posts)
	}
	if n := slackAnnounces(t, tg, posts, slackK1, slackT1); n != 2 {
		t.Errorf("%d announce posts, want 2", n)
	}
	// alpha ended first; beta's announce must not overtake it while alpha
	// waits out the rate limit in the same thread.
	if !strings.Contains(posts[1].Text, "Task: alpha") || !strings.Contains(posts[2].Text, "Task: beta") {
		t.Errorf("announces out of order in the thread: %q then %q", firstLine2(posts[1].Text), firstLine2(posts[2].Text))
	}
	if failed := sf.PostCalls() - len(posts); failed != 4 {
		t.Errorf("%d chat.postMessage calls failed, want the 4 injected failures", failed)
	}
	// One 429 was waited out by the adapter; the other three failures went
	// back to the outbox.
	if n := tg.metric(t, `herald_outbox_retried_total{kind="announce"}`); n < 3 {
		t.Errorf("announce retries = %v, want at least 3", n)
	}
	if n := tg.metric(t, `herald_outbox_delivered_total{kind="announce"}`); n != 2 {
		t.Errorf("announces delivered = %v, want 2", n)
	}
}

func firstLine2(s string) string {
	lines := strings.SplitN(s, "\n", 3)
	return strings.Join(lines[:min(2, len(lines))], " / ")
}
