package telegram

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
)

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
		held := false
		for i := 0; i < len(raws); {
			// An album (several photos or files sent at once) comes as
			// messages with one media_group_id: it is one message.
			n := albumLen(raws[i:])
			id := a.handle(ctx, raws[i:i+n]...)
			i += n
			if id == notTaken {
				// The rest of the batch waits too (order), and comes again
				// with the next getUpdates from this offset.
				held = true
				break
			}
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
		if held {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, a.maxBackoff)
		}
	}
}

// topicFields are the update fields v5.5.1 does not know.
type topicFields struct {
	Message *struct {
		ThreadID int  `json:"message_thread_id"`
		IsTopic  bool `json:"is_topic_message"`
		ReplyTo  *struct {
			TopicCreated *struct{} `json:"forum_topic_created"`
		} `json:"reply_to_message"`
	} `json:"message"`
}

// handle decodes one raw update (or the updates of one album), turns it
// into an Inbound and, if admitted, gives it to the sink. It returns the
// (last) update_id (-1 if unreadable, notTaken if the gateway could not
// store it now).
func (a *Adapter) handle(ctx context.Context, raws ...json.RawMessage) int {
	last := -1
	var msgs []*tgbotapi.Message
	var extras []topicFields
	for _, raw := range raws {
		var u tgbotapi.Update
		if err := json.Unmarshal(raw, &u); err != nil {
			var id struct {
				UpdateID *int `json:"update_id"`
			}
			if json.Unmarshal(raw, &id) == nil && id.UpdateID != nil {
				a.log.Warn("telegram: skipping undecodable update", zap.Int("updateId", *id.UpdateID), zap.Error(err))
				last = max(last, *id.UpdateID)
				continue
			}
			a.log.Warn("telegram: skipping undecodable update", zap.Error(err))
			continue
		}
		last = max(last, u.UpdateID)
		var extra topicFields
		_ = json.Unmarshal(raw, &extra) // same bytes decoded above; cannot fail differently
		if u.Message != nil {
			msgs, extras = append(msgs, u.Message), append(extras, extra)
		}
	}
	if len(msgs) == 0 {
		return last
	}
	// The album's caption (and so its mention) is on one of its messages,
	// usually the first: that one leads, the files of all are its files.
	lead := 0
	for i, m := range msgs {
		if strings.TrimSpace(m.Caption) != "" || strings.TrimSpace(m.Text) != "" {
			lead = i
			break
		}
	}
	var files []channels.Attachment
	for _, m := range msgs {
		if m.From != nil && msgs[lead].From != nil && m.From.ID == msgs[lead].From.ID {
			files = append(files, a.attachments(m)...)
		}
	}
	in, ok := a.inbound(ctx, msgs[lead], extras[lead], files)
	if !ok {
		return last
	}
	a.mu.Lock()
	sink := a.sink
	a.mu.Unlock()
	a.log.Debug("telegram message", zap.Int("updateId", last), zap.String("origin", in.Origin.String()),
		zap.Bool("mentioned", in.Mentioned), zap.Int("files", len(in.Attachments)))
	if err := sink(ctx, in); err != nil {
		if errors.Is(err, channels.ErrUnavailable) {
			// Not stored (the gateway's store is away): not confirmed
			// either, so Telegram delivers it again.
			a.log.Warn("telegram message not taken; left unconfirmed for Telegram to deliver again", zap.Int("updateId", last), zap.Error(err))
			return -2
		}
		a.log.Warn("telegram message not taken", zap.Int("updateId", last), zap.String("origin", in.Origin.String()), zap.Error(err))
	}
	return last
}

// albumLen is how many updates at the start of raws form one album: 1, or
// the run of messages with the first one's media_group_id in its chat.
func albumLen(raws []json.RawMessage) int {
	group := func(raw json.RawMessage) (string, int64) {
		var u struct {
			Message *struct {
				MediaGroupID string `json:"media_group_id"`
				Chat         struct {
					ID int64 `json:"id"`
				} `json:"chat"`
			} `json:"message"`
		}
		if json.Unmarshal(raw, &u) != nil || u.Message == nil {
			return "", 0
		}
		return u.Message.MediaGroupID, u.Message.Chat.ID
	}
	g, chat := group(raws[0])
	if g == "" {
		return 1
	}
	n := 1
	for n < len(raws) {
		if g2, chat2 := group(raws[n]); g2 != g || chat2 != chat {
			break
		}
		n++
	}
	return n
}

// notTaken is what handle returns for an update the gateway could not store
// now: it stays unconfirmed.
const notTaken = -2

// inbound maps a message (with files, the attachments of it or of its
// album) to an Inbound; ok is false for messages Herald ignores (neither
// text nor files, from a bot, a channel post, a command for another bot,
// or not admitted by the access rules).
func (a *Adapter) inbound(ctx context.Context, m *tgbotapi.Message, extra topicFields, files []channels.Attachment) (channels.Inbound, bool) {
	if m == nil || m.Chat == nil || m.From == nil || m.From.IsBot {
		return channels.Inbound{}, false
	}
	text := m.Text
	if text == "" {
		text = m.Caption
	}
	if strings.TrimSpace(text) == "" && len(files) == 0 {
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
		if r.MessageID == threadID && extra.Message != nil && extra.Message.ReplyTo != nil && extra.Message.ReplyTo.TopicCreated != nil {
			// A topic the bot opened (sessions_spawn {thread: true}) is
			// a thread the bot is in (SPEC §24, §9's mention rule).
			mentioned = true
		}
	}
	if strings.TrimSpace(text) == "" && len(files) == 0 {
		return channels.Inbound{}, false
	}
	o := channels.Origin{
		Channel:   Name,
		ChatID:    strconv.FormatInt(m.Chat.ID, 10),
		ChatType:  chatType,
		SenderID:  strconv.FormatInt(m.From.ID, 10),
		MessageID: strconv.Itoa(m.MessageID),
	}
	var bound func() bool // a topic bound to a sub-agent (SPEC §24)
	if threadID != 0 {
		o.ThreadID = strconv.Itoa(threadID)
		if a.opts.Bound != nil {
			bound = func() bool { return a.opts.Bound(ctx, o) }
		}
	}
	admit, mentioned := a.opts.Access.AdmitInThread(o.ChatType, o.ChatID, o.SenderID, mentioned, bound)
	if !admit {
		a.log.Debug("telegram message not admitted", zap.String("origin", o.String()), zap.String("senderId", o.SenderID), zap.Bool("mentioned", mentioned))
		return channels.Inbound{}, false
	}
	name := strings.TrimSpace(m.From.FirstName + " " + m.From.LastName)
	if name == "" {
		name = m.From.UserName
	}
	return channels.Inbound{
		Origin:      o,
		SenderName:  name,
		Text:        text,
		Mentioned:   mentioned,
		At:          time.Unix(int64(m.Date), 0),
		Attachments: files,
	}, true
}

// validSecret reports whether s is a webhook secret Telegram accepts:
// 1–256 of A–Z, a–z, 0–9, _ and -. (A loop, not the regexp it was:
// compiling ^[…]{1,256}$ at package init cost 0.2 ms and 240 KB before
// every start, twice.)
func validSecret(s string) bool {
	if len(s) < 1 || len(s) > 256 {
		return false
	}
	for _, c := range []byte(s) {
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

var spaces = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[ \t]{2,}`) })

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
		text = strings.TrimSpace(spaces().ReplaceAllString(text, " "))
	}
	return text, mentioned, false
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
	if a.handle(ctx, body) == notTaken {
		a.unsee(*head.UpdateID)
		w.Header().Set("Retry-After", "5")
		http.Error(w, "the gateway cannot store messages right now; deliver it again", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// seen records a webhook update id and reports whether it was already
// handled (Telegram redelivers when a response is slow).
// unsee forgets id, so a re-delivery of an update that was not taken is
// handled.
func (a *Adapter) unsee(id int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.recent, id)
}

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
