package discord

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/bwmarrin/discordgo"

	"github.com/heraldhq/herald/channels"
)

// Check asks GET users/@me with the bot token and GET gateway/bot (the
// gateway URL and how many session starts are left today); the gateway is
// not dialled.
func (a *Adapter) Check(ctx context.Context) []channels.Check {
	me, err := a.s.User("@me", discordgo.WithContext(ctx))
	if err != nil {
		fix := "check channels.discord.botToken (the bot's token from the Developer Portal, Bot tab)"
		if channels.Unreachable(err) {
			fix = "cannot reach " + a.opts.APIURL + ": check the network, a proxy, or channels.discord.apiUrl"
		}
		return []channels.Check{{Name: "discord users/@me", Status: channels.CheckFail, Detail: a.redact(err).Error(), Fix: fix}}
	}
	out := []channels.Check{{Name: "discord users/@me", Status: channels.CheckOK, Detail: fmt.Sprintf("bot %s (id %s)", me.Username, me.ID)}}
	body, err := a.s.RequestWithBucketID("GET", discordgo.EndpointGatewayBot, nil, discordgo.EndpointGatewayBot, discordgo.WithContext(ctx))
	c := channels.Check{Name: "discord gateway/bot", Status: channels.CheckOK}
	var gw struct {
		URL   string `json:"url"`
		Limit struct {
			Total     int `json:"total"`
			Remaining int `json:"remaining"`
		} `json:"session_start_limit"`
	}
	switch {
	case err != nil:
		c.Status, c.Detail = channels.CheckFail, a.redact(err).Error()
	case json.Unmarshal(body, &gw) != nil || gw.URL == "":
		c.Status, c.Detail = channels.CheckFail, "no gateway URL in the answer"
	case gw.Limit.Total > 0 && gw.Limit.Remaining == 0:
		c.Status, c.Detail = channels.CheckWarn, "gateway "+gw.URL+"; no session starts left today"
		c.Fix = "wait for Discord's daily reset (session_start_limit) before restarting Herald"
	default:
		c.Detail = fmt.Sprintf("gateway %s; %d of %d session starts left today", gw.URL, gw.Limit.Remaining, gw.Limit.Total)
	}
	return append(out, c)
}
