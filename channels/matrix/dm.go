package matrix

import (
	"context"
	"fmt"
	"strings"

	"go.uber.org/zap"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels"
)

// A Matrix DM is keyed by the person, not the room (issue 35): a room is a
// DM while it has exactly two joined members, so when the first person
// leaves and someone else joins, the room is a DM with someone else. Keyed
// by the room, the newcomer would take over the first person's
// conversation — its history, its workspace, its pending announces. So a
// DM's Origin.ChatID is the sender's user id (@alice:example.org; the
// session key is agent:<id>:matrix:dm:@alice:example.org), and the adapter
// keeps which room each person last wrote from (memory, and the channel's
// store under dm.<bot>|<person>, so a restart or another replica sends there
// too). A message for a person goes to that room only while it is still a
// DM with that person; otherwise it is refused, never posted to whoever is
// in the room now.

// dmStateKey is the channel store's key of the room person's DM is in.
func (a *Adapter) dmStateKey(person id.UserID) string {
	return "dm." + string(a.self()) + "|" + string(person)
}

// noteDM remembers that person's DM conversation talks in room.
func (a *Adapter) noteDM(ctx context.Context, person id.UserID, room id.RoomID) {
	a.mu.Lock()
	known, ok := a.dmRoomOf.get(string(person))
	if !ok || known != string(room) {
		a.dmRoomOf.put(string(person), string(room))
	}
	a.mu.Unlock()
	if (ok && known == string(room)) || a.opts.State == nil {
		return
	}
	if err := a.opts.State.Set(ctx, a.dmStateKey(person), string(room)); err != nil {
		a.log.Warn("matrix: the room of a DM was not saved; after a restart, messages for its person wait for their next message",
			zap.String("sender", string(person)), zap.String("roomId", string(room)), zap.Error(err))
	}
}

// inRoom returns to with ChatID the Matrix room to post in: a room id as
// it is, a person's user id (a DM) as the room of their DM, checked to be
// a DM with that person still — with fresh, against the homeserver's
// member list now (a new message: /sync may not have brought a leave and
// a join yet), else against what /sync showed (an edit, typing). A DM
// origin that names a room (stored before DMs were keyed by the person)
// is checked the same way against its sender. Anything else is
// ErrPermanent; a member list that cannot be read now is retryable.
func (a *Adapter) inRoom(ctx context.Context, to channels.Origin, fresh bool) (channels.Origin, error) {
	switch {
	case strings.HasPrefix(to.ChatID, "!"):
		if to.ChatType == channels.ChatDM && strings.HasPrefix(to.SenderID, "@") {
			return to, a.stillDM(ctx, id.UserID(to.SenderID), to.ChatID, fresh)
		}
		return to, nil
	case !strings.HasPrefix(to.ChatID, "@"):
		return to, fmt.Errorf("matrix: %q is neither a Matrix room id nor a user id: %w", to.ChatID, channels.ErrPermanent)
	}
	person := id.UserID(to.ChatID)
	a.mu.Lock()
	room, ok := a.dmRoomOf.get(string(person))
	a.mu.Unlock()
	if !ok && a.opts.State != nil {
		v, found, err := a.opts.State.Get(ctx, a.dmStateKey(person))
		if err != nil {
			return to, fmt.Errorf("matrix: read the DM room of %s: %w", person, err)
		}
		if found && v != "" {
			room, ok = v, true
			a.mu.Lock()
			a.dmRoomOf.put(string(person), room)
			a.mu.Unlock()
		}
	}
	if !ok {
		return to, fmt.Errorf("matrix: no direct chat with %s is known: %w", person, channels.ErrPermanent)
	}
	if err := a.stillDM(ctx, person, room, fresh); err != nil {
		return to, err
	}
	to.ChatID = room
	return to, nil
}

// stillDM is nil while room is a two-member room with person in it, and
// ErrPermanent when the member list shows it is not: the message is not
// posted to whoever is there now. A member list that cannot be read now
// (a timeout, a 502) is a plain error, so the outbox tries again later.
func (a *Adapter) stillDM(ctx context.Context, person id.UserID, room string, fresh bool) error {
	peer, dm, err := a.dmPeer(ctx, id.RoomID(room), fresh)
	if err != nil {
		return fmt.Errorf("matrix: could not check that %s is still in a direct chat with the bot in %s: %w", person, room, err)
	}
	if !dm || peer != person {
		a.log.Warn("matrix message for a DM not sent: its person is no longer the room's other member",
			zap.String("person", string(person)), zap.String("roomId", room), zap.String("now", string(peer)))
		return fmt.Errorf("matrix: %s is no longer in a direct chat with the bot in %s: %w", person, room, channels.ErrPermanent)
	}
	return nil
}
