package gateway_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels/slack/slackfake"
)

// TestE2ESlackThreadContext (SPEC §21 thread context): Bob and Alice talk in
// a thread of C1 without the bot; when Alice then mentions the bot in that
// thread, the model's request carries their earlier messages with their
// names, oldest first, and not the mention twice. A second mention in the
// same thread is not given the context again (the first turn's transcript
// has it) and Slack is not asked again; nor after /new, since the bot has
// posted in the thread by then.
func TestE2ESlackThreadContext(t *testing.T) {
	sf, tg := startSlackE2E(t, nil)
	const bob = "U0BOB"
	sf.SetUserName(slackfake.UserID, "Alice")
	sf.SetUserName(bob, "Bob")

	root := sf.Say("C1", bob, "the nightly deploy failed with an OOM in the cache warmer", "")
	sf.Say("C1", slackfake.UserID, "I bumped the heap to 2 GB yesterday", root)
	sf.Say("C1", bob, "then it is the new index build", root)
	sf.SendMention("C1", slackfake.UserID, "which of these should we revert?", root)
	posts := sf.WaitPosts(1, e2eWait)
	if t.Failed() {
		t.FailNow()
	}
	if p := posts[0]; p.ThreadTS != root {
		t.Fatalf("reply posted in thread %q, want the thread %s", p.ThreadTS, root)
	}
	first := tg.LLM.Requests()[0].LastUser()
	want := []string{
		"Bob: the nightly deploy failed with an OOM in the cache warmer",
		"Alice: I bumped the heap to 2 GB yesterday",
		"Bob: then it is the new index build",
		"which of these should we revert?",
	}
	at := 0
	for _, w := range want {
		i := strings.Index(first[at:], w)
		if i < 0 {
			t.Fatalf("the model's first message lacks %q (in order) — it was:\n%s", w, first)
		}
		at += i + len(w)
	}
	if n := strings.Count(first, "which of these should we revert?"); n != 1 {
		t.Errorf("the mention appears %d times in the model's message, want once:\n%s", n, first)
	}
	calls := sf.RepliesCalls()

	sf.SendMention("C1", slackfake.UserID, "and what about the heap?", root)
	sf.WaitPosts(2, e2eWait)
	reqs := tg.LLM.Requests()
	second := reqs[len(reqs)-1].LastUser()
	if strings.Contains(second, "Earlier messages in this thread") || !strings.Contains(second, "and what about the heap?") {
		t.Errorf("the second turn's message = %q, want the mention alone (context only on the first turn)", second)
	}
	if got := sf.RepliesCalls(); got != calls {
		t.Errorf("conversations.replies called %d more times on the second turn, want 0", got-calls)
	}

	// /new in the thread starts the conversation again: the bot has been
	// part of this thread, so its next turn is not given the thread again.
	sf.SendMention("C1", slackfake.UserID, "/new", root)
	sf.WaitPosts(3, e2eWait)
	sf.SendMention("C1", slackfake.UserID, "start over: what broke?", root)
	sf.WaitPosts(4, e2eWait)
	reqs = tg.LLM.Requests()
	if third := reqs[len(reqs)-1].LastUser(); strings.Contains(third, "Earlier messages in this thread") || !strings.Contains(third, "start over: what broke?") {
		t.Errorf("after /new the turn's message = %q, want the mention alone (the bot was part of the thread)", third)
	}
}

// TestE2ESlackThreadContextOff: threadContext 0 gives the model the mention
// alone and never reads the thread.
func TestE2ESlackThreadContextOff(t *testing.T) {
	sf := slackfake.New(t)
	cfg := strings.Replace(fmt.Sprintf(slackE2EConfig, slackfake.BotToken, slackfake.AppToken, sf.URL()),
		"groups: { C1: {} }", "groups: { C1: {} }, threadContext: 0", 1)
	tg := newTestGateway(t, cfg, llmtest.ByLastUser(func(text string) llmtest.Reply { return llmtest.Reply{Text: "ok"} }))
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("the gateway's Slack channel did not connect over Socket Mode")
	}
	root := sf.Say("C1", "U0BOB", "an earlier message", "")
	sf.SendMention("C1", slackfake.UserID, "hello there", root)
	sf.WaitPosts(1, e2eWait)
	if got := tg.LLM.Requests()[0].LastUser(); strings.Contains(got, "an earlier message") {
		t.Errorf("with threadContext 0 the model was given the thread: %q", got)
	}
	if n := sf.RepliesCalls(); n != 0 {
		t.Errorf("with threadContext 0 conversations.replies was called %d times", n)
	}
}
