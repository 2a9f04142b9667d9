package telegram

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
)

// Name is the channel name used in origins and session keys.
const Name channels.Name = "telegram"

// Defaults for Options.
const (
	DefaultAPIURL      = "https://api.telegram.org"
	DefaultWebhookPath = "/telegram/webhook"
	DefaultPollTimeout = 30 * time.Second
)

// SecretHeader is the header Telegram sets on webhook requests to the
// secret_token given to setWebhook.
const SecretHeader = "X-Telegram-Bot-Api-Secret-Token"

const (
	sendTimeout      = 30 * time.Second
	unhealthyAfter   = 3 // consecutive getUpdates failures
	maxWebhookBody   = 1 << 20
	recentUpdateSize = 512
)

// Options configure an Adapter.
type Options struct {
	// Bound, if set, reports whether a topic is bound to a sub-agent
	// (channels.Deps.Bound): a topic the bot is in.
	Bound    func(ctx context.Context, o channels.Origin) bool
	BotToken string
	// APIURL is the Bot API server, default https://api.telegram.org (or a
	// self-hosted server); requests go to <APIURL>/bot<token>/<method>.
	APIURL string
	// WebhookURL, when set, selects webhook mode: Start registers it with
	// setWebhook and updates arrive on Routes().
	WebhookURL    string
	WebhookSecret string
	WebhookPath   string        // default /telegram/webhook
	PollTimeout   time.Duration // long-poll timeout, default 30s
	Access        channels.Access
	Logger        *zap.Logger
	HTTPClient    *http.Client
	// Offsets keeps the getUpdates offset across restarts (the gateway's
	// store): a restart continues after the last update handed to the
	// gateway. Nil starts from Telegram's oldest unconfirmed update.
	Offsets OffsetStore
}

// OffsetStore persists the long-polling offset (the next update_id).
type OffsetStore interface {
	LoadOffset(ctx context.Context) (int, error)
	SaveOffset(ctx context.Context, offset int) error
}

// Adapter is the Telegram channel.
type Adapter struct {
	opts     Options
	log      *zap.Logger
	hc       *http.Client
	endpoint string // library format: <apiUrl>/bot%s/%s

	// Backoff between failed polls; fields so tests can shorten them.
	minBackoff, maxBackoff time.Duration

	mu        sync.Mutex
	self      tgbotapi.User
	mention   *regexp.Regexp
	sink      channels.Sink
	runCtx    context.Context
	cancel    context.CancelFunc
	done      chan struct{} // closed when the poll loop ends; nil in webhook mode
	started   bool
	failures  int // consecutive getUpdates failures
	lastErr   error
	recent    map[int]struct{} // webhook update ids already handled
	recentIDs []int
}

var (
	_ channels.Channel     = (*Adapter)(nil)
	_ channels.Healther    = (*Adapter)(nil)
	_ channels.HTTPMounter = (*Adapter)(nil)
)

// New checks opts and returns an adapter; it does no I/O (Start does).
func New(opts Options) (*Adapter, error) {
	if opts.BotToken == "" {
		return nil, errors.New("telegram: botToken is required")
	}
	if opts.APIURL == "" {
		opts.APIURL = DefaultAPIURL
	}
	u, err := url.Parse(opts.APIURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("telegram: apiUrl %q is not an http(s) URL", opts.APIURL)
	}
	if opts.WebhookURL != "" {
		if u, err := url.Parse(opts.WebhookURL); err != nil || u.Scheme != "https" && u.Scheme != "http" || u.Host == "" {
			return nil, fmt.Errorf("telegram: webhookUrl %q is not an http(s) URL", opts.WebhookURL)
		}
		if opts.WebhookSecret == "" {
			return nil, errors.New("telegram: webhookSecret is required with webhookUrl (it authenticates Telegram's requests)")
		}
		if !validSecret(opts.WebhookSecret) {
			return nil, errors.New("telegram: webhookSecret must be 1-256 characters of A-Z, a-z, 0-9, _ and - (Telegram's rule for secret_token)")
		}
	}
	if opts.WebhookPath == "" {
		opts.WebhookPath = DefaultWebhookPath
	}
	if !strings.HasPrefix(opts.WebhookPath, "/") {
		return nil, fmt.Errorf("telegram: webhookPath %q must start with /", opts.WebhookPath)
	}
	if opts.PollTimeout <= 0 {
		opts.PollTimeout = DefaultPollTimeout
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	base := strings.ReplaceAll(strings.TrimRight(opts.APIURL, "/"), "%", "%%")
	return &Adapter{
		opts:       opts,
		log:        log.Named("telegram"),
		hc:         hc,
		endpoint:   base + "/bot%s/%s",
		minBackoff: time.Second,
		maxBackoff: 30 * time.Second,
		recent:     map[int]struct{}{},
	}, nil
}

// Name returns "telegram".
func (a *Adapter) Name() channels.Name { return Name }

// Username is the bot's username from getMe (empty before Start).
func (a *Adapter) Username() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.self.UserName
}

// ctxDoer binds the library's context-less requests to ctx, so Stop and
// callers' deadlines cancel them.
type ctxDoer struct {
	ctx context.Context
	hc  *http.Client
}

func (d ctxDoer) Do(r *http.Request) (*http.Response, error) { return d.hc.Do(r.WithContext(d.ctx)) }

// bot returns a library client whose requests run under ctx.
func (a *Adapter) bot(ctx context.Context) *tgbotapi.BotAPI {
	b := &tgbotapi.BotAPI{Token: a.opts.BotToken, Client: ctxDoer{ctx, a.hc}, Buffer: 100}
	b.SetAPIEndpoint(a.endpoint)
	a.mu.Lock()
	b.Self = a.self
	a.mu.Unlock()
	return b
}

// Start checks the token with getMe, then starts long polling or registers
// the webhook.
func (a *Adapter) Start(ctx context.Context, sink channels.Sink) error {
	if sink == nil {
		return errors.New("telegram: start: nil sink")
	}
	a.mu.Lock()
	if a.started {
		a.mu.Unlock()
		return errors.New("telegram: already started")
	}
	a.mu.Unlock()

	me, err := a.bot(ctx).GetMe()
	if err != nil {
		return fmt.Errorf("telegram: getMe (check botToken and apiUrl): %w", a.redact(err))
	}
	if me.UserName == "" {
		return errors.New("telegram: getMe returned a bot without a username")
	}
	b := a.bot(ctx)
	if a.opts.WebhookURL != "" {
		p := tgbotapi.Params{"url": a.opts.WebhookURL, "secret_token": a.opts.WebhookSecret}
		_ = p.AddInterface("allowed_updates", []string{"message"})
		if _, err := b.MakeRequest("setWebhook", p); err != nil {
			return fmt.Errorf("telegram: setWebhook %s: %w", a.opts.WebhookURL, a.redact(err))
		}
	} else if _, err := b.MakeRequest("deleteWebhook", nil); err != nil {
		// getUpdates answers 409 while a webhook is set.
		return fmt.Errorf("telegram: deleteWebhook before polling: %w", a.redact(err))
	}

	runCtx, cancel := context.WithCancel(ctx)
	a.mu.Lock()
	a.self = me
	a.mention = regexp.MustCompile(`(?i)(^|[^\w@/])@` + regexp.QuoteMeta(me.UserName) + `\b[:,]?`)
	a.sink = sink
	a.runCtx, a.cancel = runCtx, cancel
	a.started = true
	if a.opts.WebhookURL == "" {
		a.done = make(chan struct{})
		go a.poll(runCtx, a.done)
	}
	a.mu.Unlock()
	mode := "polling"
	if a.opts.WebhookURL != "" {
		mode = "webhook"
	}
	a.log.Info("telegram started", zap.String("bot", me.UserName), zap.String("mode", mode))
	return nil
}

// Stop ends the poll loop and waits for it (bounded by ctx). A webhook stays
// registered so Telegram keeps updates until Herald is back.
func (a *Adapter) Stop(ctx context.Context) error {
	a.mu.Lock()
	cancel, done := a.cancel, a.done
	a.started = false
	a.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("telegram: stop: poll loop still running: %w", ctx.Err())
	}
}

// Health reports an error before Start, after Stop, or while getUpdates
// keeps failing.
func (a *Adapter) Health() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.started {
		return errors.New("telegram: not running")
	}
	if a.failures >= unhealthyAfter {
		return fmt.Errorf("telegram: getUpdates failed %d times in a row: %w", a.failures, a.lastErr)
	}
	return nil
}

// redact removes the bot token from err's text: the library puts it in the
// request URL, which net/http errors quote.
func (a *Adapter) redact(err error) error {
	if err == nil || a.opts.BotToken == "" || !strings.Contains(err.Error(), a.opts.BotToken) {
		return err
	}
	return &redactedError{msg: strings.ReplaceAll(err.Error(), a.opts.BotToken, "***"), err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
