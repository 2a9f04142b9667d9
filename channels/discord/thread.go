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
// from GET channels/{thread}/messages?before=, paged back 100 at a time
// (Discord's cap; threadContext allows up to 200), headed by the message
// the thread was started from (it sits in the parent channel under the
// thread's id) when the thread's start was reached and there is room.
func (a *Adapter) ThreadHistory(ctx context.Context, at channels.Origin) ([]channels.ThreadMessage, error) {
	n := a.opts.ThreadContext
	if n <= 0 || !at.MidThread() {
		return nil, nil
	}
	var msgs []*discordgo.Message
	before, start := at.MessageID, false
	// Pages of other kinds of message (joins, pins) are skipped over, a
	// few pages at most.
	for page := 0; page < (n+99)/100+2 && len(msgs) < n; page++ {
		want := min(n-len(msgs), 100)
		got, err := a.s.ChannelMessages(at.ThreadID, want, before, "", "", discordgo.WithContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("discord: thread history of %s: %w", at.ThreadID, a.redact(err))
		}
		for _, m := range got {
			if compareIDs(m.ID, before) < 0 {
				before = m.ID
			}
			if said(m) && compareIDs(m.ID, at.MessageID) < 0 {
				msgs = append(msgs, m)
			}
		}
		if len(got) < want {
			start = true // Discord has nothing older in the thread
			break
		}
	}
	if start && len(msgs) < n && at.ChatID != "" {
		if first, err := a.s.ChannelMessage(at.ChatID, at.ThreadID, discordgo.WithContext(ctx)); err == nil && said(first) {
			msgs = append(msgs, first)
		}
	}
	slices.SortFunc(msgs, func(x, y *discordgo.Message) int { return compareIDs(x.ID, y.ID) })
	self := a.Self()
	var out []channels.ThreadMessage
	for _, m := range msgs {
		tm := channels.ThreadMessage{SenderID: m.Author.ID, Text: m.Content, At: m.Timestamp, FromBot: m.Author.ID == self.ID}
		tm.Admitted = tm.FromBot || a.opts.Access.Admit(at.ChatType, at.ChatID, m.Author.ID, true)
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

// said reports whether m is something a person or the bot said (not a
// join, a pin or a thread-created notice).
func said(m *discordgo.Message) bool {
	if m == nil || m.Author == nil {
		return false
	}
	switch m.Type {
	case discordgo.MessageTypeDefault, discordgo.MessageTypeReply:
		return true
	}
	return false
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
