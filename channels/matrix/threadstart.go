package matrix

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels"
)

var _ channels.ThreadStarter = (*Adapter)(nil)

// StartThread implements channels.ThreadStarter (SPEC §24): t.Text is
// posted in the room as the root of a new thread (Matrix threads are
// m.thread relations to their root event and have no name); the link is
// the root's matrix.to link. A DM, or a room that refuses the post (no
// permission), gets ErrNoThreads.
func (a *Adapter) StartThread(ctx context.Context, in channels.Origin, t channels.NewThread) (channels.Thread, error) {
	if in.ChatType != channels.ChatGroup {
		return channels.Thread{}, fmt.Errorf("matrix: a direct chat: %w", channels.ErrNoThreads)
	}
	if !strings.HasPrefix(in.ChatID, "!") {
		return channels.Thread{}, fmt.Errorf("matrix: room id %q is not a Matrix room id: %w", in.ChatID, channels.ErrPermanent)
	}
	to := channels.Origin{Channel: Name, Account: in.Account, ChatID: in.ChatID, ChatType: in.ChatType}
	txn := ""
	if t.Key != "" {
		// The homeserver de-duplicates a transaction id per device: the
		// starter posted again after a crash (Retry) is the same event,
		// so the run keeps one thread.
		txn = "herald-thread-" + t.Key
	}
	root, err := a.sendText(ctx, to, t.Text, txn)
	if err != nil {
		return channels.Thread{}, channels.ThreadRefused("matrix: start a thread in "+in.ChatID, err)
	}
	a.botThreads.put(roomKey(id.RoomID(in.ChatID), root), "") // a thread the bot is in (§9)
	to.ThreadID = string(root)
	link := "https://matrix.to/#/" + url.PathEscape(in.ChatID) + "/" + url.PathEscape(string(root))
	return channels.Thread{Origin: to, Link: link}, nil
}
