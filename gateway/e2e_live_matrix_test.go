package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels/matrix/matrixtest"
)

// botEvents reads the room and splits the bot's messages into originals
// and m.replace edits.
func botEvents(t *testing.T, c *mautrix.Client, room id.RoomID, bot id.UserID) (originals, edits []*event.MessageEventContent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	all, err := matrixtest.RoomMessages(ctx, c, room)
	if err != nil {
		t.Fatalf("read room: %v", err)
	}
	for _, evt := range all {
		msg, ok := evt.Content.Parsed.(*event.MessageEventContent)
		if evt.Sender != bot || !ok {
			continue
		}
		if msg.RelatesTo != nil && msg.RelatesTo.Type == event.RelReplace {
			edits = append(edits, msg)
		} else {
			originals = append(originals, msg)
		}
	}
	return originals, edits
}

// TestE2EMatrixStreamsByEditing: on a real Dendrite, a reply in a thread is
// posted as a draft while it is written, edited (m.replace) as it grows,
// and ends as that one message whose last edit carries exactly the reply.
func TestE2EMatrixStreamsByEditing(t *testing.T) {
	hs := matrixtest.Start(t)
	alice := hs.RegisterUser(t, "alice")
	carol := hs.RegisterUser(t, "carol")
	bot := hs.RegisterUser(t, "herald")
	const reply = "Here is the Matrix answer, written in three pieces so the thread can watch it grow."
	var room id.RoomID
	wait := func(what string, ok func(originals, edits []*event.MessageEventContent) bool) {
		deadline := time.Now().Add(e2eWait)
		for {
			o, e := botEvents(t, alice, room, bot.UserID)
			if ok(o, e) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("never saw %s: %d originals, %d edits", what, len(o), len(e))
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	llm := llmtest.NewAnthropic(t, func(c llmtest.Call) llmtest.Reply {
		return llmtest.Reply{Text: reply, BeforePiece: func(i int) {
			switch i {
			case 1:
				wait("the draft", func(o, _ []*event.MessageEventContent) bool { return len(o) == 1 })
			case 2:
				wait("an edit", func(_, e []*event.MessageEventContent) bool { return len(e) > 0 })
			}
		}}
	})
	startMatrixGateway(t, hs, bot, llm)
	room = groupRoom(t, alice, carol, bot.UserID)
	root := matrixtest.Post(t, alice, room, "a thread")
	matrixtest.PostInThread(t, alice, room, root, "herald: answer slowly", bot.UserID)
	wait("the final edit", func(_, e []*event.MessageEventContent) bool {
		return len(e) > 0 && e[len(e)-1].NewContent != nil && e[len(e)-1].NewContent.Body == reply
	})
	originals, edits := botEvents(t, alice, room, bot.UserID)
	if len(originals) != 1 || !strings.HasPrefix(reply, originals[0].Body) {
		t.Fatalf("%d bot messages; want one draft, a beginning of the reply", len(originals))
	}
	if originals[0].RelatesTo == nil || originals[0].RelatesTo.EventID != root {
		t.Errorf("the draft is not in the thread: %+v", originals[0].RelatesTo)
	}
	if len(edits) < 2 {
		t.Errorf("%d edits; want the draft edited as it grew and then into the reply", len(edits))
	}
}
