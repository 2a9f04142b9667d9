//go:build goolm

package matrix

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/matrix/matrixtest"
	"github.com/heraldhq/herald/devtools/pgtest"
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
	// open opens the state database a start uses (nil: SQLite in dir); a
	// replica of its own on each start.
	open func() (*store.DB, error)
}

func newCryptoBot(t *testing.T, hs *matrixtest.Homeserver, bot *mautrix.Client, opts func(*Options)) *cryptoBot {
	return &cryptoBot{t: t, hs: hs, bot: bot, dir: t.TempDir(), tokens: mautrix.NewMemorySyncStore(), opts: opts}
}

// start runs the adapter until stop (or the test's end).
func (b *cryptoBot) start() (*Adapter, inbox, func()) {
	t := b.t
	t.Helper()
	open := b.open
	if open == nil {
		open = func() (*store.DB, error) { return store.Open(context.Background(), b.dir) }
	}
	db, err := open()
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

// cryptoDB opens a handle on the bot's state database in dir; each handle
// has its own store, closed with it.
func (b *cryptoBot) cryptoDB() func() (CryptoDB, error) {
	return func() (CryptoDB, error) {
		db, err := store.Open(context.Background(), b.dir)
		if err != nil {
			return CryptoDB{}, err
		}
		h, err := db.SQLHandle()
		if err != nil {
			db.Close()
			return CryptoDB{}, err
		}
		return CryptoDB{DB: h.DB, Dialect: h.Dialect, Close: func() error { h.Close(); return db.Close() }}, nil
	}
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

// postUndecryptable sends into room, as e, a Megolm message on a session
// never shared with anyone (as from a client that did not know the bot's
// device yet), in the thread rooted at root.
func postUndecryptable(t *testing.T, e *matrixtest.E2EE, room id.RoomID, root id.EventID, session id.SessionID) id.EventID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, identity := e.Mach.GetAccount().Keys()
	fake := &event.EncryptedEventContent{
		Algorithm: id.AlgorithmMegolmV1, SenderKey: identity, DeviceID: e.DeviceID,
		SessionID:        session,
		MegolmCiphertext: []byte(strings.Repeat("B", 120)),
		RelatesTo:        &event.RelatesTo{Type: event.RelThread, EventID: root, IsFallingBack: true, InReplyTo: &event.InReplyTo{EventID: root}},
	}
	resp, err := e.SendMessageEvent(ctx, room, event.EventEncrypted, fake)
	if err != nil {
		t.Fatal(err)
	}
	return resp.EventID
}

// TestDendriteUndecryptableGroupToldOnce: in a group room, two messages
// the bot cannot decrypt from one sender on one Megolm session get one
// share-keys line, not one each (the room would hear it on every message,
// addressed to the bot or not); a message on another session gets its own.
func TestDendriteUndecryptableGroupToldOnce(t *testing.T) {
	hs := requireHS(t)
	alice := matrixtest.NewE2EE(t, hs.RegisterUser(t, "crypto-alice"))
	carol := hs.RegisterUser(t, "crypto-carol") // a third member makes the room a group
	bot := hs.RegisterUser(t, "crypto-bot")
	cb := newCryptoBot(t, hs, bot, func(o *Options) { o.KeyWait = time.Second })
	cb.start()

	room := alice.CreateEncryptedRoom(t, bot.UserID, carol.UserID)
	if _, err := carol.JoinRoomByID(t.Context(), room); err != nil {
		t.Fatalf("carol joins %s: %v", room, err)
	}
	alice.WaitMember(t, room, carol.UserID)
	alice.WaitMember(t, room, bot.UserID)
	rootA := alice.PostEncrypted(t, room, "", "thread A")
	rootB := alice.PostEncrypted(t, room, "", "thread B")

	sessA, sessB := id.SessionID(strings.Repeat("A", 43)), id.SessionID(strings.Repeat("C", 43))
	postUndecryptable(t, alice, room, rootA, sessA)
	postUndecryptable(t, alice, room, rootA, sessA)
	// The last one, on another session: its key wait ends after the first
	// two, so once its line is there, theirs are settled.
	postUndecryptable(t, alice, room, rootB, sessB)
	isLine := func(root id.EventID) func(matrixtest.Decrypted) bool {
		return func(m matrixtest.Decrypted) bool {
			return m.Body() == UndecryptableText && matrixtest.ThreadRoot(m.Event) == root
		}
	}
	alice.WaitMessages(t, room, bot.UserID, 1, isLine(rootB))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	all, _, err := alice.Messages(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	inA := 0
	for _, m := range all {
		if m.Sender == bot.UserID && isLine(rootA)(m) {
			inA++
		}
	}
	if inA != 1 {
		t.Errorf("two undecryptable messages from one sender on one session got %d share-keys lines, want 1", inA)
	}
}

// TestDendriteRecoveryKeyVerifiesDevice: the bot account's cross-signing
// keys were set up from another device (as a person does once in Element's
// Secure Backup); with its recovery key in the config, the bot's device is
// signed by the account's self-signing key at start, so other people see
// it cross-signed. A wrong recovery key refuses the start and names the
// key without printing it.
func TestDendriteRecoveryKeyVerifiesDevice(t *testing.T) {
	hs := requireHS(t)
	alice := matrixtest.NewE2EE(t, hs.RegisterUser(t, "crypto-alice"))
	bot := hs.RegisterUser(t, "crypto-bot")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Element, logged in as the bot on a device of its own, sets up
	// cross-signing and secret storage and shows the recovery key.
	element := hs.Client(t, "", "")
	password := matrixtest.Password(bot.UserID.Localpart())
	if _, err := element.Login(ctx, &mautrix.ReqLogin{Type: mautrix.AuthTypePassword, StoreCredentials: true,
		Identifier: mautrix.UserIdentifier{Type: mautrix.IdentifierTypeUser, User: bot.UserID.Localpart()}, Password: password}); err != nil {
		t.Fatalf("log in as the bot on a second device: %v", err)
	}
	var (
		recoveryKey string
		err         error
	)
	elementE2EE := matrixtest.NewE2EE(t, element)
	elementE2EE.WithoutSync(func() {
		recoveryKey, _, err = elementE2EE.Mach.GenerateAndUploadCrossSigningKeysWithPassword(ctx, password, "")
	})
	if err != nil {
		t.Fatalf("set up cross-signing for the bot account: %v", err)
	}

	trust := func() id.TrustState {
		t.Helper()
		devices, err := alice.Mach.FetchKeys(ctx, []id.UserID{bot.UserID}, true)
		if err != nil {
			t.Fatal(err)
		}
		dev := devices[bot.UserID][bot.DeviceID]
		if dev == nil {
			t.Fatalf("alice sees no device %s for the bot (got %v)", bot.DeviceID, devices[bot.UserID])
		}
		state, err := alice.Mach.ResolveTrustContext(ctx, dev)
		if err != nil {
			t.Fatal(err)
		}
		return state
	}

	wrong := []byte(recoveryKey)
	for i := len(wrong) - 1; i >= 0; i-- { // another well-formed key: change one base58 letter
		if wrong[i] != ' ' {
			wrong[i] = map[bool]byte{true: 'b', false: 'a'}[wrong[i] == 'a']
			break
		}
	}
	// herald doctor tells a wrong key from the right one.
	for key, want := range map[string]string{string(wrong): channels.CheckFail, recoveryKey: channels.CheckOK} {
		d, err := New(Options{Homeserver: hs.URL, UserID: string(bot.UserID), AccessToken: bot.AccessToken, Encryption: true, RecoveryKey: key})
		if err != nil {
			t.Fatal(err)
		}
		got := "missing"
		for _, c := range d.Check(ctx) {
			if c.Name == "matrix recovery key" {
				got = c.Status
				if strings.Contains(c.Detail, key) {
					t.Errorf("doctor's check prints the recovery key: %s", c.Detail)
				}
			}
		}
		if got != want {
			t.Errorf("doctor's recovery key check = %s, want %s", got, want)
		}
	}

	bad := newCryptoBot(t, hs, bot, func(o *Options) { o.RecoveryKey = string(wrong) })
	a, err := New(Options{Homeserver: hs.URL, UserID: string(bot.UserID), AccessToken: bot.AccessToken, Encryption: true,
		RecoveryKey: string(wrong), CryptoDB: bad.cryptoDB(), Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Start(ctx, inbox(make(chan channels.Inbound, 1)).sink)
	if err == nil || !strings.Contains(err.Error(), "channels.matrix.recoveryKey") || strings.Contains(err.Error(), string(wrong)) {
		t.Fatalf("start with a wrong recovery key: %v; want a refusal naming channels.matrix.recoveryKey, without the key", err)
	}

	cb := newCryptoBot(t, hs, bot, func(o *Options) { o.RecoveryKey = recoveryKey })
	cb.dir = bad.dir // the same device and state database
	cb.start()
	if got := trust(); got != id.TrustStateCrossSignedTOFU {
		t.Fatalf("alice sees the bot's device as %s, want %s (signed by the bot's cross-signing keys)", got, id.TrustStateCrossSignedTOFU)
	}
}

// TestDendriteLateKeyIsWaitedFor: a message whose room key reaches the
// bot's device after the message itself (the bot asks the sender's devices
// for it) is decrypted when the key comes and reaches the gateway like any
// other; nobody is told to share keys.
func TestDendriteLateKeyIsWaitedFor(t *testing.T) {
	hs := requireHS(t)
	alice := matrixtest.NewE2EE(t, hs.RegisterUser(t, "crypto-alice"))
	bot := hs.RegisterUser(t, "crypto-bot")
	cb := newCryptoBot(t, hs, bot, nil) // the default wait: 30 s
	_, in, _ := cb.start()
	room := alice.CreateEncryptedRoom(t, bot.UserID)
	alice.WaitMember(t, room, bot.UserID)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Alice's room session, shared with nobody yet; the message goes first.
	if err := alice.Mach.ShareGroupSession(ctx, room, []id.UserID{alice.UserID}); err != nil {
		t.Fatal(err)
	}
	sess, err := alice.Mach.CryptoStore.GetOutboundGroupSession(ctx, room)
	if err != nil || sess == nil {
		t.Fatalf("alice's outbound session: %v", err)
	}
	sessionKey, sessionID := sess.Internal.Key(), sess.ID()
	enc, err := alice.Mach.EncryptMegolmEvent(ctx, room, event.EventMessage,
		&event.MessageEventContent{MsgType: event.MsgText, Body: "the key comes later"})
	if err != nil {
		t.Fatal(err)
	}
	sent, err := alice.SendMessageEvent(ctx, room, event.EventEncrypted, enc)
	if err != nil {
		t.Fatal(err)
	}

	// The bot, lacking the key, asks alice's devices for it.
	for asked := false; !asked; {
		select {
		case req := <-alice.KeyRequests:
			asked = req.Body.SessionID == sessionID && req.Body.RoomID == room
		case <-time.After(matrixtest.WaitTimeout):
			t.Fatalf("the bot asked for no key for session %s within %s", sessionID, matrixtest.WaitTimeout)
		}
	}
	select {
	case got := <-in:
		t.Fatalf("a message reached the gateway before its key: %+v %q", got.Origin, got.Text)
	default:
	}
	dev, err := alice.Mach.GetOrFetchDevice(ctx, bot.UserID, bot.DeviceID)
	if err != nil {
		t.Fatal(err)
	}
	if err := alice.Mach.SendEncryptedToDevice(ctx, dev, event.ToDeviceRoomKey, event.Content{Parsed: &event.RoomKeyEventContent{
		Algorithm: id.AlgorithmMegolmV1, RoomID: room, SessionID: sessionID, SessionKey: sessionKey}}); err != nil {
		t.Fatalf("send the room key to the bot: %v", err)
	}
	got := in.next(t)
	if got.Origin.MessageID != string(sent.EventID) || got.Text != "the key comes later" {
		t.Fatalf("after the key came: %+v %q; want the waiting message %s", got.Origin, got.Text, sent.EventID)
	}
}

// TestDendriteEncryptedFailoverOnPostgres: with the state on PostgreSQL, a
// second replica taking over the channel (its own process and pool, the same
// database) is the same Matrix device: it decrypts the person's next
// message on the session the first replica received, and answers
// encrypted.
func TestDendriteEncryptedFailoverOnPostgres(t *testing.T) {
	hs := requireHS(t)
	url := pgtest.URL(t)
	alice := matrixtest.NewE2EE(t, hs.RegisterUser(t, "crypto-alice"))
	bot := hs.RegisterUser(t, "crypto-bot")
	cb := newCryptoBot(t, hs, bot, nil)
	cb.open = func() (*store.DB, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return store.OpenPostgres(ctx, url, t.TempDir())
	}
	a, in, stop := cb.start()
	room := alice.CreateEncryptedRoom(t, bot.UserID)
	alice.WaitMember(t, room, bot.UserID)
	alice.PostEncrypted(t, room, "", "to the first replica")
	got := in.next(t)
	if got.Text != "to the first replica" {
		t.Fatalf("first replica got %q", got.Text)
	}
	send(t, a, got.Origin, "first replica here")
	alice.WaitMessages(t, room, bot.UserID, 1, func(m matrixtest.Decrypted) bool { return m.Encrypted && m.Body() == "first replica here" })
	before := deviceKeys(t, alice.Client, bot.UserID)
	stop()

	b, in, _ := cb.start() // the other replica
	q := alice.PostEncrypted(t, room, "", "to whoever holds the channel now")
	got = in.next(t)
	if got.Origin.MessageID != string(q) || got.Text != "to whoever holds the channel now" {
		t.Fatalf("second replica got %+v %q", got.Origin, got.Text)
	}
	send(t, b, got.Origin, "second replica, same device")
	alice.WaitMessages(t, room, bot.UserID, 1, func(m matrixtest.Decrypted) bool { return m.Encrypted && m.Body() == "second replica, same device" })
	if after := deviceKeys(t, alice.Client, bot.UserID); len(before) != 1 || fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("the bot's devices changed over the failover: before %v, after %v", before, after)
	}
}

// memKV is a channels.KV in memory, shared by the starts of one test the
// way the gateway's store is shared by a process and the next.
type memKV struct {
	mu sync.Mutex
	m  map[string]string
}

func (k *memKV) Get(_ context.Context, key string) (string, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := k.m[key]
	return v, ok, nil
}

func (k *memKV) Set(_ context.Context, key, value string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]string{}
	}
	k.m[key] = value
	return nil
}

func (k *memKV) Claim(ctx context.Context, key, value string) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.m[key]; ok {
		return false, nil
	}
	if k.m == nil {
		k.m = map[string]string{}
	}
	k.m[key] = value
	return true, nil
}

func (k *memKV) DeleteBefore(context.Context, string, time.Time) (int64, error) { return 0, nil }

// TestDendriteKeyWaitSurvivesRestart: a message whose key has not come when
// the bot stops is kept in the channel's store, not lost and not answered
// with the share-keys line; the next start asks for its key again and
// delivers it when the key comes.
func TestDendriteKeyWaitSurvivesRestart(t *testing.T) {
	hs := requireHS(t)
	alice := matrixtest.NewE2EE(t, hs.RegisterUser(t, "crypto-alice"))
	bot := hs.RegisterUser(t, "crypto-bot")
	kv := &memKV{}
	cb := newCryptoBot(t, hs, bot, func(o *Options) { o.State = kv })
	a, _, stop := cb.start()
	room := alice.CreateEncryptedRoom(t, bot.UserID)
	alice.WaitMember(t, room, bot.UserID)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	if err := alice.Mach.ShareGroupSession(ctx, room, []id.UserID{alice.UserID}); err != nil {
		t.Fatal(err)
	}
	sess, err := alice.Mach.CryptoStore.GetOutboundGroupSession(ctx, room)
	if err != nil || sess == nil {
		t.Fatalf("alice's outbound session: %v", err)
	}
	sessionKey, sessionID := sess.Internal.Key(), sess.ID()
	enc, err := alice.Mach.EncryptMegolmEvent(ctx, room, event.EventMessage,
		&event.MessageEventContent{MsgType: event.MsgText, Body: "sent before the restart"})
	if err != nil {
		t.Fatal(err)
	}
	sent, err := alice.SendMessageEvent(ctx, room, event.EventEncrypted, enc)
	if err != nil {
		t.Fatal(err)
	}
	waitKeyRequest := func(what string) {
		t.Helper()
		for asked := false; !asked; {
			select {
			case req := <-alice.KeyRequests:
				asked = req.Body.SessionID == sessionID && req.Body.RoomID == room
			case <-time.After(matrixtest.WaitTimeout):
				t.Fatalf("%s: the bot asked for no key for session %s within %s", what, sessionID, matrixtest.WaitTimeout)
			}
		}
	}
	waitKeyRequest("first start")
	// A /sync batch cut by the stop retries the waiting message with a
	// context that has ended: reading the key store fails, which says
	// nothing about the message — it still waits, and is still saved.
	cut, cutNow := context.WithCancel(ctx)
	cutNow()
	a.retryPendingKeys(cut, nil, "")
	if v, _, _ := kv.Get(ctx, pendingKeyPrefix+string(bot.UserID)); !strings.Contains(v, string(sent.EventID)) {
		t.Fatalf("a retry cut by the stop dropped the waiting message %s from the saved list: %q", sent.EventID, v)
	}
	stop() // the key has not come: the message must survive the stop

	_, in, _ := cb.start()
	waitKeyRequest("after the restart")
	dev, err := alice.Mach.GetOrFetchDevice(ctx, bot.UserID, bot.DeviceID)
	if err != nil {
		t.Fatal(err)
	}
	if err := alice.Mach.SendEncryptedToDevice(ctx, dev, event.ToDeviceRoomKey, event.Content{Parsed: &event.RoomKeyEventContent{
		Algorithm: id.AlgorithmMegolmV1, RoomID: room, SessionID: sessionID, SessionKey: sessionKey}}); err != nil {
		t.Fatalf("send the room key to the bot: %v", err)
	}
	got := in.next(t)
	if got.Origin.MessageID != string(sent.EventID) || got.Text != "sent before the restart" {
		t.Fatalf("after the restart and the key: %+v %q; want the waiting message %s", got.Origin, got.Text, sent.EventID)
	}
	// Nobody was told to share keys: the message was only waiting.
	msgs, err := matrixtest.RoomMessages(ctx, alice.Client, room)
	if err != nil {
		t.Fatal(err)
	}
	for _, evt := range msgs {
		if evt.Sender != bot.UserID || evt.Type != event.EventEncrypted {
			continue
		}
		_ = evt.Content.ParseRaw(evt.Type)
		dec, err := alice.Mach.DecryptMegolmEvent(ctx, evt)
		if err != nil {
			continue
		}
		_ = dec.Content.ParseRaw(dec.Type)
		if m := dec.Content.AsMessage(); m != nil && m.Body == UndecryptableText {
			t.Errorf("the bot told alice to share keys although the message only waited across a restart")
		}
	}
}
