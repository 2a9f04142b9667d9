package slack

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/slack-go/slack"

	"github.com/heraldhq/herald/channels"
)

// DraftEvery: chat.update is a Tier 3 method (about 50 a minute).
func (a *Adapter) DraftEvery() time.Duration { return 1200 * time.Millisecond }

// Draft shows the reply written so far in the thread: the first draft is
// posted, the next ones edit it with chat.update (SPEC §16).
func (a *Adapter) Draft(ctx context.Context, to channels.Origin, ref, text string) (string, error) {
	if r := []rune(text); len(r) > Limit {
		text = string(r[:Limit-1]) + "…"
	}
	if ref != "" {
		err := a.update(ctx, to, ref, channels.Message{Text: text})
		if !errors.Is(err, errNoSuchMessage) {
			return ref, err
		}
	}
	return a.post(ctx, to, channels.Message{Text: text})
}

var errNoSuchMessage = errors.New("slack: message to update not found")

// update replaces the text (and, for an outbox part, the metadata that
// FindPart looks for) of the bot's message ts.
func (a *Adapter) update(ctx context.Context, to channels.Origin, ts string, msg channels.Message) error {
	opts := []slack.MsgOption{slack.MsgOptionText(msg.Text, false)}
	if msg.ID != "" {
		opts = append(opts, slack.MsgOptionMetadata(slack.SlackMetadata{EventType: metadataEvent,
			EventPayload: map[string]any{"outbox_id": msg.ID, "part": msg.Part}}))
	}
	_, _, _, err := a.api.UpdateMessageContext(ctx, to.ChatID, ts, opts...)
	if err == nil {
		return nil
	}
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		return &channels.RetryAfterError{After: max(rl.RetryAfter, time.Second), Err: fmt.Errorf("chat.update: %w", err)}
	}
	var se slack.SlackErrorResponse
	if errors.As(err, &se) && (se.Err == "message_not_found" || se.Err == "cant_update_message" || se.Err == "edit_window_closed") {
		return errNoSuchMessage
	}
	return fmt.Errorf("chat.update: %w", err)
}
