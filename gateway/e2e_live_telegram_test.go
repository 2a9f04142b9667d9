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
	t.Parallel()
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

// TestE2ETelegramDraftSurvivesARestart: the gateway stops while a reply is
// half drafted on Telegram; after the restart the owed turn runs again and
// its reply replaces that same draft: one message, with the final text,
// not a half-written one next to a new one.
func TestE2ETelegramDraftSurvivesARestart(t *testing.T) {
	t.Parallel()
	tf := tgfake.New(t, tgToken)
	dir := t.TempDir()
	cfg := strings.Replace(fmt.Sprintf(telegramE2EConfig, tgToken, tf.URL()), "shutdownGraceSeconds: 5", "shutdownGraceSeconds: 1", 1)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	t.Run("stopped mid-stream", func(t *testing.T) {
		newTestGatewayIn(t, dir, cfg, func(c llmtest.Call) llmtest.Reply {
			return llmtest.Reply{Text: "a first attempt, cut off by the stop before it ends", BeforePiece: func(i int) {
				if i == 1 {
					<-release // held until the request ends: the gateway stops meanwhile
				}
			}}
		})
		tf.SendText(tgAlice, "private", 0, tgAlice, "write slowly")
		deadline := time.Now().Add(e2eWait)
		for len(tf.Sent()) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("no draft on Telegram")
			}
			time.Sleep(10 * time.Millisecond)
		}
		// The subtest's end stops the gateway with the turn cut mid-reply.
	})
	if s := tf.Sent(); len(s) != 1 || s[0].Text == "a first attempt, cut off by the stop before it ends" {
		t.Fatalf("before the restart Telegram has %+v; want one half-written draft", s)
	}
	const final = "the whole answer, after the restart"
	tg := newTestGatewayIn(t, dir, cfg, func(c llmtest.Call) llmtest.Reply { return llmtest.Reply{Text: final} })
	tg.waitDelivered(t, 1)
	s := tf.Sent()
	if len(s) != 1 || s[0].Text != final {
		t.Errorf("after the restart Telegram has %+v; want the draft edited into %q and nothing else", s, final)
	}
}
