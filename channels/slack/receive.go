package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
)

// replayWindow is how far X-Slack-Request-Timestamp may be from now.
const replayWindow = 5 * time.Minute

// maxSlashSeen bounds the slash-command signatures remembered inside the
// replay window (about 100 bytes each): far above what Slack sends one app.
const maxSlashSeen = 100_000

// maxBody bounds a webhook request body.
const maxBody = 1 << 20

// runSocket runs the Socket Mode client until ctx ends. slack-go reconnects
// on its own after drops and `disconnect` requests; RunContext returns only
// on fatal errors (bad app token, apps.connections.open refused), which are
// retried here with backoff so a fixed token is picked up without a restart.
func (a *Adapter) runSocket(ctx context.Context, smc *socketmode.Client) {
	backoff := time.Second
	for {
		began := time.Now()
		err := smc.RunContext(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("socket mode loop ended")
		}
		if time.Since(began) > time.Minute {
			backoff = time.Second
		}
		a.setHealth(fmt.Errorf("slack: socket mode: %w", err))
		a.log.Warn("slack socket mode failed, retrying", zap.Error(err), zap.Duration("retryIn", backoff))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, 5*time.Minute)
	}
}

// consumeSocket reads the Socket Mode client's events, decodes each and
// hands its message to the gateway, then acknowledges the envelope: a
// message is stored before Slack hears it arrived (SPEC §12), so a crash
// in between makes Slack deliver it again instead of losing it.
func (a *Adapter) consumeSocket(ctx context.Context, smc *socketmode.Client) {
	for {
		select {
		case <-ctx.Done():
			return
		case evt := <-smc.Events:
			a.handleSocketEvent(ctx, smc, evt)
		}
	}
}

func (a *Adapter) handleSocketEvent(ctx context.Context, smc *socketmode.Client, evt socketmode.Event) {
	var refused error // a message the gateway could not store now: not acked
	if evt.Request != nil && evt.Request.EnvelopeID != "" {
		defer func() {
			if refused != nil {
				// Slack sends an envelope it has no ack for again.
				a.log.Warn("slack message not taken; envelope left unacknowledged for Slack to send again",
					zap.String("envelopeId", evt.Request.EnvelopeID), zap.Error(refused))
				return
			}
			if err := smc.AckCtx(ctx, evt.Request.EnvelopeID, nil); err != nil {
				a.log.Warn("slack ack failed", zap.String("envelopeId", evt.Request.EnvelopeID), zap.Error(err))
			}
		}()
	}
	switch evt.Type {
	case socketmode.EventTypeConnecting:
		a.setHealth(errors.New("slack: socket mode disconnected, connecting"))
	case socketmode.EventTypeConnected:
		a.setHealth(nil)
		a.log.Info("slack socket mode connected")
	case socketmode.EventTypeConnectionError:
		err := errors.New("connection error")
		if ce, ok := evt.Data.(*slack.ConnectionErrorEvent); ok && ce.ErrorObj != nil {
			err = ce.ErrorObj
		}
		a.setHealth(fmt.Errorf("slack: socket mode: %w", err))
		a.log.Warn("slack socket mode connection error", zap.Error(err))
	case socketmode.EventTypeInvalidAuth:
		a.setHealth(errors.New("slack: socket mode: invalid app token"))
		a.log.Error("slack socket mode rejected the app token")
	case socketmode.EventTypeEventsAPI:
		if ev, ok := evt.Data.(slackevents.EventsAPIEvent); ok {
			refused = a.handleEventsAPI(ctx, ev)
		}
	case socketmode.EventTypeSlashCommand:
		if cmd, ok := evt.Data.(slack.SlashCommand); ok {
			a.handleSlash(ctx, cmd)
		}
	case socketmode.EventTypeIncomingError, socketmode.EventTypeErrorBadMessage, socketmode.EventTypeErrorWriteFailed:
		a.log.Debug("slack socket mode problem", zap.String("type", string(evt.Type)), zap.Any("detail", evt.Data))
	}
}

// inMsg is the part of app_mention and message events the adapter reads.
type inMsg struct {
	team, channel, channelType string
	user, botID, subtype       string
	text, ts, threadTS         string
	appMention                 bool
	files                      []slack.File
}

// handleEventsAPI hands an event's message to the gateway. It returns an
// error wrapping channels.ErrUnavailable when the gateway could not store
// it now: the event must not be acknowledged, so Slack sends it again. It
// returns nil otherwise (taken, dropped, or refused with the person told).
func (a *Adapter) handleEventsAPI(ctx context.Context, ev slackevents.EventsAPIEvent) error {
	if ev.Type != slackevents.CallbackEvent {
		return nil
	}
	switch e := ev.InnerEvent.Data.(type) {
	case *slackevents.AppMentionEvent:
		sub := ""
		if e.Edited != nil {
			sub = "message_changed"
		}
		return a.handleMessage(ctx, inMsg{team: ev.TeamID, channel: e.Channel, user: e.User, botID: e.BotID, subtype: sub,
			text: e.Text, ts: e.TimeStamp, threadTS: e.ThreadTimeStamp, appMention: true, files: e.Files})
	case *slackevents.MessageEvent:
		var files []slack.File
		if e.Message != nil {
			files = e.Message.Files
		}
		return a.handleMessage(ctx, inMsg{team: ev.TeamID, channel: e.Channel, channelType: e.ChannelType, user: e.User,
			botID: e.BotID, subtype: e.SubType, text: e.Text, ts: e.TimeStamp, threadTS: e.ThreadTimeStamp, files: files})
	}
	return nil
}

// handleMessage turns one app_mention or message event into an Inbound, or
// drops it (bot/own messages, edits and other subtypes, duplicates, senders
// Access does not admit). It returns the sink's error only when it wraps
// channels.ErrUnavailable; the message is then forgotten as seen, so
// Slack's next delivery of it is handed over again.
func (a *Adapter) handleMessage(ctx context.Context, m inMsg) error {
	a.mu.Lock()
	botID, team, sink, replyTo := a.botID, a.teamID, a.sink, a.opts.ReplyToMode
	a.mu.Unlock()
	if sink == nil {
		return nil
	}
	if m.botID != "" || m.user == "" || m.user == botID {
		return nil
	}
	switch m.subtype {
	case "", "thread_broadcast", "file_share":
	default:
		return nil // edits, deletions, joins, bot messages …
	}
	if m.team == "" {
		m.team = team
	}
	chatType := channels.ChatGroup
	if m.channelType == "im" || strings.HasPrefix(m.channel, "D") {
		chatType = channels.ChatDM
	}
	threadTS := m.threadTS
	if threadTS == m.ts {
		threadTS = "" // the root of a thread is a top-level message
	}
	mentioned := m.appMention || chatType == channels.ChatDM || mentions(m.text, botID)
	if threadTS != "" && a.threads.has(m.channel+"/"+threadTS) {
		mentioned = true
	}
	// Slack delivers a channel mention twice (app_mention and message) and
	// retries unacknowledged webhooks: deliver each message once.
	seenKey := m.channel + "/" + m.ts
	if !a.seen.add(seenKey) {
		return nil
	}
	origin := channels.Origin{
		Channel:   Name,
		Account:   m.team,
		ChatID:    m.channel,
		ChatType:  chatType,
		SenderID:  m.user,
		MessageID: m.ts,
		ThreadID:  threadTS,
	}
	if threadTS == "" && chatType == channels.ChatGroup && replyTo != ReplyToOff {
		origin.ThreadID = m.ts // the reply starts a thread under the message
	}
	var bound func() bool // a thread bound to a sub-agent (SPEC §24)
	if threadTS != "" && a.opts.Bound != nil {
		bound = func() bool { return a.opts.Bound(ctx, origin) }
	}
	admit, mentioned := a.opts.Access.AdmitInThread(chatType, m.channel, m.user, mentioned, bound)
	if !admit {
		a.log.Debug("slack message not admitted", zap.String("origin", origin.String()),
			zap.String("senderId", m.user), zap.Bool("mentioned", mentioned))
		return nil
	}
	if chatType == channels.ChatGroup && origin.ThreadID != "" && mentioned {
		a.threads.add(m.channel + "/" + origin.ThreadID)
	}
	if err := sink(ctx, channels.Inbound{
		Origin:      origin,
		Text:        stripMention(m.text, botID),
		Mentioned:   mentioned,
		At:          a.tsTime(m.ts),
		Attachments: a.attachments(m.files),
	}); err != nil {
		if errors.Is(err, channels.ErrUnavailable) {
			a.seen.remove(seenKey)
			return err
		}
		a.log.Warn("slack message not taken", zap.String("origin", origin.String()), zap.Error(err))
	}
	return nil
}

// handleSlash turns a slash command into an Inbound "/<command> <text>".
func (a *Adapter) handleSlash(ctx context.Context, cmd slack.SlashCommand) {
	a.mu.Lock()
	team, sink := a.teamID, a.sink
	a.mu.Unlock()
	if sink == nil || cmd.ChannelID == "" || cmd.UserID == "" {
		return
	}
	if cmd.TeamID != "" {
		team = cmd.TeamID
	}
	chatType := channels.ChatGroup
	if strings.HasPrefix(cmd.ChannelID, "D") || cmd.ChannelName == "directmessage" {
		chatType = channels.ChatDM
	}
	origin := channels.Origin{Channel: Name, Account: team, ChatID: cmd.ChannelID, ChatType: chatType, SenderID: cmd.UserID}
	if !a.opts.Access.Admit(chatType, cmd.ChannelID, cmd.UserID, true) {
		a.log.Debug("slack slash command not admitted", zap.String("origin", origin.String()), zap.String("senderId", cmd.UserID))
		return
	}
	command := cmd.Command
	if !strings.HasPrefix(command, "/") {
		command = "/" + command
	}
	if err := sink(ctx, channels.Inbound{
		Origin:     origin,
		SenderName: cmd.UserName,
		Text:       strings.TrimSpace(command + " " + strings.TrimSpace(cmd.Text)),
		Mentioned:  true,
		At:         a.now(),
	}); err != nil {
		a.log.Warn("slack slash command not taken", zap.String("origin", origin.String()), zap.Error(err))
	}
}

func (a *Adapter) tsTime(ts string) time.Time {
	sec, frac, _ := strings.Cut(ts, ".")
	s, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return a.now()
	}
	var us int64
	if frac != "" {
		us, _ = strconv.ParseInt((frac + "000000")[:6], 10, 64)
	}
	return time.Unix(s, us*1000)
}

func mentions(text, botID string) bool {
	return botID != "" && (strings.Contains(text, "<@"+botID+">") || strings.Contains(text, "<@"+botID+"|"))
}

var leadingMention = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\s*<@([A-Z0-9]+)(?:\|[^>]*)?>[\s:,]*`) })

// stripMention removes a leading <@BOTID> (or <@BOTID|name>) and the
// separator after it.
func stripMention(text, botID string) string {
	if botID == "" {
		return strings.TrimSpace(text)
	}
	loc := leadingMention().FindStringSubmatchIndex(text)
	if loc == nil || text[loc[2]:loc[3]] != botID {
		return strings.TrimSpace(text)
	}
	return strings.TrimSpace(text[loc[1]:])
}

// Routes returns the Events API and slash command handlers in http mode,
// and nothing in socket mode.
func (a *Adapter) Routes() map[string]http.Handler {
	if a.opts.Mode != ModeHTTP {
		return nil
	}
	return map[string]http.Handler{
		"POST " + a.opts.WebhookPath: http.HandlerFunc(a.serveEvents),
		"POST " + CommandsPath:       http.HandlerFunc(a.serveCommands),
	}
}

// verify reads the body and checks the request's signature and timestamp.
// On failure it has already answered 401.
func (a *Adapter) verify(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return nil, false
	}
	sec, err := strconv.ParseInt(r.Header.Get("X-Slack-Request-Timestamp"), 10, 64)
	if err != nil || a.now().Sub(time.Unix(sec, 0)).Abs() > replayWindow {
		a.log.Warn("slack webhook rejected: missing or stale timestamp",
			zap.String("path", r.URL.Path), zap.String("remote", r.RemoteAddr))
		http.Error(w, "stale or missing X-Slack-Request-Timestamp", http.StatusUnauthorized)
		return nil, false
	}
	sv, err := slack.NewSecretsVerifier(r.Header, a.opts.SigningSecret)
	if err == nil {
		_, _ = sv.Write(body)
		err = sv.Ensure()
	}
	if err != nil {
		a.log.Warn("slack webhook rejected: bad signature",
			zap.String("path", r.URL.Path), zap.String("remote", r.RemoteAddr), zap.Error(err))
		http.Error(w, "invalid X-Slack-Signature", http.StatusUnauthorized)
		return nil, false
	}
	return body, true
}

func (a *Adapter) serveEvents(w http.ResponseWriter, r *http.Request) {
	body, ok := a.verify(w, r)
	if !ok {
		return
	}
	var outer struct {
		Type      string `json:"type"`
		Challenge string `json:"challenge"`
	}
	if err := json.Unmarshal(body, &outer); err != nil {
		http.Error(w, "body is not JSON", http.StatusBadRequest)
		return
	}
	if outer.Type == slackevents.URLVerification {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, outer.Challenge)
		return
	}
	ctx, ok := a.receiving(w)
	if !ok {
		return
	}
	ev, err := slackevents.ParseEvent(body, slackevents.OptionNoVerifyToken())
	if err != nil {
		// Unknown or malformed events are acknowledged so Slack does not retry them.
		a.log.Debug("slack event ignored", zap.Error(err))
		w.WriteHeader(http.StatusOK)
		return
	}
	if err := a.handleEventsAPI(ctx, ev); err != nil {
		// Not stored: Slack retries an event answered with an error.
		a.log.Warn("slack message not taken; answered 503 for Slack to send it again", zap.Error(err))
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(err)))
		http.Error(w, "the gateway cannot store messages right now; try again", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// retryAfterSeconds is the wait an *channels.UnavailableError asks for, in
// whole seconds (at least 1; 5 when it names none).
func retryAfterSeconds(err error) int {
	var ue *channels.UnavailableError
	if errors.As(err, &ue) && ue.RetryAfter > 0 {
		return max(1, int((ue.RetryAfter+time.Second-1)/time.Second))
	}
	return 5
}

func (a *Adapter) serveCommands(w http.ResponseWriter, r *http.Request) {
	body, ok := a.verify(w, r)
	if !ok {
		return
	}
	ctx, ok := a.receiving(w)
	if !ok {
		return
	}
	// A slash command signed within the replay window would run again if
	// the request were replayed: each signature is taken once (SPEC §17).
	// Slack itself never retries a slash command.
	sec, _ := strconv.ParseInt(r.Header.Get("X-Slack-Request-Timestamp"), 10, 64)
	// verify accepted "v0=" and 64 hex digits in any case: the lower-cased
	// header is the one key of the signature's bytes, so a re-cased replay
	// is the same signature.
	sig := strings.ToLower(r.Header.Get("X-Slack-Signature"))
	fresh, err := a.slashSeen.add(sig, time.Unix(sec, 0), a.now())
	if err == nil && fresh && a.opts.Replays != nil {
		// Until the timestamp leaves the window (it may lie ahead of now).
		ttl := time.Unix(sec, 0).Add(replayWindow + time.Second).Sub(a.now())
		fresh, err = a.opts.Replays.TakeOnce(ctx, "slash:"+sig, ttl)
	}
	switch {
	case err != nil:
		a.log.Warn("slack slash command refused", zap.String("remote", r.RemoteAddr), zap.Error(err))
		http.Error(w, "too many slash commands at once; try again in a minute", http.StatusServiceUnavailable)
		return
	case !fresh:
		a.log.Warn("slack slash command replayed; not run again", zap.String("remote", r.RemoteAddr))
		w.WriteHeader(http.StatusOK)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	cmd, err := slack.SlashCommandParse(r)
	if err != nil {
		http.Error(w, "bad slash command form", http.StatusBadRequest)
		return
	}
	a.handleSlash(ctx, cmd)
	w.WriteHeader(http.StatusOK)
}

// receiving returns the receive context, or answers 503 before Start.
func (a *Adapter) receiving(w http.ResponseWriter) (context.Context, bool) {
	a.mu.Lock()
	ctx := a.runCtx
	a.mu.Unlock()
	if ctx == nil || ctx.Err() != nil {
		http.Error(w, "slack channel not running", http.StatusServiceUnavailable)
		return nil, false
	}
	return ctx, true
}
