package slack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
)

// Receive modes.
const (
	ModeSocket = "socket"
	ModeHTTP   = "http"
)

// Reply-to modes: whether a reply to a top-level channel message starts a
// thread under it.
const (
	ReplyToOff   = "off"
	ReplyToFirst = "first"
	ReplyToAll   = "all"
)

// Defaults.
const (
	DefaultAPIURL      = "https://slack.com/api/"
	DefaultWebhookPath = "/slack/events"
	// CommandsPath is where slash commands are posted in http mode.
	CommandsPath = "/slack/commands"
)

// Name is the channel name used in origins and session keys.
const Name channels.Name = "slack"

// Options configures the adapter. Zero values take the documented defaults.
type Options struct {
	// Bound, if set, reports whether a thread is bound to a sub-agent
	// (channels.Deps.Bound): a thread the bot is in.
	Bound         func(ctx context.Context, o channels.Origin) bool
	BotToken      string // xoxb-…, required
	AppToken      string // xapp-…, required in socket mode
	SigningSecret string // required in http mode
	Mode          string // "socket" (default) | "http"
	APIURL        string // default https://slack.com/api/
	WebhookPath   string // default /slack/events
	ReplyToMode   string // off|first|all, default all
	// ThreadContext is how many earlier messages of a thread the bot is
	// first addressed in are read as context (channels.ThreadReader); 0 = off.
	ThreadContext int
	Access        channels.Access
	Logger        *zap.Logger
	Now           func() time.Time
	HTTPClient    *http.Client
	// Replays, if set, records the slash commands taken (http mode) where
	// every replica and the next start see them, so a replay to another
	// replica or after a restart runs nothing either. The adapter's own
	// in-memory list is checked first.
	Replays ReplayStore
}

// ReplayStore records signed requests taken (SPEC §17).
type ReplayStore interface {
	// TakeOnce records key for ttl and reports whether it was new: false
	// when key was recorded before and its ttl has not run out.
	TakeOnce(ctx context.Context, key string, ttl time.Duration) (bool, error)
}

// Adapter is the Slack channel.
type Adapter struct {
	opts Options
	log  *zap.Logger
	now  func() time.Time
	api  *slack.Client

	mu      sync.Mutex
	sink    channels.Sink
	runCtx  context.Context
	cancel  context.CancelFunc
	botID   string // the bot's own user id (auth.test)
	teamID  string
	health  error
	started bool
	wg      sync.WaitGroup
	threads *boundedSet // "channel/thread_ts" the bot is in
	seen    *boundedSet // "channel/ts" of messages already delivered
	// slashSeen: signatures of slash commands taken (http mode), so a
	// replayed request runs nothing twice.
	slashSeen *replaySet
	names     channels.NameCache // user id → display name, for thread context
}

var (
	_ channels.Channel     = (*Adapter)(nil)
	_ channels.Healther    = (*Adapter)(nil)
	_ channels.HTTPMounter = (*Adapter)(nil)
)

// New checks opts and builds an adapter. It does no I/O: Start connects.
func New(opts Options) (*Adapter, error) {
	if opts.Mode == "" {
		opts.Mode = ModeSocket
	}
	if opts.APIURL == "" {
		opts.APIURL = DefaultAPIURL
	}
	if !strings.HasSuffix(opts.APIURL, "/") {
		opts.APIURL += "/"
	}
	if opts.WebhookPath == "" {
		opts.WebhookPath = DefaultWebhookPath
	}
	if opts.ReplyToMode == "" {
		opts.ReplyToMode = ReplyToAll
	}
	if opts.BotToken == "" {
		return nil, errors.New("slack: botToken is required")
	}
	switch opts.Mode {
	case ModeSocket:
		if opts.AppToken == "" {
			return nil, errors.New("slack: appToken is required in socket mode")
		}
	case ModeHTTP:
		if opts.SigningSecret == "" {
			return nil, errors.New("slack: signingSecret is required in http mode")
		}
		if !strings.HasPrefix(opts.WebhookPath, "/") {
			return nil, fmt.Errorf("slack: webhookPath %q must start with /", opts.WebhookPath)
		}
	default:
		return nil, fmt.Errorf("slack: mode %q: want %q or %q", opts.Mode, ModeSocket, ModeHTTP)
	}
	switch opts.ReplyToMode {
	case ReplyToOff, ReplyToFirst, ReplyToAll:
	default:
		return nil, fmt.Errorf("slack: replyToMode %q: want off, first or all", opts.ReplyToMode)
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	apiOpts := []slack.Option{slack.OptionAPIURL(opts.APIURL)}
	if opts.AppToken != "" {
		apiOpts = append(apiOpts, slack.OptionAppLevelToken(opts.AppToken))
	}
	if opts.HTTPClient != nil {
		apiOpts = append(apiOpts, slack.OptionHTTPClient(opts.HTTPClient))
	}
	return &Adapter{
		opts:    opts,
		log:     log.Named("slack"),
		now:     now,
		api:     slack.New(opts.BotToken, apiOpts...),
		health:  errors.New("slack: not started"),
		threads: newBoundedSet(4096),
		seen:    newBoundedSet(4096),
		// verify accepts a timestamp until replayWindow after it; a second
		// more covers the boundary.
		slashSeen: newReplaySet(maxSlashSeen, replayWindow+time.Second),
	}, nil
}

// Name returns "slack".
func (a *Adapter) Name() channels.Name { return Name }

// BotUserID is the bot's own user id, known after Start.
func (a *Adapter) BotUserID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.botID
}

// Start checks the bot token with auth.test (an error here means a bad
// token or an unreachable API; the caller may retry), then, in socket mode,
// starts the Socket Mode loop, which reconnects on its own. In http mode
// inbound events arrive through Routes.
func (a *Adapter) Start(ctx context.Context, sink channels.Sink) error {
	if sink == nil {
		return errors.New("slack: start: nil sink")
	}
	a.mu.Lock()
	if a.started {
		a.mu.Unlock()
		return errors.New("slack: already started")
	}
	a.mu.Unlock()

	authCtx, authCancel := context.WithTimeout(ctx, 30*time.Second)
	auth, err := a.api.AuthTestContext(authCtx)
	authCancel()
	if err != nil {
		a.setHealth(fmt.Errorf("slack: auth.test: %w", err))
		return fmt.Errorf("slack: auth.test at %s: %w", a.opts.APIURL, err)
	}
	if auth.UserID == "" {
		err := errors.New("slack: auth.test returned no user id")
		a.setHealth(err)
		return err
	}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.mu.Lock()
	a.started = true
	a.sink = sink
	a.botID = auth.UserID
	a.teamID = auth.TeamID
	a.runCtx = runCtx
	a.cancel = cancel
	a.mu.Unlock()
	// Start's ctx bounds the receive loops too, as the interface promises.
	stop := context.AfterFunc(ctx, cancel)

	a.log.Info("slack connected",
		zap.String("mode", a.opts.Mode),
		zap.String("botUserId", auth.UserID),
		zap.String("teamId", auth.TeamID))

	if a.opts.Mode == ModeHTTP {
		a.setHealth(nil)
		a.wg.Go(func() {
			<-runCtx.Done()
			stop()
		})
		return nil
	}
	a.setHealth(errors.New("slack: socket mode connecting"))
	smc := socketmode.New(a.api, socketmode.OptionLog(zapStdLogger{a.log}))
	a.wg.Go(func() {
		defer stop()
		a.runSocket(runCtx, smc)
	})
	a.wg.Go(func() { a.consumeSocket(runCtx, smc) })
	return nil
}

// Stop ends the receive loops and waits for them, or until ctx is done.
func (a *Adapter) Stop(ctx context.Context) error {
	a.mu.Lock()
	cancel := a.cancel
	a.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	done := make(chan struct{})
	go func() {
		a.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		a.mu.Lock()
		a.started, a.cancel, a.runCtx, a.sink = false, nil, nil, nil
		a.health = errors.New("slack: stopped")
		a.mu.Unlock()
		return nil
	case <-ctx.Done():
		return fmt.Errorf("slack: stop: %w", ctx.Err())
	}
}

// Health reports nil while the adapter can receive: the socket is connected
// (socket mode) or auth.test succeeded (http mode).
func (a *Adapter) Health() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.health
}

func (a *Adapter) setHealth(err error) {
	a.mu.Lock()
	a.health = err
	a.mu.Unlock()
}

// zapStdLogger lets slack-go's socketmode log through zap at debug level.
type zapStdLogger struct{ log *zap.Logger }

func (l zapStdLogger) Output(_ int, s string) error {
	l.log.Debug("socketmode", zap.String("detail", strings.TrimSpace(s)))
	return nil
}
