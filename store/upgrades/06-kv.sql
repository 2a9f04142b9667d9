-- v6: kv
-- only: sqlite (the whole step: PostgreSQL gets the schema of v1-v10 in v10)
-- small durable settings of components, e.g. the Matrix /sync
-- next_batch token, so a restart continues where it stopped.

CREATE TABLE kv (
	key        TEXT PRIMARY KEY,
	value      TEXT NOT NULL,
	updated_at INTEGER NOT NULL
);
