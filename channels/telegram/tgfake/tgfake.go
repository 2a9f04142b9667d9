// Package tgfake is a fake Telegram Bot API for tests: an httptest server
// that speaks the real Bot API wire format (`{"ok":true,"result":…}` with
// integer ids) for getMe, getUpdates (long polling, offsets), setWebhook,
// getWebhookInfo, deleteWebhook, sendMessage, editMessageText,
// sendChatAction, createForumTopic (SetForum), and files (files.go: photo, document, audio, voice and
// video messages, getFile and /file/bot<token>/<path>, sendPhoto and
// sendDocument multipart uploads), including forum-topic fields
// (message_thread_id, is_topic_message) and injected failures (429 with
// retry_after, 5xx, per-chat 4xx).
//
// It is a test helper for any package's end-to-end tests. It must not import
// Herald packages and must never reach the network beyond its own listener.
package tgfake

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Defaults of the fake bot account, returned by getMe.
const (
	BotID       int64 = 7000000001
	BotUsername       = "herald_bot"
	BotName           = "Herald"
)

// Sent is one sendMessage call the fake accepted.
type Sent struct {
	ChatID    int64
	ThreadID  int // message_thread_id, 0 when not set
	Text      string
	ReplyTo   int // reply_to_message_id, 0 when not set
	ParseMode string
	MessageID int // the id the fake assigned
}

// In describes one incoming message to queue as an update (or post to a
// webhook). Zero fields get defaults: ChatType "private", FromName "User".
type In struct {
	ChatID   int64
	ChatType string // "private", "group", "supergroup"
	ThreadID int    // > 0: a message in that forum topic
	FromID   int64
	FromName string
	Text     string
	// ReplyTo is the message_id of a message the fake knows (one queued
	// with SendText/Queue or one the bot sent) that this one replies to.
	ReplyTo int
	// A file on the message (at most one, as on Telegram; Text is then its
	// caption): a photo (sent in three sizes, this one the largest), a
	// document, an audio file, a voice note or a video.
	Photo, Document, Audio, Voice, Video *FileIn
	// MediaGroup is set by QueueAlbum: the media_group_id of an album.
	MediaGroup string
}

// Server is a running fake Bot API. Create it with New.
type Server struct {
	t     testing.TB
	token string
	srv   *httptest.Server

	mu           sync.Mutex
	fs           fileState
	changed      chan struct{} // closed and replaced whenever updates or sent change
	updates      []json.RawMessage
	updateIDs    []int
	nextUpdate   int
	nextMsg      int
	messages     map[msgKey]message // every message the fake knows, for replies
	sent         []Sent
	edits        []Edit
	actions      []ChatAction
	failNext     []*failure // nil entries let a call through
	failPolls    []failure
	failAllPolls *failure
	failChats    map[int64]failure
	webhookURL   string
	webhookSec   string
	polls        int
	// poll ends the long poll in progress (closed by the next one, as the
	// real Bot API ends it with 409 when a second getUpdates comes in).
	poll      chan struct{}
	conflicts int
	// forums are the chats that are forum supergroups (SetForum), with
	// the error createForumTopic answers there ("" = it creates topics);
	// topics are the topics created, by chat and thread id.
	forums map[int64]string
	topics []Topic
}

// Topic is one forum topic the fake created (createForumTopic).
type Topic struct {
	ChatID   int64
	ThreadID int // message_thread_id: the id of its creation service message
	Name     string
}

type msgKey struct {
	chat int64
	id   int
}

type failure struct {
	status      int
	retryAfter  int
	description string
}

// New starts a fake Bot API that accepts token and stops it when the test
// ends.
func New(t testing.TB, token string) *Server {
	t.Helper()
	s := &Server{
		t:          t,
		token:      token,
		changed:    make(chan struct{}),
		nextUpdate: 100000,
		nextMsg:    1,
		messages:   map[msgKey]message{},
		failChats:  map[int64]failure{},
		forums:     map[int64]string{},
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// URL is the apiUrl to configure (the library appends /bot<token>/<method>).
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server; pending long polls return.
func (s *Server) Close() {
	s.mu.Lock()
	s.notifyLocked()
	s.mu.Unlock()
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// FailNext makes the next n sendMessage calls fail with status: 429 carries
// parameters.retry_after = retryAfter seconds, anything else a generic
// description ("Internal Server Error" for 5xx).
func (s *Server) FailNext(n, status, retryAfter int) {
	s.FailNextAfter(0, n, status, retryAfter)
}

// FailNextAfter lets the next skip sendMessage calls succeed, then fails n
// as FailNext does: for a failure in the middle of a multi-part message.
func (s *Server) FailNextAfter(skip, n, status, retryAfter int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range skip {
		s.failNext = append(s.failNext, nil)
	}
	for range n {
		s.failNext = append(s.failNext, &failure{status: status, retryAfter: retryAfter, description: describe(status, retryAfter)})
	}
}

// FailPolls makes the next n getUpdates calls fail with status; n < 0
// makes every call fail until FailPolls(0, 0) clears the failures.
func (s *Server) FailPolls(n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failPolls, s.failAllPolls = nil, nil
	if n < 0 {
		s.failAllPolls = &failure{status: status, description: describe(status, 0)}
	}
	for range n {
		s.failPolls = append(s.failPolls, failure{status: status, description: describe(status, 0)})
	}
}

// FailChat makes every sendMessage to chatID fail with status and
// description, e.g. FailChat(42, 400, "Bad Request: chat not found") or
// FailChat(42, 403, "Forbidden: bot was blocked by the user").
func (s *Server) FailChat(chatID int64, status int, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failChats[chatID] = failure{status: status, description: description}
}

// SetForum makes chatID a forum supergroup: createForumTopic creates
// topics there. With refuse set, it fails instead with that description,
// as Telegram does for a bot without the right to manage topics (e.g.
// "Bad Request: not enough rights to create a topic"). In any other chat
// it answers "Bad Request: the chat is not a forum".
func (s *Server) SetForum(chatID int64, refuse string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forums[chatID] = refuse
}

// Topics returns the forum topics created, in order.
func (s *Server) Topics() []Topic {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Topic(nil), s.topics...)
}

// createForumTopic creates a topic like Telegram: its message_thread_id is
// the id of the forum_topic_created service message the creator (the bot)
// posts in it, and later messages in the topic reply to that message.
func (s *Server) createForumTopic(w http.ResponseWriter, p url.Values) {
	chatID, err := strconv.ParseInt(p.Get("chat_id"), 10, 64)
	if err != nil {
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: chat not found"})
		return
	}
	name := p.Get("name")
	if n := len([]rune(name)); n == 0 || n > 128 {
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: TOPIC_NAME_INVALID"})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	refuse, forum := s.forums[chatID]
	switch {
	case !forum:
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: the chat is not a forum"})
		return
	case refuse != "":
		writeError(w, failure{status: http.StatusBadRequest, description: refuse})
		return
	}
	id := s.nextMsg
	s.nextMsg++
	s.messages[msgKey{chatID, id}] = message{MessageID: id, MessageThreadID: id, IsTopicMessage: true, From: botUser(),
		Chat: chat{ID: chatID, Type: "supergroup", IsForum: true}, Date: time.Now().Unix(),
		ForumTopicCreated: &forumTopic{Name: name, IconColor: 7322096}}
	s.topics = append(s.topics, Topic{ChatID: chatID, ThreadID: id, Name: name})
	s.notifyLocked()
	writeResult(w, map[string]any{"message_thread_id": id, "name": name, "icon_color": 7322096})
}

// Webhook returns the url and secret_token of the last setWebhook ("" after
// deleteWebhook).
func (s *Server) Webhook() (url, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.webhookURL, s.webhookSec
}

// Polls is the number of getUpdates calls served so far.
func (s *Server) Polls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.polls
}

// Conflicts counts long polls ended by another getUpdates while they were
// waiting: two bot instances polling at once (Telegram answers the first
// 409 "terminated by other getUpdates request").
func (s *Server) Conflicts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conflicts
}

// SendText queues a text message update, as if user fromID wrote text in
// chatID (chatType "private", "group" or "supergroup"). threadID > 0 makes it
// a forum-topic message (is_topic_message true, message_thread_id set). It
// returns the message_id.
func (s *Server) SendText(chatID int64, chatType string, threadID int, fromID int64, text string) int {
	return s.Queue(In{ChatID: chatID, ChatType: chatType, ThreadID: threadID, FromID: fromID, Text: text})
}

// Queue queues an update for in and returns its message_id.
func (s *Server) Queue(in In) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, raw := s.updateLocked(in)
	s.updates = append(s.updates, raw)
	s.updateIDs = append(s.updateIDs, id)
	s.notifyLocked()
	return s.nextMsg - 1
}

// Pending is the number of queued updates not yet confirmed by an offset.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.updates)
}

// PostUpdate builds an update for in and POSTs it to a webhook at url with
// the X-Telegram-Bot-Api-Secret-Token header set to secret (omitted when
// empty), as Telegram does. It returns the response status.
func (s *Server) PostUpdate(url, secret string, in In) int {
	s.t.Helper()
	status, err := PostWebhook(context.Background(), url, secret, s.NewUpdate(in))
	if err != nil {
		s.t.Fatalf("tgfake: post update to %s: %v", url, err)
	}
	return status
}

// NewUpdate builds the update for in (a new update_id and message_id)
// without queueing it, for a test that posts it to webhooks itself, once
// or more, as Telegram redelivers.
func (s *Server) NewUpdate(in In) json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, raw := s.updateLocked(in)
	return raw
}

// PostWebhook POSTs a raw update JSON body to url with the secret header,
// returning the HTTP status.
func PostWebhook(ctx context.Context, url, secret string, update []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(update))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// Sent returns every message accepted by sendMessage, in order.
func (s *Server) Sent() []Sent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sent(nil), s.sent...)
}

// WaitSent waits until at least n messages were sent and returns all of
// them; it fails the test (call it from the test goroutine) after timeout.
func (s *Server) WaitSent(n int, timeout time.Duration) []Sent {
	s.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		if len(s.sent) >= n {
			out := append([]Sent(nil), s.sent...)
			s.mu.Unlock()
			return out
		}
		ch := s.changed
		got := append([]Sent(nil), s.sent...)
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			s.t.Fatalf("tgfake: waited %s for %d sent messages, got %d: %+v", timeout, n, len(got), got)
			return got
		}
	}
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Wire types: only what the fake emits, with the Bot API's field names.
type user struct {
	ID        int64  `json:"id"`
	IsBot     bool   `json:"is_bot"`
	FirstName string `json:"first_name"`
	Username  string `json:"username,omitempty"`
}

type chat struct {
	ID    int64  `json:"id"`
	Type  string `json:"type"`
	Title string `json:"title,omitempty"`
	// IsForum marks a supergroup with topics enabled.
	IsForum bool `json:"is_forum,omitempty"`
}

type message struct {
	MessageID       int      `json:"message_id"`
	MessageThreadID int      `json:"message_thread_id,omitempty"`
	IsTopicMessage  bool     `json:"is_topic_message,omitempty"`
	From            *user    `json:"from,omitempty"`
	Chat            chat     `json:"chat"`
	Date            int64    `json:"date"`
	Text            string   `json:"text,omitempty"`
	ReplyTo         *message `json:"reply_to_message,omitempty"`
	// ForumTopicCreated marks the service message that opened a topic.
	ForumTopicCreated *forumTopic `json:"forum_topic_created,omitempty"`

	Caption      string      `json:"caption,omitempty"`
	MediaGroupID string      `json:"media_group_id,omitempty"`
	Photo        []photoSize `json:"photo,omitempty"`
	Document     *fileObj    `json:"document,omitempty"`
	Audio        *fileObj    `json:"audio,omitempty"`
	Voice        *fileObj    `json:"voice,omitempty"`
	Video        *fileObj    `json:"video,omitempty"`
}

type forumTopic struct {
	Name      string `json:"name"`
	IconColor int    `json:"icon_color"`
}

type update struct {
	UpdateID int      `json:"update_id"`
	Message  *message `json:"message"`
}

func botUser() *user {
	return &user{ID: BotID, IsBot: true, FirstName: BotName, Username: BotUsername}
}

// updateLocked builds the JSON of one update for in. s.mu must be held.
func (s *Server) updateLocked(in In) (int, json.RawMessage) {
	if in.ChatType == "" {
		in.ChatType = "private"
	}
	if in.FromName == "" {
		in.FromName = "User"
	}
	m := message{
		MessageID: s.nextMsg,
		From:      &user{ID: in.FromID, FirstName: in.FromName},
		Chat:      chat{ID: in.ChatID, Type: in.ChatType, IsForum: in.ThreadID > 0},
		Date:      time.Now().Unix(),
		Text:      in.Text,
	}
	if in.ChatType != "private" {
		m.Chat.Title = "Group " + strconv.FormatInt(in.ChatID, 10)
	}
	if in.Photo != nil || in.Document != nil || in.Audio != nil || in.Voice != nil || in.Video != nil {
		m.Text, m.Caption, m.MediaGroupID = "", in.Text, in.MediaGroup
		switch {
		case in.Photo != nil:
			m.Photo = s.photoSizesLocked(in.Photo)
		case in.Document != nil:
			m.Document = s.fileObjLocked("documents", "", in.Document)
		case in.Audio != nil:
			m.Audio = s.fileObjLocked("music", ".mp3", in.Audio)
			m.Audio.Duration = 3
		case in.Voice != nil:
			m.Voice = s.fileObjLocked("voice", ".oga", in.Voice)
			m.Voice.FileName, m.Voice.Duration = "", 2 // Telegram gives a voice note no name
		case in.Video != nil:
			m.Video = s.fileObjLocked("videos", ".mp4", in.Video)
			m.Video.Duration, m.Video.Width, m.Video.Height = 4, 640, 360
		}
	}
	s.nextMsg++
	if in.ThreadID > 0 {
		m.MessageThreadID = in.ThreadID
		m.IsTopicMessage = true
		if root, ok := s.messages[msgKey{in.ChatID, in.ThreadID}]; ok && root.ForumTopicCreated != nil && in.ReplyTo == 0 {
			// In a topic every message replies to the topic's creation
			// message (as on Telegram).
			root.ReplyTo = nil
			m.ReplyTo = &root
		}
	}
	if in.ReplyTo != 0 {
		if r, ok := s.messages[msgKey{in.ChatID, in.ReplyTo}]; ok {
			r.ReplyTo = nil
			m.ReplyTo = &r
		} else {
			m.ReplyTo = &message{MessageID: in.ReplyTo, Chat: m.Chat, Date: m.Date}
		}
		if in.ThreadID == 0 {
			// A reply outside a topic still carries the reply thread id,
			// as Telegram does; it is not a topic message.
			m.MessageThreadID = in.ReplyTo
		}
	}
	s.messages[msgKey{in.ChatID, m.MessageID}] = m
	id := s.nextUpdate
	s.nextUpdate++
	raw, err := json.Marshal(update{UpdateID: id, Message: &m})
	if err != nil {
		panic(err) // plain structs always marshal
	}
	return id, raw
}

func describe(status, retryAfter int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return fmt.Sprintf("Too Many Requests: retry after %d", retryAfter)
	case status >= 500:
		return "Internal Server Error"
	case status == http.StatusUnauthorized:
		return "Unauthorized"
	case status == http.StatusForbidden:
		return "Forbidden"
	default:
		return "Bad Request"
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/file/bot") {
		s.serveFile(w, r)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/bot")
	if !ok {
		writeError(w, failure{status: http.StatusNotFound, description: "Not Found"})
		return
	}
	token, method, ok := strings.Cut(rest, "/")
	if !ok {
		writeError(w, failure{status: http.StatusNotFound, description: "Not Found"})
		return
	}
	if token != s.token {
		writeError(w, failure{status: http.StatusUnauthorized, description: "Unauthorized"})
		return
	}
	if _, ok := fileMethods[method]; ok {
		s.sendFile(w, r, method)
		return
	}
	params, err := readParams(r)
	if err != nil {
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: " + err.Error()})
		return
	}
	switch method {
	case "getMe":
		writeResult(w, botUser())
	case "getUpdates":
		s.getUpdates(w, r, params)
	case "setWebhook":
		s.mu.Lock()
		s.webhookURL, s.webhookSec = params.Get("url"), params.Get("secret_token")
		s.mu.Unlock()
		writeResult(w, true)
	case "getWebhookInfo":
		s.mu.Lock()
		info := map[string]any{"url": s.webhookURL, "has_custom_certificate": false, "pending_update_count": len(s.updates)}
		s.mu.Unlock()
		writeResult(w, info)
	case "deleteWebhook":
		s.mu.Lock()
		s.webhookURL, s.webhookSec = "", ""
		s.mu.Unlock()
		writeResult(w, true)
	case "sendMessage":
		s.sendMessage(w, params)
	case "createForumTopic":
		s.createForumTopic(w, params)
	case "getFile":
		s.getFile(w, params)
	case "editMessageText":
		s.editMessageText(w, params)
	case "sendChatAction":
		chatID, _ := strconv.ParseInt(params.Get("chat_id"), 10, 64)
		thread, _ := strconv.Atoi(params.Get("message_thread_id"))
		s.mu.Lock()
		s.actions = append(s.actions, ChatAction{ChatID: chatID, ThreadID: thread, Action: params.Get("action")})
		s.mu.Unlock()
		writeResult(w, true)
	default:
		writeError(w, failure{status: http.StatusNotFound, description: "Not Found: method not found"})
	}
}

func (s *Server) getUpdates(w http.ResponseWriter, r *http.Request, p url.Values) {
	offset, _ := strconv.Atoi(p.Get("offset"))
	timeout, _ := strconv.Atoi(p.Get("timeout"))
	limit, _ := strconv.Atoi(p.Get("limit"))
	if limit <= 0 || limit > 100 {
		limit = 100
	}
	s.mu.Lock()
	s.polls++
	if f := s.failAllPolls; f != nil {
		s.mu.Unlock()
		writeError(w, *f)
		return
	}
	if len(s.failPolls) > 0 {
		f := s.failPolls[0]
		s.failPolls = s.failPolls[1:]
		s.mu.Unlock()
		writeError(w, f)
		return
	}
	if s.webhookURL != "" {
		s.mu.Unlock()
		writeError(w, failure{status: http.StatusConflict, description: "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"})
		return
	}
	if s.poll != nil {
		close(s.poll) // a second poller: the first one ends with 409
	}
	mine := make(chan struct{})
	s.poll = mine
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.poll == mine {
			s.poll = nil
		}
		s.mu.Unlock()
	}()

	deadline := time.NewTimer(time.Duration(timeout) * time.Second)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		// An offset confirms every update before it.
		if offset != 0 {
			for len(s.updateIDs) > 0 && s.updateIDs[0] < offset {
				s.updateIDs, s.updates = s.updateIDs[1:], s.updates[1:]
			}
		}
		if len(s.updates) > 0 || timeout <= 0 {
			n := min(limit, len(s.updates))
			out := append([]json.RawMessage{}, s.updates[:n]...)
			s.mu.Unlock()
			writeResult(w, out)
			return
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			timeout = 0
		case <-mine:
			s.mu.Lock()
			s.conflicts++
			s.mu.Unlock()
			writeError(w, failure{status: http.StatusConflict, description: "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"})
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (s *Server) sendMessage(w http.ResponseWriter, p url.Values) {
	chatID, err := strconv.ParseInt(p.Get("chat_id"), 10, 64)
	if err != nil {
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: chat not found"})
		return
	}
	text := p.Get("text")
	if strings.TrimSpace(text) == "" {
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: message text is empty"})
		return
	}
	if n := len([]rune(text)); n > 4096 {
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: message is too long"})
		return
	}
	thread, _ := strconv.Atoi(p.Get("message_thread_id"))
	replyTo, _ := strconv.Atoi(p.Get("reply_to_message_id"))

	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.failChats[chatID]; ok {
		writeError(w, f)
		return
	}
	if len(s.failNext) > 0 {
		f := s.failNext[0]
		s.failNext = s.failNext[1:]
		if f != nil {
			writeError(w, *f)
			return
		}
	}
	chatType := "private"
	if chatID < 0 {
		chatType = "supergroup"
	}
	m := message{
		MessageID:       s.nextMsg,
		MessageThreadID: thread,
		IsTopicMessage:  thread > 0,
		From:            botUser(),
		Chat:            chat{ID: chatID, Type: chatType, IsForum: thread > 0},
		Date:            time.Now().Unix(),
		Text:            text,
	}
	s.nextMsg++
	if replyTo != 0 {
		if r, ok := s.messages[msgKey{chatID, replyTo}]; ok {
			r.ReplyTo = nil
			m.ReplyTo = &r
		}
	}
	s.messages[msgKey{chatID, m.MessageID}] = m
	s.sent = append(s.sent, Sent{
		ChatID: chatID, ThreadID: thread, Text: text, ReplyTo: replyTo,
		ParseMode: p.Get("parse_mode"), MessageID: m.MessageID,
	})
	s.notifyLocked()
	writeResult(w, m)
}

// Edit is one editMessageText the fake accepted.
type Edit struct {
	ChatID    int64
	MessageID int
	Text      string
}

// ChatAction is one sendChatAction the fake received.
type ChatAction struct {
	ChatID   int64
	ThreadID int
	Action   string
}

// Edits returns the accepted edits, in order.
func (s *Server) Edits() []Edit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Edit(nil), s.edits...)
}

// ChatActions returns the chat actions received, in order.
func (s *Server) ChatActions() []ChatAction {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ChatAction(nil), s.actions...)
}

// editMessageText changes a message the bot sent, as the Bot API does: an
// unknown message and an unchanged text are 400s; injected failures (429
// with retry_after included) apply as to sendMessage. Sent() then shows the
// new text.
func (s *Server) editMessageText(w http.ResponseWriter, p url.Values) {
	chatID, _ := strconv.ParseInt(p.Get("chat_id"), 10, 64)
	id, _ := strconv.Atoi(p.Get("message_id"))
	text := p.Get("text")
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.failNext) > 0 {
		f := s.failNext[0]
		s.failNext = s.failNext[1:]
		if f != nil {
			writeError(w, *f)
			return
		}
	}
	m, ok := s.messages[msgKey{chatID, id}]
	switch {
	case !ok || m.From == nil || m.From.ID != botUser().ID:
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: message to edit not found"})
		return
	case strings.TrimSpace(text) == "":
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: message text is empty"})
		return
	case len([]rune(text)) > 4096:
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: MESSAGE_TOO_LONG"})
		return
	case m.Text == text:
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message"})
		return
	}
	m.Text = text
	s.messages[msgKey{chatID, id}] = m
	for i := range s.sent {
		if s.sent[i].ChatID == chatID && s.sent[i].MessageID == id {
			s.sent[i].Text = text
		}
	}
	s.edits = append(s.edits, Edit{ChatID: chatID, MessageID: id, Text: text})
	s.notifyLocked()
	writeResult(w, m)
}

// readParams accepts the three ways the Bot API takes parameters: query
// string, form body and JSON body.
func readParams(r *http.Request) (url.Values, error) {
	vals := r.URL.Query()
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil && err != io.EOF {
			return nil, fmt.Errorf("can't parse JSON body: %v", err)
		}
		for k, v := range body {
			switch v := v.(type) {
			case string:
				vals.Set(k, v)
			case float64:
				vals.Set(k, strconv.FormatFloat(v, 'f', -1, 64))
			default:
				b, _ := json.Marshal(v)
				vals.Set(k, string(b))
			}
		}
	case "application/x-www-form-urlencoded", "multipart/form-data":
		if err := r.ParseMultipartForm(1 << 20); err != nil && err != http.ErrNotMultipart {
			return nil, fmt.Errorf("can't parse form: %v", err)
		}
		for k, v := range r.PostForm {
			vals[k] = v
		}
	}
	return vals, nil
}

func writeResult(w http.ResponseWriter, result any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": result})
}

func writeError(w http.ResponseWriter, f failure) {
	body := map[string]any{"ok": false, "error_code": f.status, "description": f.description}
	if f.retryAfter > 0 {
		body["parameters"] = map[string]any{"retry_after": f.retryAfter}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.status)
	_ = json.NewEncoder(w).Encode(body)
}
