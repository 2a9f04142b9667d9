package discord

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
)

// Name is the channel name used in origins and session keys.
const Name channels.Name = "discord"

// DefaultAPIURL is Discord's API root; REST goes to <apiUrl>api/v10/.
const DefaultAPIURL = "https://discord.com/"

// Limit is Discord's message size limit in characters.
const Limit = 2000

const (
	sendTimeout    = 30 * time.Second
	unhealthyAfter = 3    // consecutive failed reconnects
	eventQueue     = 256  // gateway events waiting for the worker
	maxCursors     = 2000 // channels whose last message id is kept
	catchUpPages   = 100  // of 100 messages, per channel and catch-up (10,000 messages missed while down)
	maxKnown       = 10000
	minBackoff     = time.Second
	maxBackoff     = time.Minute
)

// Gateway intents: guild messages and DMs with their content (a privileged
// intent discordgo leaves out of its defaults), guilds for channels and
// threads.
const intents = discordgo.IntentsGuilds | discordgo.IntentsGuildMessages | discordgo.IntentsDirectMessages |
	discordgo.IntentMessageContent

func init() {
	// discordgo v0.29.0 speaks API v9 by default; its gateway URL gets
	// "?v=" + APIVersion when it connects. REST URLs are rewritten per
	// session (see rewrite), so nothing else global is changed.
	discordgo.APIVersion = "10"
}

// Options configure an Adapter.
type Options struct {
	BotToken string
	// ApplicationID is the application whose commands are registered;
	// empty = the application of the bot (from READY).
	ApplicationID string
	// APIURL is Discord's root, default https://discord.com/.
	APIURL string
	// ReplyInThread opens a thread on a top-level mention in a guild
	// channel; nil = true.
	ReplyInThread *bool
	Access        channels.Access
	// State keeps the catch-up cursors and the threads the bot is in
	// (the channel's namespaced store: keys "cursors", "thread.<id>");
	// nil keeps them in memory only.
	State channels.KV
	// ThreadContext is how many earlier messages of a thread ThreadHistory
	// gives (SPEC §21); 0 = off.
	ThreadContext int
	Logger        *zap.Logger
	HTTPClient    *http.Client // base of REST requests (its Transport is used)
}

// Adapter is the Discord channel.
type Adapter struct {
	opts     Options
	log      *zap.Logger
	inThread bool
	hc       *http.Client
	// retryHeld is how long a channel whose message the gateway could not
	// store waits before it is caught up again; a field so tests shorten it.
	retryHeld time.Duration

	s *discordgo.Session

	events chan any      // gateway events for the worker, in order
	kick   chan struct{} // a disconnect: the supervisor reconnects
	wg     sync.WaitGroup

	mu        sync.Mutex
	sink      channels.Sink
	runCtx    context.Context
	cancel    context.CancelFunc
	started   bool
	connected bool
	failures  int
	lastErr   error
	self      discordgo.User
	appID     string
	commands  bool                // application commands registered
	conns     map[net.Conn]bool   // raw gateway connections, closed by Stop
	known     map[string]chanInfo // channel id → what it is
	threads   map[string]bool     // threads the bot is in
	names     map[string]string   // message id → thread name, for threads opened lazily
	cursors   map[string]string   // channel id → last message id handled
	held      map[string]hold     // channels whose messages wait for a catch-up (store away, history unreadable)
	loaded    bool
}

// hold is a channel whose messages wait for a catch-up: its live messages
// are skipped (the catch-up fetches them from the cursor) until a catch-up
// read it to the end.
type hold struct {
	at    time.Time // when it is caught up again
	fails int       // history reads failed in a row, for the backoff
}

type chanInfo struct {
	guildID, parentID string
	thread            bool
}

var (
	_ channels.Channel    = (*Adapter)(nil)
	_ channels.Healther   = (*Adapter)(nil)
	_ channels.PartSender = (*Adapter)(nil)
	_ channels.Typer      = (*Adapter)(nil)
	_ channels.Drafter    = (*Adapter)(nil)
	_ channels.Checker    = (*Adapter)(nil)
)

// New checks opts and returns an adapter; it does no I/O (Start does).
func New(opts Options) (*Adapter, error) {
	opts.BotToken = strings.TrimPrefix(strings.TrimSpace(opts.BotToken), "Bot ")
	if opts.BotToken == "" {
		return nil, errors.New("discord: botToken is required")
	}
	if opts.APIURL == "" {
		opts.APIURL = DefaultAPIURL
	}
	u, err := url.Parse(opts.APIURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("discord: apiUrl %q is not an http(s) URL", opts.APIURL)
	}
	if !strings.HasSuffix(opts.APIURL, "/") {
		opts.APIURL += "/"
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	a := &Adapter{
		opts:      opts,
		log:       log.Named("discord"),
		inThread:  opts.ReplyInThread == nil || *opts.ReplyInThread,
		hc:        hc,
		retryHeld: retryHeld,
		events:    make(chan any, eventQueue),
		kick:      make(chan struct{}, 1),
		conns:     map[net.Conn]bool{},
		known:     map[string]chanInfo{},
		threads:   map[string]bool{},
		names:     map[string]string{},
		cursors:   map[string]string{},
		held:      map[string]hold{},
	}
	s, err := discordgo.New("Bot " + opts.BotToken)
	if err != nil {
		return nil, fmt.Errorf("discord: %w", err)
	}
	// The token is in discordgo's debug lines (IDENTIFY): keep its log
	// below errors, which carry no token.
	s.LogLevel = discordgo.LogError - 1
	s.Debug = false
	s.SyncEvents = true // handlers run in the reader; they only queue
	s.ShouldReconnectOnError = false
	s.ShouldReconnectVoiceOnSessionError = false
	s.ShouldRetryOnRateLimit = false // a 429 goes back to the caller as RetryAfterError
	s.MaxRestRetries = 1
	s.Compress = true
	s.Identify.Intents = intents
	s.Client = &http.Client{Timeout: sendTimeout, Transport: rewrite{from: discordgo.EndpointAPI, to: opts.APIURL + "api/v10/", next: next}}
	s.Dialer = &websocket.Dialer{HandshakeTimeout: 20 * time.Second, Proxy: http.ProxyFromEnvironment, NetDialContext: a.dial}
	s.State.MaxMessageCount = 0
	s.State.TrackMembers = false
	s.State.TrackPresences = false
	s.State.TrackVoice = false
	s.State.TrackEmojis = false
	s.State.TrackRoles = false
	s.AddHandler(func(_ *discordgo.Session, e *discordgo.Ready) { a.queue(e) })
	s.AddHandler(func(_ *discordgo.Session, e *discordgo.Resumed) { a.queue(e) })
	s.AddHandler(func(_ *discordgo.Session, e *discordgo.MessageCreate) { a.queue(e) })
	s.AddHandler(func(_ *discordgo.Session, e *discordgo.ThreadCreate) { a.queue(e) })
	s.AddHandler(func(_ *discordgo.Session, e *discordgo.GuildCreate) { a.queue(e) })
	s.AddHandler(func(_ *discordgo.Session, e *discordgo.InteractionCreate) { a.queue(e) })
	s.AddHandler(func(_ *discordgo.Session, _ *discordgo.Disconnect) { a.disconnected() })
	a.s = s
	return a, nil
}

// rewrite sends discordgo's REST requests, which it builds from its
// package-level endpoints (https://discord.com/api/v9/…), to apiUrl and
// API v10, per session; its GET gateway becomes GET gateway/bot (SPEC §21).
type rewrite struct {
	from, to string
	next     http.RoundTripper
}

func (t rewrite) RoundTrip(r *http.Request) (*http.Response, error) {
	u := r.URL.String()
	rest, ok := strings.CutPrefix(u, t.from)
	if !ok {
		return t.next.RoundTrip(r)
	}
	if rest == "gateway" {
		rest = "gateway/bot"
	}
	nu, err := url.Parse(t.to + rest)
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.URL, r.Host = nu, nu.Host
	return t.next.RoundTrip(r)
}

// dial opens the gateway connection under the adapter's run context and
// remembers it, so Stop can cut a connection discordgo waits on.
func (a *Adapter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	a.mu.Lock()
	run := a.runCtx
	a.mu.Unlock()
	if run == nil {
		run = ctx
	}
	dctx, cancel := context.WithTimeout(run, 20*time.Second)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(dctx, network, addr)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.runCtx != nil && a.runCtx.Err() != nil {
		c.Close()
		return nil, errors.New("discord: stopped")
	}
	for old := range a.conns {
		delete(a.conns, old) // discordgo closed it before dialling again
	}
	a.conns[c] = true
	return c, nil
}

// Name returns "discord".
func (a *Adapter) Name() channels.Name { return Name }

// Self is the bot user (empty before Start).
func (a *Adapter) Self() discordgo.User {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.self
}

// Start connects to the gateway (GET gateway/bot, IDENTIFY, READY) and
// starts the worker that hands messages to sink and the supervisor that
// resumes a dropped connection.
func (a *Adapter) Start(ctx context.Context, sink channels.Sink) error {
	if sink == nil {
		return errors.New("discord: start: nil sink")
	}
	a.mu.Lock()
	if a.started {
		a.mu.Unlock()
		return errors.New("discord: already started")
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.runCtx, a.cancel, a.sink = runCtx, cancel, sink
	a.mu.Unlock()
	if err := a.loadState(ctx); err != nil {
		cancel()
		return err
	}
	if err := a.s.Open(); err != nil {
		cancel()
		_ = a.s.Close()
		return fmt.Errorf("discord: connect to the gateway (check botToken and apiUrl): %w", a.redact(err))
	}
	a.mu.Lock()
	a.started, a.connected = true, true
	a.self = *a.s.State.User
	self := a.self
	a.mu.Unlock()
	a.wg.Add(2)
	go func() { defer a.wg.Done(); a.work(runCtx) }()
	go func() { defer a.wg.Done(); a.supervise(runCtx) }()
	a.log.Info("discord started", zap.String("bot", self.Username), zap.String("botId", self.ID))
	return nil
}

// Stop closes the gateway connection and waits for the worker and the
// supervisor (bounded by ctx).
func (a *Adapter) Stop(ctx context.Context) error {
	a.mu.Lock()
	cancel := a.cancel
	a.started = false
	conns := make([]net.Conn, 0, len(a.conns))
	for c := range a.conns {
		conns = append(conns, c)
	}
	a.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	for _, c := range conns {
		_ = c.Close() // unblocks a read discordgo waits on
	}
	done := make(chan struct{})
	go func() {
		_ = a.s.Close()
		a.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("discord: stop: still running: %w", ctx.Err())
	}
}

// Health reports an error before Start, after Stop, or while reconnects
// keep failing.
func (a *Adapter) Health() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.started {
		return errors.New("discord: not running")
	}
	if !a.connected && a.failures >= unhealthyAfter {
		return fmt.Errorf("discord: gateway reconnect failed %d times in a row: %w", a.failures, a.lastErr)
	}
	return nil
}

// queue hands a gateway event to the worker, in order. It blocks while the
// queue is full (the gateway reader waits), and gives up when stopping.
func (a *Adapter) queue(e any) {
	a.mu.Lock()
	ctx := a.runCtx
	a.mu.Unlock()
	if ctx == nil {
		return
	}
	select {
	case a.events <- e:
	case <-ctx.Done():
	}
}

func (a *Adapter) disconnected() {
	a.mu.Lock()
	a.connected = false
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// supervise reopens the gateway after a disconnect. discordgo keeps the
// session id and sequence in the Session, so Open sends RESUME and Discord
// replays what was missed; when Discord refuses the resume (INVALID_SESSION)
// discordgo identifies anew and the READY that follows triggers a catch-up.
func (a *Adapter) supervise(ctx context.Context) {
	backoff := minBackoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
		}
		for ctx.Err() == nil {
			err := a.s.Open()
			if err == nil || errors.Is(err, discordgo.ErrWSAlreadyOpen) {
				a.mu.Lock()
				if a.failures > 0 {
					a.log.Info("discord gateway reconnected", zap.Int("failures", a.failures))
				}
				a.failures, a.lastErr, a.connected = 0, nil, true
				a.mu.Unlock()
				backoff = minBackoff
				break
			}
			err = a.redact(err)
			a.mu.Lock()
			a.failures++
			a.lastErr = err
			n := a.failures
			a.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			a.log.Warn("discord gateway reconnect failed", zap.Error(err), zap.Int("failures", n), zap.Duration("backoff", backoff))
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, maxBackoff)
		}
	}
}

// redact removes the bot token from err's text.
func (a *Adapter) redact(err error) error {
	if err == nil || !strings.Contains(err.Error(), a.opts.BotToken) {
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
