package store

import (
	"context"
	"io"
	"time"

	"github.com/heraldhq/herald/channels"
)

// The store's contract, one interface per aggregate. *DB implements every
// one of them on SQLite and on PostgreSQL (store/storetest.Run is the
// contract suite, run on both); consumers declare the aggregates they use.
// Open and OpenPostgres (or OpenStore, by config) create a *DB. Methods
// only tests use (GetOutbox, RefFiles, CreateRun, SessionResets, ...) are on *DB and
// in storetest.Store, not in these interfaces.

// Sessions are conversation histories' rows (the history itself is in
// Transcripts) and per-conversation settings.
type Sessions interface {
	EnsureSession(ctx context.Context, s *Session) (created bool, err error) // insert if Key absent; *s holds the stored row
	GetSession(ctx context.Context, key string) (*Session, error)            // ErrNotFound
	ListSessions(ctx context.Context, f SessionFilter) ([]Session, error)    // newest first
	AddSessionUsage(ctx context.Context, key string, in, out int64) error
	ResetSession(ctx context.Context, key, newID, newPath, archivedPath string, at time.Time) error // /new, /reset: one transaction
	ConversationSettings(ctx context.Context, key string) (ConversationSettings, error)
	SetConversationSettings(ctx context.Context, key string, s ConversationSettings) error
	HoldSession(ctx context.Context, key, holder string) (moved bool, err error) // moved: another replica held it
}

// Runs are sub-agent runs; a run's end and its announce are one transaction.
type Runs interface {
	SpawnRun(ctx context.Context, r *Run, child *Session, lim SpawnLimits) error                       // CreateRun with the limits checked in its transaction (*LimitError)
	SpawnRuns(ctx context.Context, runs []*Run, children []*Session, lim SpawnLimits) error            // SpawnRun of N runs: one transaction, all or none
	SpawnEach(ctx context.Context, runs []*Run, children []*Session, lim SpawnLimits) ([]error, error) // SpawnRun of each run in turn, one transaction: each its own limits and error
	RunBySpawnCall(ctx context.Context, requesterKey, callID string) (*Run, error)
	StartRun(ctx context.Context, runID string, at time.Time) error       // queued → running; ErrNotQueued
	ResumeRun(ctx context.Context, runID string, ran time.Duration) error // running|announcing → queued again (SPEC §25); ErrNotQueued
	SetRunStatus(ctx context.Context, runID, status string) error
	FinishRun(ctx context.Context, r *Run, announce *OutboxItem) error // the run's end + its outbox row, one transaction
	EndRun(ctx context.Context, r *Run, end RunEnd) error              // FinishRun with the run's result for its requester too
	// AnnounceBatch adds a batch's one announce before its last run ends
	// (its groupTimeoutSeconds, SPEC §23): Render gets every run of the
	// batch, live ones too; once per batch, as RunEnd.Batch.
	AnnounceBatch(ctx context.Context, batch string, render func(runs []Run) *OutboxItem) (*OutboxItem, error)
	AddRunUsage(ctx context.Context, runID string, in, out, cacheRead, cacheWrite int64) error
	GetRun(ctx context.Context, runID string) (*Run, error)
	ListRuns(ctx context.Context, f RunFilter) ([]Run, error) // newest first
	DueArchives(ctx context.Context, now time.Time) ([]Run, error)
	NextArchiveAt(ctx context.Context) (time.Time, bool, error)
	MarkArchived(ctx context.Context, runID string, at time.Time) error // also marks the child session deleted
	ClaimRuns(ctx context.Context, c Claim) ([]Run, error)
}

// Results are sub-agent runs' results for the sessions that spawned them
// (SPEC §23): written by EndRun, folded into the requester session's
// history by the turn that first reads them.
type Results interface {
	FoldResults(ctx context.Context, f Fold) ([]Result, error)                   // marks and returns what the turn f.By takes
	PendingResults(ctx context.Context, key, sessionID string) ([]Result, error) // not folded yet, oldest first
	FoldedFiles(ctx context.Context, key, by string) ([]FileRef, error)          // the files of the results the turn by folded
}

// Turns is the intake: every inbound message, stored before it is
// acknowledged; its turn is owed until CompleteIntake puts the reply in the
// outbox.
type Turns interface {
	AddIntake(ctx context.Context, in *Intake) (added bool, err error) // a re-delivered platform id adds nothing
	StartIntake(ctx context.Context, id int64, at time.Time) error
	CompleteIntake(ctx context.Context, id int64, reply *OutboxItem, at time.Time) (int64, *Intake, error) // returns the session's next turn, claimed
	CompleteTurn(ctx context.Context, e TurnEnd) (int64, *Intake, error)                                   // CompleteIntake with the turn's usage
	ClaimOwed(ctx context.Context, c Claim) ([]Intake, error)
	OwedIntake(ctx context.Context) ([]Intake, error)              // arrival order
	RecentIntake(ctx context.Context, limit int) ([]Intake, error) // newest first, owed or answered
	SetIntakeDraft(ctx context.Context, id int64, ref string) error
}

// Outbox is every message to a platform, delivered in order per destination.
type Outbox interface {
	EnqueueOutbox(ctx context.Context, o *OutboxItem) (int64, error) // a known RunID returns the existing row
	ClaimOutbox(ctx context.Context, c Claim, chans []string, now time.Time) ([]OutboxItem, error)
	PendingOutbox(ctx context.Context, limit int) ([]OutboxItem, error)
	NextOutboxAt(ctx context.Context, holder string) (time.Time, bool, error) // holder's own claims left out
	MarkDelivered(ctx context.Context, id int64, at time.Time) error
	DeliverOutbox(ctx context.Context, id int64, at time.Time, next *NextClaim) error // MarkDelivered, claiming the destination's next item
	MarkRetry(ctx context.Context, id int64, next time.Time, errText string) error
	MarkFailed(ctx context.Context, id int64, at time.Time, errText string) error
	BeginPart(ctx context.Context, id int64, part int) error
	EndPart(ctx context.Context, id int64, part int, platformID string) error
	AbortPart(ctx context.Context, id int64) error
	OutboxStats(ctx context.Context) (pending, delivered, failed int, err error)
	OutboxPending(ctx context.Context) (int, error) // OutboxStats' pending alone, read on its partial index
	ListOutbox(ctx context.Context, pendingOnly bool, limit int) ([]OutboxItem, error)
	OutboxInState(ctx context.Context, state string, limit int) ([]OutboxItem, error) // newest first
	Backlog(ctx context.Context) (OutboxBacklog, error)
	// Dead letters (SPEC §27): past its limits an item is dead where it
	// would be claimed; an operator retries or drops it.
	BuryOutbox(ctx context.Context, c Claim, lim OutboxLimits, now time.Time) ([]OutboxItem, error)
	// PassOutbox is BuryOutbox then ClaimOutbox in one transaction (a
	// delivery pass).
	PassOutbox(ctx context.Context, c Claim, chans []string, lim OutboxLimits, now time.Time) (OutboxPass, error)
	RetryOutbox(ctx context.Context, id int64, now time.Time) error // ErrNotFound: unknown or delivered
	DropOutbox(ctx context.Context, id int64) error                 // ErrNotFound: unknown or delivered
}

// Approvals are tool calls waiting for /approve or /deny.
type Approvals interface {
	CreateApproval(ctx context.Context, a *Approval) error
	GetApproval(ctx context.Context, code string) (*Approval, error)
	ResolveApproval(ctx context.Context, code, status, by string, at time.Time) (*Approval, error) // ErrNotFound, ErrResolved
	PendingApprovals(ctx context.Context) ([]Approval, error)
}

// WebLog is the web chat's conversations, numbered per client.
type WebLog interface {
	AppendWeb(ctx context.Context, client string, m *WebMessage) (int64, error) // a known RunID or Key returns the first seq
	WebAfter(ctx context.Context, client string, after int64, limit int) ([]WebMessage, error)
}

// KV is small named values (platform offsets, the last reload).
type KV interface {
	GetKV(ctx context.Context, key string) (value string, found bool, err error)
	SetKV(ctx context.Context, key, value string) error
	// ClaimKV stores value under key unless key has one; it reports whether it did.
	ClaimKV(ctx context.Context, key, value string) (bool, error)
	// DeleteKVBefore deletes the values under keys starting with prefix
	// last set before t.
	DeleteKVBefore(ctx context.Context, prefix string, t time.Time) (int64, error)
}

// Leases are named roles held by one replica at a time.
type Leases interface {
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error) // ErrLeaseHeld
	ReleaseLease(ctx context.Context, name, holder string) error
	GetLease(ctx context.Context, name string) (Lease, error)
	LiveReplicas(ctx context.Context) ([]string, error)
}

// Schedules are recurring and one-off runs (SPEC §19); a due time is
// claimed in the transaction that records its run (FireDue).
type Schedules interface {
	AddSchedule(ctx context.Context, s *Schedule, max int) error                  // *LimitError, ErrExists
	AddScheduleWithin(ctx context.Context, s *Schedule, lim ScheduleLimits) error // *LimitError, ErrExists
	SyncConfigSchedules(ctx context.Context, list []Schedule) error
	GetSchedule(ctx context.Context, id string) (*Schedule, error) // ErrNotFound
	ListSchedules(ctx context.Context, sessionKey string) ([]Schedule, error)
	PauseSchedule(ctx context.Context, id string) error
	ResumeSchedule(ctx context.Context, id string, next time.Time) error
	RemoveSchedule(ctx context.Context, id string) error
	NextScheduleAt(ctx context.Context, waitBefore time.Time) (time.Time, bool, error)
	CountSchedules(ctx context.Context) (ScheduleCounts, error)
	FireDue(ctx context.Context, now, waitBefore time.Time, limit int, plan func(s *Schedule) Firing) ([]Fired, error)
}

// Bus carries wake-ups between the replicas of a PostgreSQL state
// (LISTEN/NOTIFY); on SQLite it carries nothing.
type Bus interface {
	Notify(ctx context.Context, channel, payload string) error
	Listen(ctx context.Context, channel string, ready func(), fn func(payload string), fail func(err error)) // until ctx ends
}

// Stops are /stop and /subagents stop for work another replica holds
// (SPEC §14 replicas), recorded before they are answered: the NOTIFY that
// tells the holder at once may be lost (its listener reconnecting), so
// the holder also reads what it is asked to stop, each poll and whenever
// its listener (re)connects. A request ends with its run or turn.
type Stops interface {
	RequestStop(ctx context.Context, runIDs []string, at time.Time) error                     // runs not ended yet
	RequestAbort(ctx context.Context, sessionKey, except string, at time.Time) (int64, error) // the session's started turn held by a replica other than except
	StopRequests(ctx context.Context, holder string) (runs, sessions []string, err error)     // what holder holds and was asked to stop
}

// Files are the stored files of messages in and out (SPEC §18),
// content-addressed by SHA-256 and kept attachments.retentionDays after a
// conversation last named them.
type Files interface {
	PutFile(ctx context.Context, r io.Reader, limit int64, sniff func(head []byte) (string, error)) (FileRef, error) // ErrFileTooLarge
	OpenFile(ctx context.Context, id string) (io.ReadCloser, FileRef, error)                                         // ErrNotFound
	FileNamed(ctx context.Context, id, scope string) (bool, error)
	HoldFileBytes(ctx context.Context, h FileHold, q FileQuota) (granted int64, limit string, err error)
	SetFileHold(ctx context.Context, id string, conv, total int64, until time.Time) error // conv = total = 0 removes it
	IntakeFiles(ctx context.Context, intakeID int64) ([]FileRef, error)
	OutboxFiles(ctx context.Context, outboxID int64) ([]FileRef, error)
	SweepFiles(ctx context.Context, before time.Time) (int, error)
}

// Bindings are chat threads bound to sub-agents' child sessions (SPEC
// §24): the router asks before it names a thread's session.
type Bindings interface {
	BindThread(ctx context.Context, b *Binding) error                                           // replaces the thread's binding
	ThreadBinding(ctx context.Context, thread channels.Origin, now time.Time) (*Binding, error) // ErrNotFound: none, or ended
	TouchBinding(ctx context.Context, thread channels.Origin, at, expires time.Time) (bool, error)
	UnbindThread(ctx context.Context, thread channels.Origin, now time.Time) (*Binding, error) // ErrNotFound
	ChildBindings(ctx context.Context, childKeys []string, now time.Time) ([]Binding, error)
	// A run's thread of its own (SPEC §24): Run.ThreadPending records it
	// with the run (SpawnRun).
	RunThread(ctx context.Context, runID string) (*RunThread, error)       // ErrNotFound
	OpenRunThread(ctx context.Context, runID string, o ThreadOpened) error // ErrExists: not pending; ErrNotFound
	RefuseRunThread(ctx context.Context, runID string) error               // ErrNotFound: not pending
	SetRunDraft(ctx context.Context, runID, ref string) error              // ErrNotFound
}

// Memories are what agents remember (SPEC §28), searched by full text
// (FTS5 on SQLite, tsvector on PostgreSQL); every read is limited to a
// MemoryScope (one agent, one or every conversation of it).
type Memories interface {
	AddMemory(ctx context.Context, m *Memory) error                                                     // ErrExists
	SearchMemories(ctx context.Context, sc MemoryScope, words []string, limit int) ([]MemoryHit, error) // words: MemoryWords; best first
	ListMemories(ctx context.Context, sc MemoryScope, pinnedOnly bool, limit int) ([]Memory, error)     // newest first
	GetMemory(ctx context.Context, sc MemoryScope, id string) (*Memory, error)                          // ErrNotFound
	ForgetMemory(ctx context.Context, sc MemoryScope, id string) error                                  // ErrNotFound
}

// Store is every aggregate and the database's own methods.
type Store interface {
	Files
	Memories
	Sessions
	Runs
	Results
	Turns
	Outbox
	Approvals
	WebLog
	KV
	Leases
	Schedules
	Bus
	Stops
	Transcripts
	Spend
	Bindings
	Backup(ctx context.Context, path string) error // SQLite only
	Driver() string                                // DriverSQLite or DriverPostgres
	Check(ctx context.Context) error               // the database answers a read (/readyz); scans no table
	StateDir() string
	Path() string // the SQLite file, or the PostgreSQL URL without its password
	Close() error
}

var _ Store = (*DB)(nil)
