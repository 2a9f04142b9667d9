package slack

import (
	"context"
	"fmt"

	"github.com/heraldhq/herald/channels"
)

// Check calls auth.test with the bot token and, in Socket Mode,
// apps.connections.open with the app token (the URL it returns is not
// dialled).
func (a *Adapter) Check(ctx context.Context) []channels.Check {
	auth, err := a.api.AuthTestContext(ctx)
	if err != nil {
		fix := "check channels.slack.botToken (the Bot User OAuth Token, xoxb-…)"
		if channels.Unreachable(err) {
			fix = "cannot reach " + a.opts.APIURL + ": check the network, a proxy, or channels.slack.apiUrl"
		}
		return []channels.Check{{Name: "slack auth.test", Status: channels.CheckFail, Detail: err.Error(), Fix: fix}}
	}
	out := []channels.Check{{Name: "slack auth.test", Status: channels.CheckOK,
		Detail: fmt.Sprintf("bot %s (%s) in team %s (%s)", auth.User, auth.UserID, auth.Team, auth.TeamID)}}
	if a.opts.Mode == ModeHTTP {
		return out
	}
	if _, _, err := a.api.StartSocketModeContext(ctx); err != nil {
		return append(out, channels.Check{Name: "slack apps.connections.open", Status: channels.CheckFail, Detail: err.Error(),
			Fix: "check channels.slack.appToken (an App-Level Token with connections:write, xapp-…) and that Socket Mode is enabled for the app"})
	}
	return append(out, channels.Check{Name: "slack apps.connections.open", Status: channels.CheckOK, Detail: "Socket Mode connection URL granted"})
}
