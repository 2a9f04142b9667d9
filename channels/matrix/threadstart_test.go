package matrix

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/matrix/matrixtest"
)

// TestDendriteThreadStartIsIdempotent: a thread started again with the
// same key (the run's id) after a crash — a new adapter, the same device —
// gets the starter the first call posted, so the run has one thread; a
// thread with another key is a new one.
func TestDendriteThreadStartIsIdempotent(t *testing.T) {
	hs := requireHS(t)
	alice := hs.RegisterUser(t, "alice")
	bot := hs.RegisterUser(t, "herald")
	a, _, stop := startBotWith(t, hs, bot, func(o *Options) { o.ThreadReplies = ThreadsInbound })
	room := matrixtest.CreateRoomWith(t, alice, bot.UserID)
	matrixtest.WaitJoined(t, alice, room, bot.UserID)
	in := channels.Origin{Channel: Name, ChatID: string(room), ChatType: channels.ChatGroup}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := a.StartThread(ctx, in, channels.NewThread{Name: "alpha", Text: "🧵 alpha", Key: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	stop()
	a, _, _ = startBotWith(t, hs, bot, func(o *Options) { o.ThreadReplies = ThreadsInbound })
	again, err := a.StartThread(ctx, in, channels.NewThread{Name: "alpha", Text: "🧵 alpha", Key: "run-1", Retry: true})
	if err != nil {
		t.Fatal(err)
	}
	if again.Origin.ThreadID != first.Origin.ThreadID || again.Link != first.Link {
		t.Errorf("thread started again = %+v, want the first one %+v", again, first)
	}
	other, err := a.StartThread(ctx, in, channels.NewThread{Name: "beta", Text: "🧵 beta", Key: "run-2"})
	if err != nil {
		t.Fatal(err)
	}
	if other.Origin.ThreadID == first.Origin.ThreadID {
		t.Errorf("another run's thread = %+v, want a new one", other)
	}
	if msgs := matrixtest.WaitThreadMessages(t, alice, room, "", bot.UserID, 2); len(msgs) != 2 {
		t.Errorf("room shows %d starters of the bot, want 2", len(msgs))
	}
}
