-- v9: conversation
-- only: sqlite (the whole step: PostgreSQL gets the schema of v1-v10 in v10)
-- a conversation's own settings (/model, /think), kept across /new,
-- and the sessions a conversation had before /new or /reset.

CREATE TABLE conversation_settings (
	session_key TEXT PRIMARY KEY,
	model       TEXT NOT NULL DEFAULT '',
	thinking    TEXT NOT NULL DEFAULT '',
	updated_at  INTEGER NOT NULL
);

CREATE TABLE session_resets (
	session_key     TEXT NOT NULL,
	old_session_id  TEXT NOT NULL,
	old_transcript  TEXT NOT NULL,
	new_session_id  TEXT NOT NULL,
	reset_at        INTEGER NOT NULL
);
CREATE INDEX session_resets_key ON session_resets (session_key, reset_at);
