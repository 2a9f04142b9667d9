package slack

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/slack-go/slack"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
)

var _ channels.ThreadStarter = (*Adapter)(nil)

// StartThread implements channels.ThreadStarter (SPEC §24): t.Text is
// posted in the channel as a top-level message and its ts is the new
// thread; the link is the starter's permalink ("" if Slack gives none).
// Slack names no threads: t.Name is not used. With t.Retry, a starter
// with t.Key found in the channel's recent history is the thread.
func (a *Adapter) StartThread(ctx context.Context, in channels.Origin, t channels.NewThread) (channels.Thread, error) {
	if in.ChatType != channels.ChatGroup {
		return channels.Thread{}, fmt.Errorf("slack: a direct message: %w", channels.ErrNoThreads)
	}
	to := in
	to.ThreadID, to.MessageID, to.SenderID, to.SenderName = "", "", "", ""
	starter := channels.Message{Kind: channels.KindSystem, Text: t.Text}
	if t.Key != "" {
		// The starter carries the thread's key in its metadata (as an
		// outbox post carries its item), so a retry after a crash finds
		// the thread in the channel instead of opening another.
		starter.ID, starter.Part, starter.Parts = "thread:"+t.Key, 1, 1
	}
	var ts string
	var err error
	if t.Retry && starter.ID != "" {
		var found bool
		if ts, found, err = a.FindPart(ctx, to, starter); err != nil {
			return channels.Thread{}, threadFailed("slack: look for a thread opened before in "+in.ChatID, err, t.Key)
		}
		if !found {
			ts = ""
		}
	}
	if ts == "" {
		ts, err = a.post(ctx, to, starter)
	}
	if err != nil {
		return channels.Thread{}, threadFailed("slack: start a thread in "+in.ChatID, err, t.Key)
	}
	to.ThreadID = ts
	a.threads.add(to.ChatID + "/" + ts) // a thread the bot is in (§9)
	// The thread exists now: its link is asked for even when the caller
	// is being stopped, so the thread is recorded with it.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	link, err := a.api.GetPermalinkContext(lctx, &slack.PermalinkParameters{Channel: to.ChatID, Ts: ts})
	if err != nil {
		a.log.Debug("slack: no permalink for a new thread", zap.Error(err))
		link = ""
	}
	return channels.Thread{Origin: to, Link: link}, nil
}

// threadFailed is the error of a StartThread step that failed with err:
// a permanent Slack error (permanentErrors: no such channel, not in it, no
// permission) is a refusal and wraps ErrNoThreads; any other failure (a
// timeout, a 5xx, a network error, a lost answer) may have left the
// starter posted, and with a key (the starter's metadata, which a retry
// finds with FindPart) wraps ErrThreadMaybeOpened: the thread stays
// pending and the next try finds that starter.
func threadFailed(what string, err error, key string) error {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) && permanentErrors[se.Err] {
		return fmt.Errorf("%s: %w: %w", what, err, channels.ErrNoThreads)
	}
	if key != "" {
		return fmt.Errorf("%s: %w: %w", what, err, channels.ErrThreadMaybeOpened)
	}
	return fmt.Errorf("%s: %w", what, err)
}
