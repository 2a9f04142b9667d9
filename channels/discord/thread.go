package discord

import (
	"context"
	"fmt"
	"slices"

	"github.com/bwmarrin/discordgo"

	"github.com/heraldhq/herald/channels"
)

var _ channels.ThreadReader = (*Adapter)(nil)

// ThreadHistory implements channels.ThreadReader (SPEC §21): up to
// threadContext messages of the thread before at.MessageID, oldest first,
// from GET channels/{thread}/messages?before=, headed by the message the
// thread was started from (it sits in the parent channel under the
// thread's id) when there is room.
func (a *Adapter) ThreadHistory(ctx context.Context, at channels.Origin) ([]channels.ThreadMessage, error) {
	n := a.opts.ThreadContext
	if n <= 0 || !at.MidThread() {
		return nil, nil
	}
	msgs, err := a.s.ChannelMessages(at.ThreadID, min(n, 100), at.MessageID, "", "", discordgo.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("discord: thread history of %s: %w", at.ThreadID, a.redact(err))
	}
	if len(msgs) < n && at.ChatID != "" {
		if first, err := a.s.ChannelMessage(at.ChatID, at.ThreadID, discordgo.WithContext(ctx)); err == nil {
			msgs = append(msgs, first)
		}
	}
	slices.SortFunc(msgs, func(x, y *discordgo.Message) int { return compareIDs(x.ID, y.ID) })
	self := a.Self()
	var out []channels.ThreadMessage
	for _, m := range msgs {
		if m.Author == nil || compareIDs(m.ID, at.MessageID) >= 0 {
			continue
		}
		switch m.Type {
		case discordgo.MessageTypeDefault, discordgo.MessageTypeReply:
		default:
			continue
		}
		tm := channels.ThreadMessage{SenderID: m.Author.ID, Text: m.Content, At: m.Timestamp, FromBot: m.Author.ID == self.ID}
		if tm.FromBot {
			tm.SenderName = "Herald"
		} else {
			tm.SenderName = displayName(m.Author, m.Member)
			if text, mentioned := addressed(m, self.ID); mentioned {
				tm.Text = text
			}
		}
		out = append(out, tm)
	}
	return channels.LastN(out, n), nil
}

// displayName is the name a person shows in a guild (nick), else their
// global name, else their username.
func displayName(u *discordgo.User, m *discordgo.Member) string {
	if m != nil && m.Nick != "" {
		return m.Nick
	}
	if u.GlobalName != "" {
		return u.GlobalName
	}
	return u.Username
}
