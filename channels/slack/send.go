package slack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
)

// maxInlineWait is the longest rate-limit wait Send sleeps through itself
// (once); longer waits go back to the caller as *channels.RetryAfterError.
const maxInlineWait = 2 * time.Second

// textProgressTTL is how long a partly sent message without a RunID is
// remembered for a retry to continue it.
const textProgressTTL = 15 * time.Minute

// permanentErrors are chat.postMessage errors that a retry cannot fix.
var permanentErrors = map[string]bool{
	"channel_not_found":       true,
	"not_in_channel":          true,
	"is_archived":             true,
	"msg_too_long":            true,
	"invalid_auth":            true,
	"not_authed":              true,
	"account_inactive":        true,
	"token_revoked":           true,
	"missing_scope":           true,
	"no_text":                 true,
	"restricted_action":       true,
	"invalid_arguments":       true,
	"thread_not_found":        true,
	"ekm_access_denied":       true,
	"team_access_not_granted": true,
}

// Send posts msg to the origin's channel, in its thread when ThreadID is
// set. Long text is split at the Slack limit and posted part by part; if a
// part fails, the error is returned and a retry of the same message (same
// RunID, or the same text to the same place) continues with that part.
// A message with a RunID whose parts were all posted is not posted again.
func (a *Adapter) Send(ctx context.Context, to channels.Origin, msg channels.Message) error {
	if to.ChatID == "" {
		return fmt.Errorf("slack send: origin has no chat id: %w", channels.ErrPermanent)
	}
	if strings.TrimSpace(msg.Text) == "" {
		return nil
	}
	parts := channels.Split(msg.Text, channels.LimitSlack)
	key, ttl := progressKey(to, msg)
	start := a.progress.get(key, a.now(), ttl)
	if start >= len(parts) {
		a.log.Debug("slack send skipped, already posted", zap.String("runId", msg.RunID), zap.String("origin", to.String()))
		return nil
	}
	for i := start; i < len(parts); i++ {
		if err := a.post(ctx, to, parts[i]); err != nil {
			return fmt.Errorf("slack send part %d/%d to %s: %w", i+1, len(parts), to, err)
		}
		a.progress.set(key, i+1, a.now())
	}
	if msg.RunID == "" {
		a.progress.delete(key)
	}
	if to.ThreadID != "" {
		a.threads.add(to.ChatID + "/" + to.ThreadID)
	}
	return nil
}

func progressKey(to channels.Origin, msg channels.Message) (string, time.Duration) {
	where := to.ChatID + "/" + to.ThreadID
	if msg.RunID != "" {
		return "run:" + msg.RunID + "@" + where, 0
	}
	sum := sha256.Sum256([]byte(string(msg.Kind) + "\x00" + msg.Text))
	return "text:" + hex.EncodeToString(sum[:12]) + "@" + where, textProgressTTL
}

// post sends one part with chat.postMessage, sleeping through one short
// rate-limit wait.
func (a *Adapter) post(ctx context.Context, to channels.Origin, text string) error {
	opts := []slack.MsgOption{slack.MsgOptionText(text, false)}
	if to.ThreadID != "" {
		opts = append(opts, slack.MsgOptionTS(to.ThreadID))
	}
	for attempt := 0; ; attempt++ {
		_, _, err := a.api.PostMessageContext(ctx, to.ChatID, opts...)
		if err == nil {
			return nil
		}
		var rl *slack.RateLimitedError
		if errors.As(err, &rl) {
			wait := max(rl.RetryAfter, time.Second)
			if attempt == 0 && wait <= maxInlineWait {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return fmt.Errorf("chat.postMessage: %w", ctx.Err())
				case <-t.C:
				}
				continue
			}
			return &channels.RetryAfterError{After: wait, Err: fmt.Errorf("chat.postMessage: %w", err)}
		}
		var se slack.SlackErrorResponse
		if errors.As(err, &se) && permanentErrors[se.Err] {
			return fmt.Errorf("chat.postMessage: %w: %w", err, channels.ErrPermanent)
		}
		return fmt.Errorf("chat.postMessage: %w", err)
	}
}
