// Package discord is the Discord channel (SPEC §21): the gateway websocket
// through github.com/bwmarrin/discordgo (pinned v0.29.0), REST under
// <apiUrl>api/v10/.
//
// discordgo builds its REST URLs from package variables (API v9 at
// discord.com); the adapter rewrites them per session to apiUrl and v10,
// and its GET gateway to GET gateway/bot. discordgo keeps the session id
// and sequence inside its Session and resumes only within one process;
// after a restart every channel with a cursor (the last message id
// handled, kept in the store) is caught up with GET
// channels/{id}/messages?after=. Threads: a top-level mention in a guild
// channel is answered in a thread started from that message (its id is
// the message's). discordgo's debug log prints the token: it stays off.
package discord
