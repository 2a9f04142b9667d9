-- v15: spend
-- model spend, one row per model call (SPEC §20): budgets sum it by
-- UTC day and month per conversation (the requester conversation a run
-- belongs to), agent and in total; /usage and herald usage report it.

CREATE TABLE spend (
-- only: sqlite for next 1 lines
	at           INTEGER NOT NULL,
-- only: postgres for next 1 lines
	at           BIGINT NOT NULL,
	day          TEXT NOT NULL,
	conversation TEXT NOT NULL,
	agent_id     TEXT NOT NULL,
	model        TEXT NOT NULL,
	run_id       TEXT NOT NULL,
	label        TEXT NOT NULL DEFAULT '',
-- only: sqlite for next 3 lines
	usd          REAL NOT NULL,
	tokens_in    INTEGER NOT NULL,
	tokens_out   INTEGER NOT NULL
-- only: postgres for next 3 lines
	usd          DOUBLE PRECISION NOT NULL,
	tokens_in    BIGINT NOT NULL,
	tokens_out   BIGINT NOT NULL
);
CREATE INDEX spend_day ON spend (day);
CREATE INDEX spend_conversation ON spend (conversation, day);
