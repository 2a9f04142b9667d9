-- 0005 (PostgreSQL): as SQLite's 0014: schedules (SPEC §19). A schedule's next due time is claimed in the
-- transaction that inserts its run; the unique index on runs
-- (schedule_id, schedule_due) is the last word that one due time has at
-- most one run.
CREATE TABLE schedules (
	id           TEXT PRIMARY KEY,
	session_key  TEXT NOT NULL,
	agent_id     TEXT NOT NULL,
	kind         TEXT NOT NULL,
	expr         TEXT NOT NULL,
	timezone     TEXT NOT NULL DEFAULT 'UTC',
	task         TEXT NOT NULL,
	origin       TEXT NOT NULL DEFAULT '{}',
	source       TEXT NOT NULL DEFAULT 'chat',
	catch_up     TEXT NOT NULL DEFAULT 'latest',
	max_failures INTEGER NOT NULL DEFAULT 3,
	paused       INTEGER NOT NULL DEFAULT 0,
	next_due     BIGINT,
	active_run   TEXT NOT NULL DEFAULT '',
	failures     INTEGER NOT NULL DEFAULT 0,
	fired        BIGINT NOT NULL DEFAULT 0,
	skipped      BIGINT NOT NULL DEFAULT 0,
	missed       BIGINT NOT NULL DEFAULT 0,
	last_due     BIGINT,
	created_at   BIGINT NOT NULL,
	created_by   TEXT NOT NULL DEFAULT ''
);
CREATE INDEX schedules_due ON schedules (next_due) WHERE paused = 0 AND next_due IS NOT NULL;
CREATE INDEX schedules_session ON schedules (session_key);
ALTER TABLE runs ADD COLUMN schedule_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN schedule_due BIGINT;
CREATE UNIQUE INDEX runs_schedule_due ON runs (schedule_id, schedule_due) WHERE schedule_id <> '';
