package telegram

import (
	"cmp"
	"context"
	"strconv"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
)

// Config is the section channels.telegram (SPEC §9).
type Config struct {
	config.ChannelCommon
	BotToken      config.Secret `json:"botToken"`
	APIURL        string        `json:"apiUrl"`        // default https://api.telegram.org
	WebhookURL    string        `json:"webhookUrl"`    // set = webhook mode, else long polling
	WebhookSecret config.Secret `json:"webhookSecret"` // checked against X-Telegram-Bot-Api-Secret-Token
	WebhookPath   string        `json:"webhookPath"`   // default /telegram/webhook
	// UncertainDelivery: a message part whose send outcome is unknown after
	// a crash is sent again ("resend", the default) or dropped ("skip").
	UncertainDelivery string `json:"uncertainDelivery"`
}

var (
	_ config.ChannelOptions  = (*Config)(nil)
	_ config.ApproverChecker = (*Config)(nil)
)

func (c *Config) Common() *config.ChannelCommon { return &c.ChannelCommon }

func (c *Config) Defaults() {
	c.APIURL = cmp.Or(c.APIURL, DefaultAPIURL)
	c.WebhookPath = cmp.Or(c.WebhookPath, DefaultWebhookPath)
	c.UncertainDelivery = cmp.Or(c.UncertainDelivery, string(channels.UncertainResend))
}

func (c *Config) Validate(s *config.Section) {
	s.HTTPURL("apiUrl", c.APIURL)
	s.HTTPURL("webhookUrl", c.WebhookURL)
	s.URLPath("webhookPath", c.WebhookPath)
	if c.WebhookSecret != "" && !validSecret(c.WebhookSecret.Value()) {
		s.Add("webhookSecret", "must be 1-256 characters of A-Z, a-z, 0-9, _ and -")
	}
	s.Enum("uncertainDelivery", c.UncertainDelivery, []string{string(channels.UncertainResend), string(channels.UncertainSkip)})
	if c.Enabled && c.BotToken == "" {
		s.Missing("botToken", "the enabled telegram channel needs a botToken")
	}
}

// CheckApprover: security.approvers.telegram lists Telegram user ids.
func (c *Config) CheckApprover(id string) string {
	if n, err := strconv.ParseInt(id, 10, 64); err == nil && n > 0 {
		return ""
	}
	return "a Telegram user id (a positive number)"
}

func init() {
	channels.Register(channels.Module{
		Name:    Name,
		Options: func() config.ChannelOptions { return &Config{} },
		New: func(d channels.Deps) (channels.Channel, error) {
			c := d.Options.(*Config)
			var offsets OffsetStore
			if d.State != nil {
				offsets = kvOffsets{d.State}
			}
			return New(Options{Bound: d.Bound, BotToken: c.BotToken.Value(), APIURL: c.APIURL,
				WebhookURL: c.WebhookURL, WebhookSecret: c.WebhookSecret.Value(),
				WebhookPath: c.WebhookPath, Access: channels.AccessOf(c.Access), Offsets: offsets,
				Logger: d.Logger, HTTPClient: d.HTTPClient})
		},
		Init: &channels.Init{
			Title:   "Telegram",
			Secrets: []channels.InitSecret{{Var: "TELEGRAM_BOT_TOKEN", Hint: "@BotFather → /newbot"}},
			Section: `    telegram: {
      enabled: true,
      botToken: "${TELEGRAM_BOT_TOKEN}", // long polling; set webhookUrl for a webhook
      // allowFrom: ["123456789"], // only these user ids in private chats
      // groups: { "-1001234567890": { requireMention: false } },
    },
`,
		},
		// Long polling: a second poller gets 409 Conflict. Webhooks run on
		// every replica.
		Exclusive: func(o config.ChannelOptions) bool { return o.(*Config).WebhookURL == "" },
		Uncertain: func(o config.ChannelOptions) (channels.Uncertain, string) {
			return channels.Uncertain(o.(*Config).UncertainDelivery), "uncertainDelivery"
		},
		// How an uncertain delivery is handled is read on every delivery:
		// not a reason to reconnect.
		Reconnect: func(old, next config.ChannelOptions) bool {
			a, b := *old.(*Config), *next.(*Config)
			a.UncertainDelivery, b.UncertainDelivery = "", ""
			return !channels.SameOptions(&a, &b)
		},
	})
}

// kvOffsets keeps the getUpdates offset in the channel's store (SPEC §12:
// Telegram update_id, offset persisted) under telegram.offset.
type kvOffsets struct{ kv channels.KV }

func (t kvOffsets) LoadOffset(ctx context.Context) (int, error) {
	v, found, err := t.kv.Get(ctx, "offset")
	if err != nil || !found {
		return 0, err
	}
	return strconv.Atoi(v)
}

func (t kvOffsets) SaveOffset(ctx context.Context, offset int) error {
	return t.kv.Set(ctx, "offset", strconv.Itoa(offset))
}
