package telegram

import (
	"context"
	"fmt"

	"github.com/heraldhq/herald/channels"
)

// Check calls getMe with the bot token and getWebhookInfo: in webhook mode
// the webhook Telegram has is compared with webhookUrl; when long polling,
// a webhook left behind is reported (Herald deletes it at start).
func (a *Adapter) Check(ctx context.Context) []channels.Check {
	me, err := a.bot(ctx).GetMe()
	if err != nil {
		fix := "check channels.telegram.botToken (from @BotFather)"
		if channels.Unreachable(err) {
			fix = "cannot reach the Bot API: check the network, a proxy, or channels.telegram.apiUrl"
		}
		return []channels.Check{{Name: "telegram getMe", Status: channels.CheckFail, Detail: a.redact(err).Error(), Fix: fix}}
	}
	out := []channels.Check{{Name: "telegram getMe", Status: channels.CheckOK, Detail: fmt.Sprintf("bot @%s (id %d)", me.UserName, me.ID)}}
	info, err := a.bot(ctx).GetWebhookInfo()
	c := channels.Check{Name: "telegram getWebhookInfo", Status: channels.CheckOK}
	switch {
	case err != nil:
		c.Status, c.Detail = channels.CheckFail, a.redact(err).Error()
	case a.opts.WebhookURL == "" && info.URL != "":
		c.Status = channels.CheckWarn
		c.Detail = "a webhook is set (" + info.URL + ") while Herald long-polls"
		c.Fix = "nothing if only Herald uses this bot: it deletes the webhook at start; otherwise another program receives its updates"
	case a.opts.WebhookURL == "":
		c.Detail = fmt.Sprintf("no webhook (long polling); %d updates waiting", info.PendingUpdateCount)
	case info.URL == a.opts.WebhookURL:
		c.Detail = "webhook set to " + info.URL
		if info.LastErrorMessage != "" {
			c.Status, c.Detail = channels.CheckWarn, c.Detail+"; Telegram's last delivery error: "+info.LastErrorMessage
			c.Fix = "make webhookUrl reachable from the internet over HTTPS and routed to Herald's " + a.opts.WebhookPath
		}
	default:
		c.Detail = fmt.Sprintf("webhook is %q, not webhookUrl %q yet (Herald sets it at start)", info.URL, a.opts.WebhookURL)
	}
	return append(out, c)
}
