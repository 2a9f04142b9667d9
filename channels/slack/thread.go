package slack

import (
	"context"
	"fmt"

	"github.com/slack-go/slack"

	"github.com/heraldhq/herald/channels"
)

var _ channels.ThreadReader = (*Adapter)(nil)

// maxReplyPages bounds the conversations.replies pages read for one thread
// (200 messages each): the last threadContext messages before the mention
// are kept from what was read.
const maxReplyPages = 10

// ThreadHistory reads the thread at.ThreadID up to (not including)
// at.MessageID with conversations.replies and returns its last
// Options.ThreadContext messages, oldest first, with senders' display names.
func (a *Adapter) ThreadHistory(ctx context.Context, at channels.Origin) ([]channels.ThreadMessage, error) {
	n := a.opts.ThreadContext
	if n <= 0 || !at.MidThread() {
		return nil, nil
	}
	a.mu.Lock()
	botID := a.botID
	a.mu.Unlock()
	params := &slack.GetConversationRepliesParameters{ChannelID: at.ChatID, Timestamp: at.ThreadID,
		Latest: at.MessageID, Inclusive: false, Limit: 200}
	var out []channels.ThreadMessage
	for page := 0; page < maxReplyPages; page++ {
		msgs, more, cursor, err := a.api.GetConversationRepliesContext(ctx, params)
		if err != nil {
			return nil, fmt.Errorf("slack conversations.replies %s/%s: %w", at.ChatID, at.ThreadID, err)
		}
		for _, m := range msgs {
			if m.Timestamp == "" || !tsBefore(m.Timestamp, at.MessageID) || m.SubType == "thread_broadcast_deleted" {
				continue
			}
			fromBot := m.BotID != "" || (botID != "" && m.User == botID)
			tm := channels.ThreadMessage{SenderID: m.User, Text: stripMention(m.Text, botID), At: a.tsTime(m.Timestamp), FromBot: fromBot}
			tm.Admitted = fromBot || a.opts.Access.Admit(at.ChatType, at.ChatID, m.User, true)
			switch {
			case fromBot:
				tm.SenderName = "Herald"
			case m.User != "":
				tm.SenderName = a.userName(ctx, m.User)
			default:
				tm.SenderName = m.Username
			}
			out = append(out, tm)
		}
		out = channels.LastN(out, n)
		if !more || cursor == "" {
			break
		}
		params.Cursor = cursor
	}
	return out, nil
}

// tsBefore reports whether Slack timestamp a is earlier than b. Both are
// "<seconds>.<6 digits>", so equal-length strings compare as numbers.
func tsBefore(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// userName is a user's display name (then real name, then the id), asked of
// users.info once per user and kept in a small cache.
func (a *Adapter) userName(ctx context.Context, userID string) string {
	if name, ok := a.names.Get(userID); ok {
		return name
	}
	u, err := a.api.GetUserInfoContext(ctx, userID)
	if err != nil || u == nil {
		a.log.Debug("slack users.info failed; the thread context names the user by id")
		return userID
	}
	name := u.Profile.DisplayName
	if name == "" {
		name = u.RealName
	}
	if name == "" {
		name = u.Name
	}
	if name == "" {
		name = userID
	}
	a.names.Put(userID, name)
	return name
}
