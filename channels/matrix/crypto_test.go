//go:build goolm

package matrix

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/matrix/matrixtest"
	"github.com/heraldhq/herald/store"
)

// cryptoBot is an encrypting adapter whose keys live in a real Herald state
// database (SQLite in dir), as the gateway runs it.
type cryptoBot struct {
	t      *testing.T
	hs     *matrixtest.Homeserver
	bot    *mautrix.Client
	dir    string
	tokens mautrix.SyncStore
	opts   func(*Options)
}

func newCryptoBot(t *testing.T, hs *matrixtest.Homeserver, bot *mautrix.Client, opts func(*Options)) *cryptoBot {
	return &cryptoBot{t: t, hs: hs, bot: bot, dir: t.TempDir(), tokens: mautrix.NewMemorySyncStore(), opts: opts}
}

// start runs the adapter until stop (or the test's end).
func (b *cryptoBot) start() (*Adapter, inbox, func()) {
	t := b.t
	t.Helper()
	db, err := store.Open(context.Background(), b.dir)
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Homeserver: b.hs.URL, UserID: string(b.bot.UserID), AccessToken: b.bot.AccessToken, AutoJoin: true,
		Access: channels.Access{GroupPolicy: channels.GroupOpen}, SyncStore: b.tokens, Logger: zaptest.NewLogger(t),
		Encryption: true,
		CryptoDB: func() (CryptoDB, error) {
			h, err := db.SQLHandle()
			return CryptoDB{DB: h.DB, Dialect: h.Dialect, Close: h.Close}, err
		}}
	if b.opts != nil {
		b.opts(&o)
	}
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	in := make(inbox, 32)
	if err := a.Start(context.Background(), in.sink); err != nil {
		db.Close()
		t.Fatalf("start adapter: %v", err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Errorf("stop adapter: %v", err)
		}
		db.Close()
	}
	t.Cleanup(stop)
	return a, in, stop
}

// deviceKeys is the ed25519 key of each device the homeserver lists for user.
func deviceKeys(t *testing.T, c *mautrix.Client, user id.UserID) map[id.DeviceID]id.Ed25519 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.QueryKeys(ctx, &mautrix.ReqQueryKeys{DeviceKeys: map[id.UserID]mautrix.DeviceIDList{user: nil}})
	if err != nil {
		t.Fatalf("query keys of %s: %v", user, err)
	}
	out := map[id.DeviceID]id.Ed25519{}
	for dev, k := range resp.DeviceKeys[user] {
		out[dev] = k.Keys.GetEd25519(dev)
	}
	return out
}

// TestDendriteEncryptedDM: in an encrypted DM (Element's default) a person's
// encrypted messages reach the gateway as text, and the bot's answers,
// thread replies and streaming edits go out encrypted. After a restart the
// bot is the same device with the same keys: it reads the person's
// messages sent before and during the restart on the Megolm session it
// already had, and its answers still decrypt.
func TestDendriteEncryptedDM(t *testing.T) {
	hs := requireHS(t)
	alice := matrixtest.NewE2EE(t, hs.RegisterUser(t, "crypto-alice"))
	bot := hs.RegisterUser(t, "crypto-bot")
	cb := newCryptoBot(t, hs, bot, nil)
	a, in, stop := cb.start()

	room := alice.CreateEncryptedRoom(t, bot.UserID)
	alice.WaitMember(t, room, bot.UserID) // the bot joins on invite
	q := alice.PostEncrypted(t, room, "", "what is the status?")
	got := in.next(t)
	if got.Origin.MessageID != string(q) || got.Text != "what is the status?" || got.Origin.ChatType != channels.ChatDM {
		t.Fatalf("inbound = %+v text %q; want the decrypted DM %s", got.Origin, got.Text, q)
	}
	send(t, a, got.Origin, "All green.")
	isText := func(s string) func(matrixtest.Decrypted) bool {
		return func(m matrixtest.Decrypted) bool { return m.Body() == s }
	}
	reply := alice.WaitMessages(t, room, bot.UserID, 1, isText("All green."))[0]
	if !reply.Encrypted {
		t.Fatalf("the bot's answer in an encrypted room went out in clear text")
	}

	// A thread: the question in it reaches the gateway with its root, and
	// the answer is an encrypted thread reply (the relation readable by the
	// homeserver).
	tq := alice.PostEncrypted(t, room, q, "and in this thread?")
	got = in.next(t)
	if got.Origin.ThreadID != string(q) || got.Origin.MessageID != string(tq) {
		t.Fatalf("thread message origin = %+v; want thread %s message %s", got.Origin, q, tq)
	}
	send(t, a, got.Origin, "Threaded answer.")
	tr := alice.WaitMessages(t, room, bot.UserID, 1, isText("Threaded answer."))[0]
	if root := matrixtest.ThreadRoot(tr.Event); !tr.Encrypted || root != q {
		t.Fatalf("thread answer encrypted=%v root %q; want encrypted in thread %s", tr.Encrypted, root, q)
	}

	// Streaming: a draft, then the final text as an m.replace edit of it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ref, err := a.Draft(ctx, got.Origin, "", "Writ…")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx, got.Origin, channels.Message{Kind: channels.KindReply, Text: "Written in full.", DraftRef: ref}); err != nil {
		t.Fatal(err)
	}
	edit := alice.WaitMessages(t, room, bot.UserID, 1, func(m matrixtest.Decrypted) bool {
		msg := m.Content.AsMessage()
		return msg.RelatesTo.GetReplaceID() == id.EventID(ref) && msg.NewContent != nil && msg.NewContent.Body == "Written in full."
	})[0]
	if !edit.Encrypted {
		t.Fatalf("the streaming edit went out in clear text")
	}

	// Restart: same device, same keys, same sessions.
	before := deviceKeys(t, alice.Client, bot.UserID)
	stop()
	during := alice.PostEncrypted(t, room, "", "sent while the bot is down")
	a, in, _ = cb.start()
	got = in.next(t)
	if got.Origin.MessageID != string(during) || got.Text != "sent while the bot is down" {
		t.Fatalf("after the restart: %+v %q; want the message sent while down, decrypted", got.Origin, got.Text)
	}
	if after := deviceKeys(t, alice.Client, bot.UserID); len(after) != 1 || len(before) != 1 || after[bot.DeviceID] != before[bot.DeviceID] {
		t.Fatalf("the bot's devices changed over the restart: before %v, after %v", before, after)
	}
	send(t, a, got.Origin, "Back, same device.")
	if r := alice.WaitMessages(t, room, bot.UserID, 1, isText("Back, same device."))[0]; !r.Encrypted {
		t.Fatalf("answer after the restart went out in clear text")
	}
}

// TestDendriteUndecryptableIsAnswered: a message the bot's device has no
// key for (and gets none for within KeyWait) is answered with one line
// asking to share keys, in the message's thread; it is never dropped
// silently.
func TestDendriteUndecryptableIsAnswered(t *testing.T) {
	hs := requireHS(t)
	alice := matrixtest.NewE2EE(t, hs.RegisterUser(t, "crypto-alice"))
	bot := hs.RegisterUser(t, "crypto-bot")
	cb := newCryptoBot(t, hs, bot, func(o *Options) { o.KeyWait = time.Second })
	_, in, _ := cb.start()

	room := alice.CreateEncryptedRoom(t, bot.UserID)
	alice.WaitMember(t, room, bot.UserID)
	root := alice.PostEncrypted(t, room, "", "a thread")
	if got := in.next(t); got.Origin.MessageID != string(root) {
		t.Fatalf("first message: %+v", got.Origin)
	}
	// A Megolm message whose session was never shared with the bot (as
	// from a client that did not know the bot's device yet).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, identity := alice.Mach.GetAccount().Keys()
	fake := &event.EncryptedEventContent{
		Algorithm: id.AlgorithmMegolmV1, SenderKey: identity, DeviceID: alice.DeviceID,
		SessionID:        id.SessionID(strings.Repeat("A", 43)),
		MegolmCiphertext: []byte(strings.Repeat("B", 120)),
		RelatesTo:        &event.RelatesTo{Type: event.RelThread, EventID: root, IsFallingBack: true, InReplyTo: &event.InReplyTo{EventID: root}},
	}
	if _, err := alice.SendMessageEvent(ctx, room, event.EventEncrypted, fake); err != nil {
		t.Fatal(err)
	}
	line := alice.WaitMessages(t, room, bot.UserID, 1, func(m matrixtest.Decrypted) bool { return m.Body() == UndecryptableText })[0]
	if !line.Encrypted || matrixtest.ThreadRoot(line.Event) != root {
		t.Fatalf("the share-keys line: encrypted=%v thread %q; want encrypted in thread %s", line.Encrypted, matrixtest.ThreadRoot(line.Event), root)
	}
	select {
	case got := <-in:
		t.Fatalf("the undecryptable message reached the gateway: %+v %q", got.Origin, got.Text)
	default:
	}
}
