package matrix

import (
	"context"
	"regexp"
	"sync"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
)

// Config is the section channels.matrix (SPEC §9).
type Config struct {
	config.ChannelCommon
	Homeserver    string        `json:"homeserver"`
	UserID        string        `json:"userId"`
	AccessToken   config.Secret `json:"accessToken"`
	Password      config.Secret `json:"password"`
	DeviceID      string        `json:"deviceId"`
	AutoJoin      *bool         `json:"autoJoin"`      // default true
	ThreadReplies string        `json:"threadReplies"` // off|inbound|always; default inbound
	ThreadContext *int          `json:"threadContext"` // earlier thread messages given to the model (SPEC §21); default 20, 0 = off
	// Encryption reads and answers in end-to-end encrypted rooms (SPEC §21,
	// crypto.go); RecoveryKey verifies the bot's device by cross-signing.
	Encryption  bool          `json:"encryption"`
	RecoveryKey config.Secret `json:"recoveryKey"`
	// RequireVerifiedDevices takes /approve only from a device its sender
	// verified (cross-signed) or the bot verified (issue 35).
	RequireVerifiedDevices bool `json:"requireVerifiedDevices"`
}

var (
	_ config.ChannelOptions  = (*Config)(nil)
	_ config.ApproverChecker = (*Config)(nil)

	userRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^@[^:\s]+:\S+$`) })
)

func (c *Config) Common() *config.ChannelCommon { return &c.ChannelCommon }

func (c *Config) Defaults() {
	if c.AutoJoin == nil {
		on := true
		c.AutoJoin = &on
	}
	if c.ThreadReplies == "" {
		c.ThreadReplies = ThreadsInbound
	}
	if c.ThreadContext == nil {
		n := config.DefaultThreadContext
		c.ThreadContext = &n
	}
}

func (c *Config) Validate(s *config.Section) {
	s.HTTPURL("homeserver", c.Homeserver)
	s.Enum("threadReplies", c.ThreadReplies, []string{ThreadsOff, ThreadsInbound, ThreadsAlways})
	s.ThreadContext("threadContext", c.ThreadContext)
	if c.UserID != "" && !userRe().MatchString(c.UserID) {
		s.Add("userId", "%q is not a Matrix user id like @herald:example.org", c.UserID)
	}
	if c.RecoveryKey != "" && !c.Encryption {
		s.Add("recoveryKey", "is set but channels.matrix.encryption is false: a recovery key verifies the device of an encrypting bot")
	}
	if c.RequireVerifiedDevices && !c.Encryption {
		s.Add("requireVerifiedDevices", "needs channels.matrix.encryption: true: only an encrypted message names the device that sent it")
	}
	if c.Encryption && !EncryptionAvailable {
		s.Add("encryption", "this binary was built without the goolm tag (go build -tags goolm): it has no Olm for end-to-end encryption")
	}
	if !c.Enabled {
		return
	}
	if c.Homeserver == "" {
		s.Missing("homeserver", "the enabled matrix channel needs a homeserver URL")
	}
	if c.UserID == "" {
		s.Missing("userId", "the enabled matrix channel needs a userId")
	}
	if c.AccessToken == "" && c.Password == "" {
		s.Missing("accessToken", "the enabled matrix channel needs an accessToken or a password")
	}
}

// CheckApprover: security.approvers.matrix lists Matrix user ids.
func (c *Config) CheckApprover(id string) string {
	if userRe().MatchString(id) {
		return ""
	}
	return "a Matrix user id (@name:server)"
}

func init() {
	channels.Register(channels.Module{
		Name:    Name,
		Options: func() config.ChannelOptions { return &Config{} },
		New: func(d channels.Deps) (channels.Channel, error) {
			c := d.Options.(*Config)
			var sync mautrix.SyncStore
			if d.State != nil {
				sync = kvSyncStore{d.State}
			}
			return New(Options{Homeserver: c.Homeserver, UserID: c.UserID,
				AccessToken: c.AccessToken.Value(), Password: c.Password.Value(), DeviceID: c.DeviceID,
				AutoJoin: c.AutoJoin == nil || *c.AutoJoin, ThreadReplies: c.ThreadReplies, Access: channels.AccessOf(c.Access),
				ThreadContext: config.ThreadContextOr(c.ThreadContext),
				SyncStore:     sync, Logger: d.Logger, HTTPClient: d.HTTPClient, Bound: d.Bound,
				Encryption: c.Encryption, RecoveryKey: c.RecoveryKey.Value(), CryptoDB: d.SQL, State: d.State,
				RequireVerifiedDevices: c.RequireVerifiedDevices})
		},
		Init: &channels.Init{
			Title:   "Matrix",
			Secrets: []channels.InitSecret{{Var: "MATRIX_ACCESS_TOKEN", Hint: "the bot account's access token (Element → Settings → Help & About)"}},
			Section: `    matrix: {
      enabled: true,
      homeserver: "https://matrix.example.org", // change to your homeserver
      userId: "@herald:example.org",            // change to the bot's user id
      accessToken: "${MATRIX_ACCESS_TOKEN}",
      threadReplies: "inbound", // off | inbound | always
` + initEncryption + `    },
`,
		},
		// One /sync loop at a time: two would each take every event.
		Exclusive: func(config.ChannelOptions) bool { return true },
	})
}

// initEncryption is init's encryption line: Element encrypts DMs and
// private rooms by default, so a bot that can decrypt turns it on.
var initEncryption = func() string {
	if !EncryptionAvailable {
		return ""
	}
	return "      encryption: true,         // read and answer in end-to-end encrypted rooms (keys in the state database)\n"
}()

// kvSyncStore keeps the /sync tokens in the channel's store (SPEC §12:
// Matrix next_batch persisted) under matrix.filter.<user> and
// matrix.next_batch.<user>, so a restart continues from the last token
// instead of skipping what arrived while the gateway was down.
type kvSyncStore struct{ kv channels.KV }

var _ mautrix.SyncStore = kvSyncStore{}

func (m kvSyncStore) SaveFilterID(ctx context.Context, userID id.UserID, filterID string) error {
	return m.kv.Set(ctx, "filter."+string(userID), filterID)
}

func (m kvSyncStore) LoadFilterID(ctx context.Context, userID id.UserID) (string, error) {
	v, _, err := m.kv.Get(ctx, "filter."+string(userID))
	return v, err
}

func (m kvSyncStore) SaveNextBatch(ctx context.Context, userID id.UserID, token string) error {
	return m.kv.Set(ctx, "next_batch."+string(userID), token)
}

func (m kvSyncStore) LoadNextBatch(ctx context.Context, userID id.UserID) (string, error) {
	v, _, err := m.kv.Get(ctx, "next_batch."+string(userID))
	return v, err
}
