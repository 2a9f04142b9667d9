package discord

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/heraldhq/herald/channels"
)

// Discord's JSON error codes the adapter acts on.
const (
	codeUnknownChannel       = 10003
	codeUnknownMessage       = 10008
	codeThreadAlreadyCreated = 160004
)

// post is the body of POST channels/{id}/messages. discordgo's MessageSend
// has no nonce, so the adapter sends its own.
type post struct {
	Content         string                            `json:"content"`
	Nonce           string                            `json:"nonce,omitempty"`
	EnforceNonce    bool                              `json:"enforce_nonce,omitempty"`
	AllowedMentions *discordgo.MessageAllowedMentions `json:"allowed_mentions"`
	Attachments     []map[string]any                  `json:"attachments,omitempty"`
	Reference       *discordgo.MessageReference       `json:"message_reference,omitempty"`
}

// noMentions: text from the model never pings anyone (@everyone, roles,
// users).
var noMentions = &discordgo.MessageAllowedMentions{Parse: []discordgo.AllowedMentionType{}}

// Send posts msg to the origin's channel or thread, split at 2000
// characters with the stats line last.
func (a *Adapter) Send(ctx context.Context, to channels.Origin, msg channels.Message) error {
	if strings.TrimSpace(msg.Text) == "" {
		return nil
	}
	parts := channels.Split(msg.Text, Limit)
	for i, part := range parts {
		m := msg
		m.Text, m.Part, m.Parts = part, i+1, len(parts)
		if i > 0 {
			m.DraftRef = ""
		}
		if _, err := a.SendPart(ctx, to, m); err != nil {
			return err
		}
	}
	return nil
}

// PartLimit implements channels.PartSender: Discord's 2000 characters.
func (a *Adapter) PartLimit() int { return Limit }

// SendPart implements channels.PartSender: one message, with a nonce
// derived from the outbox item and part and enforce_nonce, so a re-send
// after an unknown outcome returns the message already posted instead of
// posting twice (Discord keeps nonces a few minutes).
func (a *Adapter) SendPart(ctx context.Context, to channels.Origin, msg channels.Message) (string, error) {
	if to.ChatID == "" {
		return "", fmt.Errorf("discord: send to %s: no channel id: %w", to, channels.ErrPermanent)
	}
	if strings.TrimSpace(msg.Text) == "" {
		return "", nil
	}
	target := target(to)
	if msg.DraftRef != "" && msg.Part <= 1 {
		// The reply was shown as a draft while it was written: its first
		// part becomes that message.
		switch err := a.edit(ctx, target, msg.DraftRef, msg.Text); {
		case err == nil:
			return msg.DraftRef, nil
		case !isCode(err, codeUnknownMessage):
			return "", fmt.Errorf("discord: finish the draft in %s: %w", to, classify(a.redact(err)))
		}
	}
	p := post{Content: msg.Text, AllowedMentions: noMentions}
	if key := firstOf(msg.ID, msg.RunID); key != "" {
		p.Nonce, p.EnforceNonce = nonce(key, msg.Part), true
	}
	id, err := a.postTo(ctx, to, p)
	if err != nil {
		return "", fmt.Errorf("discord: send part %d/%d to %s: %w", max(msg.Part, 1), max(msg.Parts, 1), to, err)
	}
	return id, nil
}

// nonce is the message nonce of part of an outbox item: at most 25
// characters, the same on every re-send.
func nonce(key string, part int) string {
	sum := sha256.Sum256([]byte("herald/" + key + "/" + strconv.Itoa(part)))
	return "h" + hex.EncodeToString(sum[:])[:24]
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// target is the Discord channel a message to o goes to: its thread, else
// its channel.
func target(o channels.Origin) string {
	if o.ThreadID != "" {
		return o.ThreadID
	}
	return o.ChatID
}

// postTo posts p to the origin's thread or channel; a thread not opened yet
// (a top-level mention's, whose id is the message's) is opened first.
func (a *Adapter) postTo(ctx context.Context, to channels.Origin, p post) (string, error) {
	id, err := a.postMessage(ctx, target(to), p)
	if err != nil && to.ThreadID != "" && isCode(err, codeUnknownChannel) {
		if terr := a.openThread(ctx, to); terr != nil {
			return "", terr
		}
		id, err = a.postMessage(ctx, target(to), p)
	}
	if err != nil {
		return "", classify(a.redact(err))
	}
	return id, nil
}

func (a *Adapter) postMessage(ctx context.Context, channelID string, p post) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	ep := discordgo.EndpointChannelMessages(channelID)
	body, err := a.s.RequestWithBucketID(http.MethodPost, ep, p, ep, discordgo.WithContext(ctx))
	if err != nil {
		return "", err
	}
	var m discordgo.Message
	if err := discordgo.Unmarshal(body, &m); err != nil {
		return "", fmt.Errorf("discord: undecodable message: %w", err)
	}
	return m.ID, nil
}

// openThread starts the thread of a top-level mention from its message
// (the thread's id is the message's). One already there is fine.
func (a *Adapter) openThread(ctx context.Context, to channels.Origin) error {
	a.mu.Lock()
	name := a.names[to.ThreadID]
	a.mu.Unlock()
	if name == "" {
		name = "Herald"
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	_, err := a.s.MessageThreadStartComplex(to.ChatID, to.ThreadID, &discordgo.ThreadStart{Name: name, AutoArchiveDuration: 1440},
		discordgo.WithContext(ctx))
	if err != nil && !isCode(err, codeThreadAlreadyCreated) {
		return fmt.Errorf("discord: open a thread on message %s in %s: %w", to.ThreadID, to.ChatID, classify(a.redact(err)))
	}
	a.markThread(ctx, to.ThreadID)
	return nil
}

// Typing shows "typing…" in the origin's thread or channel; Discord shows
// it ten seconds or until the bot's next message, so "off" sends nothing.
func (a *Adapter) Typing(ctx context.Context, to channels.Origin, on bool) error {
	if !on || to.ChatID == "" {
		return nil
	}
	typing := func() error {
		ctx, cancel := context.WithTimeout(ctx, sendTimeout)
		defer cancel()
		return a.s.ChannelTyping(target(to), discordgo.WithContext(ctx))
	}
	err := typing()
	if err != nil && to.ThreadID != "" && isCode(err, codeUnknownChannel) {
		if terr := a.openThread(ctx, to); terr != nil {
			return terr
		}
		err = typing()
	}
	if err != nil {
		return classify(a.redact(err))
	}
	return nil
}

// DraftEvery: Discord allows five messages (or edits) per five seconds in
// a channel.
func (a *Adapter) DraftEvery() time.Duration { return 1500 * time.Millisecond }

// Draft shows the reply written so far: the first draft is a message, the
// next ones edit it (SPEC §16). A draft longer than one message shows its
// first 2000 characters; the final delivery continues in new messages.
func (a *Adapter) Draft(ctx context.Context, to channels.Origin, ref, text string) (string, error) {
	if r := []rune(text); len(r) > Limit {
		text = string(r[:Limit-1]) + "…"
	}
	if strings.TrimSpace(text) == "" {
		return ref, nil
	}
	if ref != "" {
		err := a.edit(ctx, target(to), ref, text)
		if err == nil {
			return ref, nil
		}
		if !isCode(err, codeUnknownMessage) {
			return ref, classify(a.redact(err))
		}
		// The draft was deleted: start a new one.
	}
	return a.postTo(ctx, to, post{Content: text, AllowedMentions: noMentions})
}

func (a *Adapter) edit(ctx context.Context, channelID, messageID, text string) error {
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	_, err := a.s.ChannelMessageEditComplex(&discordgo.MessageEdit{ID: messageID, Channel: channelID, Content: &text,
		AllowedMentions: noMentions}, discordgo.WithContext(ctx))
	return err
}

// isCode reports whether err is Discord's JSON error with code.
func isCode(err error, code int) bool {
	var re *discordgo.RESTError
	return errors.As(err, &re) && re.Message != nil && re.Message.Code == code
}

// classify maps a REST error to Herald's retry semantics: 429 →
// *RetryAfterError (Discord's retry_after), other 4xx → ErrPermanent, 5xx
// and network errors stay transient.
func classify(err error) error {
	var rl *discordgo.RateLimitError
	if errors.As(err, &rl) {
		after := time.Second
		if rl.TooManyRequests != nil && rl.RetryAfter > 0 {
			after = rl.RetryAfter
		}
		// discordgo names the URL it built (api/v9 at discord.com), not
		// the one asked (see rewrite): name the route only.
		return &channels.RetryAfterError{After: after, Err: fmt.Errorf("discord 429 on %s", strings.TrimPrefix(rl.URL, discordgo.EndpointAPI))}
	}
	var re *discordgo.RESTError
	if errors.As(err, &re) && re.Response != nil {
		code := re.Response.StatusCode
		msg := strings.TrimSpace(string(re.ResponseBody))
		if re.Message != nil {
			msg = fmt.Sprintf("%s (code %d)", re.Message.Message, re.Message.Code)
		}
		switch {
		case code == http.StatusTooManyRequests:
			return &channels.RetryAfterError{After: time.Second, Err: fmt.Errorf("discord %d: %s", code, msg)}
		case code >= 500:
			return fmt.Errorf("discord %d: %s", code, msg)
		case code >= 400:
			return fmt.Errorf("discord %d: %s: %w", code, msg, channels.ErrPermanent)
		}
	}
	return err
}
