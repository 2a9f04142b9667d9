-- 0002: durable intake (SPEC §12). Every inbound message is stored here
-- before it is acknowledged; its turn is owed until the reply is committed
-- to the outbox (done_at set in the same transaction). platform_id is the
-- platform's id of the message, so a re-delivery never runs a second turn.

CREATE TABLE intake (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	session_key TEXT NOT NULL,
	agent_id    TEXT NOT NULL,
	channel     TEXT NOT NULL,
	platform_id TEXT,
	origin      TEXT NOT NULL DEFAULT '{}',
	sender_name TEXT NOT NULL DEFAULT '',
	text        TEXT NOT NULL,
	mentioned   INTEGER NOT NULL DEFAULT 0,
	created_at  INTEGER NOT NULL,
	started_at  INTEGER,
	done_at     INTEGER
);
CREATE UNIQUE INDEX intake_platform ON intake (channel, platform_id) WHERE platform_id IS NOT NULL;
CREATE INDEX intake_owed ON intake (done_at, id);
