//go:build goolm

package matrix

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.mau.fi/util/dbutil"
	"go.uber.org/zap"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/crypto"
	"maunium.net/go/mautrix/crypto/ssss"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
	"maunium.net/go/mautrix/sqlstatestore"

	"github.com/heraldhq/herald/channels"
)

// End-to-end encryption (SPEC §21). mautrix's crypto machine with the
// pure-Go Olm (the goolm build tag; crypto_off.go is the build without it)
// keeps the device's identity keys and its Olm and Megolm sessions in the
// state database (crypto_* tables, and the rooms' membership and encryption
// state in mx_* tables), so the device survives a restart and a failover
// to another replica on the same PostgreSQL database.
//
// mautrix's cryptohelper is not used: it imports a cgo SQLite driver, and
// it waits for missing keys in goroutines nobody waits for, delivering the
// message outside the /sync batch it came in (so outside the gateway's
// durable intake). Here a message whose key is missing waits in a bounded
// list that each /sync batch retries after the keys it brought, and a
// single owned goroutine tells the sender once the wait is over.

// EncryptionAvailable reports whether this binary can do end-to-end
// encryption: built with the goolm tag.
const EncryptionAvailable = true

// pickleKey encrypts the pickled Olm account and sessions in the database.
// Whoever can read the state database can read the device's keys anyway
// (docs/security.md): the database is the secret to protect.
var pickleKey = []byte("herald matrix e2ee")

// maxPendingKeys bounds the messages waiting for their key; a message past
// the bound is answered at once.
const maxPendingKeys = 64

// defaultKeyWait is Options.KeyWait's default.
const defaultKeyWait = 30 * time.Second

// UndecryptableText is the one line the bot answers a message it cannot
// decrypt with.
const UndecryptableText = "🔒 I could not decrypt your message: my device has no key for it. Please share your room keys with my device (or verify it), then send the message again."

// e2ee is the crypto state of a started adapter.
type e2ee struct {
	mach    *crypto.OlmMachine
	closeDB func() error

	mu      sync.Mutex
	pending []*pendingKey // messages waiting for their Megolm session
	told    *recent       // room|sender|session already told to share keys

	done chan struct{} // closed when the key-wait goroutine ends
}

// pendingKey is a message whose Megolm session has not arrived yet.
type pendingKey struct {
	evt      *event.Event
	deadline time.Time
}

// startCrypto opens the crypto store, loads (or creates and uploads) the
// device's keys, verifies the device with the recovery key, and registers
// the crypto handlers on syncer, ahead of the adapter's own.
func (a *Adapter) startCrypto(ctx context.Context, syncer *mautrix.DefaultSyncer) (err error) {
	if a.opts.CryptoDB == nil {
		return errors.New("matrix: encryption needs a database for the device's keys (Options.CryptoDB)")
	}
	handle, err := a.opts.CryptoDB()
	if err != nil {
		return fmt.Errorf("matrix: encryption: open the key store: %w", err)
	}
	defer func() {
		if err != nil {
			_ = handle.Close()
		}
	}()
	db, err := dbutil.NewWithDB(handle.DB, handle.Dialect)
	if err != nil {
		return fmt.Errorf("matrix: encryption: key store dialect %q: %w", handle.Dialect, err)
	}
	zlog := zerolog.New(zapWriter{a.log.Named("crypto")}).Level(zerolog.WarnLevel)
	dblog := dbutil.ZeroLogger(zlog)
	state := sqlstatestore.NewSQLStateStore(db, dblog, false)
	if err := state.Upgrade(ctx); err != nil {
		return fmt.Errorf("matrix: encryption: prepare the room state tables: %w", err)
	}
	// One account per user and device: a new access token (a new device)
	// gets a new identity, never the keys of another device.
	account := string(a.client.UserID) + "|" + string(a.client.DeviceID)
	if a.client.DeviceID == "" {
		return fmt.Errorf("matrix: encryption: the homeserver named no device for %s (whoami); log in a device for the bot", a.client.UserID)
	}
	store := crypto.NewSQLCryptoStore(db, dblog, account, a.client.DeviceID, pickleKey)
	if err := store.DB.Upgrade(ctx); err != nil {
		return fmt.Errorf("matrix: encryption: prepare the key tables: %w", err)
	}
	a.client.StateStore = state
	mach := crypto.NewOlmMachine(a.client, &zlog, store, state)
	if err := mach.Load(ctx); err != nil {
		return fmt.Errorf("matrix: encryption: load the device's keys: %w", err)
	}
	if err := a.publishDeviceKeys(ctx, mach); err != nil {
		return err
	}
	if a.opts.RecoveryKey != "" {
		if err := mach.VerifyWithRecoveryKey(ctx, a.opts.RecoveryKey); err != nil {
			return fmt.Errorf("matrix: encryption: verify device %s with channels.matrix.recoveryKey: %w (the key is the account's recovery key from its secure backup, e.g. Element's \"Recovery key\")",
				a.client.DeviceID, err)
		}
		a.log.Info("matrix device verified by cross-signing", zap.String("deviceId", string(a.client.DeviceID)))
	}
	c := &e2ee{mach: mach, closeDB: handle.Close, told: newRecent(maxThreads)}
	a.client.Crypto = &cryptoHelper{mach: mach, client: a.client}
	a.mu.Lock()
	a.e2ee = c
	a.mu.Unlock()

	syncer.OnSync(mach.ProcessSyncResponse) // to-device keys, device lists, one-time keys
	syncer.OnSync(a.retryPendingKeys)       // messages whose keys that batch brought
	syncer.OnSync(a.updateRoomState)        // before onSync drops pre-join history
	syncer.OnEventType(event.StateMember, mach.HandleMemberEvent)
	syncer.OnEventType(event.StateHistoryVisibility, mach.HandleHistoryVisibility)
	a.log.Info("matrix end-to-end encryption on", zap.String("deviceId", string(a.client.DeviceID)),
		zap.String("fingerprint", mach.Fingerprint()))
	a.loadPending(ctx, c)
	return nil
}

// publishDeviceKeys uploads the device's keys the first time, and checks
// that the keys the homeserver has for the device are this store's.
func (a *Adapter) publishDeviceKeys(ctx context.Context, mach *crypto.OlmMachine) error {
	user, device := a.client.UserID, a.client.DeviceID
	resp, err := a.client.QueryKeys(ctx, &mautrix.ReqQueryKeys{DeviceKeys: map[id.UserID]mautrix.DeviceIDList{user: {device}}})
	if err != nil {
		return fmt.Errorf("matrix: encryption: query the keys of device %s: %w", device, err)
	}
	shared := mach.GetAccount().Shared
	keys, ok := resp.DeviceKeys[user][device]
	switch {
	case !ok || len(keys.Keys) == 0:
		if shared {
			return fmt.Errorf("matrix: encryption: the homeserver lost the keys of device %s that this state database uploaded; log in a new device for the bot", device)
		}
		if err := mach.ShareKeys(ctx, -1); err != nil {
			return fmt.Errorf("matrix: encryption: upload the keys of device %s: %w", device, err)
		}
		a.log.Info("matrix device keys uploaded", zap.String("deviceId", string(device)))
	case !shared:
		return fmt.Errorf("matrix: encryption: device %s already has keys on the homeserver that this state database does not hold (another client's device, or a new state database): log in a new device for the bot (a new access token, or another channels.matrix.deviceId) and keep the state database", device)
	case keys.Keys.GetEd25519(device) != mach.OwnIdentity().SigningKey:
		return fmt.Errorf("matrix: encryption: the homeserver has other keys for device %s than this state database", device)
	}
	return nil
}

// cryptoFirstSync takes what the crypto machine and the state store need
// from the first /sync of a start. Its to-device messages (keys) are
// processed only on a fresh start: when the loop resumes from a stored
// token, that sync brings them again.
func (a *Adapter) cryptoFirstSync(ctx context.Context, resp *mautrix.RespSync, fresh bool) error {
	c := a.crypto()
	if c == nil {
		return nil
	}
	if fresh {
		c.mach.ProcessSyncResponse(ctx, resp, "")
	}
	a.updateRoomState(ctx, resp, "")
	return nil
}

// updateRoomState records the rooms' state (members, encryption) from a
// /sync batch in the state store the crypto machine reads: who a reply's
// key is shared with, and which rooms are encrypted.
func (a *Adapter) updateRoomState(ctx context.Context, resp *mautrix.RespSync, _ string) bool {
	store := a.client.StateStore
	apply := func(roomID id.RoomID, evts []*event.Event) {
		for _, evt := range evts {
			if evt.StateKey == nil {
				continue
			}
			evt.RoomID = roomID
			evt.Type.Class = event.StateEventType
			if err := evt.Content.ParseRaw(evt.Type); err != nil && !errors.Is(err, event.ErrUnsupportedContentType) && !errors.Is(err, event.ErrContentAlreadyParsed) {
				continue
			}
			mautrix.UpdateStateStore(ctx, store, evt)
		}
	}
	for roomID, room := range resp.Rooms.Join {
		apply(roomID, room.State.Events)
		apply(roomID, room.Timeline.Events)
	}
	for roomID, room := range resp.Rooms.Leave {
		apply(roomID, room.State.Events)
		apply(roomID, room.Timeline.Events)
	}
	return true
}

func (a *Adapter) crypto() *e2ee {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.e2ee
}

// onEncrypted decrypts a new m.room.encrypted event and hands the message
// inside to onMessage. A message whose key has not arrived waits for it
// (retryPendingKeys); one that cannot be decrypted is answered with
// UndecryptableText.
func (a *Adapter) onEncrypted(ctx context.Context, evt *event.Event) {
	if evt.Mautrix.EventSource&event.SourceJoin == 0 || evt.Mautrix.EventSource&event.SourceTimeline == 0 {
		return
	}
	c := a.crypto()
	if c == nil {
		return
	}
	dec, err := c.mach.DecryptMegolmEvent(ctx, evt)
	switch {
	case err == nil:
		a.onMessage(ctx, dec)
	case evt.Sender == a.client.UserID:
		// The bot's own events from another device: nothing to answer.
	case errors.Is(err, crypto.ErrNoSessionFound):
		a.awaitKey(ctx, c, evt)
	case errors.Is(err, crypto.ErrDuplicateMessageIndex):
		a.log.Warn("matrix encrypted message replayed with a used message index; ignored",
			zap.String("roomId", string(evt.RoomID)), zap.String("eventId", string(evt.ID)))
	case undecided(ctx, err):
		// Stopping: not the message's fault, and the person is told
		// nothing. The batch's position is not saved (ProcessResponse), so
		// the next start fetches it again.
		a.log.Info("matrix message not decrypted before the stop; its /sync batch is fetched again at the next start", zap.String("roomId", string(evt.RoomID)),
			zap.String("eventId", string(evt.ID)), zap.Error(err))
	default:
		a.log.Warn("matrix message cannot be decrypted", zap.String("roomId", string(evt.RoomID)),
			zap.String("eventId", string(evt.ID)), zap.String("sender", string(evt.Sender)), zap.Error(err))
		a.tellUndecryptable(ctx, evt)
	}
}

// awaitKey keeps evt until its key arrives or KeyWait passes, and asks the
// sender's devices (and the bot's own) for the key.
func (a *Adapter) awaitKey(ctx context.Context, c *e2ee, evt *event.Event) {
	content := evt.Content.AsEncrypted()
	c.mu.Lock()
	full := len(c.pending) >= maxPendingKeys
	if !full {
		c.pending = append(c.pending, &pendingKey{evt: evt, deadline: time.Now().Add(a.keyWait())})
	}
	c.mu.Unlock()
	if !full {
		a.savePending(ctx, c)
	}
	a.log.Info("matrix message waits for its key", zap.String("roomId", string(evt.RoomID)),
		zap.String("eventId", string(evt.ID)), zap.String("sessionId", string(content.SessionID)), zap.Bool("listFull", full))
	if full {
		a.tellUndecryptable(ctx, evt)
		return
	}
	reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := c.mach.SendRoomKeyRequest(reqCtx, evt.RoomID, content.SenderKey, content.SessionID, "",
		map[id.UserID][]id.DeviceID{evt.Sender: {"*"}, a.client.UserID: {"*"}})
	if err != nil {
		a.log.Warn("matrix room key request failed", zap.String("eventId", string(evt.ID)), zap.Error(err))
	}
}

func (a *Adapter) keyWait() time.Duration {
	if a.opts.KeyWait > 0 {
		return a.opts.KeyWait
	}
	return defaultKeyWait
}

// retryPendingKeys runs on each /sync batch after the crypto machine took
// its to-device keys: a waiting message whose key came is decrypted and
// handed over with the batch (so under the same durable-intake rules).
func (a *Adapter) retryPendingKeys(ctx context.Context, _ *mautrix.RespSync, _ string) bool {
	c := a.crypto()
	if c == nil {
		return true
	}
	c.mu.Lock()
	waiting := c.pending
	c.pending = nil
	c.mu.Unlock()
	var still []*pendingKey
	for _, p := range waiting {
		dec, err := c.mach.DecryptMegolmEvent(ctx, p.evt)
		if errors.Is(err, crypto.ErrNoSessionFound) || undecided(ctx, err) {
			still = append(still, p)
			continue
		}
		if err != nil {
			a.log.Warn("matrix message cannot be decrypted with the key that came", zap.String("eventId", string(p.evt.ID)), zap.Error(err))
			a.tellUndecryptable(ctx, p.evt)
			continue
		}
		a.log.Info("matrix message decrypted after its key came", zap.String("eventId", string(p.evt.ID)))
		a.onMessage(ctx, dec)
		a.mu.Lock()
		refused := a.refused != nil
		a.mu.Unlock()
		if refused {
			still = append(still, p) // not stored: handed over again with the next batch
		}
	}
	c.mu.Lock()
	c.pending = append(still, c.pending...)
	c.mu.Unlock()
	if len(still) != len(waiting) {
		a.savePending(ctx, c)
	}
	return true
}

// undecided reports whether a decryption failed for a reason of its own
// rather than the message's: the context ended (the adapter stopping in
// the middle of a /sync batch) while the key store was read. Such a
// message is decided later; it is neither dropped nor answered with
// UndecryptableText.
func undecided(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// startKeyWaits starts the goroutine that tells the senders of messages
// whose key did not come within KeyWait; stopCrypto waits for it.
func (a *Adapter) startKeyWaits(ctx context.Context) {
	c := a.crypto()
	if c == nil {
		return
	}
	c.done = make(chan struct{})
	tick := min(a.keyWait()/4, time.Second)
	go func() {
		defer close(c.done)
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				gone := c.expired(now)
				for _, p := range gone {
					a.log.Warn("matrix message key did not come; the sender is told", zap.String("roomId", string(p.evt.RoomID)),
						zap.String("eventId", string(p.evt.ID)), zap.Duration("waited", a.keyWait()))
					a.tellUndecryptable(ctx, p.evt)
				}
				if len(gone) > 0 {
					a.savePending(ctx, c)
				}
			}
		}
	}()
}

// expired removes and returns the waiting messages whose deadline passed.
func (c *e2ee) expired(now time.Time) []*pendingKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out, keep []*pendingKey
	for _, p := range c.pending {
		if now.After(p.deadline) {
			out = append(out, p)
		} else {
			keep = append(keep, p)
		}
	}
	c.pending = keep
	return out
}

// stopCrypto waits for the key-wait goroutine, tells the senders of
// messages still waiting unless Options.State keeps them for the next
// start, and closes the key store.
func (a *Adapter) stopCrypto(ctx context.Context) {
	c := a.crypto()
	if c == nil {
		return
	}
	if c.done != nil {
		select {
		case <-c.done:
		case <-ctx.Done():
		}
	}
	c.mu.Lock()
	left := c.pending
	c.pending = nil
	c.mu.Unlock()
	if a.opts.State != nil {
		// Kept in the store: the next start waits for their keys again.
		left = nil
	}
	for _, p := range left {
		tellCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		a.tellUndecryptable(tellCtx, p.evt)
		cancel()
	}
	a.mu.Lock()
	a.e2ee = nil
	a.mu.Unlock()
	if err := c.closeDB(); err != nil {
		a.log.Warn("matrix: close the key store", zap.Error(err))
	}
}

// tellUndecryptable answers evt with UndecryptableText, in its thread: in
// a DM every such message; in a group once per room, sender and Megolm
// session (the mention is inside the ciphertext, so a group room where the
// bot lacks a session would otherwise hear it on every message, addressed
// to the bot or not); only to a sender the access rules let talk to the bot.
func (a *Adapter) tellUndecryptable(ctx context.Context, evt *event.Event) {
	c := a.crypto()
	if evt.Sender == a.client.UserID {
		return
	}
	content := evt.Content.AsEncrypted()
	chatType, err := a.chatType(ctx, evt.RoomID)
	if err != nil {
		a.log.Warn("matrix joined members lookup failed, treating room as a group",
			zap.String("roomId", string(evt.RoomID)), zap.Error(err))
		chatType = channels.ChatGroup
	}
	// The mention is inside the ciphertext: the sender's allowlist and the
	// room's are what can be checked.
	if !a.opts.Access.Admit(chatType, string(evt.RoomID), string(evt.Sender), true) {
		a.log.Info("matrix undecryptable message from a sender not admitted; not answered",
			zap.String("roomId", string(evt.RoomID)), zap.String("sender", string(evt.Sender)))
		return
	}
	if c != nil {
		key := string(evt.RoomID) + "|" + string(evt.Sender) + "|" + string(content.SessionID)
		if chatType == channels.ChatDM {
			key += "|" + string(evt.ID) // every message of a DM is to the bot: each is answered
		}
		c.mu.Lock()
		seen := c.told.has(key)
		c.told.put(key, "")
		c.mu.Unlock()
		if seen {
			return
		}
	}
	threadID := a.replyThread(content.RelatesTo.GetThreadParent(), evt.ID)
	to := channels.Origin{Channel: Name, ChatID: string(evt.RoomID), ChatType: chatType, ThreadID: threadID,
		SenderID: string(evt.Sender), MessageID: string(evt.ID)}
	if _, err := a.sendText(ctx, to, UndecryptableText, "herald-undecryptable-"+string(evt.ID)); err != nil {
		a.log.Warn("matrix: cannot tell the sender of an undecryptable message", zap.String("origin", to.String()), zap.Error(err))
	}
}

// cryptoChecks is doctor's look at encryption: the recovery key is checked
// against the account's secret storage (without signing anything).
func (a *Adapter) cryptoChecks(ctx context.Context) []channels.Check {
	if !a.opts.Encryption {
		return nil
	}
	out := []channels.Check{{Name: "matrix encryption", Status: channels.CheckOK,
		Detail: "pure-Go Olm; the device's keys are kept in the state database"}}
	if a.opts.RecoveryKey == "" {
		return append(out, channels.Check{Name: "matrix device verification", Status: channels.CheckWarn,
			Detail: "no channels.matrix.recoveryKey: the bot's device is not cross-signed",
			Fix:    "set up Secure Backup for the bot account in Element and put its recovery key in channels.matrix.recoveryKey"})
	}
	keyID, keyData, err := ssss.NewSSSSMachine(a.client).GetDefaultKeyData(ctx)
	if err != nil {
		return append(out, channels.Check{Name: "matrix recovery key", Status: channels.CheckFail, Detail: err.Error(),
			Fix: "the account has no secret storage: set up Secure Backup for the bot account in Element, then use its recovery key"})
	}
	if _, err := keyData.VerifyRecoveryKey(keyID, a.opts.RecoveryKey); err != nil && !errors.Is(err, ssss.ErrUnverifiableKey) {
		return append(out, channels.Check{Name: "matrix recovery key", Status: channels.CheckFail, Detail: err.Error(),
			Fix: "channels.matrix.recoveryKey is not the recovery key of the account's secret storage"})
	}
	return append(out, channels.Check{Name: "matrix recovery key", Status: channels.CheckOK,
		Detail: "matches the account's secret storage (key " + keyID + ")"})
}

// decryptEarlier decrypts an event read from the room's history (thread
// context) with the keys the device holds; nil when it cannot.
func (a *Adapter) decryptEarlier(ctx context.Context, room id.RoomID, evt *event.Event) *event.Event {
	c := a.crypto()
	if c == nil {
		return nil
	}
	evt.RoomID = room
	if err := evt.Content.ParseRaw(evt.Type); err != nil && !errors.Is(err, event.ErrContentAlreadyParsed) {
		return nil
	}
	dec, err := c.mach.DecryptMegolmEvent(ctx, evt)
	if err != nil {
		a.log.Debug("matrix earlier thread message not decrypted", zap.String("eventId", string(evt.ID)), zap.Error(err))
		return nil
	}
	return dec
}

// freshTrust fetches user's device keys from the homeserver again (within
// ctx: deviceDoubt bounds it) and
// resolves the trust of dev (the device a message was decrypted from) with
// them; ok is false when the fetch fails or the homeserver now lists other
// keys for the device.
func (a *Adapter) freshTrust(ctx context.Context, user id.UserID, dev *id.Device) (id.TrustState, bool) {
	c := a.crypto()
	if c == nil {
		return id.TrustStateUnset, false
	}
	devices, err := c.mach.FetchKeys(ctx, []id.UserID{user}, true)
	if err != nil {
		a.log.Warn("matrix: the keys of an approver could not be read again", zap.String("sender", string(user)), zap.Error(err))
		return id.TrustStateUnset, false
	}
	fresh := devices[user][dev.DeviceID]
	if fresh == nil {
		// FetchKeys returns only what changed; the store has the rest.
		if fresh, err = c.mach.CryptoStore.GetDevice(ctx, user, dev.DeviceID); err != nil || fresh == nil {
			return id.TrustStateUnset, false
		}
	}
	if fresh.SigningKey != dev.SigningKey || fresh.IdentityKey != dev.IdentityKey {
		return id.TrustStateDeviceKeyMismatch, true
	}
	state, err := c.mach.ResolveTrustContext(ctx, fresh)
	if err != nil {
		return id.TrustStateUnset, false
	}
	return state, true
}

// cryptoHelper is the client's mautrix.CryptoHelper: SendMessageEvent
// encrypts through it in encrypted rooms (replies, thread replies and
// edits alike; the relation stays readable to the homeserver).
type cryptoHelper struct {
	mach   *crypto.OlmMachine
	client *mautrix.Client
}

var _ mautrix.CryptoHelper = (*cryptoHelper)(nil)

func (h *cryptoHelper) Init(context.Context) error { return nil }

func (h *cryptoHelper) Decrypt(ctx context.Context, evt *event.Event) (*event.Event, error) {
	return h.mach.DecryptMegolmEvent(ctx, evt)
}

func (h *cryptoHelper) WaitForSession(ctx context.Context, roomID id.RoomID, senderKey id.SenderKey, sessionID id.SessionID, timeout time.Duration) bool {
	return h.mach.WaitForSession(ctx, roomID, senderKey, sessionID, timeout)
}

func (h *cryptoHelper) RequestSession(ctx context.Context, roomID id.RoomID, senderKey id.SenderKey, sessionID id.SessionID, userID id.UserID, deviceID id.DeviceID) {
	if deviceID == "" {
		deviceID = "*"
	}
	_ = h.mach.SendRoomKeyRequest(ctx, roomID, senderKey, sessionID, "", map[id.UserID][]id.DeviceID{userID: {deviceID}, h.client.UserID: {"*"}})
}

// Encrypt encrypts content for the room's Megolm session, sharing a new
// session with the room's joined and invited members' devices when there
// is none (or it expired).
func (h *cryptoHelper) Encrypt(ctx context.Context, roomID id.RoomID, evtType event.Type, content any) (*event.EncryptedEventContent, error) {
	enc, err := h.mach.EncryptMegolmEvent(ctx, roomID, evtType, content)
	if err == nil {
		return enc, nil
	}
	if !errors.Is(err, crypto.ErrSessionExpired) && !errors.Is(err, crypto.ErrNoGroupSession) && !errors.Is(err, crypto.ErrSessionNotShared) {
		return nil, err
	}
	users, err := h.client.StateStore.GetRoomJoinedOrInvitedMembers(ctx, roomID)
	if err != nil {
		return nil, fmt.Errorf("room members of %s: %w", roomID, err)
	}
	if err := h.mach.ShareGroupSession(ctx, roomID, users); err != nil {
		return nil, fmt.Errorf("share the room key in %s: %w", roomID, err)
	}
	return h.mach.EncryptMegolmEvent(ctx, roomID, evtType, content)
}

// zapWriter turns mautrix's zerolog lines into the adapter's zap log (one
// field with the JSON line; the crypto machine logs session and event ids,
// never key material).
type zapWriter struct{ log *zap.Logger }

func (w zapWriter) Write(p []byte) (int, error) {
	w.log.Warn("mautrix crypto", zap.ByteString("line", trimNewline(p)))
	return len(p), nil
}

func (w zapWriter) WriteLevel(level zerolog.Level, p []byte) (int, error) {
	line := zap.ByteString("line", trimNewline(p))
	switch {
	case level >= zerolog.ErrorLevel:
		w.log.Error("mautrix crypto", line)
	case level == zerolog.WarnLevel:
		w.log.Warn("mautrix crypto", line)
	default:
		w.log.Debug("mautrix crypto", line)
	}
	return len(p), nil
}

func trimNewline(p []byte) []byte {
	if n := len(p); n > 0 && p[n-1] == '\n' {
		return p[:n-1]
	}
	return p
}

// pendingKeyPrefix is the State key of the messages waiting for their key,
// per bot user.
const pendingKeyPrefix = "e2ee.pending."

// savePending writes the messages waiting for their key to Options.State
// (a JSON array of the encrypted events), so a restart or a crash while
// they wait neither loses them nor leaves their senders untold.
func (a *Adapter) savePending(ctx context.Context, c *e2ee) {
	if a.opts.State == nil {
		return
	}
	c.mu.Lock()
	evts := make([]*event.Event, 0, len(c.pending))
	for _, p := range c.pending {
		evts = append(evts, p.evt)
	}
	c.mu.Unlock()
	b, err := json.Marshal(evts)
	if err == nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err = a.opts.State.Set(sctx, pendingKeyPrefix+string(a.client.UserID), string(b))
		cancel()
	}
	if err != nil {
		a.log.Warn("matrix: the messages waiting for their key were not saved; a restart now would lose them", zap.Error(err))
	}
}

// loadPending takes back the messages that waited for their key when the
// adapter last stopped (or died): each waits KeyWait again, and its key is
// asked for again.
func (a *Adapter) loadPending(ctx context.Context, c *e2ee) {
	if a.opts.State == nil {
		return
	}
	v, found, err := a.opts.State.Get(ctx, pendingKeyPrefix+string(a.client.UserID))
	if err != nil {
		a.log.Warn("matrix: the messages that waited for their key could not be read", zap.Error(err))
		return
	}
	if !found || v == "" {
		return
	}
	var evts []*event.Event
	if err := json.Unmarshal([]byte(v), &evts); err != nil {
		a.log.Warn("matrix: the saved messages waiting for their key are unreadable; dropped", zap.Error(err))
		return
	}
	deadline := time.Now().Add(a.keyWait())
	c.mu.Lock()
	for _, evt := range evts {
		if evt == nil || len(c.pending) >= maxPendingKeys {
			continue
		}
		if err := evt.Content.ParseRaw(evt.Type); err != nil {
			continue
		}
		// Where it came from is not saved with it: a joined room's timeline.
		evt.Mautrix.EventSource = event.SourceJoin | event.SourceTimeline
		c.pending = append(c.pending, &pendingKey{evt: evt, deadline: deadline})
	}
	taken := append([]*pendingKey(nil), c.pending...)
	c.mu.Unlock()
	for _, p := range taken {
		content := p.evt.Content.AsEncrypted()
		a.log.Info("matrix message still waits for its key after a restart", zap.String("roomId", string(p.evt.RoomID)),
			zap.String("eventId", string(p.evt.ID)))
		reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := c.mach.SendRoomKeyRequest(reqCtx, p.evt.RoomID, content.SenderKey, content.SessionID, "",
			map[id.UserID][]id.DeviceID{p.evt.Sender: {"*"}, a.client.UserID: {"*"}}); err != nil {
			a.log.Warn("matrix room key request failed", zap.String("eventId", string(p.evt.ID)), zap.Error(err))
		}
		cancel()
	}
}
