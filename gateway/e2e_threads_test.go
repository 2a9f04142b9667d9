package gateway_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels/slack/slackfake"
)

// shiftClock is the wall clock moved forward by what a test adds.
type shiftClock struct{ off atomic.Int64 }

func (c *shiftClock) Now() time.Time      { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *shiftClock) Add(d time.Duration) { c.off.Add(int64(d)) }

// threadModel is researchModel, and a sub-agent asked a follow-up ("again:
// …") answers with what its own session holds: its task and how many
// messages it sees, so a test knows which session answered.
func threadModel() llmtest.Handler {
	research := researchModel(nil)
	return func(c llmtest.Call) llmtest.Reply {
		last := c.LastUser()
		if strings.Contains(c.System, "Sub-agent context") && strings.HasPrefix(last, "again:") {
			first := ""
			for _, m := range c.Messages {
				if m.Role == agent.RoleUser {
					first = m.Text
					break
				}
			}
			return llmtest.Reply{Text: fmt.Sprintf("child (task %q, %d messages) heard %q", first, len(c.Messages), last)}
		}
		return research(c)
	}
}

// TestE2ESlackFocusThread: after alpha and beta were announced in thread
// T1, "/focus alpha" in thread T2 binds T2 to alpha's child session; a
// message in T2 (no mention: a bound thread is one the bot is in) is
// answered in T2 by alpha's session, which sees its own history — nothing
// is announced again and nothing reaches T1 or the T2 conversation's own
// session; /subagents list in T1 marks alpha 🧵. After a restart the
// binding holds; threadIdleMinutes after the last message it ends and T2
// talks to its own agent again.
func TestE2ESlackFocusThread(t *testing.T) {
	clock := &shiftClock{}
	testClock = clock
	defer func() { testClock = nil }()
	sf := slackfake.New(t)
	cfg := fmt.Sprintf(slackE2EConfig, slackfake.BotToken, slackfake.AppToken, sf.URL())
	stateDir := t.TempDir()
	tg := newTestGatewayIn(t, stateDir, cfg, threadModel())
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("Slack did not connect")
	}
	sf.SendMention("C1", slackfake.UserID, "please research Go generics", slackT1)
	tg.waitDelivered(t, 3) // the reply and two announces in T1

	sf.SendMention("C1", slackfake.UserID, "/focus alpha", slackT2)
	posts := sf.WaitPosts(4, e2eWait)
	if p := posts[len(posts)-1]; p.ThreadTS != slackT2 || p.Text != "🎯 This thread now talks to alpha." {
		t.Fatalf("/focus reply = %+v", p)
	}
	sf.SendMessage("C1", slackfake.UserID, "again: what did you find?", slackT2)
	posts = sf.WaitPosts(5, e2eWait)
	want := `child (task "alpha: read the first half", `
	if p := posts[4]; p.ThreadTS != slackT2 || !strings.HasPrefix(p.Text, want) || !strings.HasSuffix(p.Text, `heard "again: what did you find?"`) {
		t.Fatalf("answer in the bound thread = %+v, want alpha's session answering in T2", p)
	}
	if keys := tg.sessionKeys(t); len(keys) != 1 || keys[0] != slackK1 {
		t.Errorf("requester sessions %q: the bound thread's message must not open a conversation of its own", keys)
	}
	sf.SendMention("C1", slackfake.UserID, "/subagents list", slackT1)
	posts = sf.WaitPosts(6, e2eWait)
	if p := posts[5]; p.ThreadTS != slackT1 || !strings.Contains(p.Text, "success · 🧵 alpha · ") || strings.Contains(p.Text, "🧵 beta") {
		t.Errorf("/subagents list in T1 = %+v, want alpha marked 🧵", p)
	}
	tg.waitDelivered(t, 6) // nothing announced again

	// A restart keeps the binding.
	tg.Stop()
	tg = newTestGatewayIn(t, stateDir, cfg, threadModel())
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("Slack did not reconnect")
	}
	sf.SendMention("C1", slackfake.UserID, "again: still there?", slackT2)
	posts = sf.WaitPosts(7, e2eWait)
	if p := posts[6]; p.ThreadTS != slackT2 || !strings.HasPrefix(p.Text, want) {
		t.Fatalf("after a restart: %+v, want alpha's session answering", p)
	}

	// threadIdleMinutes (1440) after the last message the binding ends.
	clock.Add(1441 * time.Minute)
	sf.SendMention("C1", slackfake.UserID, "again: anyone?", slackT2)
	posts = sf.WaitPosts(8, e2eWait)
	if p := posts[7]; p.ThreadTS != slackT2 || !strings.HasPrefix(p.Text, "plain answer to: again: anyone?") {
		t.Fatalf("after the binding ended: %+v, want the agent's own answer", p)
	}
	if keys := tg.sessionKeys(t); len(keys) != 2 || keys[1] != slackK2 {
		t.Errorf("requester sessions %q, want T2's own conversation now", keys)
	}
}
