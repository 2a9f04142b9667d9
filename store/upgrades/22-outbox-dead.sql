-- v22: outbox dead letters
-- nothing waits forever (SPEC §27): an outbox item that failed
-- outbox.maxAttempts times or is older than outbox.maxAgeHours is dead.
-- dead is a state of the row, not a table: dead_at is set together with
-- failed_at (so a dead item leaves the pending set and its destination's
-- later items go out), and a retry from the console or the CLI clears
-- both and sets revived_at, from which its age counts again.

ALTER TABLE outbox ADD COLUMN dead_at BIGINT;
ALTER TABLE outbox ADD COLUMN revived_at BIGINT NOT NULL DEFAULT 0;
