package matrix

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels"
)

// onSync runs before the events of each /sync response are dispatched. It
// marks the loop healthy, learns room sizes from the summaries, and drops
// the history a room shows when the bot has just joined it: only events after
// the bot's own join in that batch are delivered.
func (a *Adapter) onSync(_ context.Context, resp *mautrix.RespSync, _ string) bool {
	a.setHealth(nil)
	self := a.client.UserID
	a.mu.Lock()
	for roomID, room := range resp.Rooms.Join {
		a.noteRoomSizeLocked(roomID, room.Summary.JoinedMemberCount)
	}
	a.mu.Unlock()
	for _, room := range resp.Rooms.Join {
		evts := room.Timeline.Events
		for i := len(evts) - 1; i >= 0; i-- {
			if isFreshJoin(evts[i], self) {
				room.Timeline.Events = evts[i:]
				break
			}
		}
	}
	return true
}

// isFreshJoin says whether evt is userID's own join (not a profile change of
// an existing member).
func isFreshJoin(evt *event.Event, userID id.UserID) bool {
	if evt.Type != event.StateMember || evt.GetStateKey() != string(userID) {
		return false
	}
	if m, _ := evt.Content.Raw["membership"].(string); m != string(event.MembershipJoin) {
		return false
	}
	if prev := evt.Unsigned.PrevContent; prev != nil {
		if m, _ := prev.Raw["membership"].(string); m == string(event.MembershipJoin) {
			return false
		}
	}
	return true
}

// onMember accepts invites for the bot (when AutoJoin) and forgets a room's
// size whenever its membership changes.
func (a *Adapter) onMember(ctx context.Context, evt *event.Event) {
	self := a.client.UserID
	if evt.Mautrix.EventSource&event.SourceInvite != 0 {
		if a.opts.AutoJoin && evt.GetStateKey() == string(self) && evt.Content.AsMember().Membership == event.MembershipInvite {
			a.join(ctx, evt.RoomID, evt.Sender)
		}
		return
	}
	if evt.Mautrix.EventSource&event.SourceJoin != 0 && evt.Mautrix.EventSource&event.SourceTimeline != 0 {
		a.mu.Lock()
		a.dmRooms.del(string(evt.RoomID))
		a.mu.Unlock()
	}
}

// replyThread is the ThreadID of the Origin of a message evt in the thread
// rooted at root ("" for none): under ThreadsInbound its thread, under
// ThreadsAlways its thread or one rooted at the message itself, under
// ThreadsOff none.
func (a *Adapter) replyThread(root, evt id.EventID) string {
	switch a.opts.ThreadReplies {
	case ThreadsInbound:
		return string(root)
	case ThreadsAlways:
		if root == "" {
			return string(evt)
		}
		return string(root)
	}
	return ""
}

// onMessage turns a new m.text, m.notice, or a file (m.image, m.file,
// m.audio, m.video) into an Inbound, after the mention and allowlist checks.
func (a *Adapter) onMessage(ctx context.Context, evt *event.Event) {
	if evt.Mautrix.EventSource&event.SourceJoin == 0 || evt.Mautrix.EventSource&event.SourceTimeline == 0 {
		return
	}
	content := evt.Content.AsMessage()
	if content == nil {
		return
	}
	root := content.RelatesTo.GetThreadParent()
	if root != "" {
		a.mu.Lock()
		a.threadLast.put(roomKey(evt.RoomID, root), string(evt.ID))
		a.mu.Unlock()
	}
	if evt.Sender == a.client.UserID {
		return
	}
	if !evt.Mautrix.WasEncrypted && a.roomEncrypted(ctx, evt.RoomID) {
		// Plaintext in an encrypted room: anyone with the homeserver's
		// ear can put it there, and the people in the room never see it
		// as the room's (issue 35).
		a.log.Warn("matrix plaintext message in an encrypted room refused", zap.String("roomId", string(evt.RoomID)),
			zap.String("sender", string(evt.Sender)))
		return
	}
	var files []channels.Attachment
	if isMedia(content.MsgType) {
		// m.image, m.file, m.audio, m.video (files.go): the body is the
		// caption, or only the file name.
		var caption string
		caption, files = a.mediaInbound(content)
		c := *content
		c.Body, c.Format, c.FormattedBody = caption, "", ""
		content = &c
	} else if content.MsgType != event.MsgText && content.MsgType != event.MsgNotice {
		return
	}
	if content.RelatesTo.GetReplaceID() != "" || content.NewContent != nil {
		return // an edit of an earlier message
	}

	chatType, err := a.inboundChatType(ctx, evt.RoomID, evt.ID)
	if err != nil {
		// Neither the homeserver nor the state store can say whether this
		// is a DM: the batch is fetched again (with the sync backoff)
		// rather than the message judged a group one and dropped.
		a.mu.Lock()
		a.refused = err
		a.mu.Unlock()
		return
	}
	mentioned, text := a.addressed(evt, content, root)
	origin := channels.Origin{
		Channel:   Name,
		ChatID:    string(evt.RoomID),
		ChatType:  chatType,
		ThreadID:  a.replyThread(root, evt.ID),
		SenderID:  string(evt.Sender),
		MessageID: string(evt.ID),
	}
	if chatType == channels.ChatDM {
		mentioned = true
		// Keyed by the person, not the room (dm.go).
		origin.ChatID = string(evt.Sender)
	}
	// A thread bound to a sub-agent (SPEC §24) is one the bot is in, also
	// after a restart whose first /sync no longer shows the bot's posts
	// there: the binding is in the store, asked only where it decides.
	var bound func() bool
	if root != "" && origin.ThreadID == string(root) && a.opts.Bound != nil {
		bound = func() bool { return a.opts.Bound(ctx, origin) }
	}
	admit, mentioned := a.opts.Access.AdmitInThread(chatType, string(evt.RoomID), string(evt.Sender), mentioned, bound)
	if !admit {
		a.log.Debug("matrix message not admitted", zap.String("roomId", string(evt.RoomID)),
			zap.String("sender", string(evt.Sender)), zap.String("chatType", chatType), zap.Bool("mentioned", mentioned))
		return
	}

	in := channels.Inbound{
		Origin:      origin,
		SenderName:  senderName(evt.Sender),
		Text:        text,
		Mentioned:   mentioned,
		At:          time.UnixMilli(evt.Timestamp),
		Attachments: files,
	}
	if a.opts.RequireVerifiedDevices {
		in.Unverified = a.deviceDoubt(ctx, evt, text)
	}
	a.mu.Lock()
	sink, refused, taken := a.sink, a.refused, a.retaken[evt.ID]
	a.mu.Unlock()
	if taken {
		return // taken when a refused batch was first handed over
	}
	if sink != nil && refused == nil {
		if chatType == channels.ChatDM {
			a.noteDM(ctx, evt.Sender, evt.RoomID) // before the sink: its answer goes there
		}
		if err := sink(ctx, in); err != nil {
			if errors.Is(err, channels.ErrUnavailable) {
				// Not stored: the batch is fetched again (ProcessResponse).
				a.mu.Lock()
				a.refused = err
				a.mu.Unlock()
				return
			}
			a.log.Warn("matrix message not taken", zap.String("origin", in.Origin.String()), zap.Error(err))
		}
		a.mu.Lock()
		a.batchTaken = append(a.batchTaken, evt.ID)
		a.mu.Unlock()
	}
}

// chatType is "dm" for a room with exactly two joined members, else
// "group". The answer is cached until the room's membership changes. When
// the homeserver's member list cannot be read, the state store (the member
// events seen in /sync, kept when encryption is on) answers; when it knows
// nothing of the room either, err is the lookup's error.
func (a *Adapter) chatType(ctx context.Context, roomID id.RoomID) (string, error) {
	_, dm, err := a.dmPeer(ctx, roomID, false)
	if err == nil {
		if dm {
			return channels.ChatDM, nil
		}
		return channels.ChatGroup, nil
	}
	if kind, ok := a.storedChatType(ctx, roomID); ok {
		a.log.Warn("matrix joined members lookup failed, room judged from the state store",
			zap.String("roomId", string(roomID)), zap.String("chatType", kind), zap.Error(err))
		return kind, nil
	}
	return "", err
}

// inboundChatType is chatType for a message of the /sync batch being
// processed. When the room cannot be judged, err wraps
// channels.ErrUnavailable: the batch is fetched again (with the sync
// backoff) rather than a DM taken for a group message and dropped; at most
// maxMemberRetries times for one event, after which the room is taken as a
// group (and the failure logged), so a member list that never answers
// cannot stop all intake.
func (a *Adapter) inboundChatType(ctx context.Context, roomID id.RoomID, evtID id.EventID) (string, error) {
	kind, err := a.chatType(ctx, roomID)
	if err == nil {
		return kind, nil
	}
	a.mu.Lock()
	if a.memberRetries == nil {
		a.memberRetries = map[id.EventID]int{}
	}
	a.memberRetries[evtID]++
	n := a.memberRetries[evtID]
	a.mu.Unlock()
	if n > maxMemberRetries {
		a.log.Error("matrix joined members lookup keeps failing, treating room as a group",
			zap.String("roomId", string(roomID)), zap.String("eventId", string(evtID)), zap.Int("tries", n), zap.Error(err))
		return channels.ChatGroup, nil
	}
	a.log.Warn("matrix joined members lookup failed, the /sync batch is fetched again",
		zap.String("roomId", string(roomID)), zap.Int("try", n), zap.Error(err))
	return "", fmt.Errorf("%w: %w", channels.ErrUnavailable, err)
}

// maxMemberRetries is how often one message's /sync batch is fetched again
// because its room's member list cannot be read (with the sync backoff,
// about 1+2+4+8+16 s).
const maxMemberRetries = 5

// storedChatType judges a room from the client's state store (the member
// events seen in /sync), ok false when it has none or does not list the
// bot as joined (it knows nothing useful of the room then).
func (a *Adapter) storedChatType(ctx context.Context, roomID id.RoomID) (kind string, ok bool) {
	store := a.client.StateStore
	if store == nil {
		return "", false
	}
	members, err := store.GetRoomJoinedOrInvitedMembers(ctx, roomID)
	if err != nil || len(members) == 0 {
		return "", false
	}
	joined, self := 0, false
	for _, u := range members {
		if !store.IsMembership(ctx, roomID, u, event.MembershipJoin) {
			continue
		}
		joined++
		self = self || u == a.client.UserID
	}
	if !self {
		return "", false
	}
	if joined == 2 {
		return channels.ChatDM, true
	}
	return channels.ChatGroup, true
}

// dmPeer is the other member of a room with exactly two joined members
// (dm true), from the cache or (fresh, or not cached) the homeserver. A
// lookup that fails is err, classified as a send error (a timeout or a
// 5xx retryable, the bot no longer in the room permanent); nothing is
// cached then.
func (a *Adapter) dmPeer(ctx context.Context, roomID id.RoomID, fresh bool) (peer id.UserID, dm bool, err error) {
	a.mu.Lock()
	v, ok := a.dmRooms.get(string(roomID))
	a.mu.Unlock()
	if ok && !fresh {
		return id.UserID(v), v != channels.ChatGroup, nil
	}
	resp, err := a.client.JoinedMembers(ctx, roomID)
	if err != nil {
		return "", false, classifySendError("matrix: read the members of "+string(roomID), err)
	}
	v = channels.ChatGroup
	if len(resp.Joined) == 2 {
		for user := range resp.Joined {
			if user != a.client.UserID {
				v = string(user)
			}
		}
	}
	a.mu.Lock()
	a.dmRooms.put(string(roomID), v)
	a.mu.Unlock()
	return id.UserID(v), v != channels.ChatGroup, nil
}

// noteRoomSize takes a room's joined-member count from a /sync summary:
// other than two, a group; two, looked up again when next needed (who the
// other member is). The caller holds a.mu.
func (a *Adapter) noteRoomSizeLocked(roomID id.RoomID, joined *int) {
	switch {
	case joined == nil:
	case *joined == 2:
		a.dmRooms.del(string(roomID))
	default:
		a.dmRooms.put(string(roomID), channels.ChatGroup)
	}
}

// addressed reports whether the message is addressed to the bot and returns
// its text with the reply fallback and a leading mention removed.
func (a *Adapter) addressed(evt *event.Event, content *event.MessageEventContent, root id.EventID) (bool, string) {
	self := a.client.UserID
	a.mu.Lock()
	display := a.displayName
	inBotThread := root != "" && a.botThreads.has(roomKey(evt.RoomID, root))
	replyTo := content.RelatesTo.GetNonFallbackReplyTo()
	replyToBot := replyTo != "" && a.ownEvents.has(roomKey(evt.RoomID, replyTo))
	a.mu.Unlock()

	body := content.Body
	if content.RelatesTo.GetReplyTo() != "" && strings.HasPrefix(body, "> ") {
		body = event.TrimReplyFallbackText(body)
	}
	names := botNames(self, display)
	mentioned := inBotThread || replyToBot
	if content.Mentions != nil && slices.Contains(content.Mentions.UserIDs, self) {
		mentioned = true
	}
	if strings.Contains(content.FormattedBody, "matrix.to/#/"+string(self)) {
		mentioned = true
	}
	if !mentioned {
		for _, n := range names {
			if containsWord(body, n) {
				mentioned = true
				break
			}
		}
	}
	return mentioned, stripLeadingMention(body, names)
}

// botNames are the ways a person may write the bot's name, longest first.
func botNames(self id.UserID, display string) []string {
	names := []string{string(self)}
	if local := self.Localpart(); local != "" {
		names = append(names, "@"+local, local)
	}
	if display = strings.TrimSpace(display); display != "" {
		names = append(names, "@"+display, display)
	}
	slices.SortStableFunc(names, func(x, y string) int { return len(y) - len(x) })
	return slices.Compact(names)
}

// containsWord reports whether name occurs in s, case-insensitively, not
// inside a longer word.
func containsWord(s, name string) bool {
	re, err := regexp.Compile(`(?i)(^|[^\pL\pN_])` + regexp.QuoteMeta(name) + `($|[^\pL\pN_])`)
	if err != nil {
		return false
	}
	return re.MatchString(s)
}

// stripLeadingMention removes one of names (and a following ":" or ",")
// from the start of text.
func stripLeadingMention(text string, names []string) string {
	trimmed := strings.TrimLeft(text, " \t")
	lower := strings.ToLower(trimmed)
	for _, n := range names {
		if !strings.HasPrefix(lower, strings.ToLower(n)) {
			continue
		}
		rest := trimmed[len(n):]
		if rest != "" {
			r := rest[0]
			if r != ' ' && r != ':' && r != ',' && r != '\n' && r != '\t' {
				continue // the name is the start of a longer word
			}
		}
		rest = strings.TrimLeft(rest, " \t")
		rest = strings.TrimPrefix(rest, ":")
		rest = strings.TrimPrefix(rest, ",")
		return strings.TrimSpace(rest)
	}
	return text
}

// senderName is a readable name for a sender: its localpart.
func senderName(u id.UserID) string {
	if l := u.Localpart(); l != "" {
		return l
	}
	return string(u)
}

// threadRootOf is the m.thread root of a parsed message event, or "".
func threadRootOf(evt *event.Event) id.EventID {
	if msg, ok := evt.Content.Parsed.(*event.MessageEventContent); ok {
		return msg.RelatesTo.GetThreadParent()
	}
	return ""
}
