package store

// The method set other packages rely on. Bodies are filled in by the SQLite
// implementation (db.go); this file fixes the contract.
//
//	Open(ctx, stateDir) (*DB, error)         create dir, open herald.db (WAL, busy timeout, foreign keys), migrate;
//	                                         a corrupt file → error wrapping ErrCorrupt; unwritable dir → ErrReadOnly
//	(*DB).Close() error
//	(*DB).StateDir() string
//	(*DB).TranscriptPath(agentID, sessionID) string   <stateDir>/transcripts/<agentId>/<sessionId>.jsonl
//
// Sessions:
//	EnsureSession(ctx, *Session) (created bool, err)   insert if Key absent; on return *Session holds the stored row
//	GetSession(ctx, key) (*Session, error)             ErrNotFound
//	ListSessions(ctx, SessionFilter) ([]Session, error)
//	AddSessionUsage(ctx, key, in, out int64) error
//	MarkSessionDeleted(ctx, key, at) error
//
// Runs:
//	CreateRun(ctx, *Run, child *Session) error        run row + child session row, one transaction
//	SpawnRun(ctx, *Run, child, SpawnLimits) error       CreateRun with maxChildrenPerSession/maxTotalSpawns checked in its transaction (*LimitError)
//	StartRun(ctx, runID, at) error                    queued → running
//	SetRunStatus(ctx, runID, status) error
//	FinishRun(ctx, *Run, announce *OutboxItem) error  run's end fields + (if non-nil) the outbox row, one transaction
//	GetRun(ctx, runID) (*Run, error)
//	GetRunByChildKey(ctx, key) (*Run, error)
//	ListRuns(ctx, RunFilter) ([]Run, error)            newest first
//	CountSpawns(ctx, rootKey) (int, error)
//	DueArchives(ctx, now) ([]Run, error)               ArchiveAt ≤ now, not archived
//	NextArchiveAt(ctx) (time.Time, bool, error)
//	MarkArchived(ctx, runID, at) error                 also marks the child session deleted
//
// Outbox:
//	EnqueueOutbox(ctx, *OutboxItem) (id int64, err)    duplicate RunID → returns the existing id, no new row
//	DueOutbox(ctx, now, limit) ([]OutboxItem, error)   the oldest pending item per destination with NextAttemptAt ≤ now
//	PendingOutbox(ctx, limit) ([]OutboxItem, error)     every pending item, oldest first
//	NextOutboxAt(ctx) (time.Time, bool, error)
//	MarkDelivered(ctx, id, at) error
//	MarkRetry(ctx, id, next, errText) error           attempts++
//	MarkFailed(ctx, id, at, errText) error
//	OutboxStats(ctx) (pending, delivered, failed int, err)
//
// Approvals:
//	CreateApproval(ctx, *Approval) error
//	GetApproval(ctx, code) (*Approval, error)
//	ResolveApproval(ctx, code, status, by, at) (*Approval, error)   ErrNotFound, ErrResolved
//	PendingApprovals(ctx) ([]Approval, error)
//
// Web chat log:
//	AppendWeb(ctx, client, *WebMessage) (seq int64, err)   seq per client, increasing; same RunID twice → the first seq, no new row
//	WebAfter(ctx, client, after int64, limit int) ([]WebMessage, error)
//
// Transcripts (transcript.go):
//	OpenTranscript(path, TranscriptHeader) (*Transcript, error)   creates dirs; writes the header if the file is new
//	(*Transcript).Append(TranscriptEntry) error                   one JSON line, written through (no user-space buffer)
//	(*Transcript).Close() error
//	ReadTranscript(path) (TranscriptHeader, []TranscriptEntry, error)   tolerates a torn last line
