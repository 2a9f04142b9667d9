// Package store is Herald's persistence: sessions, sub-agent runs, the
// intake of owed turns, the announce outbox, archive deadlines, approvals,
// the web chat log, leases and the JSONL transcripts. Its contract is the
// interfaces in api.go; *DB keeps them in one SQLite database in the state
// dir (WAL; transcripts as files under transcripts/<agentId>/<sessionId>.jsonl,
// stored files under files/) or in PostgreSQL (postgres.go; transcripts and
// files as rows: a sink per engine, transcripts.go and filestore.go), with the same query
// texts (the engines' differences are a dialect value, dialect.go) and one
// migration tree (upgrades/, migrate.go).
//
// It must not import gateway, subagent, agent or any channels/<name> package.
package store

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/heraldhq/herald/channels"
)

// Sentinel errors.
var (
	ErrNotFound = errors.New("not found")
	// ErrCorrupt: the database file is not a SQLite database or fails its integrity check.
	ErrCorrupt = errors.New("state database is corrupt")
	// ErrReadOnly: the state dir or database cannot be written.
	ErrReadOnly = errors.New("state dir is not writable")
	// ErrTooManyFiles: no file descriptor was free (EMFILE, ENFILE); the
	// error says how many are open and the limit. Retried, it may succeed.
	ErrTooManyFiles = errors.New("too many open files")
	// ErrResolved: the approval was already resolved or expired.
	ErrResolved = errors.New("already resolved")
	// ErrExists: a row with the same key (run id, session key, approval code) is already stored.
	ErrExists = errors.New("already exists")
	// ErrNotQueued: StartRun on a run that is not queued.
	ErrNotQueued = errors.New("run is not queued")
	// ErrSchemaTooNew: the database was migrated by a newer Herald than this binary.
	ErrSchemaTooNew = errors.New("state database schema is newer than this herald")
)

// Session kinds.
const (
	KindMain     = "main"     // a requester (chat) session
	KindSubagent = "subagent" // a child session of a sub-agent run
	KindDelegate = "delegate" // an isolated delegate session
)

// Session is one conversation history.
type Session struct {
	Key            string          // agent:<agentId>:...
	ID             string          // uuid; names the transcript file
	AgentID        string          //
	Kind           string          // KindMain | KindSubagent | KindDelegate
	ParentKey      string          // requester session key for children; "" for main
	RootKey        string          // top-level requester session key ("" = itself)
	Depth          int             // 0 main, 1 child, ...
	Label          string          //
	Model          string          // provider/model
	Origin         channels.Origin // where the conversation lives (main) / where announces go (child)
	TranscriptPath string          // absolute path of the JSONL transcript
	CreatedAt      time.Time
	UpdatedAt      time.Time
	DeletedAt      time.Time // zero = live
	TokensIn       int64
	TokensOut      int64
}

// Run statuses and outcomes (SPEC §3 session_status).
const (
	StatusQueued     = "queued"
	StatusRunning    = "running"
	StatusAnnouncing = "announcing"
	StatusDone       = "done"

	OutcomeSuccess = "success"
	OutcomeError   = "error"
	OutcomeTimeout = "timeout"
	OutcomeUnknown = "unknown"
	OutcomeStopped = "stopped"
)

// Where a run's announce goes (SPEC §23 sessions_spawn announce).
const (
	AnnounceChat   = "chat"   // the §6 announce in the requester's chat
	AnnounceParent = "parent" // no post; the parent is woken with the results
	AnnounceSilent = "silent" // only the parent's history
)

// Run is one sub-agent run.
type Run struct {
	ID             string // uuid
	ChildKey       string // agent:<agentId>:subagent:<uuid>
	ChildSessionID string
	RequesterKey   string // the session that spawned it
	// RequesterSessionID is the requester session's id (transcript) at
	// spawn: the run's result is folded into that session's history only
	// (SPEC §23; a conversation started again with /new does not take it).
	RequesterSessionID string
	// Announce is where the run's announce goes (SPEC §23): AnnounceChat,
	// AnnounceParent or AnnounceSilent.
	Announce string
	// SpawnGroup names the turn that spawned the run ("" = none): the
	// requester is woken once, when the last run of its group with
	// Announce parent ended, or at GroupDeadline (zero = none).
	SpawnGroup    string
	GroupDeadline time.Time
	// OutputSchema is the run's sessions_spawn outputSchema (JSON; "" =
	// none) and Output the JSON value its announce step gave for it,
	// compact, stored with the run's end (SPEC §23).
	OutputSchema, Output string
	// Batch names the sessions_spawn call with tasks that made the run
	// with its siblings, in one transaction (SPEC §23; "" = none): with
	// Announce chat the end of its last run posts one announce for all.
	Batch string
	// Skipped: the run's child replied ANNOUNCE_SKIP (nothing of it is
	// posted), stored with its end.
	Skipped bool
	// WaitingFor (not stored) is how many children spawned with announce
	// parent a running run waits for before it goes on (SPEC §23).
	WaitingFor int
	// SpawnCallID is the sessions_spawn tool call that made the run (kept
	// in spawn_calls, not read back by ListRuns/GetRun).
	SpawnCallID    string
	RootKey        string // the top-level requester session (for maxTotalSpawns and /stop)
	Depth          int    // 1 = spawned by a top-level session
	AgentID        string
	Task           string
	Label          string
	Model          string // provider/model applied
	Thinking       string
	Cleanup        string // keep | delete
	TimeoutSeconds int    // 0 = none
	MaxIterations  int
	AllowedTools   []string
	Origin         channels.Origin // the requester's origin captured at spawn
	Status         string
	Outcome        string // set when Status is done
	Note           string // error details / why it ended
	Result         string // the announced result text (or last assistant text)
	CreatedAt      time.Time
	StartedAt      time.Time // zero until running
	EndedAt        time.Time // zero until ended
	TokensIn       int64
	TokensOut      int64
	CacheRead      int64
	CacheWrite     int64
	CostUSD        float64   // < 0 = no cost configured
	ArchiveAt      time.Time // zero = never
	ArchivedAt     time.Time // zero = not yet
	// Owner is the replica (gateway.replicaId) that queued or runs it; a
	// replica whose lease lapsed leaves it to another (SPEC §14).
	Owner string
	// ScheduleID and ScheduleDue name the schedule firing that made the
	// run (SPEC §19); "" for a run spawned by sessions_spawn.
	ScheduleID  string
	ScheduleDue time.Time
	// BudgetStopped (not stored): the run ended "error" because a budget
	// was reached (SPEC §20). For a scheduled run it is not one of the
	// failed runs in a row that pause the schedule: the budget resets.
	BudgetStopped bool
	// TraceParent is the W3C trace context of the sessions_spawn call
	// that made the run ("" = not traced): the run's spans, also after a
	// restart or on another replica, continue that trace (SPEC §22).
	TraceParent string
	// Resumes counts the times the run was queued again after its gateway
	// stopped (SPEC §25); Ran is how long it ran before its current
	// stretch, which began at StretchAt (zero: at StartedAt).
	Resumes   int
	Ran       time.Duration
	StretchAt time.Time
	// ThreadPending (not a runs column): SpawnRun records, in its
	// transaction, that the run gets a thread of its own, still to be
	// opened (run_threads, SPEC §24).
	ThreadPending bool
}

// RunFilter selects runs for ListRuns. Empty fields match anything.
type RunFilter struct {
	RequesterKey string // direct children of this session
	SpawnGroup   string // the runs of one spawn group
	Batch        string // the runs of one batch spawn
	RootKey      string // every run under this top-level session
	// Chat, "<channel>:<chatType>:<chatId>", selects the runs under every
	// conversation of one chat (any agent, any thread): root keys
	// agent:<id>:<Chat> and agent:<id>:<Chat>:thread:<id> (SPEC §24 /focus).
	Chat     string
	Statuses []string // any of these
	Limit    int      // 0 = no limit
	// Brief sets only what a list of runs shows: ID, ChildKey,
	// RequesterKey, RootKey, AgentID, Task, Label, Status, Outcome, Note,
	// CreatedAt, StartedAt, EndedAt, TokensIn, TokensOut, Resumes,
	// Announce and Batch (the web chat's panel).
	Brief bool
}

// OutboxItem is one message waiting to be delivered to a channel.
type OutboxItem struct {
	ID            int64
	RunID         string // set for announces; unique: a second item with the same RunID is not added
	Origin        channels.Origin
	Kind          channels.Kind
	Text          string
	CreatedAt     time.Time
	Attempts      int
	NextAttemptAt time.Time
	DeliveredAt   time.Time // zero = pending
	FailedAt      time.Time // zero = not given up
	// DeadAt is when the item became a dead letter (SPEC §27: too many
	// attempts or too old); FailedAt is set with it. Zero = not dead.
	DeadAt    time.Time
	LastError string
	// Part progress of a message sent part by part (channels.PartSender):
	// PartsSent parts are on the platform with PartIDs; SendingPart is the
	// part whose send started without a known outcome (-1 = none).
	PartsSent   int
	PartIDs     []string
	SendingPart int
	// SessionKey and AgentID name whom the message speaks for (logs).
	SessionKey, AgentID string
	// DraftRef is the platform id of a draft of this message shown while it
	// was written (SPEC §16): its first part replaces the draft instead of
	// being posted anew. "" = none.
	DraftRef string
	// ClaimedBy is the replica sending it ("" = none): ClaimOutbox sets it,
	// MarkDelivered, MarkRetry and MarkFailed clear it.
	ClaimedBy string
	// TraceParent is the W3C trace context of the turn or run that wrote
	// the message ("" = not traced): its delivery spans join that trace.
	TraceParent string
	// Files go out after the text, one part each (SPEC §18); written with
	// the row, read back with OutboxFiles.
	Files []FileRef
	// FilesKnown says Files holds all the item's files, as on the item
	// CompleteTurn claimed for its caller: nothing to read back.
	FilesKnown bool
}

// Approval statuses.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	ApprovalExpired  = "expired"
)

// Approval is one supervised tool call waiting for a person.
type Approval struct {
	Code       string // short code people type: /approve <code>
	SessionKey string // the requester session whose thread it was posted in
	RunID      string // "" for a top-level turn
	Tool       string
	Args       string // JSON
	Origin     channels.Origin
	Status     string
	CreatedAt  time.Time
	ExpiresAt  time.Time
	ResolvedAt time.Time
	ResolvedBy string
	Replica    string // the replica whose tool call waits for the decision
}

// WebMessage is one message in a web chat client's conversation (SPEC §9).
type WebMessage struct {
	Seq   int64     `json:"seq"`
	Role  string    `json:"role"` // user|assistant|announce|system
	Text  string    `json:"text"`
	RunID string    `json:"runId,omitempty"`
	At    time.Time `json:"at"`
	// Key, when set, makes the append idempotent per client (e.g. the
	// outbox item it delivers): a second append with it adds nothing.
	Key string `json:"-"`
	// Files are the message's files (SPEC §18), references only.
	Files []FileRef `json:"files,omitempty"`
	// Delivers, when set, is the outbox item this message delivers whole:
	// AppendWeb marks it delivered (MarkDelivered, at DeliveredAt; zero =
	// At) in the transaction that stores the message, also when Key finds
	// the message stored already.
	Delivers    int64     `json:"-"`
	DeliveredAt time.Time `json:"-"`
	// Next, with Delivers, claims the delivered item's destination's next
	// item in the same transaction (DeliverOutbox).
	Next *NextClaim `json:"-"`
	// Added is set by the write that stores the message: true when it
	// added it, false when RunID or Key found it stored already (the web
	// chat shows only an added message from memory).
	Added bool `json:"-"`
	// Then, with Delivers and Next, delivers the destination's next items
	// in the same transaction, as their own sends one after the other
	// would: each item Next claims that has no files is given to Then, and
	// the message Then makes of it (nil: it cannot be taken whole) is
	// appended with Delivers set to the item (so it is marked delivered
	// and the item after it claimed), up to MaxFollow items. The item
	// Then did not take stays claimed in Next.Item, for a send of its
	// own. A destination's backlog thus goes out in one commit, in order,
	// each item once, instead of one commit after another.
	Then func(next OutboxItem) *WebMessage `json:"-"`
	// Followed are the items Then's messages delivered, in order, each
	// with its message as stored (set on return; none when the append
	// failed).
	Followed []Followed `json:"-"`
}

// Followed is an outbox item a web append delivered after its own
// message (WebMessage.Then): the item as delivered, and its message with
// Seq, At and Added as stored.
type Followed struct {
	Item    OutboxItem
	Message WebMessage
}

// MaxFollow bounds the items one web append delivers after its own
// (WebMessage.Then), so its transaction stays short.
const MaxFollow = 64

// SessionFilter selects sessions for ListSessions.
type SessionFilter struct {
	AgentID        string
	Kind           string
	IncludeDeleted bool
	Limit          int
}

// TranscriptHeader is the first line of a transcript file.
type TranscriptHeader struct {
	Type       string    `json:"type"` // "session"
	Version    int       `json:"version"`
	SessionKey string    `json:"sessionKey"`
	SessionID  string    `json:"sessionId"`
	AgentID    string    `json:"agentId"`
	ParentKey  string    `json:"parentKey,omitempty"`
	CreatedAt  time.Time `json:"createdAt"`
	// Fresh (OpenTranscript only, not a line's field): the caller found
	// no lines at the path, a new session's. A transcript file is then
	// not looked at when opened: the first write makes it, and when one
	// is there after all, that write cuts its torn line (and gives it the
	// header when empty) first, as the open would have.
	Fresh bool `json:"-"`
}

// TranscriptEntry is one message line of a transcript. Content, ToolCalls and
// ToolResults use the agent package's JSON shapes, kept as raw JSON here so
// the store does not import agent.
type TranscriptEntry struct {
	Type        string          `json:"type"` // "message", or "compaction" (Content is the summary)
	Role        string          `json:"role"` // user|assistant|tool|system
	Content     string          `json:"content,omitempty"`
	ToolCalls   json.RawMessage `json:"toolCalls,omitempty"`
	ToolResults json.RawMessage `json:"toolResults,omitempty"`
	// Files (user and announce messages) are references to stored files:
	// id (SHA-256), name, type, size — never the bytes (SPEC §18).
	Files     json.RawMessage `json:"files,omitempty"`
	Usage     json.RawMessage `json:"usage,omitempty"`
	Model     string          `json:"model,omitempty"`
	Timestamp time.Time       `json:"timestamp"`
	// Kept (compaction lines): how many of the latest messages the summary
	// did not replace; the messages before them are summarised by Content.
	Kept int `json:"kept,omitempty"`
	// Tokens (compaction lines): the estimated context before and after.
	TokensBefore int `json:"tokensBefore,omitempty"`
	TokensAfter  int `json:"tokensAfter,omitempty"`
}
