-- 0011: leases (SPEC §14). A named role (the gateway role of a PostgreSQL
-- state; the table exists on SQLite too so both stores keep one contract)
-- held by one replica until expires_at unless it renews it.

CREATE TABLE leases (
	name        TEXT PRIMARY KEY,
	holder      TEXT NOT NULL,
	acquired_at INTEGER NOT NULL,
	expires_at  INTEGER NOT NULL
);
