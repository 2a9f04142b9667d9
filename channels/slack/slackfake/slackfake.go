// Package slackfake is a fake Slack for end-to-end tests: an httptest server
// built on slack-go's slacktest that also speaks Socket Mode. It answers
// auth.test with a fixed bot user and team, records chat.postMessage calls,
// can fail the next calls with 429 (Retry-After), 5xx or a Slack error code,
// hands out a ws:// URL from apps.connections.open, and on /ws sends real
// Socket Mode envelopes (hello, events_api, slash_commands) and records the
// client's acks. Helpers sign and post Events API payloads for http mode.
// It also serves files (files.go): a person's files on message events,
// their url_private downloads (bot token checked), and the bot's uploads
// (files.getUploadURLExternal, the upload URL, files.completeUploadExternal).
//
// It is test support only: it must not be imported by production code and
// never talks to the real Slack.
package slackfake

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/slack-go/slack/slacktest"
)

// Identities the fake answers with.
const (
	BotUserID = "U0HERALDBOT"
	BotID     = "B0HERALDBOT"
	TeamID    = "T0HERALD"
	AppID     = "A0HERALD"
	BotToken  = "xoxb-herald-test"
	AppToken  = "xapp-herald-test"
	// UserID is a default human sender.
	UserID = "U0ALICE"
)

// Post is one recorded chat.postMessage call that succeeded.
type Post struct {
	Channel  string
	ThreadTS string
	Text     string
	TS       string // the ts the fake gave the posted message
	Metadata string // the metadata form field (JSON), "" if none
}

// Update is one chat.update the fake accepted.
type Update struct {
	Channel, TS, Text string
	Metadata          string
}

// Updates returns the accepted chat.update calls, in order.
func (s *Server) Updates() []Update {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Update(nil), s.updates...)
}

// update answers chat.update like Slack: the bot's own message changes its
// text (Posted then shows the new text); an unknown ts is message_not_found.
func (s *Server) update(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	ch, ts, text := r.PostForm.Get("channel"), r.PostForm.Get("ts"), r.PostForm.Get("text")
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.posts {
		if s.posts[i].Channel == ch && s.posts[i].TS == ts {
			s.posts[i].Text = text
			if md := r.PostForm.Get("metadata"); md != "" {
				s.posts[i].Metadata = md
			}
			s.updates = append(s.updates, Update{Channel: ch, TS: ts, Text: text, Metadata: r.PostForm.Get("metadata")})
			writeJSON(w, http.StatusOK, map[string]any{"ok": true, "channel": ch, "ts": ts, "text": text})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": "message_not_found"})
}

// Server is the fake. Create it with New; it stops at test cleanup.
type Server struct {
	t  testing.TB
	st *slacktest.Server

	mu         sync.Mutex
	posts      []Post
	updates    []Update
	postCalls  int
	acks       []string
	skip       int // successful calls before the failures start
	fails      int
	failStatus int
	failAfter  string
	failCode   string
	rejectAuth bool
	conns      []*wsConn
	tsBase     int64
	seq        int64
	closed     bool
	holdPosts  int // posts recorded whose answer is then withheld until the caller hangs up
	loseStatus int // the next post is recorded, then answered this HTTP status
	done       chan struct{}
	wg         sync.WaitGroup
	fs         fileState
	// people: persons' messages (Say, SendMention), returned with the
	// bot's posts by conversations.replies; names: users.info answers.
	people       []Said
	names        map[string]string
	repliesCalls int
}

type wsConn struct {
	mu sync.Mutex // serialises writes
	c  *websocket.Conn
}

func (w *wsConn) writeJSON(v any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return w.c.WriteJSON(v)
}

// New starts a fake Slack and registers its shutdown with t.Cleanup.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, tsBase: time.Now().Unix(), done: make(chan struct{})}
	s.st = slacktest.NewTestServer(func(c slacktest.Customize) {
		c.Handle("/auth.test", s.authTest)
		c.Handle("/chat.postMessage", s.postMessage)
		c.Handle("/chat.update", s.update)
		c.Handle("/chat.getPermalink", s.permalink)
		c.Handle("/conversations.history", s.history)
		c.Handle("/conversations.replies", s.replies)
		c.Handle("/users.info", s.usersInfo)
		c.Handle("/apps.connections.open", s.connectionsOpen)
		c.Handle("/ws", s.socket)
		s.fileRoutes(c)
	})
	s.st.BotID = BotUserID
	s.st.Start()
	t.Cleanup(s.Close)
	return s
}

// URL is the API URL to configure (apiUrl), with a trailing slash.
func (s *Server) URL() string { return s.st.GetAPIURL() }

// Close drops the Socket Mode connections and stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.c.Close()
	}
	s.wg.Wait()
	s.st.Stop()
}

// FailNext makes the next n chat.postMessage calls answer HTTP status (429
// with a Retry-After header when retryAfter is not empty, or a 5xx).
func (s *Server) FailNext(n int, status int, retryAfter string) {
	s.FailNextAfter(0, n, status, retryAfter)
}

// FailNextAfter lets skip chat.postMessage calls succeed, then fails the
// following n as FailNext does (to break a multi-part message in the middle).
func (s *Server) FailNextAfter(skip, n int, status int, retryAfter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.skip, s.fails, s.failStatus, s.failAfter, s.failCode = skip, n, status, retryAfter, ""
}

// FailNextError makes the next n chat.postMessage calls answer 200 with
// {"ok":false,"error":code}, e.g. "channel_not_found".
func (s *Server) FailNextError(n int, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.skip, s.fails, s.failStatus, s.failAfter, s.failCode = 0, n, 0, "", code
}

// RejectAuth makes auth.test and apps.connections.open answer invalid_auth
// (a revoked or wrong token) until called with false.
func (s *Server) RejectAuth(reject bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejectAuth = reject
}

// Posted returns the messages posted so far, in order.
func (s *Server) Posted() []Post {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Post(nil), s.posts...)
}

// PostCalls counts chat.postMessage calls, failed ones included.
func (s *Server) PostCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.postCalls
}

// WaitPosts waits until at least n messages were posted and returns them.
// On timeout it reports a test error and returns what it has.
func (s *Server) WaitPosts(n int, timeout time.Duration) []Post {
	var got []Post
	if !s.waitFor(timeout, func() bool { got = s.Posted(); return len(got) >= n }) {
		s.t.Errorf("slackfake: waited %s for %d posts, got %d: %+v", timeout, n, len(got), got)
	}
	return got
}

// Acks returns the envelope ids the client acknowledged, in order.
func (s *Server) Acks() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.acks...)
}

// WaitAck waits until envelope id was acknowledged.
func (s *Server) WaitAck(id string, timeout time.Duration) bool {
	return s.waitFor(timeout, func() bool {
		for _, a := range s.Acks() {
			if a == id {
				return true
			}
		}
		return false
	})
}

// WaitAcks waits until at least n envelopes were acknowledged and returns
// their ids. On timeout it reports a test error and returns what it has.
func (s *Server) WaitAcks(n int, timeout time.Duration) []string {
	var got []string
	if !s.waitFor(timeout, func() bool { got = s.Acks(); return len(got) >= n }) {
		s.t.Errorf("slackfake: waited %s for %d acks, got %d", timeout, n, len(got))
	}
	return got
}

// Connected reports whether a Socket Mode client is connected.
func (s *Server) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns) > 0
}

// WaitConnected waits for a Socket Mode client.
func (s *Server) WaitConnected(timeout time.Duration) bool {
	return s.waitFor(timeout, s.Connected)
}

// DropConnections closes every Socket Mode connection, as a network
// failure would.
func (s *Server) DropConnections() {
	s.mu.Lock()
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.c.Close()
	}
}

// SendMention sends, over Socket Mode, a message mentioning the bot in
// channel (in thread threadTS if not empty) the way Slack does: an
// app_mention event and a message event for the same ts. The text gets a
// leading <@BOT> unless it already mentions the bot. It returns the
// message's ts.
func (s *Server) SendMention(channel, user, text, threadTS string) string {
	if !strings.Contains(text, "<@"+BotUserID) {
		text = "<@" + BotUserID + "> " + text
	}
	ts := s.NextTS()
	s.said(Said{Channel: channel, User: user, Text: text, TS: ts, ThreadTS: threadTS})
	s.SendEvent(MentionEvent(channel, user, text, ts, threadTS))
	s.SendEvent(MessageEvent(channelType(channel), channel, user, text, ts, threadTS))
	return ts
}

// SendDM sends a direct message event (channel_type im) and returns its ts.
func (s *Server) SendDM(channel, user, text, threadTS string) string {
	ts := s.NextTS()
	s.SendEvent(MessageEvent("im", channel, user, text, ts, threadTS))
	return ts
}

// SendMessage sends a plain message event without a mention (a channel
// message, or a thread reply) and returns its ts.
func (s *Server) SendMessage(channel, user, text, threadTS string) string {
	ts := s.NextTS()
	s.SendEvent(MessageEvent(channelType(channel), channel, user, text, ts, threadTS))
	return ts
}

// SendSlashCommand sends a slash_commands envelope (command like
// "/subagents", text its arguments) and returns the envelope id.
func (s *Server) SendSlashCommand(channel, user, command, text string) string {
	return s.SendEnvelope("slash_commands", SlashCommand(channel, user, command, text))
}

// SendEvent wraps an inner event in an event_callback and sends it as an
// events_api envelope; it returns the envelope id.
// TryMention sends a mention of the bot in channel (in thread threadTS if
// set) as one app_mention envelope over the newest Socket Mode connection,
// without failing the test when no client is connected (the chaos test
// kills the gateway at random). It returns the envelope id; Acked tells
// whether the gateway acknowledged it.
func (s *Server) TryMention(channel, user, text, threadTS string) (string, error) {
	if !strings.Contains(text, "<@"+BotUserID) {
		text = "<@" + BotUserID + "> " + text
	}
	s.mu.Lock()
	if len(s.conns) == 0 {
		s.mu.Unlock()
		return "", errors.New("slackfake: no Socket Mode client connected")
	}
	s.seq++
	id, ts := fmt.Sprintf("env-%d", s.seq), fmt.Sprintf("%d.%06d", s.tsBase, s.seq)
	c := s.conns[len(s.conns)-1]
	s.mu.Unlock()
	env := map[string]any{
		"envelope_id": id, "type": "events_api", "accepts_response_payload": false, "retry_attempt": 0, "retry_reason": "",
		"payload": json.RawMessage(EventCallback(MentionEvent(channel, user, text, ts, threadTS))),
	}
	if err := c.writeJSON(env); err != nil {
		return "", err
	}
	return id, nil
}

// HoldNextPosts makes the next n chat.postMessage calls succeed on the
// fake's side (recorded in Posted) without answering the caller until it
// hangs up: a crash between Slack accepting a post and the gateway
// hearing so.
func (s *Server) HoldNextPosts(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holdPosts = n
}

// LoseNextPost makes the next chat.postMessage call succeed on the fake's
// side (recorded in Posted) and then answer HTTP status (a 5xx, say), as
// if its answer were lost on the way back: the caller cannot tell whether
// Slack has the post.
func (s *Server) LoseNextPost(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loseStatus = status
}

// Acked reports whether the envelope id was acknowledged.
func (s *Server) Acked(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.acks, id)
}

func (s *Server) SendEvent(event map[string]any) string {
	return s.SendEnvelope("events_api", json.RawMessage(EventCallback(event)))
}

// SendEnvelope sends one Socket Mode envelope of type typ to the newest
// connection, waiting up to 10 s for a client to connect. It returns the
// envelope id, or "" (and a test error) when no client is connected.
func (s *Server) SendEnvelope(typ string, payload any) string {
	if !s.WaitConnected(10 * time.Second) {
		s.t.Errorf("slackfake: no Socket Mode client connected to send %s", typ)
		return ""
	}
	s.mu.Lock()
	s.seq++
	id := fmt.Sprintf("env-%d", s.seq)
	c := s.conns[len(s.conns)-1]
	s.mu.Unlock()
	env := map[string]any{
		"envelope_id":              id,
		"type":                     typ,
		"payload":                  payload,
		"accepts_response_payload": typ == "slash_commands",
		"retry_attempt":            0,
		"retry_reason":             "",
	}
	if err := c.writeJSON(env); err != nil {
		s.t.Errorf("slackfake: send %s envelope: %v", typ, err)
		return ""
	}
	return id
}

// NextTS returns a new, increasing Slack message ts.
func (s *Server) NextTS() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return fmt.Sprintf("%d.%06d", s.tsBase, s.seq)
}

func (s *Server) waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func channelType(channel string) string {
	if strings.HasPrefix(channel, "D") {
		return "im"
	}
	if strings.HasPrefix(channel, "G") {
		return "group"
	}
	return "channel"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) authTest(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	reject := s.rejectAuth
	s.mu.Unlock()
	if reject {
		writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"ok": true, "url": "https://herald-test.slack.com/", "team": "Herald Test", "user": "herald",
		"team_id": TeamID, "user_id": BotUserID, "bot_id": BotID,
	})
}

func (s *Server) connectionsOpen(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	reject := s.rejectAuth
	s.mu.Unlock()
	if reject {
		writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "url": s.st.GetWSURL()})
}

func (s *Server) postMessage(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.postCalls++
	if s.skip > 0 {
		s.skip--
	} else if s.fails > 0 {
		s.fails--
		status, after, code := s.failStatus, s.failAfter, s.failCode
		s.mu.Unlock()
		if code != "" {
			writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": code})
			return
		}
		if after != "" {
			w.Header().Set("Retry-After", after)
		}
		http.Error(w, http.StatusText(status), status)
		return
	}
	channel := r.PostForm.Get("channel")
	if channel == "" {
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": "channel_not_found"})
		return
	}
	s.seq++
	ts := fmt.Sprintf("%d.%06d", s.tsBase, s.seq)
	p := Post{Channel: channel, ThreadTS: r.PostForm.Get("thread_ts"), Text: r.PostForm.Get("text"), TS: ts, Metadata: r.PostForm.Get("metadata")}
	s.posts = append(s.posts, p)
	hold := s.holdPosts > 0
	if hold {
		s.holdPosts--
	}
	lost := s.loseStatus
	s.loseStatus = 0
	s.mu.Unlock()
	if lost != 0 {
		http.Error(w, http.StatusText(lost), lost)
		return
	}
	if hold {
		// Slack has the post; its answer never reaches the caller (the
		// gateway is killed meanwhile).
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"ok": true, "channel": p.Channel, "ts": ts,
		"message": map[string]any{"type": "message", "user": BotUserID, "bot_id": BotID, "text": p.Text, "ts": ts, "thread_ts": p.ThreadTS},
	})
}

// history answers conversations.history with the bot's top-level posts in
// the channel, newest first, their metadata included when asked for.
func (s *Server) history(w http.ResponseWriter, r *http.Request) {
	s.listPosts(w, r, func(p Post) bool { return p.ThreadTS == "" })
}

// replies answers conversations.replies with the bot's posts in the thread
// of ts, oldest first.
func (s *Server) replies(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	ts := r.Form.Get("ts")
	s.mu.Lock()
	s.repliesCalls++
	s.mu.Unlock()
	s.listPosts(w, r, func(p Post) bool { return p.ThreadTS == ts })
}

func (s *Server) listPosts(w http.ResponseWriter, r *http.Request, keep func(Post) bool) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	channel, withMeta := r.Form.Get("channel"), r.Form.Get("include_all_metadata") == "1"
	s.mu.Lock()
	var msgs []tsMessage
	for _, p := range s.posts {
		if p.Channel != channel || !keep(p) {
			continue
		}
		m := map[string]any{"type": "message", "user": BotUserID, "bot_id": BotID, "text": p.Text, "ts": p.TS, "thread_ts": p.ThreadTS}
		if withMeta && p.Metadata != "" {
			var md any
			if json.Unmarshal([]byte(p.Metadata), &md) == nil {
				m["metadata"] = md
			}
		}
		msgs = append(msgs, tsMessage{ts: p.TS, msg: m})
	}
	// The bot's file shares are messages of the channel too.
	msgs = append(msgs, s.shareMessages(channel, func(thread string) bool { return keep(Post{Channel: channel, ThreadTS: thread}) })...)
	if strings.HasSuffix(r.URL.Path, "/conversations.replies") {
		// The whole thread, as Slack has it: persons' messages too,
		// before latest when given.
		msgs = append(msgs, s.peopleIn(channel, r.Form.Get("ts"))...)
		if latest := r.Form.Get("latest"); latest != "" {
			msgs = slices.DeleteFunc(msgs, func(m tsMessage) bool { return !TSLess(m.ts, latest) })
		}
	}
	s.mu.Unlock()
	sortByTS(msgs)
	out := make([]map[string]any, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, m.msg)
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "messages": out, "has_more": false})
}

// Remember records a post as if the bot had made it (a post Slack accepted
// just before the gateway died, so the gateway never heard the answer).
func (s *Server) Remember(p Post) Post {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	p.TS = fmt.Sprintf("%d.%06d", s.tsBase, s.seq)
	s.posts = append(s.posts, p)
	return p
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// socket is the Socket Mode endpoint: hello, periodic pings, ack recording.
func (s *Server) socket(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.wg.Add(1)
	}
	s.mu.Unlock()
	if closed {
		http.Error(w, "closed", http.StatusServiceUnavailable)
		return
	}
	defer s.wg.Done()
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	conn := &wsConn{c: c}
	defer c.Close()
	hello := map[string]any{
		"type": "hello", "num_connections": 1,
		"connection_info": map[string]any{"app_id": AppID},
		"debug_info":      map[string]any{"host": "slackfake"},
	}
	if err := conn.writeJSON(hello); err != nil {
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.conns = append(s.conns, conn)
	s.mu.Unlock()
	defer s.forget(conn)

	stopPing := make(chan struct{})
	defer close(stopPing)
	s.wg.Go(func() {
		// slack-go reconnects when no ping arrives for 30 s.
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			_ = c.WriteControl(websocket.PingMessage, []byte("ping"), time.Now().Add(time.Second))
			select {
			case <-stopPing:
				return
			case <-s.done:
				return
			case <-tick.C:
			}
		}
	})
	for {
		var ack struct {
			EnvelopeID string `json:"envelope_id"`
		}
		if err := c.ReadJSON(&ack); err != nil {
			return
		}
		if ack.EnvelopeID != "" {
			s.mu.Lock()
			s.acks = append(s.acks, ack.EnvelopeID)
			s.mu.Unlock()
		}
	}
}

func (s *Server) forget(conn *wsConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range s.conns {
		if c == conn {
			s.conns = append(s.conns[:i], s.conns[i+1:]...)
			return
		}
	}
}

// Workspace is the fake workspace's domain in permalinks.
const Workspace = "herald-test"

// permalink answers chat.getPermalink like Slack: a link to a message the
// channel holds, message_not_found for one it does not.
func (s *Server) permalink(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	channel, ts := r.Form.Get("channel"), r.Form.Get("message_ts")
	s.mu.Lock()
	found := false
	for _, p := range s.posts {
		if p.Channel == channel && p.TS == ts {
			found = true
		}
	}
	s.mu.Unlock()
	if !found {
		writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": "message_not_found"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "channel": channel,
		"permalink": "https://" + Workspace + ".slack.com/archives/" + channel + "/p" + strings.ReplaceAll(ts, ".", "")})
}
