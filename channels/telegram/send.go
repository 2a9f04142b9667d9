package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/heraldhq/herald/channels"
)

// Send posts msg to the origin's chat and forum topic as plain text, split
// at 4096 characters. After an error, a retry of the same message (same
// origin, RunID and text) continues with the first part not yet posted.
func (a *Adapter) Send(ctx context.Context, to channels.Origin, msg channels.Message) error {
	chatID, err := strconv.ParseInt(to.ChatID, 10, 64)
	if err != nil {
		return fmt.Errorf("telegram: send to %s: chat id %q is not a number: %w", to, to.ChatID, channels.ErrPermanent)
	}
	if to.ThreadID != "" {
		if _, err := strconv.Atoi(to.ThreadID); err != nil {
			return fmt.Errorf("telegram: send to %s: thread id %q is not a number: %w", to, to.ThreadID, channels.ErrPermanent)
		}
	}
	if strings.TrimSpace(msg.Text) == "" {
		return nil // Telegram rejects empty messages; nothing to say
	}
	// Outside the outbox (which sends part by part with SendPart and keeps
	// the progress), every part is sent in turn.
	parts := channels.Split(msg.Text, Limit)
	for i, part := range parts {
		if _, err := a.sendPart(ctx, chatID, to.ThreadID, part); err != nil {
			return fmt.Errorf("telegram: send part %d/%d to %s: %w", i+1, len(parts), to, err)
		}
	}
	return nil
}

// PartLimit implements channels.PartSender: Telegram's 4096 characters.
func (a *Adapter) PartLimit() int { return Limit }

// SendPart implements channels.PartSender: one sendMessage; the platform
// id is the message_id.
func (a *Adapter) SendPart(ctx context.Context, to channels.Origin, msg channels.Message) (string, error) {
	chatID, err := strconv.ParseInt(to.ChatID, 10, 64)
	if err != nil {
		return "", fmt.Errorf("telegram: send to %s: chat id %q is not a number: %w", to, to.ChatID, channels.ErrPermanent)
	}
	if to.ThreadID != "" {
		if _, err := strconv.Atoi(to.ThreadID); err != nil {
			return "", fmt.Errorf("telegram: send to %s: thread id %q is not a number: %w", to, to.ThreadID, channels.ErrPermanent)
		}
	}
	if strings.TrimSpace(msg.Text) == "" {
		return "", nil
	}
	if msg.DraftRef != "" && msg.Part <= 1 {
		// The reply was shown as a draft while it was written: its first
		// part becomes that message instead of a new one.
		done, err := a.finishDraft(ctx, chatID, msg.DraftRef, msg.Text)
		if err != nil {
			return "", fmt.Errorf("telegram: finish the draft in %s: %w", to, err)
		}
		if done {
			return msg.DraftRef, nil
		}
	}
	id, err := a.sendPart(ctx, chatID, to.ThreadID, msg.Text)
	if err != nil {
		return "", fmt.Errorf("telegram: send part %d/%d to %s: %w", msg.Part, msg.Parts, to, err)
	}
	return id, nil
}

func (a *Adapter) sendPart(ctx context.Context, chatID int64, threadID, text string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	p := tgbotapi.Params{"text": text}
	p.AddNonZero64("chat_id", chatID)
	p.AddNonEmpty("message_thread_id", threadID)
	resp, err := a.bot(ctx).MakeRequest("sendMessage", p)
	if err != nil {
		return "", classify(a.redact(err))
	}
	var m struct {
		MessageID int `json:"message_id"`
	}
	if resp != nil && json.Unmarshal(resp.Result, &m) == nil && m.MessageID != 0 {
		return strconv.Itoa(m.MessageID), nil
	}
	return "", nil
}

// classify maps a Bot API error to Herald's retry semantics: 429 →
// *RetryAfterError, other 4xx → ErrPermanent, 5xx and network errors stay
// transient.
func classify(err error) error {
	var te *tgbotapi.Error
	if !errors.As(err, &te) {
		return err
	}
	switch {
	case te.Code == http.StatusTooManyRequests || te.RetryAfter > 0:
		after := time.Duration(te.RetryAfter) * time.Second
		if after <= 0 {
			after = time.Second
		}
		return &channels.RetryAfterError{After: after, Err: fmt.Errorf("telegram %d: %s", te.Code, te.Message)}
	case te.Code >= 500:
		return fmt.Errorf("telegram %d: %s", te.Code, te.Message)
	case te.Code >= 400:
		return fmt.Errorf("telegram %d: %s: %w", te.Code, te.Message, channels.ErrPermanent)
	}
	return err
}
