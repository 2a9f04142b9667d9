package slack

import (
	"context"
	"errors"
	"fmt"

	"github.com/slack-go/slack"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
)

var _ channels.ThreadStarter = (*Adapter)(nil)

// StartThread implements channels.ThreadStarter (SPEC §24): t.Text is
// posted in the channel as a top-level message and its ts is the new
// thread; the link is the starter's permalink ("" if Slack gives none).
// Slack names no threads: t.Name is not used.
func (a *Adapter) StartThread(ctx context.Context, in channels.Origin, t channels.NewThread) (channels.Thread, error) {
	if in.ChatType != channels.ChatGroup {
		return channels.Thread{}, fmt.Errorf("slack: a direct message: %w", channels.ErrNoThreads)
	}
	to := in
	to.ThreadID, to.MessageID, to.SenderID, to.SenderName = "", "", "", ""
	ts, err := a.post(ctx, to, channels.Message{Kind: channels.KindSystem, Text: t.Text})
	if err != nil {
		var se slack.SlackErrorResponse
		if errors.As(err, &se) && permanentErrors[se.Err] {
			return channels.Thread{}, fmt.Errorf("slack: start a thread in %s: %w: %w", in.ChatID, err, channels.ErrNoThreads)
		}
		return channels.Thread{}, fmt.Errorf("slack: start a thread in %s: %w", in.ChatID, err)
	}
	to.ThreadID = ts
	a.threads.add(to.ChatID + "/" + ts) // a thread the bot is in (§9)
	link, err := a.api.GetPermalinkContext(ctx, &slack.PermalinkParameters{Channel: to.ChatID, Ts: ts})
	if err != nil {
		a.log.Debug("slack: no permalink for a new thread", zap.Error(err))
		link = ""
	}
	return channels.Thread{Origin: to, Link: link}, nil
}
