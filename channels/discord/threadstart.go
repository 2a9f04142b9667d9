package discord

import (
	"context"
	"errors"
	"fmt"

	"github.com/bwmarrin/discordgo"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
)

var _ channels.ThreadStarter = (*Adapter)(nil)

// maxThreadName is Discord's longest thread name.
const maxThreadName = 100

// StartThread implements channels.ThreadStarter (SPEC §24): t.Text is
// posted in the channel and a thread named t.Name is started from it (the
// thread's id is the message's, as for a top-level mention); the link is
// the thread's channel mention, which Discord shows as a link to it. A
// DM, or a channel where the bot may not start threads, gets ErrNoThreads.
func (a *Adapter) StartThread(ctx context.Context, in channels.Origin, t channels.NewThread) (channels.Thread, error) {
	if in.ChatType != channels.ChatGroup || in.ChatID == "" {
		return channels.Thread{}, fmt.Errorf("discord: a direct message: %w", channels.ErrNoThreads)
	}
	name := channels.ThreadName(t.Name, maxThreadName)
	p := post{Content: t.Text, AllowedMentions: noMentions}
	if t.Key != "" {
		// Posted again after a crash, the starter is the same message (and
		// its thread the same thread, as starting it again is fine).
		p.Nonce, p.EnforceNonce = nonce("thread:"+t.Key, 0), true
	}
	id, err := a.postMessage(ctx, in.ChatID, p)
	if err != nil {
		return channels.Thread{}, threadFailed("discord: post the starter of a thread in "+in.ChatID, classify(a.redact(err)), t.Key)
	}
	tctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	if _, err := a.s.MessageThreadStartComplex(in.ChatID, id, &discordgo.ThreadStart{Name: name, AutoArchiveDuration: 1440},
		discordgo.WithContext(tctx)); err != nil && !isCode(err, codeThreadAlreadyCreated) {
		err = classify(a.redact(err))
		if errors.Is(err, channels.ErrPermanent) {
			// Refused (no permission to start threads): the spawn runs in
			// the requester's thread, and the starter of a thread that
			// never was does not stay in the channel. Any other failure
			// (a timeout, a 5xx) may have started the thread: the starter
			// stays, and a retry with the key finds it and its thread.
			dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), sendTimeout)
			if derr := a.s.ChannelMessageDelete(in.ChatID, id, discordgo.WithContext(dctx)); derr != nil {
				a.log.Warn("discord: could not delete the starter of a thread that was not started", zap.String("channelId", in.ChatID), zap.Error(a.redact(derr)))
			}
			dcancel()
		}
		return channels.Thread{}, threadFailed("discord: start a thread in "+in.ChatID, err, t.Key)
	}
	a.markThread(ctx, id) // a thread the bot is in (§9)
	to := channels.Origin{Channel: Name, Account: in.Account, ChatID: in.ChatID, ChatType: in.ChatType, ThreadID: id}
	return channels.Thread{Origin: to, Link: "<#" + id + ">"}, nil
}

// threadFailed is the error of a StartThread step that failed with err:
// a refusal (a 4xx) wraps ErrNoThreads; any other failure, with a key to
// find the starter by (its nonce), wraps ErrThreadMaybeOpened.
func threadFailed(what string, err error, key string) error {
	if key != "" && !errors.Is(err, channels.ErrPermanent) {
		return fmt.Errorf("%s: %w: %w", what, err, channels.ErrThreadMaybeOpened)
	}
	return channels.ThreadRefused(what, err)
}
