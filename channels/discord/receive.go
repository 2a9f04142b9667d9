package discord

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bwmarrin/discordgo"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
)

// Keys in the adapter's KV.
const (
	keyCursors = "cursors" // JSON {channelId: last message id handled}
	keyThread  = "thread." // + thread id: the bot is in it
)

// retryHeld is how long a channel whose message the gateway could not
// store waits before it is caught up again, and the first backoff of a
// channel whose history could not be read.
const retryHeld = 5 * time.Second

// work handles gateway events one at a time, in the order they came: the
// sink is called here, and a channel's cursor advances only past messages
// the gateway took (or Herald ignores). Held channels are caught up again
// when their hold is due.
func (a *Adapter) work(ctx context.Context) {
	var timer *time.Timer
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-retry:
			for _, ch := range a.due(time.Now()) {
				if ctx.Err() != nil {
					return
				}
				a.catchUp(ctx, ch) // the channel stays held until it succeeds
			}
		case e := <-a.events:
			switch e := e.(type) {
			case *discordgo.Ready:
				a.ready(ctx, e)
			case *discordgo.Resumed:
				a.log.Info("discord gateway session resumed")
			case *discordgo.ThreadCreate:
				if e.Channel != nil {
					a.remember(e.Channel)
					if e.OwnerID == a.Self().ID || e.Member != nil && e.Member.UserID == a.Self().ID {
						a.markThread(ctx, e.ID)
					}
				}
			case *discordgo.GuildCreate:
				if e.Guild != nil {
					a.guild(ctx, e.Guild)
				}
			case *discordgo.MessageCreate:
				if e.Message != nil {
					a.message(ctx, e.Message, true)
				}
			case *discordgo.InteractionCreate:
				if e.Interaction != nil {
					a.interaction(ctx, e.Interaction)
				}
			}
		}
		if timer != nil {
			timer.Stop()
			timer, retry = nil, nil
		}
		if next, ok := a.nextDue(); ok {
			timer = time.NewTimer(time.Until(next))
			retry = timer.C
		}
	}
}

// due lists the held channels whose catch-up is due at now, in id order.
func (a *Adapter) due(now time.Time) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var chans []string
	for ch, h := range a.held {
		if !h.at.After(now) {
			chans = append(chans, ch)
		}
	}
	slices.SortFunc(chans, compareIDs)
	return chans
}

// nextDue is when the next held channel is caught up again.
func (a *Adapter) nextDue() (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var next time.Time
	for _, h := range a.held {
		if next.IsZero() || h.at.Before(next) {
			next = h.at
		}
	}
	return next, !next.IsZero()
}

// holdFor holds channel ch: its live messages wait, and it is caught up
// again after wait.
func (a *Adapter) holdFor(ch string, wait time.Duration, failed bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.held[ch]
	if failed {
		h.fails++
	}
	h.at = time.Now().Add(wait)
	a.held[ch] = h
}

// release ends the hold of channel ch: a catch-up read it to the end.
func (a *Adapter) release(ch string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.held, ch)
}

// readBackoff is how long channel ch waits after its history could not be
// read (err): Discord's Retry-After for a 429, else a backoff doubling from
// retryHeld up to maxBackoff.
func (a *Adapter) readBackoff(ch string, err error) time.Duration {
	var ra *channels.RetryAfterError
	if errors.As(classify(err), &ra) && ra.After > 0 {
		return min(ra.After, maxBackoff)
	}
	a.mu.Lock()
	fails := a.held[ch].fails
	a.mu.Unlock()
	wait := a.retryHeld
	for i := 0; i < fails && wait < maxBackoff; i++ {
		wait *= 2
	}
	return min(wait, maxBackoff)
}

// ready starts a new gateway session (not a resume): events of the old one
// are gone, so every channel with a cursor is caught up over REST, and the
// application commands are registered once.
func (a *Adapter) ready(ctx context.Context, r *discordgo.Ready) {
	a.mu.Lock()
	if r.User != nil {
		a.self = *r.User
	}
	if a.appID == "" {
		a.appID = a.opts.ApplicationID
		if a.appID == "" && r.Application != nil {
			a.appID = r.Application.ID
		}
	}
	register := !a.commands
	chans := make([]string, 0, len(a.cursors))
	for ch := range a.cursors {
		chans = append(chans, ch)
	}
	a.mu.Unlock()
	a.log.Info("discord gateway session ready", zap.Int("guilds", len(r.Guilds)), zap.Int("catchUpChannels", len(chans)))
	if register {
		if err := a.registerCommands(ctx); err != nil {
			a.log.Warn("discord: could not register the application commands; they work as text", zap.Error(err))
		} else {
			a.mu.Lock()
			a.commands = true
			a.mu.Unlock()
		}
	}
	slices.SortFunc(chans, func(x, y string) int { return compareIDs(x, y) })
	for _, ch := range chans {
		if ctx.Err() != nil {
			return
		}
		a.catchUp(ctx, ch)
	}
}

// guild starts a cursor at the channel's last message for every channel
// and active thread of a guild that Herald serves and has none yet, so a
// restart catches up a channel even when the bot never saw a message there.
func (a *Adapter) guild(ctx context.Context, g *discordgo.Guild) {
	for _, list := range [][]*discordgo.Channel{g.Channels, g.Threads} {
		for _, c := range list {
			if c == nil || c.ID == "" {
				continue
			}
			info := a.remember(c)
			chat := c.ID
			if info.thread && info.parentID != "" {
				chat = info.parentID
			}
			switch c.Type {
			case discordgo.ChannelTypeGuildText, discordgo.ChannelTypeGuildNews,
				discordgo.ChannelTypeGuildPublicThread, discordgo.ChannelTypeGuildPrivateThread, discordgo.ChannelTypeGuildNewsThread:
			default:
				continue
			}
			if !a.serves(channels.ChatGroup, chat) || a.cursor(c.ID) != "" {
				continue
			}
			last := c.LastMessageID
			if last == "" {
				last = "0" // no message yet: everything after a restart is new
			}
			a.advance(ctx, c.ID, last, true)
		}
	}
}

// catchUp fetches what channel ch received after its cursor (GET
// channels/{id}/messages?after=) and handles it oldest first. Until it has
// read to the end the channel is held: when Discord does not answer (a 429,
// a 5xx, the network) its live messages wait and the catch-up is tried
// again later from the same cursor, so the cursor never passes a message
// not read.
func (a *Adapter) catchUp(ctx context.Context, ch string) {
	for page := 0; page < catchUpPages; page++ {
		after := a.cursor(ch)
		if after == "" {
			a.release(ch)
			return
		}
		rctx, cancel := context.WithTimeout(ctx, sendTimeout)
		msgs, err := a.s.ChannelMessages(ch, 100, "", after, "", discordgo.WithContext(rctx))
		cancel()
		if err != nil {
			var re *discordgo.RESTError
			if errors.As(err, &re) && re.Response != nil && (re.Response.StatusCode == 404 || re.Response.StatusCode == 403) {
				a.log.Info("discord: channel gone or not readable; no longer caught up", zap.String("channelId", ch), zap.Error(err))
				a.dropCursor(ctx, ch)
				a.release(ch)
				return
			}
			if ctx.Err() != nil {
				return // stopping: the stored cursor is caught up from at the next start
			}
			wait := a.readBackoff(ch, err)
			a.holdFor(ch, wait, true)
			a.log.Warn("discord: catch-up failed; the channel's messages wait for it and it is tried again", zap.String("channelId", ch),
				zap.Duration("retryIn", wait), zap.Error(a.redact(err)))
			return
		}
		slices.SortFunc(msgs, func(x, y *discordgo.Message) int { return compareIDs(x.ID, y.ID) })
		for _, m := range msgs {
			if !a.message(ctx, m, false) {
				return // held: the rest waits for the next catch-up
			}
		}
		if len(msgs) > 0 {
			a.log.Info("discord: caught up missed messages", zap.String("channelId", ch), zap.Int("messages", len(msgs)))
		}
		if len(msgs) < 100 {
			a.release(ch)
			return
		}
	}
	a.release(ch)
	a.log.Warn("discord: catch-up stopped after its page limit; the channel's newer missed messages are skipped", zap.String("channelId", ch),
		zap.Int("messages", catchUpPages*100), zap.String("after", a.cursor(ch)))
}

// message handles one message from the gateway (live) or a catch-up. It
// reports false when the gateway could not store it: the channel is held
// until a catch-up, which starts from the cursor, so nothing is lost.
func (a *Adapter) message(ctx context.Context, m *discordgo.Message, live bool) bool {
	if m.Author == nil || m.ChannelID == "" || m.ID == "" {
		return true
	}
	a.mu.Lock()
	_, held := a.held[m.ChannelID]
	cur := a.cursors[m.ChannelID]
	self := a.self
	a.mu.Unlock()
	if live && held {
		return true // the catch-up of this channel fetches it
	}
	if cur != "" && compareIDs(m.ID, cur) <= 0 {
		return true // handled already (a resume or catch-up overlap)
	}
	if m.Author.ID == self.ID {
		// The bot's own post: it is in that thread now.
		if info, ok := a.channelInfo(ctx, m.ChannelID, m.GuildID); ok && info.thread {
			a.markThread(ctx, m.ChannelID)
		}
		a.advance(ctx, m.ChannelID, m.ID, false)
		return true
	}
	in, serve, ok := a.inbound(ctx, m)
	if ok {
		a.mu.Lock()
		sink := a.sink
		a.mu.Unlock()
		a.log.Debug("discord message", zap.String("messageId", m.ID), zap.String("origin", in.Origin.String()), zap.Bool("mentioned", in.Mentioned))
		if err := sink(ctx, in); err != nil {
			if errors.Is(err, channels.ErrUnavailable) {
				a.log.Warn("discord message not taken; its channel is caught up again later", zap.String("messageId", m.ID), zap.Error(err))
				a.holdFor(m.ChannelID, a.retryHeld, false)
				if cur == "" { // no cursor yet: start one just before this message
					a.advance(ctx, m.ChannelID, prevID(m.ID), true)
				}
				return false
			}
			a.log.Warn("discord message not taken", zap.String("messageId", m.ID), zap.String("origin", in.Origin.String()), zap.Error(err))
		}
	}
	a.advance(ctx, m.ChannelID, m.ID, serve)
	return true
}

// advance moves a channel's cursor to id; create says the channel may get
// a cursor when it has none (a chat Herald serves).
func (a *Adapter) advance(ctx context.Context, ch, id string, create bool) {
	a.mu.Lock()
	cur, has := a.cursors[ch]
	if !has && !create || has && compareIDs(id, cur) <= 0 {
		a.mu.Unlock()
		return
	}
	a.cursors[ch] = id
	if len(a.cursors) > maxCursors { // forget the channel quiet the longest
		oldest := ""
		for c, v := range a.cursors {
			if oldest == "" || compareIDs(v, a.cursors[oldest]) < 0 {
				oldest = c
			}
		}
		delete(a.cursors, oldest)
	}
	b, _ := json.Marshal(a.cursors)
	a.mu.Unlock()
	a.saveCursors(ctx, b)
}

func (a *Adapter) dropCursor(ctx context.Context, ch string) {
	a.mu.Lock()
	delete(a.cursors, ch)
	b, _ := json.Marshal(a.cursors)
	a.mu.Unlock()
	a.saveCursors(ctx, b)
}

func (a *Adapter) saveCursors(ctx context.Context, b []byte) {
	if a.opts.State == nil {
		return
	}
	if err := a.opts.State.Set(context.WithoutCancel(ctx), keyCursors, string(b)); err != nil {
		a.log.Warn("discord: could not save the catch-up cursors", zap.Error(err))
	}
}

func (a *Adapter) cursor(ch string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cursors[ch]
}

// loadState reads the cursors kept by the last run.
func (a *Adapter) loadState(ctx context.Context) error {
	a.mu.Lock()
	loaded := a.loaded
	a.mu.Unlock()
	if a.opts.State == nil || loaded {
		return nil
	}
	v, found, err := a.opts.State.Get(ctx, keyCursors)
	if err != nil {
		return err // Start fails: starting without them would skip messages
	}
	cursors := map[string]string{}
	if found {
		if err := json.Unmarshal([]byte(v), &cursors); err != nil {
			a.log.Warn("discord: saved catch-up cursors unreadable; starting without them", zap.Error(err))
			cursors = map[string]string{}
		}
	}
	a.mu.Lock()
	a.cursors, a.loaded = cursors, true
	a.mu.Unlock()
	return nil
}

// inbound maps a message to an Inbound. serve says the chat is one Herald
// serves (its cursor is kept); ok says the message goes to the gateway.
func (a *Adapter) inbound(ctx context.Context, m *discordgo.Message) (in channels.Inbound, serve, ok bool) {
	if m.Author.Bot || m.Author.System {
		return in, false, false
	}
	switch m.Type {
	case discordgo.MessageTypeDefault, discordgo.MessageTypeReply:
	default: // joins, pins, thread-created notices …
		return in, false, false
	}
	self := a.Self()
	o := channels.Origin{Channel: Name, ChatID: m.ChannelID, SenderID: m.Author.ID, MessageID: m.ID}
	var thread bool
	// The guild comes from the channel, never from the message: REST
	// message objects (a catch-up) carry no guild_id, and a guild message
	// taken for a DM would skip requireMention, groupPolicy and the
	// group's allowFrom.
	info, known := a.channelInfo(ctx, m.ChannelID, m.GuildID)
	if !known {
		a.log.Warn("discord: message in a channel that could not be looked up; skipped", zap.String("channelId", m.ChannelID))
		return in, false, false
	}
	if info.guildID == "" {
		o.ChatType = channels.ChatDM
	} else {
		o.ChatType = channels.ChatGroup
		if info.thread && info.parentID != "" {
			o.ChatID, o.ThreadID, thread = info.parentID, m.ChannelID, true
		}
	}
	serve = a.serves(o.ChatType, o.ChatID)
	text, mentioned := addressed(m, self.ID)
	if r := m.ReferencedMessage; r != nil && r.Author != nil && r.Author.ID == self.ID {
		mentioned = true
	}
	if thread && !mentioned && a.isThread(ctx, o.ThreadID) {
		mentioned = true
	}
	files := a.attachments(m)
	if strings.TrimSpace(text) == "" && len(files) == 0 {
		return in, serve, false
	}
	if !a.opts.Access.Admit(o.ChatType, o.ChatID, o.SenderID, mentioned) {
		a.log.Debug("discord message not admitted", zap.String("origin", o.String()), zap.String("senderId", o.SenderID), zap.Bool("mentioned", mentioned))
		return in, serve, false
	}
	if o.ChatType == channels.ChatGroup && !thread && mentioned && a.inThread {
		// A top-level mention opens a thread: Discord gives a thread
		// started from a message that message's id, so the reply's origin
		// is known now and the thread is opened with the first post.
		o.ThreadID = m.ID
		a.mu.Lock()
		if len(a.names) > maxKnown {
			clear(a.names)
		}
		a.names[m.ID] = threadName(text)
		a.mu.Unlock()
		a.markThread(ctx, m.ID)
	}
	name := displayName(m.Author, m.Member)
	at := m.Timestamp
	if at.IsZero() {
		at = snowflakeTime(m.ID)
	}
	return channels.Inbound{Origin: o, SenderName: name, Text: text, Mentioned: mentioned, At: at, Attachments: files}, serve, true
}

// serves reports whether Herald answers in the chat at all (its cursor is
// worth keeping).
func (a *Adapter) serves(chatType, chatID string) bool {
	if chatType != channels.ChatGroup {
		return true
	}
	switch a.opts.Access.GroupPolicy {
	case channels.GroupDisabled:
		return false
	case channels.GroupOpen:
		return true
	default:
		_, ok := a.opts.Access.Groups[chatID]
		return ok
	}
}

var spaces = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[ \t]{2,}`) })

// addressed strips the bot's mentions (<@id>, <@!id>) from the content and
// says whether there was one.
func addressed(m *discordgo.Message, selfID string) (string, bool) {
	text := m.Content
	mentioned := false
	for _, u := range m.Mentions {
		if u != nil && u.ID == selfID {
			mentioned = true
		}
	}
	for _, tok := range []string{"<@" + selfID + ">", "<@!" + selfID + ">"} {
		if strings.Contains(text, tok) {
			mentioned = true
			text = strings.ReplaceAll(text, tok, "")
		}
	}
	if mentioned {
		text = strings.TrimSpace(spaces().ReplaceAllString(text, " "))
		text = strings.TrimLeft(text, ",: ")
	}
	return text, mentioned
}

func threadName(text string) string {
	name := strings.Join(strings.Fields(text), " ")
	if r := []rune(name); len(r) > 90 {
		name = string(r[:89]) + "…"
	}
	if name == "" {
		name = "Herald"
	}
	return name
}

// channelInfo says whether a guild channel is a thread and its parent:
// from the adapter's memory, discordgo's state (GUILD_CREATE,
// THREAD_CREATE), or GET channels/{id}.
func (a *Adapter) channelInfo(ctx context.Context, id, guildID string) (chanInfo, bool) {
	a.mu.Lock()
	info, ok := a.known[id]
	a.mu.Unlock()
	if ok {
		return info, true
	}
	c, err := a.s.State.Channel(id)
	if err != nil || c == nil {
		rctx, cancel := context.WithTimeout(ctx, sendTimeout)
		c, err = a.s.Channel(id, discordgo.WithContext(rctx))
		cancel()
		if err != nil {
			a.log.Warn("discord: channel lookup failed", zap.String("channelId", id), zap.Error(a.redact(err)))
			return chanInfo{}, false
		}
	}
	return a.remember(c), true
}

func (a *Adapter) remember(c *discordgo.Channel) chanInfo {
	info := chanInfo{guildID: c.GuildID, parentID: c.ParentID, thread: c.IsThread()}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.known) > maxKnown {
		clear(a.known)
	}
	a.known[c.ID] = info
	return info
}

// isThread reports whether the bot is in thread id (it opened it, was
// added, or posted there), from memory or the store.
func (a *Adapter) isThread(ctx context.Context, id string) bool {
	a.mu.Lock()
	in := a.threads[id]
	a.mu.Unlock()
	if in || a.opts.State == nil {
		return in
	}
	_, found, err := a.opts.State.Get(ctx, keyThread+id)
	if err != nil {
		a.log.Warn("discord: could not read thread membership", zap.String("threadId", id), zap.Error(err))
		return false
	}
	if found {
		a.mu.Lock()
		a.threads[id] = true
		a.mu.Unlock()
	}
	return found
}

func (a *Adapter) markThread(ctx context.Context, id string) {
	a.mu.Lock()
	was := a.threads[id]
	if len(a.threads) > maxKnown {
		clear(a.threads)
	}
	a.threads[id] = true
	a.mu.Unlock()
	if was || a.opts.State == nil {
		return
	}
	if err := a.opts.State.Set(context.WithoutCancel(ctx), keyThread+id, "1"); err != nil {
		a.log.Warn("discord: could not save thread membership", zap.String("threadId", id), zap.Error(err))
	}
}

// compareIDs orders snowflakes (decimal strings) numerically.
func compareIDs(x, y string) int {
	if len(x) != len(y) {
		return len(x) - len(y)
	}
	return strings.Compare(x, y)
}

func prevID(id string) string {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil || n == 0 {
		return id
	}
	return strconv.FormatUint(n-1, 10)
}

// snowflakeTime is when a snowflake was made (Discord epoch 2015).
func snowflakeTime(id string) time.Time {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return time.Now()
	}
	return time.UnixMilli(int64(n>>22) + 1420070400000)
}
