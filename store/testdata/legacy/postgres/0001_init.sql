-- 0001 (PostgreSQL): the schema of SQLite migrations 0001–0010 in one step,
-- plus the transcript lines that live in files on SQLite. Times are UTC unix
-- milliseconds (BIGINT); NULL = zero time. Origin, AllowedTools and
-- part_ids are JSON text, as on SQLite. `seq` stands in for SQLite's rowid
-- where rows are ordered by insertion.

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
	created_at      BIGINT NOT NULL,
	updated_at      BIGINT NOT NULL,
	deleted_at      BIGINT,
	tokens_in       BIGINT NOT NULL DEFAULT 0,
	tokens_out      BIGINT NOT NULL DEFAULT 0,
	seq             BIGINT GENERATED ALWAYS AS IDENTITY
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
	timeout_seconds  BIGINT NOT NULL DEFAULT 0,
	max_iterations   BIGINT NOT NULL DEFAULT 0,
	allowed_tools    TEXT,
	origin           TEXT NOT NULL DEFAULT '{}',
	status           TEXT NOT NULL,
	outcome          TEXT NOT NULL DEFAULT '',
	note             TEXT NOT NULL DEFAULT '',
	result           TEXT NOT NULL DEFAULT '',
	created_at       BIGINT NOT NULL,
	started_at       BIGINT,
	ended_at         BIGINT,
	tokens_in        BIGINT NOT NULL DEFAULT 0,
	tokens_out       BIGINT NOT NULL DEFAULT 0,
	cache_read       BIGINT NOT NULL DEFAULT 0,
	cache_write      BIGINT NOT NULL DEFAULT 0,
	cost_usd         DOUBLE PRECISION NOT NULL DEFAULT -1,
	archive_at       BIGINT,
	archived_at      BIGINT,
	seq              BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX runs_requester ON runs (requester_key, created_at);
CREATE INDEX runs_root ON runs (root_key, created_at);
CREATE INDEX runs_status ON runs (status, created_at);
CREATE INDEX runs_created ON runs (created_at);
CREATE INDEX runs_archive ON runs (archive_at)
	WHERE archive_at IS NOT NULL AND archived_at IS NULL;

CREATE TABLE outbox (
	id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	run_id          TEXT,
	origin          TEXT NOT NULL DEFAULT '{}',
	kind            TEXT NOT NULL DEFAULT '',
	text            TEXT NOT NULL DEFAULT '',
	created_at      BIGINT NOT NULL,
	attempts        INTEGER NOT NULL DEFAULT 0,
	next_attempt_at BIGINT NOT NULL,
	delivered_at    BIGINT,
	failed_at       BIGINT,
	last_error      TEXT NOT NULL DEFAULT '',
	dest            TEXT NOT NULL DEFAULT '',
	parts_sent      INTEGER NOT NULL DEFAULT 0,
	part_ids        TEXT NOT NULL DEFAULT '[]',
	sending_part    INTEGER NOT NULL DEFAULT -1,
	session_key     TEXT NOT NULL DEFAULT '',
	agent_id        TEXT NOT NULL DEFAULT '',
	draft_ref       TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX outbox_run ON outbox (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX outbox_pending ON outbox (next_attempt_at)
	WHERE delivered_at IS NULL AND failed_at IS NULL;
CREATE INDEX outbox_failed ON outbox (failed_at)
	WHERE delivered_at IS NULL AND failed_at IS NOT NULL;
CREATE INDEX outbox_dest_pending ON outbox (dest, id)
	WHERE delivered_at IS NULL AND failed_at IS NULL;

CREATE TABLE approvals (
	code        TEXT PRIMARY KEY,
	session_key TEXT NOT NULL DEFAULT '',
	run_id      TEXT NOT NULL DEFAULT '',
	tool        TEXT NOT NULL DEFAULT '',
	args        TEXT NOT NULL DEFAULT '',
	origin      TEXT NOT NULL DEFAULT '{}',
	status      TEXT NOT NULL,
	created_at  BIGINT NOT NULL,
	expires_at  BIGINT,
	resolved_at BIGINT,
	resolved_by TEXT NOT NULL DEFAULT '',
	seq         BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX approvals_pending ON approvals (created_at) WHERE status = 'pending';

CREATE TABLE web_messages (
	client TEXT NOT NULL,
	seq    BIGINT NOT NULL,
	role   TEXT NOT NULL,
	text   TEXT NOT NULL DEFAULT '',
	run_id TEXT,
	at     BIGINT NOT NULL,
	idem   TEXT,
	PRIMARY KEY (client, seq)
);
CREATE UNIQUE INDEX web_messages_run ON web_messages (client, run_id) WHERE run_id IS NOT NULL;
CREATE UNIQUE INDEX web_messages_idem ON web_messages (client, idem) WHERE idem IS NOT NULL;

CREATE TABLE intake (
	id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	session_key TEXT NOT NULL,
	agent_id    TEXT NOT NULL,
	channel     TEXT NOT NULL,
	platform_id TEXT,
	origin      TEXT NOT NULL DEFAULT '{}',
	sender_name TEXT NOT NULL DEFAULT '',
	text        TEXT NOT NULL,
	mentioned   BOOLEAN NOT NULL DEFAULT FALSE,
	created_at  BIGINT NOT NULL,
	started_at  BIGINT,
	done_at     BIGINT,
	draft_ref   TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX intake_platform ON intake (channel, platform_id) WHERE platform_id IS NOT NULL;
CREATE INDEX intake_owed ON intake (done_at, id);

CREATE TABLE kv (
	key        TEXT PRIMARY KEY,
	value      TEXT NOT NULL,
	updated_at BIGINT NOT NULL
);

CREATE TABLE spawn_calls (
	requester_key TEXT NOT NULL,
	call_id       TEXT NOT NULL,
	run_id        TEXT NOT NULL,
	PRIMARY KEY (requester_key, call_id)
);

CREATE TABLE conversation_settings (
	session_key TEXT PRIMARY KEY,
	model       TEXT NOT NULL DEFAULT '',
	thinking    TEXT NOT NULL DEFAULT '',
	updated_at  BIGINT NOT NULL
);

CREATE TABLE session_resets (
	session_key     TEXT NOT NULL,
	old_session_id  TEXT NOT NULL,
	old_transcript  TEXT NOT NULL,
	new_session_id  TEXT NOT NULL,
	reset_at        BIGINT NOT NULL,
	seq             BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX session_resets_key ON session_resets (session_key, reset_at);

-- Transcripts: one row per JSONL line (line 1 is the header). `name` is the
-- transcript's path as SQLite would name the file; an archive renames it.
CREATE TABLE transcript_lines (
	name TEXT NOT NULL,
	line BIGINT NOT NULL,
	body TEXT NOT NULL,
	PRIMARY KEY (name, line)
);
