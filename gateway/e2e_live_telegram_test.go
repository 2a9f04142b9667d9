package gateway_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels/telegram/tgfake"
)

// TestE2ETelegramStreamsByEditing: a reply to a Telegram chat is shown while
// it is written — a "typing" action, then one message edited as the text
// grows (a 429 during an edit is waited out) — and ends as that one message
// with exactly the final text: not a second message.
func TestE2ETelegramStreamsByEditing(t *testing.T) {
	tf := tgfake.New(t, tgToken)
	const reply = "Here is the answer, written in three pieces so the chat can watch it grow."
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
	tg := newTestGateway(t, fmt.Sprintf(telegramE2EConfig, tgToken, tf.URL()), func(c llmtest.Call) llmtest.Reply {
		return llmtest.Reply{Text: reply, BeforePiece: func(i int) {
			switch i {
			case 1: // the first piece is on Telegram as a new message
				waitFake("the draft message", func() bool { return len(tf.Sent()) == 1 })
				tf.FailNext(1, 429, 1) // the next edit is rate limited
			case 2: // the second piece edited it in
				waitFake("an edit with the second piece", func() bool {
					e := tf.Edits()
					return len(e) > 0 && strings.HasPrefix(reply, e[len(e)-1].Text) && len(e[len(e)-1].Text) > len(tf.Sent()[0].Text)/2
				})
			}
		}}
	})
	_ = tg
	tf.SendText(tgAlice, "private", 0, tgAlice, "please answer")
	waitFake("the final text", func() bool {
		s := tf.Sent()
		return len(s) > 0 && s[0].Text == reply
	})
	sent := tf.Sent()
	if len(sent) != 1 || sent[0].ChatID != tgAlice {
		t.Errorf("telegram got %d messages %+v; want the one draft edited into the reply", len(sent), sent)
	}
	edits := tf.Edits()
	if len(edits) < 2 || edits[len(edits)-1].Text != reply || edits[len(edits)-1].MessageID != sent[0].MessageID {
		t.Errorf("edits %+v; want the draft edited, ending with the reply", edits)
	}
	typing := false
	for _, a := range tf.ChatActions() {
		typing = typing || (a.ChatID == tgAlice && a.Action == "typing")
	}
	if !typing {
		t.Errorf("no typing action in the chat: %+v", tf.ChatActions())
	}
	tg.waitDelivered(t, 1)
}
