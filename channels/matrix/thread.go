package matrix

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels"
)

var _ channels.ThreadReader = (*Adapter)(nil)

// maxRelationPages bounds the /relations pages read for one thread.
const maxRelationPages = 5

// ThreadHistory reads the thread at.ThreadID through its m.thread relations
// (newest first, from the server) and its root event, and returns the last
// Options.ThreadContext messages before at.MessageID, oldest first.
// Encrypted events are decrypted with the keys the bot's device holds
// (crypto.go); those it cannot read are left out.
func (a *Adapter) ThreadHistory(ctx context.Context, at channels.Origin) ([]channels.ThreadMessage, error) {
	n := a.opts.ThreadContext
	if n <= 0 || !at.MidThread() {
		return nil, nil
	}
	in, err := a.inRoom(ctx, at, false)
	if err != nil {
		return nil, fmt.Errorf("matrix thread context: %w", err)
	}
	room, root, mention := id.RoomID(in.ChatID), id.EventID(at.ThreadID), id.EventID(at.MessageID)
	var newestFirst []*event.Event
	req := &mautrix.ReqGetRelations{RelationType: event.RelThread, Dir: mautrix.DirectionBackward, Limit: 100}
	for page := 0; page < maxRelationPages && len(newestFirst) < n; page++ {
		resp, err := a.client.GetRelations(ctx, room, root, req)
		if err != nil {
			return nil, fmt.Errorf("matrix thread relations of %s in %s: %w", root, room, err)
		}
		for _, evt := range resp.Chunk {
			if evt.ID == mention {
				newestFirst = newestFirst[:0] // whatever came after the mention is not context
				continue
			}
			newestFirst = append(newestFirst, evt)
		}
		if resp.NextBatch == "" {
			break
		}
		req.From = resp.NextBatch
	}
	if len(newestFirst) < n {
		if evt, err := a.client.GetEvent(ctx, room, root); err == nil {
			newestFirst = append(newestFirst, evt)
		} else if !errors.Is(err, mautrix.MNotFound) {
			a.log.Debug("matrix thread root not read for thread context")
		}
	}
	slices.Reverse(newestFirst)
	self := a.self()
	var out []channels.ThreadMessage
	for _, evt := range newestFirst {
		if evt.Type == event.EventEncrypted {
			if evt = a.decryptEarlier(ctx, room, evt); evt == nil {
				continue
			}
		}
		if evt.Type != event.EventMessage {
			continue // encrypted, reactions, state …
		}
		_ = evt.Content.ParseRaw(evt.Type)
		msg, ok := evt.Content.Parsed.(*event.MessageEventContent)
		if !ok || msg.NewContent != nil || msg.RelatesTo.GetReplaceID() != "" {
			continue // edits are not messages of their own
		}
		fromBot := evt.Sender == self
		tm := channels.ThreadMessage{SenderID: string(evt.Sender), Text: msg.Body,
			At: time.UnixMilli(evt.Timestamp), FromBot: fromBot}
		tm.Admitted = fromBot || a.opts.Access.Admit(at.ChatType, at.ChatID, string(evt.Sender), true)
		if fromBot {
			tm.SenderName = "Herald"
		} else {
			tm.SenderName = a.memberName(ctx, room, evt.Sender)
		}
		out = append(out, tm)
	}
	return channels.LastN(out, n), nil
}

// self is the bot's own user id.
func (a *Adapter) self() id.UserID {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.userID
}

// memberName is a room member's display name, else the localpart of the id.
func (a *Adapter) memberName(ctx context.Context, room id.RoomID, user id.UserID) string {
	key := string(room) + "|" + string(user)
	if name, ok := a.names.Get(key); ok {
		return name
	}
	name := senderName(user)
	var member event.MemberEventContent
	if err := a.client.StateEvent(ctx, room, event.StateMember, string(user), &member); err == nil && member.Displayname != "" {
		name = member.Displayname
	}
	a.names.Put(key, name)
	return name
}
