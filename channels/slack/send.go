package slack

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackutilsx"

	"github.com/heraldhq/herald/channels"
)

// maxInlineWait is the longest rate-limit wait Send sleeps through itself
// (once); longer waits go back to the caller as *channels.RetryAfterError.
const maxInlineWait = 2 * time.Second

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
// set, split at the Slack limit. The outbox does not call it: it sends
// part by part with SendPart and keeps the progress itself.
func (a *Adapter) Send(ctx context.Context, to channels.Origin, msg channels.Message) error {
	parts := channels.Split(msg.Text, Limit)
	for i, part := range parts {
		m := msg
		m.Text, m.Part, m.Parts = part, i+1, len(parts)
		if _, err := a.SendPart(ctx, to, m); err != nil {
			return err
		}
	}
	return nil
}

// PartLimit implements channels.PartSender: Slack's 4000 characters.
func (a *Adapter) PartLimit() int { return Limit }

// metadataEvent is the event_type of the message metadata every post from
// the outbox carries (SPEC §12), so a post whose outcome is unknown after a
// crash can be found in the channel before it is sent again.
const metadataEvent = "herald_message"

// SendPart implements channels.PartSender: one chat.postMessage, with
// metadata {outbox_id, part} when the part comes from the outbox; the
// platform id is the posted message's ts.
func (a *Adapter) SendPart(ctx context.Context, to channels.Origin, msg channels.Message) (string, error) {
	if to.ChatID == "" {
		return "", fmt.Errorf("slack send: origin has no chat id: %w", channels.ErrPermanent)
	}
	if strings.TrimSpace(msg.Text) == "" {
		return "", nil
	}
	if msg.DraftRef != "" && msg.Part <= 1 {
		// The reply was shown as a draft while it was written: its first
		// part becomes that message (with the outbox metadata) instead of
		// a new one.
		switch err := a.update(ctx, to, msg.DraftRef, msg); {
		case err == nil:
			return msg.DraftRef, nil
		case !errors.Is(err, errNoSuchMessage):
			return "", fmt.Errorf("slack: finish the draft in %s: %w", to, err)
		}
	}
	ts, err := a.post(ctx, to, msg)
	if err != nil {
		return "", fmt.Errorf("slack send part %d/%d to %s: %w", msg.Part, msg.Parts, to, err)
	}
	if to.ThreadID != "" {
		a.threads.add(to.ChatID + "/" + to.ThreadID)
	}
	return ts, nil
}

// FindPart implements channels.PartFinder: it looks through the thread (or
// the channel's recent history) for a message of the bot whose metadata
// names this outbox item and part.
func (a *Adapter) FindPart(ctx context.Context, to channels.Origin, msg channels.Message) (string, bool, error) {
	if msg.ID == "" {
		return "", false, nil
	}
	var msgs []slack.Message
	if to.ThreadID != "" {
		replies, _, _, err := a.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
			ChannelID: to.ChatID, Timestamp: to.ThreadID, Limit: 200, IncludeAllMetadata: true})
		if err != nil {
			return "", false, fmt.Errorf("conversations.replies: %w", err)
		}
		msgs = replies
	} else {
		hist, err := a.api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{
			ChannelID: to.ChatID, Limit: 200, IncludeAllMetadata: true})
		if err != nil {
			return "", false, fmt.Errorf("conversations.history: %w", err)
		}
		msgs = hist.Messages
	}
	for _, m := range msgs {
		md := m.Metadata
		if md.EventType != metadataEvent {
			continue
		}
		if fmt.Sprint(md.EventPayload["outbox_id"]) == msg.ID && fmt.Sprint(md.EventPayload["part"]) == fmt.Sprint(msg.Part) {
			return m.Timestamp, true, nil
		}
	}
	return "", false, nil
}

// post sends one part with chat.postMessage, sleeping through one short
// rate-limit wait.
func (a *Adapter) post(ctx context.Context, to channels.Origin, msg channels.Message) (string, error) {
	opts := []slack.MsgOption{slack.MsgOptionText(msg.Text, false)}
	if to.ThreadID != "" {
		opts = append(opts, slack.MsgOptionTS(to.ThreadID))
	}
	if msg.ID != "" {
		opts = append(opts, slack.MsgOptionMetadata(slack.SlackMetadata{EventType: metadataEvent,
			EventPayload: map[string]any{"outbox_id": msg.ID, "part": msg.Part}}))
	}
	for attempt := 0; ; attempt++ {
		_, ts, err := a.api.PostMessageContext(ctx, to.ChatID, opts...)
		if err == nil {
			return ts, nil
		}
		var rl *slack.RateLimitedError
		if errors.As(err, &rl) {
			wait := max(rl.RetryAfter, time.Second)
			if attempt == 0 && wait <= maxInlineWait {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return "", fmt.Errorf("chat.postMessage: %w", ctx.Err())
				case <-t.C:
				}
				continue
			}
			return "", &channels.RetryAfterError{After: wait, Err: fmt.Errorf("chat.postMessage: %w", err)}
		}
		var se slack.SlackErrorResponse
		if errors.As(err, &se) && permanentErrors[se.Err] {
			return "", fmt.Errorf("chat.postMessage: %w: %w", err, channels.ErrPermanent)
		}
		return "", fmt.Errorf("chat.postMessage: %w", err)
	}
}

// verbatimChunk is the most characters of escaped text one code block of
// Verbatim holds, so a block always fits a part (Limit) and the
// outbox never splits inside one.
const verbatimChunk = 3000

// Verbatim renders text so Slack shows it literally: each line in its own
// code block (no bold, italics, strike-through or links), with Slack's
// control characters escaped (&amp; &lt; &gt;, so `<url|label>`,
// `<!channel>` and `<@U…>` stay text), backticks written as `\u0060` so
// nothing can close the block, and long lines cut into several blocks that
// each fit a message part. Meant for JSON (a tool call's arguments), where
// `\u0060` means the same character.
func Verbatim(text string) string {
	var blocks []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.ReplaceAll(line, "`", `\u0060`)
		var chunk strings.Builder
		n := 0
		for _, r := range line {
			e := slackutilsx.EscapeMessage(string(r))
			if n+len(e) > verbatimChunk {
				blocks = append(blocks, "```"+chunk.String()+"```")
				chunk.Reset()
				n = 0
			}
			chunk.WriteString(e)
			n += len(e) // bytes: at least the characters
		}
		if n > 0 {
			blocks = append(blocks, "```"+chunk.String()+"```")
		} else {
			blocks = append(blocks, "")
		}
	}
	return strings.Join(blocks, "\n")
}
