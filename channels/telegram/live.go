package telegram

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/heraldhq/herald/channels"
)

// Typing sends the "typing" chat action into the chat and topic; Telegram
// shows it for five seconds or until the bot's next message, so "off" has
// nothing to send.
func (a *Adapter) Typing(ctx context.Context, to channels.Origin, on bool) error {
	if !on {
		return nil
	}
	chatID, err := strconv.ParseInt(to.ChatID, 10, 64)
	if err != nil {
		return fmt.Errorf("telegram: typing in %s: chat id %q is not a number: %w", to, to.ChatID, channels.ErrPermanent)
	}
	p := tgbotapi.Params{"action": "typing"}
	p.AddNonZero64("chat_id", chatID)
	p.AddNonEmpty("message_thread_id", to.ThreadID)
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	if _, err := a.bot(ctx).MakeRequest("sendChatAction", p); err != nil {
		return classify(a.redact(err))
	}
	return nil
}

// DraftEvery: Telegram allows about one message (or edit) a second in a chat.
func (a *Adapter) DraftEvery() time.Duration { return time.Second }

// Draft shows the reply written so far: the first draft is a message, the
// next ones edit it (SPEC §16). A draft longer than one message shows its
// first 4096 characters; the final delivery continues in new messages.
func (a *Adapter) Draft(ctx context.Context, to channels.Origin, ref, text string) (string, error) {
	chatID, err := strconv.ParseInt(to.ChatID, 10, 64)
	if err != nil {
		return ref, fmt.Errorf("telegram: draft in %s: chat id %q is not a number: %w", to, to.ChatID, channels.ErrPermanent)
	}
	if r := []rune(text); len(r) > Limit {
		text = string(r[:Limit-1]) + "…"
	}
	if ref != "" {
		switch err := a.editText(ctx, chatID, ref, text); {
		case err == nil, errors.Is(err, errNotModified):
			return ref, nil
		case !errors.Is(err, errNoSuchMessage):
			return ref, err
		}
		// The draft was deleted: start a new one.
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	return a.sendPart(ctx, chatID, to.ThreadID, text)
}

var (
	errNotModified   = errors.New("telegram: message is not modified")
	errNoSuchMessage = errors.New("telegram: message to edit not found")
)

// editText replaces the text of the bot's message ref in chatID.
func (a *Adapter) editText(ctx context.Context, chatID int64, ref, text string) error {
	id, err := strconv.Atoi(ref)
	if err != nil {
		return fmt.Errorf("telegram: edit: message id %q is not a number: %w", ref, errNoSuchMessage)
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	p := tgbotapi.Params{"text": text}
	p.AddNonZero64("chat_id", chatID)
	p.AddNonZero("message_id", id)
	_, err = a.bot(ctx).MakeRequest("editMessageText", p)
	if err == nil {
		return nil
	}
	var te *tgbotapi.Error
	if errors.As(err, &te) && te.Code == 400 {
		switch msg := strings.ToLower(te.Message); {
		case strings.Contains(msg, "not modified"):
			return errNotModified
		case strings.Contains(msg, "not found"), strings.Contains(msg, "can't be edited"):
			return errNoSuchMessage
		}
	}
	return classify(a.redact(err))
}

// finishDraft turns the draft ref into the first part of the final reply;
// done is false when there is no draft to edit (deleted), and the part is
// to be sent as a new message.
func (a *Adapter) finishDraft(ctx context.Context, chatID int64, ref, text string) (done bool, err error) {
	switch err := a.editText(ctx, chatID, ref, text); {
	case err == nil, errors.Is(err, errNotModified):
		return true, nil
	case errors.Is(err, errNoSuchMessage):
		return false, nil
	default:
		return false, err
	}
}
