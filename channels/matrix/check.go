package matrix

import (
	"context"
	"fmt"

	"github.com/heraldhq/herald/channels"
)

// Check verifies the credentials (whoami with the access token; with a
// password, a login whose new device is logged out again) and runs one
// /sync with timeout 0, as the first sync at start does.
func (a *Adapter) Check(ctx context.Context) []channels.Check {
	if err := a.login(ctx, a.opts.DeviceID); err != nil {
		fix := "check channels.matrix.userId and accessToken (or password)"
		if channels.Unreachable(err) {
			fix = "cannot reach " + a.opts.Homeserver + ": check the network or channels.matrix.homeserver"
		}
		return []channels.Check{{Name: "matrix login", Status: channels.CheckFail, Detail: err.Error(), Fix: fix}}
	}
	if a.opts.AccessToken == "" {
		defer func() { _, _ = a.client.Logout(context.WithoutCancel(ctx)) }()
	}
	how := "whoami"
	if a.opts.AccessToken == "" {
		how = "password login"
	}
	out := []channels.Check{{Name: "matrix " + how, Status: channels.CheckOK, Detail: fmt.Sprintf("%s on %s", a.client.UserID, a.opts.Homeserver)}}
	resp, err := a.client.SyncRequest(ctx, 0, "", "", false, "")
	if err != nil {
		return append(out, channels.Check{Name: "matrix sync", Status: channels.CheckFail, Detail: err.Error(),
			Fix: "the homeserver refused /sync: check that it is reachable and the account is not locked"})
	}
	out = append(out, channels.Check{Name: "matrix sync", Status: channels.CheckOK,
		Detail: fmt.Sprintf("%d joined rooms, %d invites", len(resp.Rooms.Join), len(resp.Rooms.Invite))})
	return append(out, a.cryptoChecks(ctx)...)
}
