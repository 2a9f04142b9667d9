//go:build goolm

package matrixtest

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/crypto"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
)

// E2EE is a person's client that encrypts, as Element does: an Olm machine
// (mautrix's pure-Go Olm, keys in memory) and a /sync loop of its own that
// takes the keys sent to it and the rooms' state, until the test ends.
//
// It answers no room key requests (as a client whose person has not been
// asked); the requests it gets are in KeyRequests.
type E2EE struct {
	*mautrix.Client
	Mach *crypto.OlmMachine
	// KeyRequests receives the m.room_key_request events sent to this
	// device (the last 16 unread).
	KeyRequests chan *event.RoomKeyRequestEventContent

	// synced is held while a /sync response is processed (see
	// WithoutSync).
	synced *sync.Mutex
}

// WithoutSync runs fn while this client's /sync responses wait to be
// processed. mautrix's OlmMachine sets its own cross-signing keys
// (GenerateAndUploadCrossSigningKeys, SignOwnDevice) without a lock that
// its /sync handlers take, and those handlers read and reset the same
// fields when a device list changes: a test that sets up cross-signing
// while the client syncs races with it (seen under -race in
// TestE2EMatrixApprovalNeedsVerifiedDevice). A response that arrives
// meanwhile is processed after fn, so nothing is dropped.
func (e *E2EE) WithoutSync(fn func()) {
	e.synced.Lock()
	defer e.synced.Unlock()
	fn()
}

// lockedSyncer processes each /sync response under a lock that
// WithoutSync takes too.
type lockedSyncer struct {
	*mautrix.DefaultSyncer
	mu *sync.Mutex
}

func (s lockedSyncer) ProcessResponse(ctx context.Context, resp *mautrix.RespSync, since string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.DefaultSyncer.ProcessResponse(ctx, resp, since)
}

// signatureStore is mautrix's MemoryStore with the key signatures behind a
// lock of its own: MemoryStore (mautrix v0.31.0) writes them under its read
// lock (PutSignature, DropSignaturesByKey) and hands out its inner maps
// (GetSignaturesForKeyBy), so the /sync loop storing the signatures of a
// device list raced with the test signing its own device (-race in CI,
// TestE2EMatrixApprovalNeedsVerifiedDevice). The gateway's own store is
// SQL and not affected.
type signatureStore struct {
	*crypto.MemoryStore
	mu sync.RWMutex
}

func (s *signatureStore) PutSignature(ctx context.Context, signedUser id.UserID, signedKey id.Ed25519, signerUser id.UserID, signerKey id.Ed25519, signature string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.MemoryStore.PutSignature(ctx, signedUser, signedKey, signerUser, signerKey, signature)
}

func (s *signatureStore) DropSignaturesByKey(ctx context.Context, user id.UserID, key id.Ed25519) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.MemoryStore.DropSignaturesByKey(ctx, user, key)
}

func (s *signatureStore) GetSignaturesForKeyBy(ctx context.Context, user id.UserID, key id.Ed25519, signer id.UserID) (map[id.Ed25519]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sigs, err := s.MemoryStore.GetSignaturesForKeyBy(ctx, user, key, signer)
	return maps.Clone(sigs), err
}

func (s *signatureStore) IsKeySignedBy(ctx context.Context, user id.UserID, key id.Ed25519, signer id.UserID, signerKey id.Ed25519) (bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.MemoryStore.IsKeySignedBy(ctx, user, key, signer, signerKey)
}

// NewE2EE gives c (from RegisterUser) an Olm device, uploads its keys and
// starts its /sync loop.
func NewE2EE(t testing.TB, c *mautrix.Client) *E2EE {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	state := &copyingStateStore{mautrix.NewMemoryStateStore().(*mautrix.MemoryStateStore)}
	c.StateStore = state
	c.Store = mautrix.NewMemorySyncStore()
	syncer := mautrix.NewDefaultSyncer()
	synced := new(sync.Mutex)
	c.Syncer = lockedSyncer{DefaultSyncer: syncer, mu: synced}
	log := zerolog.Nop()
	mach := crypto.NewOlmMachine(c, &log, &signatureStore{MemoryStore: crypto.NewMemoryStore(nil)}, state)
	if err := mach.Load(ctx); err != nil {
		t.Fatalf("%s: load Olm account: %v", c.UserID, err)
	}
	if err := mach.ShareKeys(ctx, -1); err != nil {
		t.Fatalf("%s: upload device keys: %v", c.UserID, err)
	}
	mach.AllowKeyShare = func(context.Context, *id.Device, event.RequestedKeyInfo) *crypto.KeyShareRejection {
		return &crypto.KeyShareRejectNoResponse
	}
	e := &E2EE{Client: c, Mach: mach, KeyRequests: make(chan *event.RoomKeyRequestEventContent, 16), synced: synced}
	syncer.OnSync(mach.ProcessSyncResponse)
	syncer.OnEvent(c.StateStoreSyncHandler)
	syncer.OnEventType(event.StateMember, mach.HandleMemberEvent)
	syncer.OnEventType(event.ToDeviceRoomKeyRequest, func(_ context.Context, evt *event.Event) {
		if req := evt.Content.AsRoomKeyRequest(); req != nil && req.Action == event.KeyRequestActionRequest {
			select {
			case e.KeyRequests <- req:
			default:
			}
		}
	})
	c.Crypto = e2eeHelper{e}

	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for runCtx.Err() == nil {
			_ = c.SyncWithContext(runCtx)
			select {
			case <-runCtx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		stop()
		c.StopSync()
		select {
		case <-done:
		case <-time.After(WaitTimeout):
			t.Errorf("%s: /sync loop did not stop", c.UserID)
		}
	})
	return e
}

// CreateEncryptedRoom creates a private room with encryption on from its
// first event (as Element does for DMs and private rooms), inviting the
// given users.
func (e *E2EE) CreateEncryptedRoom(t testing.TB, invite ...id.UserID) id.RoomID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	resp, err := e.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "private_chat", Invite: invite, Name: "herald e2ee test",
		InitialState: []*event.Event{{Type: event.StateEncryption, Content: event.Content{
			Parsed: &event.EncryptionEventContent{Algorithm: id.AlgorithmMegolmV1}}}}})
	if err != nil {
		t.Fatalf("%s creates an encrypted room inviting %v: %v", e.UserID, invite, err)
	}
	return resp.RoomID
}

// WaitMember waits until user is a joined member of room on the
// homeserver, and records the room's joined members in e's state store
// (whose own /sync may have recorded the invite after the join: mautrix
// writes a created room's invites when createRoom returns), so a message e
// encrypts next is shared with user's devices.
func (e *E2EE) WaitMember(t testing.TB, room id.RoomID, user id.UserID) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s to see %s joined in %s", e.UserID, user, room), func(ctx context.Context) (bool, error) {
		resp, err := e.JoinedMembers(ctx, room)
		if err != nil {
			return false, err
		}
		if _, ok := resp.Joined[user]; !ok {
			return false, nil
		}
		for member := range resp.Joined {
			if err := e.StateStore.SetMembership(ctx, room, member, event.MembershipJoin); err != nil {
				return false, err
			}
		}
		return true, nil
	})
}

// PostEncrypted sends an encrypted m.text into room (in the thread rooted
// at root unless it is empty), with mentions in m.mentions, and returns its
// event id.
func (e *E2EE) PostEncrypted(t testing.TB, room id.RoomID, root id.EventID, text string, mentions ...id.UserID) id.EventID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	if ok, err := e.StateStore.IsEncrypted(ctx, room); err != nil || !ok {
		t.Fatalf("%s: room %s is not known as encrypted (err %v)", e.UserID, room, err)
	}
	return PostInThread(t, e.Client, room, root, text, mentions...)
}

// PostOnSession sends an encrypted m.text into room (in the thread rooted
// at root unless it is empty) on e's current Megolm session of the room,
// without sharing any room key first: only devices that already hold that
// session (from an earlier message) can read it. It returns the event id
// and the session id.
func (e *E2EE) PostOnSession(t testing.TB, room id.RoomID, root id.EventID, text string, mentions ...id.UserID) (id.EventID, id.SessionID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	enc, err := e.Mach.EncryptMegolmEvent(ctx, room, event.EventMessage, textContent(root, text, mentions))
	if err != nil {
		t.Fatalf("%s: encrypt %q on the current session of %s: %v", e.UserID, text, room, err)
	}
	resp, err := e.SendMessageEvent(ctx, room, event.EventEncrypted, enc)
	if err != nil {
		t.Fatalf("%s posts %q in %s (thread %q): %v", e.UserID, text, room, root, err)
	}
	return resp.EventID, enc.SessionID
}

// Decrypted is a message as e reads it: decrypted when it was encrypted.
type Decrypted struct {
	*event.Event
	Encrypted bool         // it came as m.room.encrypted
	SessionID id.SessionID // the Megolm session it was encrypted with, when Encrypted
}

// Body is the message's text.
func (d Decrypted) Body() string {
	if msg, ok := d.Content.Parsed.(*event.MessageEventContent); ok {
		return msg.Body
	}
	return ""
}

// Messages returns the last 200 messages of room, oldest first, decrypted
// where e has the key; ok is false while one of them cannot be decrypted
// yet.
func (e *E2EE) Messages(ctx context.Context, room id.RoomID) (out []Decrypted, ok bool, err error) {
	resp, err := e.Client.Messages(ctx, room, "", "", mautrix.DirectionBackward, nil, 200)
	if err != nil {
		return nil, false, err
	}
	ok = true
	for i := len(resp.Chunk) - 1; i >= 0; i-- {
		evt := resp.Chunk[i]
		evt.RoomID = room
		switch evt.Type {
		case event.EventMessage:
			_ = evt.Content.ParseRaw(evt.Type)
			out = append(out, Decrypted{Event: evt})
		case event.EventEncrypted:
			if err := evt.Content.ParseRaw(evt.Type); err != nil {
				return nil, false, err
			}
			dec, err := e.Mach.DecryptMegolmEvent(ctx, evt)
			if err != nil {
				ok = false
				continue
			}
			if dec.Type == event.EventMessage {
				out = append(out, Decrypted{Event: dec, Encrypted: true, SessionID: evt.Content.AsEncrypted().SessionID})
			}
		}
	}
	return out, ok, nil
}

// WaitMessages waits until room holds at least n messages from sender that
// match (nil: all), e having decrypted them, and returns them, oldest first.
func (e *E2EE) WaitMessages(t testing.TB, room id.RoomID, sender id.UserID, n int, match func(Decrypted) bool) []Decrypted {
	t.Helper()
	var got []Decrypted
	waitFor(t, fmt.Sprintf("%d decrypted message(s) from %s in %s", n, sender, room), func(ctx context.Context) (bool, error) {
		all, _, err := e.Messages(ctx, room)
		if err != nil {
			return false, err
		}
		got = got[:0]
		for _, m := range all {
			if m.Sender == sender && (match == nil || match(m)) {
				got = append(got, m)
			}
		}
		return len(got) >= n, nil
	})
	return got
}

// e2eeHelper encrypts e's messages the way Element does: the room's
// Megolm session is shared with every joined or invited member's devices
// that lack it, then the message is encrypted.
type e2eeHelper struct{ e *E2EE }

func (h e2eeHelper) Init(context.Context) error { return nil }

func (h e2eeHelper) Decrypt(ctx context.Context, evt *event.Event) (*event.Event, error) {
	return h.e.Mach.DecryptMegolmEvent(ctx, evt)
}

func (h e2eeHelper) WaitForSession(ctx context.Context, room id.RoomID, key id.SenderKey, session id.SessionID, d time.Duration) bool {
	return h.e.Mach.WaitForSession(ctx, room, key, session, d)
}

func (h e2eeHelper) RequestSession(context.Context, id.RoomID, id.SenderKey, id.SessionID, id.UserID, id.DeviceID) {
}

func (h e2eeHelper) Encrypt(ctx context.Context, room id.RoomID, typ event.Type, content any) (*event.EncryptedEventContent, error) {
	users, err := h.e.StateStore.GetRoomJoinedOrInvitedMembers(ctx, room)
	if err != nil {
		return nil, err
	}
	if err := h.e.Mach.ShareGroupSession(ctx, room, users); err != nil {
		return nil, fmt.Errorf("share the room key: %w", err)
	}
	return h.e.Mach.EncryptMegolmEvent(ctx, room, typ, content)
}

// copyingStateStore is mautrix's MemoryStateStore that never shares a
// member content with the event it came from, nor changes one in place:
// MemoryStateStore keeps the event's own content (which the /sync loop's
// handlers go on reading) and SetMembership (CreateRoom, on the test's
// goroutine) writes into it — a data race inside mautrix's test store; nor
// reads a room's member map outside the store's lock.
type copyingStateStore struct{ *mautrix.MemoryStateStore }

func (s *copyingStateStore) SetMember(ctx context.Context, room id.RoomID, user id.UserID, m *event.MemberEventContent) error {
	if m != nil {
		c := *m
		m = &c
	}
	return s.MemoryStateStore.SetMember(ctx, room, user, m)
}

// GetRoomJoinedOrInvitedMembers lists the room's members from a copy taken
// under MemoryStateStore's lock: its own version ranges over the live map
// after letting go of the lock, racing the /sync loop's writes into it
// (seen under -race when a message is encrypted while a member event comes in).
func (s *copyingStateStore) GetRoomJoinedOrInvitedMembers(ctx context.Context, room id.RoomID) ([]id.UserID, error) {
	members, err := s.MemoryStateStore.GetAllMembers(ctx, room)
	if err != nil {
		return nil, err
	}
	out := make([]id.UserID, 0, len(members))
	for user := range members {
		out = append(out, user)
	}
	return out, nil
}

func (s *copyingStateStore) SetMembership(ctx context.Context, room id.RoomID, user id.UserID, membership event.Membership) error {
	var c event.MemberEventContent
	if m, err := s.MemoryStateStore.GetMember(ctx, room, user); err == nil && m != nil {
		c = *m // stored members are never changed in place, only replaced
	}
	c.Membership = membership
	return s.MemoryStateStore.SetMember(ctx, room, user, &c)
}
