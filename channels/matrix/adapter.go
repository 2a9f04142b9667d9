package matrix

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/zap"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels"
)

// Channel name as it appears in origins and session keys.
const Name channels.Name = "matrix"

// Thread reply modes (Options.ThreadReplies).
const (
	ThreadsOff     = "off"     // replies are never threaded
	ThreadsInbound = "inbound" // threaded only when the inbound message was in a thread (default)
	ThreadsAlways  = "always"  // a top-level message starts a thread rooted at it
)

// Memory bounds: how many thread roots, own events and room facts the
// adapter remembers.
const (
	maxThreads    = 4096
	maxOwnEvents  = 4096
	maxRooms      = 4096
	maxBackoff    = time.Minute
	minBackoff    = time.Second
	startupBudget = 60 * time.Second
)

// Options configures the adapter. Homeserver and either AccessToken or
// UserID+Password are required.
type Options struct {
	Homeserver  string // base URL, e.g. https://matrix.example.org
	UserID      string // the bot's mxid; required with Password, checked against whoami with AccessToken
	AccessToken string
	Password    string // used when AccessToken is empty (m.login.password); the token is kept in memory only
	DeviceID    string // optional device id for password login
	AutoJoin    bool   // join rooms the bot is invited to
	// ThreadReplies is ThreadsOff, ThreadsInbound (default) or ThreadsAlways.
	ThreadReplies string
	// ThreadContext is how many earlier messages of a thread the bot is
	// first addressed in are read as context (channels.ThreadReader); 0 = off.
	ThreadContext int
	Access        channels.Access
	// Bound, if set, reports whether a thread is bound to a sub-agent
	// (channels.Deps.Bound, SPEC §24): a thread the bot is in, whatever
	// this process's sync has seen of it.
	Bound  func(ctx context.Context, o channels.Origin) bool
	Logger *zap.Logger
	// HTTPClient is used for every request; its Timeout must exceed the 30 s
	// /sync long poll. Nil uses a client with a 120 s timeout.
	HTTPClient *http.Client
	// SyncStore keeps the /sync next_batch token across restarts (the
	// gateway's store). With a token from an earlier run, the adapter
	// continues from it, so messages sent while the gateway was down are
	// delivered (the gateway drops re-deliveries by event id). Nil keeps it
	// in memory: a start then skips what came before it.
	SyncStore mautrix.SyncStore
	// Encryption turns on end-to-end encryption (SPEC §21, crypto.go): the
	// bot reads and answers in encrypted rooms. CryptoDB is then required.
	Encryption bool
	// CryptoDB opens the database that keeps the device's keys and Olm and
	// Megolm sessions (the gateway's state database), at Start; its Close
	// runs at Stop.
	CryptoDB func() (CryptoDB, error)
	// RequireVerifiedDevices, with Encryption, marks every message that
	// did not come from a verified device of its sender
	// (channels.Inbound.Unverified, devices.go): the gateway refuses an
	// /approve in it.
	RequireVerifiedDevices bool
	// RecoveryKey, with Encryption, verifies the bot's device by
	// cross-signing: the account's cross-signing keys are fetched from its
	// secret storage with it and sign the device. A secret: never logged.
	RecoveryKey string
	// KeyWait is how long a message whose key has not arrived waits for it
	// before the sender is told to share keys (default 30 s).
	KeyWait time.Duration
	// State keeps the encrypted messages waiting for their key (the
	// adapter's namespaced store), so a restart — or a crash — while they
	// wait neither loses them nor leaves their senders untold: the next
	// start waits for their keys again. Nil keeps them in memory only, and
	// a clean stop tells their senders.
	State channels.KV
}

// Adapter is the Matrix channel.
type Adapter struct {
	opts   Options
	log    *zap.Logger
	client *mautrix.Client

	runMu   sync.Mutex // guards the lifecycle fields below
	started bool
	cancel  context.CancelFunc
	done    chan struct{}

	mu          sync.Mutex // guards the fields below
	sink        channels.Sink
	running     bool
	userID      id.UserID
	displayName string
	healthErr   error
	failures    int
	dmRooms     *recent // room id -> the other member's user id (a DM) | "group"
	dmRoomOf    *recent // person (user id) -> the room their DM talks in (dm.go)
	ownEvents   *recent // room|event id of events the bot sent -> ""
	botThreads  *recent // room|root the bot posted in -> ""
	threadLast  *recent // room|root -> latest event id known in that thread
	// refused is the sink's ErrUnavailable for a message of the /sync
	// batch being processed: the rest of the batch is not handed over and
	// the batch is fetched again (see backoffSyncer.ProcessResponse).
	refused error
	// memberRetries counts, per event, the /sync batches refused because
	// its room's member list could not be read (inboundChatType); cleared
	// once a batch is taken whole.
	memberRetries map[id.EventID]int
	// rewind is the token of a refused batch, to be saved back as the
	// sync token before /sync runs again ("" when none).
	rewind string
	// tokens is the store the /sync position is kept in (Options.SyncStore
	// or memory); the client sees it through batchSyncStore.
	tokens mautrix.SyncStore
	// batchTaken is the ids of the events of the batch being processed the
	// gateway took; retaken is those of a refused batch, not handed over
	// again when the batch comes again (a gateway command is not stored,
	// so the intake's de-duplication would not catch it).
	batchTaken []id.EventID
	retaken    map[id.EventID]bool
	names      channels.NameCache // room|user → display name, for thread context

	media mediaState // files.go

	// e2ee is the end-to-end encryption state while started with
	// Encryption (crypto.go); nil otherwise.
	e2ee *e2ee
	// refetchTrust, when set (tests), stands in for freshTrust.
	refetchTrust func(ctx context.Context, user id.UserID, dev *id.Device) (id.TrustState, bool)
}

var (
	_ channels.Channel  = (*Adapter)(nil)
	_ channels.Healther = (*Adapter)(nil)
)

// New checks opts and builds an adapter; it does no network I/O.
func New(opts Options) (*Adapter, error) {
	if strings.TrimSpace(opts.Homeserver) == "" {
		return nil, errors.New("matrix: homeserver is required")
	}
	if opts.AccessToken == "" && opts.Password == "" {
		return nil, errors.New("matrix: accessToken or password is required")
	}
	if opts.AccessToken == "" && opts.UserID == "" {
		return nil, errors.New("matrix: userId is required for password login")
	}
	if opts.UserID != "" {
		if _, _, err := id.UserID(opts.UserID).Parse(); err != nil {
			return nil, fmt.Errorf("matrix: userId %q: %w", opts.UserID, err)
		}
	}
	if err := checkEncryption(opts); err != nil {
		return nil, err
	}
	switch opts.ThreadReplies {
	case "":
		opts.ThreadReplies = ThreadsInbound
	case ThreadsOff, ThreadsInbound, ThreadsAlways:
	default:
		return nil, fmt.Errorf("matrix: threadReplies %q: want off, inbound or always", opts.ThreadReplies)
	}
	client, err := mautrix.NewClient(opts.Homeserver, id.UserID(opts.UserID), opts.AccessToken)
	if err != nil {
		return nil, fmt.Errorf("matrix: homeserver %q: %w", opts.Homeserver, err)
	}
	if opts.HTTPClient != nil {
		client.Client = opts.HTTPClient
	} else {
		client.Client = &http.Client{Timeout: 120 * time.Second}
	}
	client.Log = zerolog.Nop()
	client.UserAgent = "Herald (mautrix-go)"
	// Keep mautrix's own retries short so a rate limit or an outage reaches
	// the gateway's outbox (which owns retries) instead of hiding in here.
	client.DefaultHTTPRetries = 1
	client.DefaultHTTPBackoff = 500 * time.Millisecond
	client.MaxHTTPBackoff = 2 * time.Second
	client.IgnoreRateLimit = true
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return &Adapter{
		opts:       opts,
		log:        log.Named("matrix"),
		client:     client,
		healthErr:  ErrNotStarted,
		dmRooms:    newRecent(maxRooms),
		dmRoomOf:   newRecent(maxRooms),
		ownEvents:  newRecent(maxOwnEvents),
		botThreads: newRecent(maxThreads),
		threadLast: newRecent(maxThreads),
	}, nil
}

// Name returns "matrix".
func (a *Adapter) Name() channels.Name { return Name }

// UserID is the bot's mxid, known after Start.
func (a *Adapter) UserID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return string(a.userID)
}

// Health reports the state of the /sync loop: nil while syncing works.
func (a *Adapter) Health() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.healthErr
}

// Start logs in, runs a first /sync whose timeline is skipped (so nothing
// from before the start is answered), and then follows /sync in the
// background until ctx is cancelled or Stop is called.
func (a *Adapter) Start(ctx context.Context, sink channels.Sink) error {
	if sink == nil {
		return errors.New("matrix: start: nil sink")
	}
	a.runMu.Lock()
	defer a.runMu.Unlock()
	if a.started {
		return errors.New("matrix: start: already started")
	}
	startCtx, cancelStart := context.WithTimeout(ctx, startupBudget)
	defer cancelStart()
	if err := a.login(startCtx, a.deviceForLogin()); err != nil {
		return err
	}
	a.loadMediaConfig(startCtx)
	if resp, err := a.client.GetOwnDisplayName(startCtx); err == nil && resp != nil {
		a.mu.Lock()
		a.displayName = resp.DisplayName
		a.mu.Unlock()
	}
	syncer := mautrix.NewDefaultSyncer()
	a.client.Syncer = &backoffSyncer{DefaultSyncer: syncer, a: a}
	var tokens mautrix.SyncStore = mautrix.NewMemorySyncStore()
	if a.opts.SyncStore != nil {
		tokens = a.opts.SyncStore
	}
	a.tokens = tokens
	a.client.Store = batchSyncStore{tokens}
	resume, err := a.tokens.LoadNextBatch(startCtx, a.client.UserID)
	if err != nil {
		return fmt.Errorf("matrix: load the saved sync token: %w", err)
	}
	if a.opts.Encryption {
		// Before initialSync and the handlers below: the crypto handlers run
		// first on each /sync batch (keys before the messages they open).
		if err := a.startCrypto(startCtx, syncer); err != nil {
			return err
		}
		started := false
		defer func() {
			if !started {
				a.stopCrypto(context.WithoutCancel(ctx))
			}
		}()
		defer func() { started = a.started }()
	}
	if err := a.initialSync(startCtx, resume == ""); err != nil {
		return err
	}
	if resume != "" {
		// Continue from where the last run stopped: what arrived since is
		// delivered (the initial sync above only warmed the caches).
		if err := a.tokens.SaveNextBatch(startCtx, a.client.UserID, resume); err != nil {
			return fmt.Errorf("matrix: restore the sync token: %w", err)
		}
		a.log.Info("matrix continues /sync from the last run's token")
	}
	syncer.OnSync(a.onSync)
	syncer.OnEventType(event.StateMember, a.onMember)
	syncer.OnEventType(event.EventMessage, a.onMessage)
	if a.opts.Encryption {
		syncer.OnEventType(event.EventEncrypted, a.onEncrypted)
	}

	a.mu.Lock()
	a.sink = sink
	a.running = true
	a.healthErr = nil
	a.mu.Unlock()

	runCtx, cancel := context.WithCancel(ctx)
	a.cancel = cancel
	a.done = make(chan struct{})
	a.started = true
	go a.syncLoop(runCtx, a.done)
	if a.opts.Encryption {
		a.startKeyWaits(runCtx)
	}
	a.log.Info("matrix channel started", zap.String("userId", string(a.client.UserID)),
		zap.String("homeserver", a.opts.Homeserver), zap.String("threadReplies", a.opts.ThreadReplies))
	return nil
}

// Stop ends the /sync loop and waits for it (bounded by ctx).
func (a *Adapter) Stop(ctx context.Context) error {
	a.runMu.Lock()
	defer a.runMu.Unlock()
	if !a.started {
		return nil
	}
	a.cancel()
	a.client.StopSync()
	var err error
	select {
	case <-a.done:
	case <-ctx.Done():
		err = fmt.Errorf("matrix: stop: sync loop did not end: %w", ctx.Err())
	}
	if a.opts.Encryption {
		a.stopCrypto(ctx)
	}
	a.started = false
	a.mu.Lock()
	a.running = false
	a.healthErr = ErrNotStarted
	a.mu.Unlock()
	a.client.Client.CloseIdleConnections()
	return err
}

// login verifies the access token with whoami, or logs in with the password
// and keeps the new token in memory.
func (a *Adapter) login(ctx context.Context, deviceID string) error {
	if a.opts.AccessToken != "" {
		who, err := a.client.Whoami(ctx)
		if err != nil {
			return fmt.Errorf("matrix: %w: whoami on %s with the access token: %w", ErrAuth, a.opts.Homeserver, err)
		}
		if a.opts.UserID != "" && who.UserID != id.UserID(a.opts.UserID) {
			return fmt.Errorf("matrix: %w: the access token belongs to %s, not userId %s", ErrAuth, who.UserID, a.opts.UserID)
		}
		a.client.UserID = who.UserID
		if who.DeviceID != "" {
			a.client.DeviceID = who.DeviceID
		}
	} else {
		resp, err := a.client.Login(ctx, &mautrix.ReqLogin{
			Type:                     mautrix.AuthTypePassword,
			Identifier:               mautrix.UserIdentifier{Type: mautrix.IdentifierTypeUser, User: a.opts.UserID},
			Password:                 a.opts.Password,
			DeviceID:                 id.DeviceID(deviceID),
			InitialDeviceDisplayName: "Herald",
			StoreCredentials:         true,
		})
		if err != nil {
			return fmt.Errorf("matrix: %w: password login for %s on %s: %w", ErrAuth, a.opts.UserID, a.opts.Homeserver, err)
		}
		a.client.UserID = resp.UserID
	}
	a.mu.Lock()
	a.userID = a.client.UserID
	a.mu.Unlock()
	return nil
}

// initialSync creates the filter and runs one /sync with timeout 0. Its
// timeline is not delivered: it only teaches the adapter which threads the
// bot already posted in, and accepts pending invites. The next batch token is
// stored so the loop continues from here.
func (a *Adapter) initialSync(ctx context.Context, fresh bool) error {
	filter, err := a.client.CreateFilter(ctx, a.client.Syncer.GetFilterJSON(a.client.UserID))
	if err != nil {
		return fmt.Errorf("matrix: create sync filter on %s: %w", a.opts.Homeserver, err)
	}
	if err := a.client.Store.SaveFilterID(ctx, a.client.UserID, filter.FilterID); err != nil {
		return fmt.Errorf("matrix: save filter id: %w", err)
	}
	resp, err := a.client.FullSyncRequest(ctx, mautrix.ReqSync{Timeout: 0, FilterID: filter.FilterID})
	if err != nil {
		return fmt.Errorf("matrix: first /sync on %s: %w", a.opts.Homeserver, err)
	}
	self := a.client.UserID
	if a.opts.Encryption {
		if err := a.cryptoFirstSync(ctx, resp, fresh); err != nil {
			return err
		}
	}
	a.mu.Lock()
	for roomID, room := range resp.Rooms.Join {
		a.noteRoomSizeLocked(roomID, room.Summary.JoinedMemberCount)
		for _, evt := range room.Timeline.Events {
			if evt.Type != event.EventMessage {
				continue
			}
			_ = evt.Content.ParseRaw(evt.Type)
			root := threadRootOf(evt)
			if root == "" {
				continue
			}
			key := roomKey(roomID, root)
			a.threadLast.put(key, string(evt.ID))
			if evt.Sender == self {
				a.botThreads.put(key, "")
				a.ownEvents.put(roomKey(roomID, evt.ID), "")
			}
		}
	}
	a.mu.Unlock()
	if err := a.tokens.SaveNextBatch(ctx, self, resp.NextBatch); err != nil {
		return fmt.Errorf("matrix: save sync token: %w", err)
	}
	if a.opts.AutoJoin {
		for roomID, room := range resp.Rooms.Invite {
			for _, evt := range room.State.Events {
				if evt.Type == event.StateMember && evt.GetStateKey() == string(self) {
					_ = evt.Content.ParseRaw(evt.Type)
					if m := evt.Content.AsMember(); m.Membership == event.MembershipInvite {
						a.join(ctx, roomID, evt.Sender)
					}
				}
			}
		}
	}
	return nil
}

// syncLoop runs mautrix's sync loop until ctx ends, restarting it with
// backoff when it gives up (an invalid token, a failed filter, a panic in a
// handler). With a password, an invalid token triggers a new login.
func (a *Adapter) syncLoop(ctx context.Context, done chan struct{}) {
	defer close(done)
	backoff := minBackoff
	for {
		err := a.client.SyncWithContext(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil { // StopSync from elsewhere
			return
		}
		if errors.Is(err, channels.ErrUnavailable) {
			// The gateway could not store a message: the batch is
			// fetched again once its token is back in the sync store.
			if !a.rewindSync(ctx, err) {
				return
			}
			continue
		}
		a.setHealth(fmt.Errorf("matrix sync stopped: %w", err))
		a.log.Warn("matrix sync loop stopped, restarting", zap.Error(err), zap.Duration("in", backoff))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
		if errors.Is(err, mautrix.MUnknownToken) && a.opts.AccessToken == "" {
			if lerr := a.login(ctx, a.deviceForLogin()); lerr != nil {
				a.log.Warn("matrix re-login failed", zap.Error(lerr))
			}
		}
	}
}

// rewindSync waits the delay a refused message asks for, then saves the
// refused batch's token back as the sync token (mautrix saved the next one
// before processing the batch), retrying that save until it works, so the
// next /sync hands the batch over again. It reports false when ctx ended.
func (a *Adapter) rewindSync(ctx context.Context, refused error) bool {
	wait := unavailableWait(refused)
	a.log.Warn("matrix message not taken; the /sync batch is fetched again", zap.Error(refused), zap.Duration("in", wait))
	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		a.mu.Lock()
		token := a.rewind
		a.mu.Unlock()
		if token == "" {
			return true
		}
		saveCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := a.tokens.SaveNextBatch(saveCtx, a.client.UserID, token)
		cancel()
		if err == nil {
			a.mu.Lock()
			a.rewind = ""
			a.mu.Unlock()
			return true
		}
		a.log.Warn("matrix: cannot save the sync token back; retrying", zap.Error(err))
		wait = min(wait*2, maxBackoff)
	}
}

// unavailableWait is the wait an *channels.UnavailableError asks for,
// between minBackoff and 10 s (minBackoff when it names none).
func unavailableWait(err error) time.Duration {
	var ue *channels.UnavailableError
	if errors.As(err, &ue) && ue.RetryAfter > 0 {
		return min(max(ue.RetryAfter, minBackoff), 10*time.Second)
	}
	return minBackoff
}

func (a *Adapter) setHealth(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil {
		a.failures = 0
	}
	a.healthErr = err
}

// backoffSyncer is mautrix's DefaultSyncer with an exponential backoff on
// failed /sync requests that is reported through Health.
type backoffSyncer struct {
	*mautrix.DefaultSyncer
	a *Adapter
}

func (s *backoffSyncer) OnFailedSync(_ *mautrix.RespSync, err error) (time.Duration, error) {
	if errors.Is(err, mautrix.MUnknownToken) {
		return 0, err
	}
	a := s.a
	a.mu.Lock()
	a.failures++
	wait := minBackoff << min(a.failures-1, 6)
	wait = min(wait, maxBackoff)
	a.healthErr = fmt.Errorf("matrix /sync failing: %w", err)
	a.mu.Unlock()
	a.log.Warn("matrix sync failed", zap.Error(err), zap.Duration("retryIn", wait))
	return wait, nil
}

// ProcessResponse dispatches a /sync batch. When the gateway refused one of
// its messages with channels.ErrUnavailable, it returns that error, with the
// batch's token kept for syncLoop to save back: mautrix has already saved
// next_batch, and the batch must be handed over again. Messages of the
// batch handed over before the refused one (taken, or refused with the
// person told) are skipped when the batch comes again; the gateway's
// durable intake would take a platform message id once anyway, but a
// gateway command is not stored.
func (s *backoffSyncer) ProcessResponse(ctx context.Context, res *mautrix.RespSync, since string) error {
	a := s.a
	a.mu.Lock()
	a.refused, a.batchTaken = nil, nil
	a.mu.Unlock()
	if err := s.DefaultSyncer.ProcessResponse(ctx, res, since); err != nil {
		return err
	}
	a.mu.Lock()
	refused := a.refused
	a.refused = nil
	if refused != nil {
		a.rewind = since
		if a.retaken == nil {
			a.retaken = make(map[id.EventID]bool, len(a.batchTaken))
		}
		for _, e := range a.batchTaken {
			a.retaken[e] = true
		}
	} else {
		a.retaken, a.memberRetries = nil, nil
	}
	a.batchTaken = nil
	a.mu.Unlock()
	if refused != nil {
		return fmt.Errorf("matrix: /sync batch not taken: %w", refused)
	}
	if ctx.Err() != nil {
		// Stopping: what the batch handed over after the cut may not have
		// been taken. The next start fetches the batch again; intake takes
		// a platform message id once.
		return ctx.Err()
	}
	// Every message of the batch is handed over: the position moves past it.
	saveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := a.tokens.SaveNextBatch(saveCtx, a.client.UserID, res.NextBatch); err != nil {
		return fmt.Errorf("matrix: save the sync token: %w", err)
	}
	return nil
}

// batchSyncStore is the sync store the mautrix client is given: it keeps
// the real store's next_batch back. mautrix saves a batch's next_batch
// before it processes the batch (so that a bad event cannot wedge a
// client); saved through, a gateway killed in the middle of a batch would
// resume past the messages of it not yet handed over. ProcessResponse
// saves the token once the whole batch is handed over.
type batchSyncStore struct{ mautrix.SyncStore }

// SaveNextBatch keeps nothing: the client holds the token it syncs from.
func (batchSyncStore) SaveNextBatch(context.Context, id.UserID, string) error { return nil }

// join accepts an invite; failures are logged, not fatal.
func (a *Adapter) join(ctx context.Context, roomID id.RoomID, inviter id.UserID) {
	if _, err := a.client.JoinRoomByID(ctx, roomID); err != nil {
		a.log.Warn("matrix auto-join failed", zap.String("roomId", string(roomID)),
			zap.String("inviter", string(inviter)), zap.Error(err))
		return
	}
	a.log.Info("matrix joined room on invite", zap.String("roomId", string(roomID)), zap.String("inviter", string(inviter)))
}

// Send posts msg into the origin's room, in its thread when ThreadID is set,
// split at 16000 characters.
func (a *Adapter) Send(ctx context.Context, to channels.Origin, msg channels.Message) error {
	a.mu.Lock()
	running := a.running
	a.mu.Unlock()
	if !running {
		return fmt.Errorf("matrix: send to %s: %w", to, ErrNotStarted)
	}
	if strings.TrimSpace(msg.Text) == "" {
		return nil
	}
	to, err := a.inRoom(ctx, to, true)
	if err != nil {
		return fmt.Errorf("matrix: send: %w", err)
	}
	for i, part := range channels.Split(msg.Text, Limit) {
		// A transaction id derived from the outbox item and part makes a
		// re-send (after a crash between the homeserver accepting a part and
		// the outbox marking it) return the event already sent instead of
		// posting it twice (SPEC §12).
		txn := ""
		if msg.ID != "" {
			txn = fmt.Sprintf("herald-%s-%d", msg.ID, i+1)
		}
		if i == 0 && msg.DraftRef != "" {
			// The reply was shown as a draft while it was written: the
			// first part becomes its final text (an m.replace edit).
			if err := a.edit(ctx, to, id.EventID(msg.DraftRef), part, txn); err != nil {
				return fmt.Errorf("matrix: finish the draft: %w", err)
			}
			continue
		}
		if _, err := a.sendText(ctx, to, part, txn); err != nil {
			return fmt.Errorf("matrix: send part %d: %w", i+1, err)
		}
	}
	return nil
}

// sendText posts text into the origin's room, in its thread when ThreadID
// is set, and returns the event id.
func (a *Adapter) sendText(ctx context.Context, to channels.Origin, text, txn string) (id.EventID, error) {
	roomID := id.RoomID(to.ChatID)
	root := id.EventID(to.ThreadID)
	content := &event.MessageEventContent{
		MsgType:  event.MsgText,
		Body:     text,
		Mentions: &event.Mentions{},
	}
	if root != "" {
		content.RelatesTo = a.inThread(roomID, root)
	}
	var req []mautrix.ReqSendEvent
	if txn != "" {
		req = append(req, mautrix.ReqSendEvent{TransactionID: txn})
	}
	resp, err := a.client.SendMessageEvent(ctx, roomID, event.EventMessage, content, req...)
	if err != nil {
		return "", classifySendError("matrix: send to "+to.String(), err)
	}
	a.noteOwnEvent(roomID, root, resp.EventID)
	return resp.EventID, nil
}

// inThread relates an event the bot sends to the thread rooted at root: an
// m.thread relation with the reply fallback to the thread's latest event.
func (a *Adapter) inThread(roomID id.RoomID, root id.EventID) *event.RelatesTo {
	return &event.RelatesTo{
		Type:          event.RelThread,
		EventID:       root,
		IsFallingBack: true,
		InReplyTo:     &event.InReplyTo{EventID: a.threadTail(roomID, root)},
	}
}

// threadTail is the latest event known in the thread, else its root.
func (a *Adapter) threadTail(roomID id.RoomID, root id.EventID) id.EventID {
	a.mu.Lock()
	defer a.mu.Unlock()
	if last, ok := a.threadLast.get(roomKey(roomID, root)); ok && last != "" {
		return id.EventID(last)
	}
	return root
}

func (a *Adapter) noteOwnEvent(roomID id.RoomID, root, evtID id.EventID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ownEvents.put(roomKey(roomID, evtID), "")
	if root != "" {
		key := roomKey(roomID, root)
		a.botThreads.put(key, "")
		a.threadLast.put(key, string(evtID))
	}
}

func roomKey(roomID id.RoomID, evtID id.EventID) string {
	return string(roomID) + "|" + string(evtID)
}
