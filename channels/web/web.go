package web

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
)

// Name is the web chat's channel name.
const Name channels.Name = "web"

// Limits of the API.
const (
	MaxClientLen   = 64        // characters of a client id
	MaxTextBytes   = 32 << 10  // bytes of one posted message
	maxBodyBytes   = 256 << 10 // bytes of a POST body (JSON escapes inflate text)
	maxPageEntries = 1000      // entries per GET /api/messages answer
	streamBatch    = 500       // entries read from the Log per event-stream read
)

// DefaultHeartbeat is how often an idle event stream sends a comment line.
const DefaultHeartbeat = 15 * time.Second

//go:embed static/index.html
var pageHTML []byte

// Options configures the web chat.
type Options struct {
	// Token, when set, must come with every API request as
	// "Authorization: Bearer <token>", in the page's cookie (POST
	// /api/login sets it) or, on loopback only, "?token=<token>". The
	// gateway requires one when the listener is not loopback. Without a
	// token the API answers only requests whose Host is a loopback name or
	// address, so a web page elsewhere cannot reach it by DNS rebinding.
	Token string
	// OffLoopback: the listener is not loopback, or a reverse proxy
	// forwards to it (SPEC §17). Then every request for a client must carry
	// its clientSecret, the token is never taken from a URL, and the rate
	// limit applies per remote address too. A request that carries a
	// Forwarded or X-Forwarded-For header is held to the same rules on any
	// listener (see Forwarded).
	OffLoopback bool
	// BehindProxy: a reverse proxy forwards to the listener
	// (gateway.http.behindProxy), so every request comes from its
	// address: the per-address rate limit is left to the proxy (it would
	// put every client in one bucket).
	BehindProxy bool
	// Secrets keeps the clients' secret hashes; nil keeps them in memory.
	Secrets ClientSecrets
	// MaxStreams caps the open event streams (0 = DefaultMaxStreams);
	// one client may have MaxStreamsPerClient.
	MaxStreams int
	// SessionKey gives the requester session key of a client (the gateway's
	// router). Nil means "agent:main:web:dm:<client>".
	SessionKey func(client string) string
	// Log persists the conversations. Required (NewMemoryLog for tests).
	Log Log
	// Logger; nil means zap.NewNop().
	Logger *zap.Logger
	// Heartbeat is the idle interval between event-stream comments; 0 means
	// DefaultHeartbeat.
	Heartbeat time.Duration
	// RateLimit bounds each client's posts; past it POST /api/messages
	// answers 429 with Retry-After. Zero: no limit.
	RateLimit RateLimit
	// OnRateLimited, if set, is called for each post refused by RateLimit
	// (the gateway counts them).
	OnRateLimited func(client string)
	// OnStream, if set, is told when a client opens an event stream (the
	// gateway then sends it the sub-agents panel). It must not block.
	OnStream func(client string)
	// Files serves the conversations' files (GET /api/files/<id>); nil:
	// none are served.
	Files FileStore
	// MaxFileBytes and MaxFiles bound the files of one post
	// (attachments.maxBytes, attachments.maxFiles); a file over them is
	// not kept and the person is told. SpoolDir holds a post's files while
	// the gateway stores them ("" = the system's temp dir).
	MaxFileBytes int64
	MaxFiles     int
	SpoolDir     string
	// FileLimits, when set, gives MaxFileBytes and MaxFiles at each post
	// (a config reload changes them).
	FileLimits func() (maxBytes int64, maxFiles int)
	// UploadsRefused, when set, is asked before a post that may carry
	// files is read: a reason (the state disk is nearly full) refuses it
	// with 507.
	UploadsRefused func() string
	// UploadWait is how long a post with files waits for one of the
	// MaxUploads slots (default DefaultUploadWait; tests shorten it).
	UploadWait time.Duration
}

// MaxUploads is how many posts that may carry files are read at once.
// With MaxFiles+1 spooled files of MaxFileBytes each, it bounds the spool.
// More wait for a slot, their bodies unread, up to UploadWait (default
// DefaultUploadWait), at most MaxUploadWaiters of them; the rest are
// answered 429 with Retry-After.
const (
	MaxUploads        = 8
	MaxUploadWaiters  = 256
	DefaultUploadWait = 30 * time.Second
)

// Adapter is the web chat channel.
type Adapter struct {
	opts   Options
	log    *zap.Logger
	hub    *hub
	limits *limiters
	// addrLimits applies RateLimit per remote address (off loopback).
	addrLimits *limiters
	secrets    ClientSecrets
	slots      *streamSlots
	uploads    chan struct{} // posts with files being read (MaxUploads)
	// uploadWaiters counts posts waiting for an upload slot.
	uploadWaiters atomic.Int64
	ctx           context.Context // cancelled by Stop, and by the ctx given to Start
	cancel        context.CancelFunc

	mu        sync.Mutex
	sink      channels.Sink
	started   bool
	stopWatch func() bool // stops the AfterFunc tying ctx to Start's ctx

	streams sync.WaitGroup // open event streams; Stop waits for them

	// streamsCtx ends every open event stream (EndStreams), so an HTTP
	// server shutting down is not held by them.
	streamsCtx context.Context
	endStreams context.CancelFunc
}

var (
	_ channels.Channel     = (*Adapter)(nil)
	_ channels.HTTPMounter = (*Adapter)(nil)
	_ channels.Healther    = (*Adapter)(nil)
)

// New returns a web chat adapter. Its routes answer at once; posting needs
// Start.
func New(opts Options) (*Adapter, error) {
	if opts.Log == nil {
		return nil, ErrNoLog
	}
	if opts.Token != "" && strings.TrimSpace(opts.Token) == "" {
		return nil, errors.New("web: the token is only whitespace")
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.SessionKey == nil {
		opts.SessionKey = func(client string) string { return "agent:main:web:dm:" + client }
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	ctx, cancel := context.WithCancel(context.Background())
	if opts.MaxStreams <= 0 {
		opts.MaxStreams = DefaultMaxStreams
	}
	if opts.Secrets == nil {
		opts.Secrets = &memorySecrets{m: map[string]string{}}
	}
	a := &Adapter{opts: opts, log: opts.Logger, hub: newHub(), limits: newLimiters(opts.RateLimit), ctx: ctx, cancel: cancel,
		secrets: opts.Secrets, slots: &streamSlots{max: opts.MaxStreams, byClient: map[string]int{}}, uploads: make(chan struct{}, MaxUploads)}
	if opts.OffLoopback && !opts.BehindProxy {
		a.addrLimits = newLimiters(opts.RateLimit)
	}
	a.streamsCtx, a.endStreams = context.WithCancel(ctx)
	return a, nil
}

// Name implements channels.Channel.
func (a *Adapter) Name() channels.Name { return Name }

// Start implements channels.Channel: from now on posted messages reach sink,
// until ctx is cancelled or Stop is called.
func (a *Adapter) Start(ctx context.Context, sink channels.Sink) error {
	if sink == nil {
		return errors.New("web: start: sink is nil")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ctx.Err() != nil {
		return fmt.Errorf("web: start: %w", ErrNotRunning)
	}
	if a.started {
		return errors.New("web: start: already started")
	}
	a.sink = sink
	a.started = true
	a.stopWatch = context.AfterFunc(ctx, a.cancel)
	a.log.Info("web chat started")
	return nil
}

// Stop implements channels.Channel: it refuses new messages, ends every
// event stream and waits for them (bounded by ctx).
func (a *Adapter) Stop(ctx context.Context) error {
	a.mu.Lock()
	a.cancel()
	if a.stopWatch != nil {
		a.stopWatch()
	}
	a.mu.Unlock()
	done := make(chan struct{})
	go func() {
		a.streams.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("web: stop: waiting for event streams: %w", ctx.Err())
	}
}

// Health implements channels.Healther.
func (a *Adapter) Health() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.started || a.ctx.Err() != nil {
		return ErrNotRunning
	}
	return nil
}

// runningSink returns the sink while the adapter runs.
func (a *Adapter) runningSink() (channels.Sink, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.started || a.ctx.Err() != nil {
		return nil, false
	}
	return a.sink, true
}

// Send implements channels.Channel: it appends msg to the conversation of
// the client named by to.ChatID and wakes that client's event streams. An
// announce re-delivered with the same RunID is stored and shown once. The
// web chat never splits a message.
func (a *Adapter) Send(ctx context.Context, to channels.Origin, msg channels.Message) error {
	e, err := a.entry(to, msg)
	if err != nil {
		return err
	}
	if msg.ID != "" {
		e.Key = "outbox:" + msg.ID // a re-send after a crash shows once
	}
	if _, err := a.append(ctx, to.ChatID, e); err != nil {
		return fmt.Errorf("web: send %s to %s: %w", e.Role, to.ChatID, err)
	}
	return nil
}

// entry is the conversation entry of an outbound message.
func (a *Adapter) entry(to channels.Origin, msg channels.Message) (*Entry, error) {
	if to.Channel != "" && to.Channel != Name {
		return nil, fmt.Errorf("web: send to %s: not a web origin: %w", to, channels.ErrPermanent)
	}
	if !ValidClient(to.ChatID) {
		return nil, fmt.Errorf("web: send to %q: %w: %w", to.ChatID, ErrInvalidClient, channels.ErrPermanent)
	}
	role, ok := RoleOf(msg.Kind)
	if !ok {
		return nil, fmt.Errorf("web: send to %s: unknown message kind %q: %w", to.ChatID, msg.Kind, channels.ErrPermanent)
	}
	return &Entry{Role: role, Text: msg.Text, RunID: msg.RunID, At: time.Now().UTC()}, nil
}

// RoleOf is the conversation role an outbound message of kind shows
// with; ok is false for a kind the web chat does not show.
func RoleOf(kind channels.Kind) (role string, ok bool) {
	switch kind {
	case channels.KindReply, "":
		return RoleAssistant, true
	case channels.KindAnnounce:
		return RoleAnnounce, true
	case channels.KindSystem:
		return RoleSystem, true
	}
	return "", false
}

// Delivered tells client's open event streams of e, an entry of its
// conversation the gateway stored itself (a reply delivered by its turn's
// completion, in the same transaction), as Send would have: added says
// whether that write added it (else the streams read the Log).
func (a *Adapter) Delivered(client string, e Entry, added bool) {
	if added {
		a.hub.added(client, &e, nil)
	} else {
		a.hub.notify(client)
	}
}

// append stores e and wakes the client's streams: with e itself when the
// Log added it, else to read the Log.
func (a *Adapter) append(ctx context.Context, client string, e *Entry) (int64, error) {
	seq, added, err := a.opts.Log.Append(ctx, client, e)
	if err != nil {
		return 0, err
	}
	e.Seq = seq
	if added {
		a.hub.added(client, e, e.Then)
	} else {
		a.hub.notify(client)
	}
	return seq, nil
}

// errNotStored wraps the error of a person's message the Log did not
// store: nothing was acknowledged.
var errNotStored = errors.New("web message not stored")

// take stores the person's message e of client and hands in to the
// gateway: in one step when the Log is an IntakeLog, else the entry first
// (its seq is the message's id), then sink. An error wrapping errNotStored
// means nothing was stored; any other is the sink's.
func (a *Adapter) take(ctx context.Context, sink channels.Sink, client string, e *Entry, in channels.Inbound) (int64, error) {
	if il, ok := a.opts.Log.(IntakeLog); ok {
		seq, stored, err := il.AppendInbound(ctx, client, e, in)
		if !stored {
			if err == nil {
				err = errors.New("the log did not say why")
			}
			return 0, fmt.Errorf("%w: %w", errNotStored, err)
		}
		a.hub.added(client, e, nil) // a person's message is always a new entry
		return seq, err
	}
	seq, err := a.append(ctx, client, e)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errNotStored, err)
	}
	in.Origin.MessageID = strconv.FormatInt(seq, 10)
	return seq, sink(ctx, in)
}

// Routes implements channels.HTTPMounter.
func (a *Adapter) Routes() map[string]http.Handler {
	return map[string]http.Handler{
		"GET /{$}":            a.guard(false, http.HandlerFunc(a.handlePage)),
		"POST /api/messages":  a.guard(true, http.HandlerFunc(a.handlePost)),
		"GET /api/messages":   a.guard(true, http.HandlerFunc(a.handleList)),
		"GET /api/events":     a.guard(true, http.HandlerFunc(a.handleEvents)),
		"GET /api/session":    a.guard(true, http.HandlerFunc(a.handleSession)),
		"GET /api/files/{id}": a.guard(true, http.HandlerFunc(a.handleFile)),
		"POST /api/login":     a.guard(true, http.HandlerFunc(a.handleLogin)),
	}
}

// Handler returns the routes on a fresh ServeMux, for tests and for serving
// the web chat on its own.
func (a *Adapter) Handler() http.Handler {
	mux := http.NewServeMux()
	for pattern, h := range a.Routes() {
		mux.Handle(pattern, h)
	}
	return mux
}

// ValidClient reports whether id is a valid client id: 1–64 characters of
// [A-Za-z0-9_-].
func ValidClient(id string) bool {
	if len(id) == 0 || len(id) > MaxClientLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// EndStreams closes every open /api/events stream (clients reconnect with
// Last-Event-ID); the gateway calls it when its HTTP server shuts down.
func (a *Adapter) EndStreams() { a.endStreams() }

// Wake tells client's open event streams that its conversation has new
// entries in the Log: another process (a replica sharing the Log) appended
// them.
func (a *Adapter) Wake(client string) { a.hub.notify(client) }

// WakeAll is Wake for every client with an open stream: the gateway calls
// it when it may have missed Wakes (its listener to the other replicas was
// cut and is back).
func (a *Adapter) WakeAll() { a.hub.notifyEvery() }
