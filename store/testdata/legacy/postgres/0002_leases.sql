-- 0002 (PostgreSQL): leases, as SQLite's 0011. Times are the database
-- server's clock, so replicas' clocks need not agree.

CREATE TABLE leases (
	name        TEXT PRIMARY KEY,
	holder      TEXT NOT NULL,
	acquired_at BIGINT NOT NULL,
	expires_at  BIGINT NOT NULL
);
