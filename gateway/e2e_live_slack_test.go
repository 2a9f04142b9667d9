package gateway_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels/slack/slackfake"
)

// TestE2ESlackStreamsByEditing: a reply in a Slack thread is posted as a
// draft while it is written, updated with chat.update as it grows, and
// ends as that one message with exactly the final text and the outbox
// metadata (so a re-send after a crash finds it).
func TestE2ESlackStreamsByEditing(t *testing.T) {
	t.Parallel()
	sf := slackfake.New(t)
	const reply = "Here is the Slack answer, written in three pieces so the thread can watch it grow."
	waitFake := func(what string, ok func() bool) {
		deadline := time.Now().Add(e2eWait)
		for !ok() {
			if time.Now().After(deadline) {
				t.Errorf("the fake never saw %s", what)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	tg := newTestGateway(t, fmt.Sprintf(slackE2EConfig, slackfake.BotToken, slackfake.AppToken, sf.URL()), func(c llmtest.Call) llmtest.Reply {
		return llmtest.Reply{Text: reply, BeforePiece: func(i int) {
			switch i {
			case 1:
				waitFake("the draft post", func() bool { return len(sf.Posted()) == 1 })
			case 2:
				waitFake("an update with the second piece", func() bool { return len(sf.Updates()) > 0 })
			}
		}}
	})
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("Slack did not connect")
	}
	sf.SendMention("C1", slackfake.UserID, "answer slowly", slackT1)
	waitFake("the final text", func() bool {
		p := sf.Posted()
		return len(p) > 0 && p[0].Text == reply
	})
	posts := sf.Posted()
	if len(posts) != 1 || posts[0].ThreadTS != slackT1 || !strings.Contains(posts[0].Metadata, "herald_message") {
		t.Errorf("posts %+v; want one post in the thread, edited into the reply with the outbox metadata", posts)
	}
	ups := sf.Updates()
	if len(ups) < 2 || ups[len(ups)-1].Text != reply || ups[len(ups)-1].TS != posts[0].TS {
		t.Errorf("updates %+v; want the draft updated, ending with the reply", ups)
	}
	tg.waitDelivered(t, 1)
}
