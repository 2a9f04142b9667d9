// Package telegram is Herald's Telegram channel: it receives messages from
// the Bot API by long polling (getUpdates) or a webhook, decodes them into
// channels.Inbound with forum-topic origins, applies the channel's access
// rules, and sends replies back into the same chat and topic, split at
// Telegram's 4096-character limit and honouring retry_after.
//
// It uses github.com/go-telegram-bot-api/telegram-bot-api/v5 v5.5.1, which
// predates forum topics, so message_thread_id and is_topic_message are read
// from the raw update JSON and sent as extra request parameters.
//
// It must not import config, gateway, agent, subagent or store, and never
// calls an agent: it hands every admitted message to the gateway's Sink.
package telegram

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
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
		if !validSecret.MatchString(opts.WebhookSecret) {
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

func (a *Adapter) poll(ctx context.Context, done chan struct{}) {
	defer close(done)
	offset := 0
	if a.opts.Offsets != nil {
		if o, err := a.opts.Offsets.LoadOffset(ctx); err != nil {
			a.log.Warn("telegram: could not load the saved update offset; starting from the oldest unconfirmed update", zap.Error(err))
		} else {
			offset = o
		}
	}
	backoff := a.minBackoff
	timeout := int(a.opts.PollTimeout / time.Second)
	if timeout < 1 {
		timeout = 1
	}
	for ctx.Err() == nil {
		reqCtx, cancel := context.WithTimeout(ctx, a.opts.PollTimeout+15*time.Second)
		resp, err := a.bot(reqCtx).Request(tgbotapi.UpdateConfig{
			Offset: offset, Timeout: timeout, AllowedUpdates: []string{"message"},
		})
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			err = a.redact(err)
			a.mu.Lock()
			a.failures++
			a.lastErr = err
			n := a.failures
			a.mu.Unlock()
			a.log.Warn("telegram getUpdates failed", zap.Error(err), zap.Int("failures", n), zap.Duration("backoff", backoff))
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, a.maxBackoff)
			continue
		}
		a.mu.Lock()
		if a.failures >= unhealthyAfter {
			a.log.Info("telegram getUpdates recovered", zap.Int("failures", a.failures))
		}
		a.failures, a.lastErr = 0, nil
		a.mu.Unlock()
		backoff = a.minBackoff

		var raws []json.RawMessage
		if err := json.Unmarshal(resp.Result, &raws); err != nil {
			a.log.Warn("telegram getUpdates: undecodable result", zap.Error(err))
			continue
		}
		before := offset
		for _, raw := range raws {
			id := a.handle(ctx, raw)
			if id >= offset {
				offset = id + 1
			}
		}
		// Every update of the batch is stored by now (the gateway's Sink
		// stores before it returns); the next getUpdates confirms them.
		if offset != before && a.opts.Offsets != nil {
			if err := a.opts.Offsets.SaveOffset(context.WithoutCancel(ctx), offset); err != nil {
				a.log.Warn("telegram: could not save the update offset", zap.Error(err))
			}
		}
	}
}

// topicFields are the update fields v5.5.1 does not know.
type topicFields struct {
	Message *struct {
		ThreadID int  `json:"message_thread_id"`
		IsTopic  bool `json:"is_topic_message"`
	} `json:"message"`
}

// handle decodes one raw update, turns it into an Inbound and, if admitted,
// gives it to the sink. It returns the update_id (-1 if unreadable).
func (a *Adapter) handle(ctx context.Context, raw []byte) int {
	var u tgbotapi.Update
	if err := json.Unmarshal(raw, &u); err != nil {
		var id struct {
			UpdateID *int `json:"update_id"`
		}
		if json.Unmarshal(raw, &id) == nil && id.UpdateID != nil {
			a.log.Warn("telegram: skipping undecodable update", zap.Int("updateId", *id.UpdateID), zap.Error(err))
			return *id.UpdateID
		}
		a.log.Warn("telegram: skipping undecodable update", zap.Error(err))
		return -1
	}
	var extra topicFields
	_ = json.Unmarshal(raw, &extra) // same bytes decoded above; cannot fail differently
	in, ok := a.inbound(u.Message, extra)
	if !ok {
		return u.UpdateID
	}
	a.mu.Lock()
	sink := a.sink
	a.mu.Unlock()
	a.log.Debug("telegram message", zap.Int("updateId", u.UpdateID), zap.String("origin", in.Origin.String()), zap.Bool("mentioned", in.Mentioned))
	if err := sink(ctx, in); err != nil {
		a.log.Warn("telegram message not taken", zap.Int("updateId", u.UpdateID), zap.String("origin", in.Origin.String()), zap.Error(err))
	}
	return u.UpdateID
}

// inbound maps a message to an Inbound; ok is false for messages Herald
// ignores (no text, from a bot, a channel post, a command for another bot,
// or not admitted by the access rules).
func (a *Adapter) inbound(m *tgbotapi.Message, extra topicFields) (channels.Inbound, bool) {
	if m == nil || m.Chat == nil || m.From == nil || m.From.IsBot {
		return channels.Inbound{}, false
	}
	text := m.Text
	if text == "" {
		text = m.Caption
	}
	if strings.TrimSpace(text) == "" {
		return channels.Inbound{}, false
	}
	var chatType string
	switch m.Chat.Type {
	case "private":
		chatType = channels.ChatDM
	case "group", "supergroup":
		chatType = channels.ChatGroup
	default: // channel posts
		return channels.Inbound{}, false
	}
	a.mu.Lock()
	self, mention := a.self, a.mention
	a.mu.Unlock()

	threadID := 0
	if extra.Message != nil && extra.Message.IsTopic {
		threadID = extra.Message.ThreadID
	}
	text, mentioned, forOther := addressed(text, self.UserName, mention)
	if forOther && chatType == channels.ChatGroup {
		return channels.Inbound{}, false
	}
	if r := m.ReplyToMessage; r != nil && r.From != nil && r.From.ID == self.ID {
		// In a topic every message "replies" to the topic's first message;
		// only a reply to another message of the bot addresses it.
		if threadID == 0 || r.MessageID != threadID {
			mentioned = true
		}
	}
	if strings.TrimSpace(text) == "" {
		return channels.Inbound{}, false
	}
	o := channels.Origin{
		Channel:   Name,
		ChatID:    strconv.FormatInt(m.Chat.ID, 10),
		ChatType:  chatType,
		SenderID:  strconv.FormatInt(m.From.ID, 10),
		MessageID: strconv.Itoa(m.MessageID),
	}
	if threadID != 0 {
		o.ThreadID = strconv.Itoa(threadID)
	}
	if !a.opts.Access.Admit(o.ChatType, o.ChatID, o.SenderID, mentioned) {
		a.log.Debug("telegram message not admitted", zap.String("origin", o.String()), zap.String("senderId", o.SenderID), zap.Bool("mentioned", mentioned))
		return channels.Inbound{}, false
	}
	name := strings.TrimSpace(m.From.FirstName + " " + m.From.LastName)
	if name == "" {
		name = m.From.UserName
	}
	return channels.Inbound{
		Origin:     o,
		SenderName: name,
		Text:       text,
		Mentioned:  mentioned,
		At:         time.Unix(int64(m.Date), 0),
	}, true
}

var validSecret = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)

var spaces = regexp.MustCompile(`[ \t]{2,}`)

// addressed strips the bot's name from text: the @username suffix of a
// leading command (/cmd@bot → /cmd) and @username mentions. mentioned is
// true for any command for this bot and any mention; forOther is true for
// a command addressed to another bot (/cmd@otherbot).
func addressed(text, username string, mention *regexp.Regexp) (out string, mentioned, forOther bool) {
	if strings.HasPrefix(text, "/") {
		end := strings.IndexFunc(text, func(r rune) bool { return r == ' ' || r == '\n' || r == '\t' })
		if end < 0 {
			end = len(text)
		}
		cmd, target, hasTarget := strings.Cut(text[:end], "@")
		switch {
		case !hasTarget:
			mentioned = true
		case strings.EqualFold(target, username):
			text = cmd + text[end:]
			mentioned = true
		default:
			return text, false, true
		}
	}
	if mention != nil && mention.MatchString(text) {
		mentioned = true
		text = mention.ReplaceAllString(text, "$1")
		text = strings.TrimSpace(spaces.ReplaceAllString(text, " "))
	}
	return text, mentioned, false
}

// Send posts msg to the origin's chat and forum topic as plain text, split
// at 4096 characters. After an error, a retry of the same message (same
// origin, RunID and text) continues with the first part not yet posted.
func (a *Adapter) Send(ctx context.Context, to channels.Origin, msg channels.Message) error {
	chatID, err := strconv.ParseInt(to.ChatID, 10, 64)
	if err != nil {
		return fmt.Errorf("telegram: send to %s: chat id %q is not a number: %w", to, to.ChatID, channels.ErrPermanent)
	}
	if to.ThreadID != "" {
		if _, err := strconv.Atoi(to.ThreadID); err != nil {
			return fmt.Errorf("telegram: send to %s: thread id %q is not a number: %w", to, to.ThreadID, channels.ErrPermanent)
		}
	}
	if strings.TrimSpace(msg.Text) == "" {
		return nil // Telegram rejects empty messages; nothing to say
	}
	// Outside the outbox (which sends part by part with SendPart and keeps
	// the progress), every part is sent in turn.
	parts := channels.Split(msg.Text, channels.LimitTelegram)
	for i, part := range parts {
		if _, err := a.sendPart(ctx, chatID, to.ThreadID, part); err != nil {
			return fmt.Errorf("telegram: send part %d/%d to %s: %w", i+1, len(parts), to, err)
		}
	}
	return nil
}

// PartLimit implements channels.PartSender: Telegram's 4096 characters.
func (a *Adapter) PartLimit() int { return channels.LimitTelegram }

// SendPart implements channels.PartSender: one sendMessage; the platform
// id is the message_id.
func (a *Adapter) SendPart(ctx context.Context, to channels.Origin, msg channels.Message) (string, error) {
	chatID, err := strconv.ParseInt(to.ChatID, 10, 64)
	if err != nil {
		return "", fmt.Errorf("telegram: send to %s: chat id %q is not a number: %w", to, to.ChatID, channels.ErrPermanent)
	}
	if to.ThreadID != "" {
		if _, err := strconv.Atoi(to.ThreadID); err != nil {
			return "", fmt.Errorf("telegram: send to %s: thread id %q is not a number: %w", to, to.ThreadID, channels.ErrPermanent)
		}
	}
	if strings.TrimSpace(msg.Text) == "" {
		return "", nil
	}
	id, err := a.sendPart(ctx, chatID, to.ThreadID, msg.Text)
	if err != nil {
		return "", fmt.Errorf("telegram: send part %d/%d to %s: %w", msg.Part, msg.Parts, to, err)
	}
	return id, nil
}

func (a *Adapter) sendPart(ctx context.Context, chatID int64, threadID, text string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	p := tgbotapi.Params{"text": text}
	p.AddNonZero64("chat_id", chatID)
	p.AddNonEmpty("message_thread_id", threadID)
	resp, err := a.bot(ctx).MakeRequest("sendMessage", p)
	if err != nil {
		return "", classify(a.redact(err))
	}
	var m struct {
		MessageID int `json:"message_id"`
	}
	if resp != nil && json.Unmarshal(resp.Result, &m) == nil && m.MessageID != 0 {
		return strconv.Itoa(m.MessageID), nil
	}
	return "", nil
}

// classify maps a Bot API error to Herald's retry semantics: 429 →
// *RetryAfterError, other 4xx → ErrPermanent, 5xx and network errors stay
// transient.
func classify(err error) error {
	var te *tgbotapi.Error
	if !errors.As(err, &te) {
		return err
	}
	switch {
	case te.Code == http.StatusTooManyRequests || te.RetryAfter > 0:
		after := time.Duration(te.RetryAfter) * time.Second
		if after <= 0 {
			after = time.Second
		}
		return &channels.RetryAfterError{After: after, Err: fmt.Errorf("telegram %d: %s", te.Code, te.Message)}
	case te.Code >= 500:
		return fmt.Errorf("telegram %d: %s", te.Code, te.Message)
	case te.Code >= 400:
		return fmt.Errorf("telegram %d: %s: %w", te.Code, te.Message, channels.ErrPermanent)
	}
	return err
}

// Routes returns the webhook handler at "POST <webhookPath>" in webhook
// mode, and nothing when long polling.
func (a *Adapter) Routes() map[string]http.Handler {
	if a.opts.WebhookURL == "" {
		return nil
	}
	return map[string]http.Handler{"POST " + a.opts.WebhookPath: http.HandlerFunc(a.serveWebhook)}
}

func (a *Adapter) serveWebhook(w http.ResponseWriter, r *http.Request) {
	got := r.Header.Get(SecretHeader)
	if subtle.ConstantTimeCompare([]byte(got), []byte(a.opts.WebhookSecret)) != 1 {
		a.log.Warn("telegram webhook: bad secret token", zap.String("remote", r.RemoteAddr))
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	a.mu.Lock()
	ctx, started := a.runCtx, a.started
	a.mu.Unlock()
	if !started || ctx.Err() != nil {
		http.Error(w, "telegram channel not running", http.StatusServiceUnavailable)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBody))
	if err != nil {
		http.Error(w, "request body too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	var head struct {
		UpdateID *int `json:"update_id"`
	}
	if err := json.Unmarshal(body, &head); err != nil || head.UpdateID == nil {
		http.Error(w, "not a Telegram update", http.StatusBadRequest)
		return
	}
	if a.seen(*head.UpdateID) {
		w.WriteHeader(http.StatusOK) // Telegram redelivered; already handled
		return
	}
	a.handle(ctx, body)
	w.WriteHeader(http.StatusOK)
}

// seen records a webhook update id and reports whether it was already
// handled (Telegram redelivers when a response is slow).
func (a *Adapter) seen(id int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.recent[id]; ok {
		return true
	}
	a.recent[id] = struct{}{}
	a.recentIDs = append(a.recentIDs, id)
	if len(a.recentIDs) > recentUpdateSize {
		delete(a.recent, a.recentIDs[0])
		a.recentIDs = a.recentIDs[1:]
	}
	return false
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
