package slack

import (
	"cmp"
	"context"
	"regexp"
	"sync"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
)

// Config is the section channels.slack (SPEC §9).
type Config struct {
	config.ChannelCommon
	Mode          string        `json:"mode"` // socket (default) | http
	BotToken      config.Secret `json:"botToken"`
	AppToken      config.Secret `json:"appToken"`      // socket mode
	SigningSecret config.Secret `json:"signingSecret"` // http mode
	APIURL        string        `json:"apiUrl"`        // default https://slack.com/api/
	WebhookPath   string        `json:"webhookPath"`   // http mode; default /slack/events
	ReplyToMode   string        `json:"replyToMode"`   // off|first|all; default all
	ThreadContext *int          `json:"threadContext"` // earlier thread messages given to the model (SPEC §21); default 20, 0 = off
}

var (
	_ config.ChannelOptions  = (*Config)(nil)
	_ config.ApproverChecker = (*Config)(nil)

	replyToModes = []string{"off", "first", "all"}
	userRe       = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[UW][A-Z0-9]{2,}$`) })
)

func (c *Config) Common() *config.ChannelCommon { return &c.ChannelCommon }

func (c *Config) Defaults() {
	c.Mode = cmp.Or(c.Mode, ModeSocket)
	c.APIURL = cmp.Or(c.APIURL, DefaultAPIURL)
	c.WebhookPath = cmp.Or(c.WebhookPath, DefaultWebhookPath)
	c.ReplyToMode = cmp.Or(c.ReplyToMode, "all")
	if c.ThreadContext == nil {
		n := config.DefaultThreadContext
		c.ThreadContext = &n
	}
}

func (c *Config) Validate(s *config.Section) {
	s.Enum("mode", c.Mode, []string{ModeSocket, ModeHTTP})
	s.Enum("replyToMode", c.ReplyToMode, replyToModes)
	s.HTTPURL("apiUrl", c.APIURL)
	s.URLPath("webhookPath", c.WebhookPath)
	s.ThreadContext("threadContext", c.ThreadContext)
	if !c.Enabled {
		return
	}
	if c.BotToken == "" {
		s.Missing("botToken", "the enabled slack channel needs a botToken (xoxb-…)")
	}
	switch c.Mode {
	case ModeSocket:
		if c.AppToken == "" {
			s.Missing("appToken", "slack socket mode needs an appToken (xapp-…)")
		}
	case ModeHTTP:
		if c.SigningSecret == "" {
			s.Missing("signingSecret", "slack http mode needs a signingSecret")
		}
	}
}

// CheckApprover: security.approvers.slack lists Slack user ids.
func (c *Config) CheckApprover(id string) string {
	if userRe().MatchString(id) {
		return ""
	}
	return "a Slack user id (U… or W…, upper-case letters and digits)"
}

func init() {
	channels.Register(channels.Module{
		Name:    Name,
		Options: func() config.ChannelOptions { return &Config{} },
		New: func(d channels.Deps) (channels.Channel, error) {
			c := d.Options.(*Config)
			var replays ReplayStore
			if d.State != nil {
				replays = &kvReplays{kv: d.State}
			}
			return New(Options{BotToken: c.BotToken.Value(), AppToken: c.AppToken.Value(),
				SigningSecret: c.SigningSecret.Value(), Mode: c.Mode, APIURL: c.APIURL,
				WebhookPath: c.WebhookPath, ReplyToMode: c.ReplyToMode, Access: channels.AccessOf(c.Access),
				ThreadContext: config.ThreadContextOr(c.ThreadContext),
				Replays:       replays, Logger: d.Logger, HTTPClient: d.HTTPClient, Bound: d.Bound})
		},
		Init: &channels.Init{
			Title: "Slack",
			Secrets: []channels.InitSecret{
				{Var: "SLACK_BOT_TOKEN", Hint: "api.slack.com/apps → OAuth & Permissions → Bot User OAuth Token (xoxb-…)"},
				{Var: "SLACK_APP_TOKEN", Hint: "api.slack.com/apps → Basic Information → App-Level Token with connections:write (xapp-…)"},
			},
			Section: `    slack: {
      enabled: true,
      mode: "socket", // Socket Mode: no public URL needed ("http" for the Events API)
      botToken: "${SLACK_BOT_TOKEN}",
      appToken: "${SLACK_APP_TOKEN}",
      // allowFrom: ["U012ABCDEF"], // only these users (empty: everyone in the workspace)
    },
`,
		},
		Verbatim:  Verbatim,
		MentionOf: func(userID string) string { return "<@" + userID + ">" },
	})
}

// kvReplays records the slash commands taken in the channel's store
// (SPEC §17), so a replayed signed request runs nothing on any replica or
// after a restart. Keys past their window are swept at most once a minute.
type kvReplays struct {
	kv        channels.KV
	mu        sync.Mutex
	lastSweep time.Time
}

const slashPrefix = "slash:"

func (s *kvReplays) TakeOnce(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	now := time.Now()
	s.mu.Lock()
	sweep := now.Sub(s.lastSweep) > time.Minute
	if sweep {
		s.lastSweep = now
	}
	s.mu.Unlock()
	if sweep {
		// Every key is recorded at most one window (5 min, and as much
		// again for a timestamp ahead of the clock) before it lapses.
		if _, err := s.kv.DeleteBefore(ctx, slashPrefix, now.Add(-11*time.Minute)); err != nil {
			return false, err
		}
	}
	return s.kv.Claim(ctx, key, now.Add(ttl).UTC().Format(time.RFC3339))
}
