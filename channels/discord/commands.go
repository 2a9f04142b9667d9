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
// gives it to the gateway like a message that mentions the bot. The
// interaction is answered at once (Discord waits three seconds) with the
// command line; the command's reply follows as a message in the channel.
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
	o := channels.Origin{Channel: Name, ChatID: i.ChannelID, SenderID: user.ID}
	if i.GuildID == "" {
		o.ChatType = channels.ChatDM
	} else {
		o.ChatType = channels.ChatGroup
		if info, ok := a.channelInfo(ctx, i.ChannelID, i.GuildID); ok && info.thread && info.parentID != "" {
			o.ChatID, o.ThreadID = info.parentID, i.ChannelID
		}
	}
	admitted := a.opts.Access.Admit(o.ChatType, o.ChatID, o.SenderID, true)
	answer := &discordgo.InteractionResponse{Type: discordgo.InteractionResponseChannelMessageWithSource,
		Data: &discordgo.InteractionResponseData{Content: text, AllowedMentions: noMentions}}
	if !admitted {
		answer.Data = &discordgo.InteractionResponseData{Content: "⛔ Herald does not take commands from you here.",
			Flags: discordgo.MessageFlagsEphemeral, AllowedMentions: noMentions}
	}
	rctx, cancel := context.WithTimeout(ctx, sendTimeout)
	err := a.s.InteractionRespond(i, answer, discordgo.WithContext(rctx))
	cancel()
	if err != nil {
		a.log.Warn("discord: could not answer an interaction", zap.String("command", data.Name), zap.Error(a.redact(err)))
	}
	if !admitted {
		a.log.Debug("discord command not admitted", zap.String("origin", o.String()), zap.String("senderId", o.SenderID))
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
		a.log.Warn("discord command not taken", zap.String("origin", o.String()), zap.Error(err))
	}
}
