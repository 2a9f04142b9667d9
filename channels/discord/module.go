package discord

import (
	"regexp"
	"strings"
	"sync"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
)

// Config is the section channels.discord (SPEC §21 and the common keys of
// §9).
type Config struct {
	config.ChannelCommon
	BotToken      config.Secret `json:"botToken"`
	ApplicationID string        `json:"applicationId"` // default: the bot's application (from READY)
	APIURL        string        `json:"apiUrl"`        // default https://discord.com/
	ReplyInThread *bool         `json:"replyInThread"` // a top-level mention opens a thread; default true
	ThreadContext *int          `json:"threadContext"` // earlier thread messages given to the model; default 20, 0 = off
}

var (
	_ config.ChannelOptions  = (*Config)(nil)
	_ config.ApproverChecker = (*Config)(nil)

	snowflakeRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9]{15,20}$`) })
)

func (c *Config) Common() *config.ChannelCommon { return &c.ChannelCommon }

func (c *Config) Defaults() {
	if c.APIURL == "" {
		c.APIURL = DefaultAPIURL
	}
	if c.ReplyInThread == nil {
		t := true
		c.ReplyInThread = &t
	}
	if c.ThreadContext == nil {
		n := config.DefaultThreadContext
		c.ThreadContext = &n
	}
}

func (c *Config) Validate(s *config.Section) {
	s.HTTPURL("apiUrl", c.APIURL)
	if c.APIURL != "" && !strings.HasSuffix(c.APIURL, "/") {
		s.Add("apiUrl", "must end with / (REST goes to <apiUrl>api/v10/), e.g. https://discord.com/")
	}
	if c.ApplicationID != "" && !snowflakeRe().MatchString(c.ApplicationID) {
		s.Add("applicationId", "must be the application's id (a number of 15-20 digits), got %q", c.ApplicationID)
	}
	s.ThreadContext("threadContext", c.ThreadContext)
	if c.Enabled && c.BotToken == "" {
		s.Missing("botToken", "the enabled discord channel needs a botToken (Developer Portal → your app → Bot → Reset Token)")
	}
}

// CheckApprover: security.approvers.discord lists Discord user ids.
func (c *Config) CheckApprover(id string) string {
	if snowflakeRe().MatchString(id) {
		return ""
	}
	return "a Discord user id (a number of 15-20 digits; Developer Mode → Copy User ID)"
}

// Verbatim shows text exactly as written: in a code block, each backtick
// followed by a zero-width space so nothing in the text can close it.
func Verbatim(text string) string {
	return "```\n" + strings.ReplaceAll(text, "`", "`\u200b") + "\n```"
}

func init() {
	channels.Register(channels.Module{
		Name:    Name,
		Options: func() config.ChannelOptions { return &Config{} },
		New: func(d channels.Deps) (channels.Channel, error) {
			c := d.Options.(*Config)
			return New(Options{BotToken: c.BotToken.Value(), ApplicationID: c.ApplicationID, APIURL: c.APIURL,
				ReplyInThread: c.ReplyInThread, ThreadContext: config.ThreadContextOr(c.ThreadContext),
				Access: channels.AccessOf(c.Access), State: d.State, Logger: d.Logger, HTTPClient: d.HTTPClient})
		},
		Init: &channels.Init{
			Title: "Discord",
			Secrets: []channels.InitSecret{{Var: "DISCORD_BOT_TOKEN",
				Hint: "discord.com/developers/applications → your app → Bot → Reset Token; turn on Message Content Intent there"}},
			Section: `    discord: {
      enabled: true,
      botToken: "${DISCORD_BOT_TOKEN}",
      // allowFrom: ["123456789012345678"], // only these user ids in DMs
      // groups: { "<channel id>": { requireMention: true } }, // guild channels Herald answers in
    },
`,
		},
		// One gateway session per bot: a second replica would get every
		// message again.
		Exclusive: func(config.ChannelOptions) bool { return true },
		Verbatim:  Verbatim,
		MentionOf: func(userID string) string { return "<@" + userID + ">" },
	})
}
