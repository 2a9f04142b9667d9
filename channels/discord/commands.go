package discord

import (
	"context"
	"errors"
	"strings"

	"github.com/bwmarrin/discordgo"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
)

// Commands are Herald's chat commands (SPEC §8) as Discord application
// commands. Each takes one optional string option, "args", the rest of the
// command line: /subagents args:"log 1 50" is the text "/subagents log 1 50".
var Commands = []struct{ Name, Description string }{
	{"subagents", "Sub-agents of this conversation: list, stop, log, info, send"},
	{"stop", "Stop the current turn and every sub-agent it started"},
	{"new", "Start a fresh session for this conversation"},
	{"reset", "Start a fresh session for this conversation"},
	{"status", "Show this conversation's status"},
	{"help", "List the chat commands"},
	{"approve", "Approve a request: the code"},
	{"deny", "Deny a request: the code"},
	{"compact", "Compact this session's history now"},
	{"model", "Show or set this conversation's model"},
	{"think", "Show or set thinking: off, low, medium, high"},
	{"schedule", "Schedules of this conversation"},
	{"usage", "Spend of this conversation"},
	{"memory", "The agent's memories of this conversation; forget <id>"},
	{"focus", "Talk to a sub-agent in this thread: its id, # or label"},
	{"unfocus", "This thread talks to the agent again"},
}

// optionArgs is the name of the one option of every command.
const optionArgs = "args"

// registerCommands replaces the application's global commands with
// Herald's (bulk overwrite, so a restart does not add duplicates).
func (a *Adapter) registerCommands(ctx context.Context) error {
	a.mu.Lock()
	app := a.appID
	a.mu.Unlock()
	if app == "" {
		return errors.New("no application id (set channels.discord.applicationId)")
	}
	cmds := make([]*discordgo.ApplicationCommand, 0, len(Commands))
	for _, c := range Commands {
		cmds = append(cmds, &discordgo.ApplicationCommand{Name: c.Name, Description: c.Description,
			Type: discordgo.ChatApplicationCommand, Options: []*discordgo.ApplicationCommandOption{{
				Type: discordgo.ApplicationCommandOptionString, Name: optionArgs, Description: "arguments, as after the command in chat",
			}}})
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	_, err := a.s.ApplicationCommandBulkOverwrite(app, "", cmds, discordgo.WithContext(ctx))
	return a.redact(err)
}

// interaction turns an application command into the chat command text and
// gives it to the gateway like a message that mentions the bot, keyed by
// the interaction's id (its Origin.MessageID: an interaction has no
// message). The interaction is answered only once the gateway took it,
// with the command line (the command's reply follows as a message in the
// channel); when the gateway refuses it (store away, busy, shutting down)
// the answer is an ephemeral "try again". Discord waits three seconds for
// the answer, and the gateway takes a command without waiting on the
// store.
func (a *Adapter) interaction(ctx context.Context, i *discordgo.Interaction) {
	if i.Type != discordgo.InteractionApplicationCommand {
		return
	}
	data := i.ApplicationCommandData()
	text := "/" + data.Name
	for _, o := range data.Options {
		if o != nil && o.Name == optionArgs && o.Type == discordgo.ApplicationCommandOptionString {
			if v := strings.TrimSpace(o.StringValue()); v != "" {
				text += " " + v
			}
		}
	}
	var user *discordgo.User
	if i.Member != nil && i.Member.User != nil {
		user = i.Member.User
	} else {
		user = i.User
	}
	if user == nil {
		return
	}
	o := channels.Origin{Channel: Name, ChatID: i.ChannelID, SenderID: user.ID, MessageID: i.ID}
	if i.GuildID == "" {
		o.ChatType = channels.ChatDM
	} else {
		o.ChatType = channels.ChatGroup
		if info, ok := a.channelInfo(ctx, i.ChannelID, i.GuildID); ok && info.thread && info.parentID != "" {
			o.ChatID, o.ThreadID = info.parentID, i.ChannelID
		}
	}
	if !a.opts.Access.Admit(o.ChatType, o.ChatID, o.SenderID, true) {
		a.log.Debug("discord command not admitted", zap.String("origin", o.String()), zap.String("senderId", o.SenderID))
		a.answer(ctx, i, data.Name, ephemeral("⛔ Herald does not take commands from you here."))
		return
	}
	name := user.GlobalName
	if i.Member != nil && i.Member.Nick != "" {
		name = i.Member.Nick
	}
	if name == "" {
		name = user.Username
	}
	a.mu.Lock()
	sink := a.sink
	a.mu.Unlock()
	in := channels.Inbound{Origin: o, SenderName: name, Text: text, Mentioned: true, At: snowflakeTime(i.ID)}
	if err := sink(ctx, in); err != nil {
		a.log.Warn("discord command not taken", zap.String("origin", o.String()), zap.String("interactionId", i.ID), zap.Error(err))
		a.answer(ctx, i, data.Name, ephemeral("⚠️ Herald could not take "+text+" just now. Please try again in a moment."))
		return
	}
	a.answer(ctx, i, data.Name, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseChannelMessageWithSource,
		Data: &discordgo.InteractionResponseData{Content: text, AllowedMentions: noMentions}})
}

// ephemeral is an answer only the person who used the command sees.
func ephemeral(text string) *discordgo.InteractionResponse {
	return &discordgo.InteractionResponse{Type: discordgo.InteractionResponseChannelMessageWithSource,
		Data: &discordgo.InteractionResponseData{Content: text, Flags: discordgo.MessageFlagsEphemeral, AllowedMentions: noMentions}}
}

// answer sends the interaction's one answer.
func (a *Adapter) answer(ctx context.Context, i *discordgo.Interaction, command string, r *discordgo.InteractionResponse) {
	rctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	if err := a.s.InteractionRespond(i, r, discordgo.WithContext(rctx)); err != nil {
		a.log.Warn("discord: could not answer an interaction", zap.String("command", command), zap.Error(a.redact(err)))
	}
}
