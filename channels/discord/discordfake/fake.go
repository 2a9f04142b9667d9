// Package discordfake is a fake Discord for tests: the gateway websocket
// (HELLO, IDENTIFY, READY, GUILD_CREATE, RESUME/RESUMED, heartbeats,
// MESSAGE_CREATE/UPDATE, THREAD_CREATE, INTERACTION_CREATE,
// INVALID_SESSION) and the REST API under /api/v10/ (gateway/bot, users/@me,
// channels, messages with nonce/enforce_nonce, edits, history with ?after=,
// threads from a message, typing, application commands, interaction
// callbacks, multipart attachments, 429s with X-RateLimit-* headers), in
// the wire format discordgo v0.29.0 speaks. Events sent while the bot is
// disconnected are kept for its RESUME, as Discord does; a new session
// (IDENTIFY) starts without them.
package discordfake

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Gateway intents the fake looks at.
const (
	IntentGuildMessages  = 1 << 9
	IntentDirectMessages = 1 << 12
	IntentMessageContent = 1 << 15
)

// Channel types (Discord's numbers).
const (
	TypeGuildText    = 0
	TypeDM           = 1
	TypePublicThread = 11
)

// Error codes of Discord's JSON errors.
const (
	CodeUnknownChannel       = 10003
	CodeUnknownMessage       = 10008
	CodeThreadAlreadyCreated = 160004
)

// User is a Discord user.
type User struct {
	ID         string `json:"id"`
	Username   string `json:"username"`
	GlobalName string `json:"global_name,omitempty"`
	Bot        bool   `json:"bot,omitempty"`
}

// Attachment is a file on a message.
type Attachment struct {
	ID          string `json:"id"`
	Filename    string `json:"filename"`
	ContentType string `json:"content_type,omitempty"`
	Size        int    `json:"size"`
	URL         string `json:"url"`
	ProxyURL    string `json:"proxy_url"`
	data        []byte
}

// Message is a stored message.
type Message struct {
	ID                string          `json:"id"`
	Type              int             `json:"type"`
	ChannelID         string          `json:"channel_id"`
	GuildID           string          `json:"guild_id,omitempty"`
	Author            User            `json:"author"`
	Content           string          `json:"content"`
	Timestamp         string          `json:"timestamp"`
	EditedTimestamp   *string         `json:"edited_timestamp"`
	Mentions          []User          `json:"mentions"`
	MentionRoles      []string        `json:"mention_roles"`
	Attachments       []Attachment    `json:"attachments"`
	Embeds            []any           `json:"embeds"`
	Nonce             string          `json:"nonce,omitempty"`
	MessageReference  *MessageRef     `json:"message_reference,omitempty"`
	ReferencedMessage *Message        `json:"referenced_message,omitempty"`
	AllowedMentions   json.RawMessage `json:"-"`
	Edits             int             `json:"-"` // how many times the bot edited it
}

// MessageRef points at another message.
type MessageRef struct {
	MessageID string `json:"message_id"`
	ChannelID string `json:"channel_id,omitempty"`
	GuildID   string `json:"guild_id,omitempty"`
}

// Channel is a channel, DM or thread.
type Channel struct {
	ID            string `json:"id"`
	Type          int    `json:"type"`
	GuildID       string `json:"guild_id,omitempty"`
	ParentID      string `json:"parent_id,omitempty"`
	Name          string `json:"name,omitempty"`
	OwnerID       string `json:"owner_id,omitempty"`
	LastMessageID string `json:"last_message_id,omitempty"`
}

// Interaction records an application command a person used and the bot's
// answer to it.
type Interaction struct {
	ID, Token, ChannelID, Name, Args string
	User                             User
	Response                         *InteractionResponse
}

// InteractionResponse is the body of an interaction callback.
type InteractionResponse struct {
	Type int `json:"type"`
	Data struct {
		Content string `json:"content"`
		Flags   int    `json:"flags"`
	} `json:"data"`
}

// Request is one REST request the fake answered.
type Request struct {
	Method, Path, Query string
	Status              int
}

// Server is the fake.
type Server struct {
	HTTP  *httptest.Server
	Token string // the bot token (without "Bot ")
	Bot   User
	AppID string

	mu        sync.Mutex
	changed   chan struct{}
	next      int64
	channels  map[string]*Channel
	messages  map[string][]*Message // by channel, oldest first
	guilds    []string
	sessions  map[string]*session
	conn      *gwConn
	requests  []Request
	typing    map[string]int
	commands  json.RawMessage
	inters    map[string]*Interaction
	limits    []pendingLimit
	buckets   []*bucket
	identify  int
	resumes   int
	resumed   int
	invalid   bool // the next RESUME gets INVALID_SESSION
	intents   int
	gatewayOK int // GET gateway/bot served
	gatewayV9 int // GET gateway (discordgo's default) served
	closed    bool
}

// bucket is a rate-limit bucket the fake enforces as Discord does: limit
// requests per window; a request past it gets a 429.
type bucket struct {
	method, pathPrefix string
	limit              int
	window             time.Duration
	used               int
	resetAt            time.Time
	Limited            int // requests answered 429 by this bucket
}

type pendingLimit struct {
	method, pathPrefix string
	retryAfter         float64
	status             int  // 0: a 429 with retryAfter; else this error status
	lost               bool // the request is carried out, then answered status
}

type session struct {
	id     string
	seq    int64
	buffer []frame // dispatched events, for RESUME
}

type frame struct {
	Op   int    `json:"op"`
	D    any    `json:"d"`
	S    *int64 `json:"s"`
	T    string `json:"t,omitempty"`
	seqN int64
}

type gwConn struct {
	ws       *websocket.Conn
	wmu      sync.Mutex
	sess     *session
	compress bool
	ready    bool
	done     chan struct{}
}

// New starts a fake Discord; it is closed at the end of the test.
func New(t interface {
	Cleanup(func())
}) *Server {
	s := &Server{
		Token:    "fake-discord-token",
		Bot:      User{ID: "900000000000000001", Username: "herald", Bot: true},
		AppID:    "900000000000000002",
		changed:  make(chan struct{}),
		next:     1_000_000_000_000_000_000 / 1000,
		channels: map[string]*Channel{},
		messages: map[string][]*Message{},
		sessions: map[string]*session{},
		typing:   map[string]int{},
		inters:   map[string]*Interaction{},
	}
	s.HTTP = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// URL is the apiUrl to configure: "http://127.0.0.1:port/".
func (s *Server) URL() string { return s.HTTP.URL + "/" }

// Close drops the gateway connection and stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	c := s.conn
	s.conn = nil
	s.mu.Unlock()
	if c != nil {
		_ = c.ws.Close()
	}
	s.HTTP.Close()
}

// ID returns a new snowflake (increasing).
func (s *Server) ID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.newID()
}

func (s *Server) newID() string {
	s.next++
	return strconv.FormatInt(s.next, 10)
}

func (s *Server) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Wait blocks until cond holds or ctx ends; cond is evaluated again after
// every change of the fake's state (it may call the Server's methods).
func (s *Server) Wait(ctx context.Context, what string, cond func() bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("discordfake: waiting for %s: %w", what, ctx.Err())
		}
	}
}

// AddGuildChannel adds a text channel in guild.
func (s *Server) AddGuildChannel(guildID, channelID, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.channels[channelID] = &Channel{ID: channelID, Type: TypeGuildText, GuildID: guildID, Name: name}
	if !slices.Contains(s.guilds, guildID) {
		s.guilds = append(s.guilds, guildID)
	}
}

// AddDM adds a DM channel between the bot and a user.
func (s *Server) AddDM(channelID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.channels[channelID] = &Channel{ID: channelID, Type: TypeDM}
}

var mentionRE = regexp.MustCompile(`<@!?(\d+)>`)

// Say posts a message from a person into a channel (or thread) and
// dispatches MESSAGE_CREATE. replyTo, if set, makes it a reply.
func (s *Server) Say(channelID string, from User, content string, replyTo string) *Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.say(channelID, from, content, replyTo, nil)
}

// SayWithFile posts a message with one attachment.
func (s *Server) SayWithFile(channelID string, from User, content, filename, contentType string, data []byte) *Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.newID()
	a := Attachment{ID: id, Filename: filename, ContentType: contentType, Size: len(data), data: data,
		URL: s.HTTP.URL + "/attachments/" + channelID + "/" + id + "/" + filename}
	a.ProxyURL = a.URL
	return s.say(channelID, from, content, "", []Attachment{a})
}

func (s *Server) say(channelID string, from User, content, replyTo string, files []Attachment) *Message {
	ch := s.channels[channelID]
	if ch == nil {
		panic("discordfake: Say into unknown channel " + channelID)
	}
	m := &Message{ID: s.newID(), ChannelID: channelID, GuildID: ch.GuildID, Author: from, Content: content,
		Timestamp: time.Now().UTC().Format(time.RFC3339Nano), Attachments: files, Mentions: []User{}, MentionRoles: []string{}, Embeds: []any{}}
	if m.Attachments == nil {
		m.Attachments = []Attachment{}
	}
	for _, mm := range mentionRE.FindAllStringSubmatch(content, -1) {
		if mm[1] == s.Bot.ID {
			m.Mentions = append(m.Mentions, s.Bot)
		}
	}
	if replyTo != "" {
		m.Type = 19
		m.MessageReference = &MessageRef{MessageID: replyTo, ChannelID: channelID, GuildID: ch.GuildID}
		for _, o := range s.messages[channelID] {
			if o.ID == replyTo {
				c := *o
				m.ReferencedMessage = &c
			}
		}
	}
	s.store(m)
	return m
}

func (s *Server) store(m *Message) {
	s.messages[m.ChannelID] = append(s.messages[m.ChannelID], m)
	s.channels[m.ChannelID].LastMessageID = m.ID
	s.dispatch("MESSAGE_CREATE", s.wire(m))
	s.notify()
}

// restMessage is the message as the REST API returns it: Discord's REST
// message objects carry no guild_id (only gateway events do), so a client
// must take the guild from the channel.
func restMessage(m *Message) *Message {
	c := *m
	c.GuildID = ""
	if r := c.ReferencedMessage; r != nil {
		rc := *r
		rc.GuildID = ""
		c.ReferencedMessage = &rc
	}
	return &c
}

// wire is the message as the gateway delivers it: without the
// MESSAGE_CONTENT intent, the content of messages that do not mention the
// bot (and are not DMs) is empty, as on Discord.
func (s *Server) wire(m *Message) any {
	c := *m
	if s.intents&IntentMessageContent == 0 && c.GuildID != "" && c.Author.ID != s.Bot.ID && len(c.Mentions) == 0 {
		c.Content = ""
		c.Attachments = []Attachment{}
	}
	return &c
}

// Messages returns the messages in a channel (or thread), oldest first.
func (s *Server) Messages(channelID string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.messagesLocked(channelID)
}

func (s *Server) messagesLocked(channelID string) []Message {
	var out []Message
	for _, m := range s.messages[channelID] {
		out = append(out, *m)
	}
	return out
}

// deleteMessage removes message id from channel; false when it is not
// there.
func (s *Server) deleteMessage(channel, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	msgs := s.messages[channel]
	for i, m := range msgs {
		if m.ID == id {
			s.messages[channel] = append(msgs[:i:i], msgs[i+1:]...)
			s.notify()
			return true
		}
	}
	return false
}

// BotMessages returns the bot's messages in a channel, oldest first.
func (s *Server) BotMessages(channelID string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.botMessagesLocked(channelID)
}

func (s *Server) botMessagesLocked(channelID string) []Message {
	var out []Message
	for _, m := range s.messages[channelID] {
		if m.Author.ID == s.Bot.ID {
			out = append(out, *m)
		}
	}
	return out
}

// WaitBotMessages waits until the bot has posted at least n messages in a
// channel and returns them.
func (s *Server) WaitBotMessages(ctx context.Context, channelID string, n int) ([]Message, error) {
	var out []Message
	err := s.Wait(ctx, fmt.Sprintf("%d bot messages in %s", n, channelID), func() bool {
		out = s.BotMessages(channelID)
		return len(out) >= n
	})
	return out, err
}

// Channel returns a channel or thread.
func (s *Server) Channel(id string) (Channel, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.channels[id]
	if !ok {
		return Channel{}, false
	}
	return *c, true
}

// Threads returns the threads of a channel.
func (s *Server) Threads(parentID string) []Channel {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Channel
	for _, c := range s.channels {
		if c.ParentID == parentID {
			out = append(out, *c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// StartThread makes a person open a public thread from a message (the
// thread gets the message's id) and dispatches THREAD_CREATE.
func (s *Server) StartThread(parentID, messageID, name string, by User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	parent := s.channels[parentID]
	t := &Channel{ID: messageID, Type: TypePublicThread, GuildID: parent.GuildID, ParentID: parentID, Name: name, OwnerID: by.ID}
	s.channels[t.ID] = t
	s.dispatch("THREAD_CREATE", map[string]any{"id": t.ID, "type": t.Type, "guild_id": t.GuildID, "parent_id": t.ParentID,
		"name": t.Name, "owner_id": t.OwnerID, "newly_created": true})
	s.notify()
}

// Typing reports how many typing requests a channel got.
func (s *Server) Typing(channelID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.typing[channelID]
}

// Requests returns the REST requests answered so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Commands returns the body of the last bulk overwrite of the global
// application commands (nil before one).
func (s *Server) Commands() json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commands
}

// Counts returns how many IDENTIFYs and RESUMEs the gateway got, how many
// RESUMEs succeeded, and how often GET gateway/bot and GET gateway were
// asked.
func (s *Server) Counts() (identify, resume, resumed, gatewayBot, gateway int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.identify, s.resumes, s.resumed, s.gatewayOK, s.gatewayV9
}

// Connected reports whether a bot is connected and past READY/RESUMED.
func (s *Server) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn != nil && s.conn.ready
}

// Intents returns the intents of the last IDENTIFY.
func (s *Server) Intents() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.intents
}

// Drop cuts the gateway connection without a close frame (a network
// failure); the session stays resumable and events after this are kept
// for the RESUME.
func (s *Server) Drop() {
	s.mu.Lock()
	c := s.conn
	s.conn = nil
	s.notify()
	s.mu.Unlock()
	if c != nil {
		_ = c.ws.UnderlyingConn().Close()
	}
}

// InvalidateNextResume makes the next RESUME fail with INVALID_SESSION
// (d: false), so the bot must IDENTIFY a new session.
func (s *Server) InvalidateNextResume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.invalid = true
}

// RateLimitNext answers the next request whose method matches and whose
// path (after /api/v10) starts with pathPrefix with a 429 and retry_after.
func (s *Server) RateLimitNext(method, pathPrefix string, retryAfter float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits = append(s.limits, pendingLimit{method: method, pathPrefix: pathPrefix, retryAfter: retryAfter})
}

// FailNext answers the next request whose method matches and whose path
// (after /api/v10) starts with pathPrefix with status (a 5xx, say) and a
// Discord error body; failures and 429s queued for a path are answered in
// the order they were queued.
func (s *Server) FailNext(method, pathPrefix string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits = append(s.limits, pendingLimit{method: method, pathPrefix: pathPrefix, status: status})
}

// LoseNext carries out the next request whose method matches and whose
// path (after /api/v10) starts with pathPrefix, then answers it with
// status (a 5xx, say) as if the answer were lost on the way back: the
// client cannot tell whether it happened.
func (s *Server) LoseNext(method, pathPrefix string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits = append(s.limits, pendingLimit{method: method, pathPrefix: pathPrefix, status: status, lost: true})
}

// SetBucket enforces a bucket of limit requests per window on requests whose
// method matches and whose path (after /api/v10) starts with pathPrefix:
// every answer carries X-RateLimit-Limit, -Remaining, -Reset-After and
// -Bucket, and a request past the limit within the window gets a 429. It
// returns a function reporting how many requests were refused.
func (s *Server) SetBucket(method, pathPrefix string, limit int, window time.Duration) func() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := &bucket{method: method, pathPrefix: pathPrefix, limit: limit, window: window}
	s.buckets = append(s.buckets, b)
	return func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return b.Limited
	}
}

// Interact makes a person use the application command name with the
// string option "args" in a channel; it dispatches INTERACTION_CREATE.
func (s *Server) Interact(channelID string, from User, name, args string) *Interaction {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channels[channelID]
	in := &Interaction{ID: s.newID(), Token: "itok-" + s.newID(), ChannelID: channelID, Name: name, Args: args, User: from}
	s.inters[in.ID] = in
	data := map[string]any{"id": s.newID(), "name": name, "type": 1}
	if args != "" {
		data["options"] = []any{map[string]any{"name": "args", "type": 3, "value": args}}
	}
	d := map[string]any{"id": in.ID, "application_id": s.AppID, "type": 2, "data": data, "channel_id": channelID,
		"token": in.Token, "version": 1, "locale": "en-US"}
	if ch.GuildID != "" {
		d["guild_id"] = ch.GuildID
		d["member"] = map[string]any{"user": from, "roles": []string{}, "permissions": "0"}
	} else {
		d["user"] = from
	}
	s.dispatch("INTERACTION_CREATE", d)
	return in
}

// InteractionAnswer returns the callback the bot sent for an interaction.
func (s *Server) InteractionAnswer(id string) *InteractionResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in := s.inters[id]; in != nil {
		return in.Response
	}
	return nil
}

// ---- gateway ----

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func (s *Server) serveGateway(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("v") != "10" || r.URL.Query().Get("encoding") != "json" {
		http.Error(w, "gateway wants ?v=10&encoding=json, got "+r.URL.RawQuery, http.StatusBadRequest)
		return
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	c := &gwConn{ws: ws, done: make(chan struct{})}
	defer close(c.done)
	defer ws.Close()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	old := s.conn
	s.conn = c
	s.mu.Unlock()
	if old != nil {
		_ = old.ws.Close()
	}
	// heartbeat_interval in ms; long enough that tests see few beats.
	if err := c.write(frame{Op: 10, D: map[string]any{"heartbeat_interval": 45000}}); err != nil {
		return
	}
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			s.mu.Lock()
			if s.conn == c {
				s.conn = nil
				s.notify()
			}
			s.mu.Unlock()
			return
		}
		var in struct {
			Op int             `json:"op"`
			D  json.RawMessage `json:"d"`
		}
		if json.Unmarshal(data, &in) != nil {
			_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(4002, "Error while decoding payload."))
			return
		}
		switch in.Op {
		case 1: // heartbeat
			_ = c.write(frame{Op: 11})
		case 2: // identify
			var id struct {
				Token    string `json:"token"`
				Intents  int    `json:"intents"`
				Compress bool   `json:"compress"`
			}
			_ = json.Unmarshal(in.D, &id)
			if strings.TrimPrefix(id.Token, "Bot ") != s.Token {
				_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(4004, "Authentication failed."))
				return
			}
			s.mu.Lock()
			s.identify++
			s.intents = id.Intents
			c.compress = id.Compress
			sess := &session{id: "sess-" + s.newID()}
			s.sessions[sess.id] = sess
			c.sess = sess
			guilds := []any{}
			for _, g := range s.guilds {
				guilds = append(guilds, map[string]any{"id": g, "unavailable": true})
			}
			ready := map[string]any{"v": 10, "session_id": sess.id, "user": s.Bot, "guilds": guilds,
				"application": map[string]any{"id": s.AppID, "flags": 0}, "private_channels": []any{},
				"resume_gateway_url": strings.Replace(s.HTTP.URL, "http", "ws", 1) + "/gateway"}
			err := s.send(c, "READY", ready)
			for _, g := range s.guilds {
				if err == nil {
					err = s.send(c, "GUILD_CREATE", s.guildLocked(g))
				}
			}
			c.ready = true
			s.notify()
			s.mu.Unlock()
			if err != nil {
				return
			}
		case 6: // resume
			var rs struct {
				Token     string `json:"token"`
				SessionID string `json:"session_id"`
				Seq       int64  `json:"seq"`
			}
			_ = json.Unmarshal(in.D, &rs)
			s.mu.Lock()
			s.resumes++
			sess := s.sessions[rs.SessionID]
			if s.invalid || sess == nil || strings.TrimPrefix(rs.Token, "Bot ") != s.Token {
				s.invalid = false
				s.mu.Unlock()
				if err := c.write(frame{Op: 9, D: false}); err != nil {
					return
				}
				continue
			}
			s.resumed++
			c.sess = sess
			var err error
			for _, f := range sess.buffer {
				if f.seqN > rs.Seq && err == nil {
					err = c.write(f)
				}
			}
			if err == nil {
				err = s.send(c, "RESUMED", map[string]any{})
			}
			c.ready = true
			s.notify()
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}
}

func (s *Server) guildLocked(g string) map[string]any {
	var chans, threads []any
	for _, c := range s.channels {
		if c.GuildID != g {
			continue
		}
		if c.Type == TypePublicThread {
			threads = append(threads, c)
		} else {
			chans = append(chans, c)
		}
	}
	return map[string]any{"id": g, "name": "guild " + g, "channels": chans, "threads": threads, "members": []any{},
		"roles": []any{}, "emojis": []any{}, "voice_states": []any{}, "presences": []any{}}
}

// send dispatches one event on c's session (s.mu held).
func (s *Server) send(c *gwConn, t string, d any) error {
	sess := c.sess
	sess.seq++
	n := sess.seq
	f := frame{Op: 0, D: d, S: &n, T: t, seqN: n}
	sess.buffer = append(sess.buffer, f)
	if len(sess.buffer) > 1000 {
		sess.buffer = sess.buffer[len(sess.buffer)-1000:]
	}
	return c.write(f)
}

// dispatch sends an event to the connected bot, or keeps it in the current
// session's buffer for a RESUME while it is disconnected (s.mu held).
func (s *Server) dispatch(t string, d any) {
	if c := s.conn; c != nil && c.ready {
		_ = s.send(c, t, d)
		return
	}
	// Disconnected: the newest session keeps the event for its RESUME.
	var newest *session
	for _, sess := range s.sessions {
		if newest == nil || sess.id > newest.id {
			newest = sess
		}
	}
	if newest != nil {
		newest.seq++
		n := newest.seq
		newest.buffer = append(newest.buffer, frame{Op: 0, D: d, S: &n, T: t, seqN: n})
	}
}

func (c *gwConn) write(f frame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if c.compress {
		var buf bytes.Buffer
		z := zlib.NewWriter(&buf)
		_, _ = z.Write(b)
		_ = z.Close()
		return c.ws.WriteMessage(websocket.BinaryMessage, buf.Bytes())
	}
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

// ---- REST ----

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status, code int, msg string) {
	writeJSON(w, status, map[string]any{"message": msg, "code": code})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/gateway") {
		s.serveGateway(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/attachments/") {
		s.serveAttachment(w, r)
		return
	}
	rec := &statusRecorder{ResponseWriter: w, status: 200}
	s.serveAPI(rec, r)
	s.mu.Lock()
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Status: rec.status})
	s.notify()
	s.mu.Unlock()
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (s *Server) serveAttachment(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/attachments/"), "/")
	if len(parts) != 3 {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.messages[parts[0]] {
		for _, a := range m.Attachments {
			if a.ID == parts[1] {
				w.Header().Set("Content-Type", a.ContentType)
				_, _ = w.Write(a.data)
				return
			}
		}
	}
	http.NotFound(w, r)
}

// AttachmentData returns the bytes of an attachment the bot posted.
func (s *Server) AttachmentData(channelID, attachmentID string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.messages[channelID] {
		for _, a := range m.Attachments {
			if a.ID == attachmentID {
				return a.data
			}
		}
	}
	return nil
}

var (
	reChannel     = regexp.MustCompile(`^/channels/(\d+)$`)
	reMessages    = regexp.MustCompile(`^/channels/(\d+)/messages$`)
	reMessage     = regexp.MustCompile(`^/channels/(\d+)/messages/(\d+)$`)
	reThread      = regexp.MustCompile(`^/channels/(\d+)/messages/(\d+)/threads$`)
	reTyping      = regexp.MustCompile(`^/channels/(\d+)/typing$`)
	reCommands    = regexp.MustCompile(`^/applications/(\d+)/commands$`)
	reInteraction = regexp.MustCompile(`^/interactions/(\d+)/([^/]+)/callback$`)
)

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	path, ok := strings.CutPrefix(r.URL.Path, "/api/v10")
	if !ok {
		apiError(w, http.StatusNotFound, 0, "404: Not Found (the fake speaks /api/v10 only, got "+r.URL.Path+")")
		return
	}
	if m := reInteraction.FindStringSubmatch(path); m != nil && r.Method == http.MethodPost {
		// Interaction callbacks are authenticated by their token, not the bot's.
		s.interactionCallback(w, r, m[1], m[2])
		return
	}
	if r.Header.Get("Authorization") != "Bot "+s.Token {
		apiError(w, http.StatusUnauthorized, 0, "401: Unauthorized")
		return
	}
	s.mu.Lock()
	for i, l := range s.limits {
		if l.method == r.Method && strings.HasPrefix(path, l.pathPrefix) {
			s.limits = slices.Delete(s.limits, i, i+1)
			s.mu.Unlock()
			if l.lost {
				s.serveAPI(httptest.NewRecorder(), r)
			}
			if l.status != 0 {
				apiError(w, l.status, 0, strconv.Itoa(l.status)+": "+http.StatusText(l.status))
				return
			}
			w.Header().Set("Retry-After", strconv.Itoa(int(l.retryAfter+0.999)))
			w.Header().Set("X-RateLimit-Limit", "5")
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset-After", strconv.FormatFloat(l.retryAfter, 'f', 3, 64))
			w.Header().Set("X-RateLimit-Bucket", "fakebucket")
			w.Header().Set("X-RateLimit-Scope", "user")
			writeJSON(w, http.StatusTooManyRequests, map[string]any{"message": "You are being rate limited.", "retry_after": l.retryAfter, "global": false})
			return
		}
	}
	for _, b := range s.buckets {
		if b.method != r.Method || !strings.HasPrefix(path, b.pathPrefix) {
			continue
		}
		now := time.Now()
		if !now.Before(b.resetAt) {
			b.used, b.resetAt = 0, now.Add(b.window)
		}
		after := strconv.FormatFloat(b.resetAt.Sub(now).Seconds(), 'f', 3, 64)
		w.Header().Set("X-RateLimit-Limit", strconv.Itoa(b.limit))
		w.Header().Set("X-RateLimit-Reset-After", after)
		w.Header().Set("X-RateLimit-Bucket", "bucket-"+b.pathPrefix)
		if b.used >= b.limit {
			b.Limited++
			s.mu.Unlock()
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Scope", "user")
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusTooManyRequests, map[string]any{"message": "You are being rate limited.", "retry_after": b.resetAt.Sub(now).Seconds(), "global": false})
			return
		}
		b.used++
		w.Header().Set("X-RateLimit-Remaining", strconv.Itoa(b.limit-b.used))
		s.mu.Unlock()
		goto handle
	}
	s.mu.Unlock()
	// A generous bucket: discordgo reads these on every response.
	w.Header().Set("X-RateLimit-Limit", "50")
	w.Header().Set("X-RateLimit-Remaining", "49")
	w.Header().Set("X-RateLimit-Reset-After", "1.000")
	w.Header().Set("X-RateLimit-Bucket", "fakebucket")
handle:

	switch {
	case path == "/gateway/bot" && r.Method == http.MethodGet:
		s.mu.Lock()
		s.gatewayOK++
		s.mu.Unlock()
		writeJSON(w, 200, map[string]any{"url": strings.Replace(s.HTTP.URL, "http", "ws", 1) + "/gateway", "shards": 1,
			"session_start_limit": map[string]any{"total": 1000, "remaining": 999, "reset_after": 86400000, "max_concurrency": 1}})
	case path == "/gateway" && r.Method == http.MethodGet:
		s.mu.Lock()
		s.gatewayV9++
		s.mu.Unlock()
		writeJSON(w, 200, map[string]any{"url": strings.Replace(s.HTTP.URL, "http", "ws", 1) + "/gateway"})
	case path == "/users/@me" && r.Method == http.MethodGet:
		writeJSON(w, 200, s.Bot)
	case reChannel.MatchString(path) && r.Method == http.MethodGet:
		id := reChannel.FindStringSubmatch(path)[1]
		c, ok := s.Channel(id)
		if !ok {
			apiError(w, 404, CodeUnknownChannel, "Unknown Channel")
			return
		}
		writeJSON(w, 200, c)
	case reMessages.MatchString(path) && r.Method == http.MethodPost:
		s.postMessage(w, r, reMessages.FindStringSubmatch(path)[1])
	case reMessages.MatchString(path) && r.Method == http.MethodGet:
		s.history(w, r, reMessages.FindStringSubmatch(path)[1])
	case reMessage.MatchString(path) && r.Method == http.MethodGet:
		m := reMessage.FindStringSubmatch(path)
		for _, msg := range s.Messages(m[1]) {
			if msg.ID == m[2] {
				writeJSON(w, 200, restMessage(&msg))
				return
			}
		}
		apiError(w, 404, CodeUnknownMessage, "Unknown Message")
	case reMessage.MatchString(path) && r.Method == http.MethodDelete:
		m := reMessage.FindStringSubmatch(path)
		if !s.deleteMessage(m[1], m[2]) {
			apiError(w, 404, CodeUnknownMessage, "Unknown Message")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case reMessage.MatchString(path) && r.Method == http.MethodPatch:
		m := reMessage.FindStringSubmatch(path)
		s.editMessage(w, r, m[1], m[2])
	case reThread.MatchString(path) && r.Method == http.MethodPost:
		m := reThread.FindStringSubmatch(path)
		s.startThread(w, r, m[1], m[2])
	case reTyping.MatchString(path) && r.Method == http.MethodPost:
		id := reTyping.FindStringSubmatch(path)[1]
		s.mu.Lock()
		_, ok := s.channels[id]
		if ok {
			s.typing[id]++
			s.notify()
		}
		s.mu.Unlock()
		if !ok {
			apiError(w, 404, CodeUnknownChannel, "Unknown Channel")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case reCommands.MatchString(path) && r.Method == http.MethodPut:
		if reCommands.FindStringSubmatch(path)[1] != s.AppID {
			apiError(w, 403, 50001, "Missing Access")
			return
		}
		body, _ := io.ReadAll(r.Body)
		var cmds []map[string]any
		if err := json.Unmarshal(body, &cmds); err != nil {
			apiError(w, 400, 50035, "Invalid Form Body")
			return
		}
		s.mu.Lock()
		s.commands = body
		for _, c := range cmds {
			c["id"] = s.newID()
			c["application_id"] = s.AppID
			c["version"] = s.newID()
		}
		s.notify()
		s.mu.Unlock()
		writeJSON(w, 200, cmds)
	default:
		apiError(w, 404, 0, "404: Not Found "+r.Method+" "+path)
	}
}

type postBody struct {
	Content          string          `json:"content"`
	Nonce            string          `json:"nonce"`
	EnforceNonce     bool            `json:"enforce_nonce"`
	AllowedMentions  json.RawMessage `json:"allowed_mentions"`
	MessageReference *MessageRef     `json:"message_reference"`
	Attachments      []struct {
		ID       json.Number `json:"id"`
		Filename string      `json:"filename"`
	} `json:"attachments"`
}

func (s *Server) postMessage(w http.ResponseWriter, r *http.Request, channelID string) {
	var body postBody
	var files []Attachment
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			apiError(w, 400, 50109, "The request body contains invalid JSON.")
			return
		}
	case "multipart/form-data":
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				apiError(w, 400, 50035, "Invalid Form Body")
				return
			}
			data, _ := io.ReadAll(p)
			switch name := p.FormName(); {
			case name == "payload_json":
				if err := json.Unmarshal(data, &body); err != nil {
					apiError(w, 400, 50109, "The request body contains invalid JSON.")
					return
				}
			case strings.HasPrefix(name, "files["):
				files = append(files, Attachment{Filename: p.FileName(), ContentType: p.Header.Get("Content-Type"), Size: len(data), data: data})
			}
		}
	default:
		apiError(w, 400, 50006, "Cannot send an empty message")
		return
	}
	if strings.TrimSpace(body.Content) == "" && len(files) == 0 {
		apiError(w, 400, 50006, "Cannot send an empty message")
		return
	}
	if len([]rune(body.Content)) > 2000 {
		apiError(w, 400, 50035, "Invalid Form Body: content: Must be 2000 or fewer in length.")
		return
	}
	if len(body.Nonce) > 25 {
		apiError(w, 400, 50035, "Invalid Form Body: nonce: Must be 25 or fewer in length.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channels[channelID]
	if ch == nil {
		apiError(w, 404, CodeUnknownChannel, "Unknown Channel")
		return
	}
	if body.EnforceNonce && body.Nonce != "" {
		for _, m := range s.messages[channelID] {
			if m.Nonce == body.Nonce && m.Author.ID == s.Bot.ID {
				writeJSON(w, 200, restMessage(m)) // the message the first send created
				return
			}
		}
	}
	m := &Message{ID: s.newID(), ChannelID: channelID, GuildID: ch.GuildID, Author: s.Bot, Content: body.Content,
		Timestamp: time.Now().UTC().Format(time.RFC3339Nano), Nonce: body.Nonce, Mentions: []User{}, MentionRoles: []string{},
		Embeds: []any{}, AllowedMentions: body.AllowedMentions, MessageReference: body.MessageReference, Attachments: []Attachment{}}
	for _, f := range files {
		f.ID = s.newID()
		f.URL = s.HTTP.URL + "/attachments/" + channelID + "/" + f.ID + "/" + f.Filename
		f.ProxyURL = f.URL
		m.Attachments = append(m.Attachments, f)
	}
	s.store(m)
	writeJSON(w, 200, restMessage(m))
}

func (s *Server) editMessage(w http.ResponseWriter, r *http.Request, channelID, messageID string) {
	var body struct {
		Content *string `json:"content"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		apiError(w, 400, 50109, "The request body contains invalid JSON.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.channels[channelID] == nil {
		apiError(w, 404, CodeUnknownChannel, "Unknown Channel")
		return
	}
	for _, m := range s.messages[channelID] {
		if m.ID != messageID {
			continue
		}
		if m.Author.ID != s.Bot.ID {
			apiError(w, 403, 50005, "Cannot edit a message authored by another user")
			return
		}
		if body.Content != nil {
			if len([]rune(*body.Content)) > 2000 {
				apiError(w, 400, 50035, "Invalid Form Body: content: Must be 2000 or fewer in length.")
				return
			}
			m.Content = *body.Content
		}
		m.Edits++
		now := time.Now().UTC().Format(time.RFC3339Nano)
		m.EditedTimestamp = &now
		s.dispatch("MESSAGE_UPDATE", s.wire(m))
		s.notify()
		writeJSON(w, 200, restMessage(m))
		return
	}
	apiError(w, 404, CodeUnknownMessage, "Unknown Message")
}

func (s *Server) history(w http.ResponseWriter, r *http.Request, channelID string) {
	q := r.URL.Query()
	limit := 50
	if l, err := strconv.Atoi(q.Get("limit")); err == nil && l >= 1 && l <= 100 {
		limit = l
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.channels[channelID] == nil {
		apiError(w, 404, CodeUnknownChannel, "Unknown Channel")
		return
	}
	all := s.messages[channelID]
	var sel []*Message
	if after := q.Get("after"); after != "" {
		a, _ := strconv.ParseInt(after, 10, 64)
		for _, m := range all { // the `limit` oldest after `after`
			if id, _ := strconv.ParseInt(m.ID, 10, 64); id > a && len(sel) < limit {
				sel = append(sel, m)
			}
		}
	} else if before := q.Get("before"); before != "" {
		b, _ := strconv.ParseInt(before, 10, 64)
		var older []*Message
		for _, m := range all {
			if id, _ := strconv.ParseInt(m.ID, 10, 64); id < b {
				older = append(older, m)
			}
		}
		sel = older[max(0, len(older)-limit):]
	} else {
		sel = all[max(0, len(all)-limit):]
	}
	out := make([]any, 0, len(sel))
	for i := len(sel) - 1; i >= 0; i-- { // newest first, as Discord answers
		out = append(out, restMessage(sel[i]))
	}
	writeJSON(w, 200, out)
}

func (s *Server) startThread(w http.ResponseWriter, r *http.Request, channelID, messageID string) {
	var body struct {
		Name string `json:"name"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Name == "" || len([]rune(body.Name)) > 100 {
		apiError(w, 400, 50035, "Invalid Form Body: name")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	parent := s.channels[channelID]
	if parent == nil {
		apiError(w, 404, CodeUnknownChannel, "Unknown Channel")
		return
	}
	found := false
	for _, m := range s.messages[channelID] {
		found = found || m.ID == messageID
	}
	if !found {
		apiError(w, 404, CodeUnknownMessage, "Unknown Message")
		return
	}
	if _, ok := s.channels[messageID]; ok {
		apiError(w, 400, CodeThreadAlreadyCreated, "A thread has already been created for this message")
		return
	}
	// A thread started from a message has the message's id.
	t := &Channel{ID: messageID, Type: TypePublicThread, GuildID: parent.GuildID, ParentID: channelID, Name: body.Name, OwnerID: s.Bot.ID}
	s.channels[t.ID] = t
	d := map[string]any{"id": t.ID, "type": t.Type, "guild_id": t.GuildID, "parent_id": t.ParentID, "name": t.Name,
		"owner_id": t.OwnerID, "newly_created": true, "member": map[string]any{"id": t.ID, "user_id": s.Bot.ID, "flags": 0}}
	s.dispatch("THREAD_CREATE", d)
	s.notify()
	writeJSON(w, 201, t)
}

func (s *Server) interactionCallback(w http.ResponseWriter, r *http.Request, id, token string) {
	var resp InteractionResponse
	if err := json.NewDecoder(r.Body).Decode(&resp); err != nil {
		apiError(w, 400, 50109, "The request body contains invalid JSON.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.inters[id]
	if in == nil || in.Token != token {
		apiError(w, 404, 10062, "Unknown interaction")
		return
	}
	if in.Response != nil {
		apiError(w, 400, 40060, "Interaction has already been acknowledged.")
		return
	}
	in.Response = &resp
	s.notify()
	w.WriteHeader(http.StatusNoContent)
}
