-- 0006: small durable settings of components, e.g. the Matrix /sync
-- next_batch token, so a restart continues where it stopped.

CREATE TABLE kv (
	key        TEXT PRIMARY KEY,
	value      TEXT NOT NULL,
	updated_at INTEGER NOT NULL
);
