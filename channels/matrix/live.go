package matrix

import (
	"context"
	"fmt"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels"
)

// typingTimeout is how long the homeserver shows a typing notice unless it
// is renewed (the gateway renews it every few seconds) or cleared.
const typingTimeout = 30 * time.Second

// Typing sets or clears the bot's typing notification in the room.
func (a *Adapter) Typing(ctx context.Context, to channels.Origin, on bool) error {
	to, err := a.inRoom(ctx, to, false)
	if err != nil {
		return fmt.Errorf("matrix: typing: %w", err)
	}
	if _, err := a.client.UserTyping(ctx, id.RoomID(to.ChatID), on, typingTimeout); err != nil {
		return classifySendError("matrix: typing in "+to.String(), err)
	}
	return nil
}

// DraftEvery: one edit a second keeps well inside homeserver rate limits.
func (a *Adapter) DraftEvery() time.Duration { return time.Second }

// Draft shows the reply written so far in the room and thread: the first
// draft is a message, the next ones m.replace edits of it (SPEC §16).
func (a *Adapter) Draft(ctx context.Context, to channels.Origin, ref, text string) (string, error) {
	to, err := a.inRoom(ctx, to, ref == "") // the first draft is a new message
	if err != nil {
		return ref, fmt.Errorf("matrix: draft: %w", err)
	}
	if r := []rune(text); len(r) > Limit {
		text = string(r[:Limit-1]) + "…"
	}
	if ref != "" {
		return ref, a.edit(ctx, to, id.EventID(ref), text, "")
	}
	evt, err := a.sendText(ctx, to, text, "")
	return string(evt), err
}

// edit replaces the text of the bot's event ref with an m.replace event;
// txn, if set, makes a re-send of the same edit idempotent.
func (a *Adapter) edit(ctx context.Context, to channels.Origin, ref id.EventID, text, txn string) error {
	content := &event.MessageEventContent{MsgType: event.MsgText, Body: text, Mentions: &event.Mentions{}}
	content.SetEdit(ref)
	var req []mautrix.ReqSendEvent
	if txn != "" {
		req = append(req, mautrix.ReqSendEvent{TransactionID: txn})
	}
	if _, err := a.client.SendMessageEvent(ctx, id.RoomID(to.ChatID), event.EventMessage, content, req...); err != nil {
		return classifySendError("matrix: edit in "+to.String(), err)
	}
	return nil
}
