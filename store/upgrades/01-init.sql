-- v1: init
-- only: sqlite (the whole step: PostgreSQL gets the schema of v1-v10 in v10)
-- Herald's first schema. Times are UTC unix milliseconds; NULL = zero
-- time. Origin and AllowedTools are JSON text.

CREATE TABLE sessions (
	key             TEXT PRIMARY KEY,
	id              TEXT NOT NULL UNIQUE,
	agent_id        TEXT NOT NULL,
	kind            TEXT NOT NULL,
	parent_key      TEXT NOT NULL DEFAULT '',
	root_key        TEXT NOT NULL DEFAULT '',
	depth           INTEGER NOT NULL DEFAULT 0,
	label           TEXT NOT NULL DEFAULT '',
	model           TEXT NOT NULL DEFAULT '',
	origin          TEXT NOT NULL DEFAULT '{}',
	transcript_path TEXT NOT NULL DEFAULT '',
	created_at      INTEGER NOT NULL,
	updated_at      INTEGER NOT NULL,
	deleted_at      INTEGER,
	tokens_in       INTEGER NOT NULL DEFAULT 0,
	tokens_out      INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_agent_kind ON sessions (agent_id, kind, updated_at);
CREATE INDEX sessions_updated ON sessions (updated_at);

CREATE TABLE runs (
	id               TEXT PRIMARY KEY,
	child_key        TEXT NOT NULL UNIQUE REFERENCES sessions (key),
	child_session_id TEXT NOT NULL DEFAULT '',
	requester_key    TEXT NOT NULL,
	root_key         TEXT NOT NULL,
	depth            INTEGER NOT NULL DEFAULT 1,
	agent_id         TEXT NOT NULL DEFAULT '',
	task             TEXT NOT NULL DEFAULT '',
	label            TEXT NOT NULL DEFAULT '',
	model            TEXT NOT NULL DEFAULT '',
	thinking         TEXT NOT NULL DEFAULT '',
	cleanup          TEXT NOT NULL DEFAULT '',
	timeout_seconds  INTEGER NOT NULL DEFAULT 0,
	max_iterations   INTEGER NOT NULL DEFAULT 0,
	allowed_tools    TEXT,
	origin           TEXT NOT NULL DEFAULT '{}',
	status           TEXT NOT NULL,
	outcome          TEXT NOT NULL DEFAULT '',
	note             TEXT NOT NULL DEFAULT '',
	result           TEXT NOT NULL DEFAULT '',
	created_at       INTEGER NOT NULL,
	started_at       INTEGER,
	ended_at         INTEGER,
	tokens_in        INTEGER NOT NULL DEFAULT 0,
	tokens_out       INTEGER NOT NULL DEFAULT 0,
	cache_read       INTEGER NOT NULL DEFAULT 0,
	cache_write      INTEGER NOT NULL DEFAULT 0,
	cost_usd         REAL NOT NULL DEFAULT -1,
	archive_at       INTEGER,
	archived_at      INTEGER
);
CREATE INDEX runs_requester ON runs (requester_key, created_at);
CREATE INDEX runs_root ON runs (root_key, created_at);
CREATE INDEX runs_status ON runs (status, created_at);
CREATE INDEX runs_created ON runs (created_at);
CREATE INDEX runs_archive ON runs (archive_at)
	WHERE archive_at IS NOT NULL AND archived_at IS NULL;

CREATE TABLE outbox (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
	run_id          TEXT,
	origin          TEXT NOT NULL DEFAULT '{}',
	kind            TEXT NOT NULL DEFAULT '',
	text            TEXT NOT NULL DEFAULT '',
	created_at      INTEGER NOT NULL,
	attempts        INTEGER NOT NULL DEFAULT 0,
	next_attempt_at INTEGER NOT NULL,
	delivered_at    INTEGER,
	failed_at       INTEGER,
	last_error      TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX outbox_run ON outbox (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX outbox_pending ON outbox (next_attempt_at)
	WHERE delivered_at IS NULL AND failed_at IS NULL;
CREATE INDEX outbox_failed ON outbox (failed_at)
	WHERE delivered_at IS NULL AND failed_at IS NOT NULL;

CREATE TABLE approvals (
	code        TEXT PRIMARY KEY,
	session_key TEXT NOT NULL DEFAULT '',
	run_id      TEXT NOT NULL DEFAULT '',
	tool        TEXT NOT NULL DEFAULT '',
	args        TEXT NOT NULL DEFAULT '',
	origin      TEXT NOT NULL DEFAULT '{}',
	status      TEXT NOT NULL,
	created_at  INTEGER NOT NULL,
	expires_at  INTEGER,
	resolved_at INTEGER,
	resolved_by TEXT NOT NULL DEFAULT ''
);
CREATE INDEX approvals_pending ON approvals (created_at) WHERE status = 'pending';

CREATE TABLE web_messages (
	client TEXT NOT NULL,
	seq    INTEGER NOT NULL,
	role   TEXT NOT NULL,
	text   TEXT NOT NULL DEFAULT '',
	run_id TEXT,
	at     INTEGER NOT NULL,
	PRIMARY KEY (client, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX web_messages_run ON web_messages (client, run_id) WHERE run_id IS NOT NULL;
