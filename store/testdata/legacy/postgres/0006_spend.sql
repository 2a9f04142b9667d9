-- 0006 (PostgreSQL): as SQLite's 0015: model spend, one row per model call
-- (SPEC §20), summed by UTC day and month for budgets, /usage and herald usage.

CREATE TABLE spend (
	at           BIGINT NOT NULL,
	day          TEXT NOT NULL,
	conversation TEXT NOT NULL,
	agent_id     TEXT NOT NULL,
	model        TEXT NOT NULL,
	run_id       TEXT NOT NULL,
	label        TEXT NOT NULL DEFAULT '',
	usd          DOUBLE PRECISION NOT NULL,
	tokens_in    BIGINT NOT NULL,
	tokens_out   BIGINT NOT NULL
);
CREATE INDEX spend_day ON spend (day);
CREATE INDEX spend_conversation ON spend (conversation, day);
