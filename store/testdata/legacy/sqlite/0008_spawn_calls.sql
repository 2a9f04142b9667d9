-- 0008: which tool call spawned a run, so a turn resumed after a crash that
-- runs a sessions_spawn call again gets the run it already made instead of
-- a second one (SPEC §12).

CREATE TABLE spawn_calls (
	requester_key TEXT NOT NULL,
	call_id       TEXT NOT NULL,
	run_id        TEXT NOT NULL,
	PRIMARY KEY (requester_key, call_id)
) WITHOUT ROWID;
