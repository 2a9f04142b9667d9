-- v23: results
-- the results of sub-agent runs for the session that spawned them (SPEC
-- §23): a row is written in the transaction that ends the run and folded
-- into the requester session's history by the turn that first reads it
-- (folded_by names that turn, set in its start write). session_id is the
-- requester session's id at spawn (runs.requester_session_id): a
-- conversation started again with /new does not take the old session's
-- results.
ALTER TABLE runs ADD COLUMN requester_session_id TEXT NOT NULL DEFAULT '';
CREATE TABLE results (
	run_id      TEXT PRIMARY KEY,
	session_key TEXT NOT NULL,
	session_id  TEXT NOT NULL,
	text        TEXT NOT NULL,
	created_at  BIGINT NOT NULL,
	folded_by   TEXT NOT NULL DEFAULT '',
	folded_at   BIGINT
);
CREATE INDEX results_unfolded ON results (session_key) WHERE folded_by = '';
CREATE INDEX results_folded_by ON results (folded_by) WHERE folded_by <> '';
