-- v12: replicas
-- who holds what (SPEC §14 replicas). A replica names itself by
-- gateway.replicaId; a row it holds is worked by it alone while its lease
-- "replica:<id>" is alive, and is free for another replica once it is not.
-- On SQLite one process runs, so a holder other than itself is gone.

-- The replica running an owed message's turn ('' = none yet). Only the
-- oldest owed message of a session is held: one turn per session.
ALTER TABLE intake ADD COLUMN claimed_by TEXT NOT NULL DEFAULT '';
CREATE INDEX intake_session_owed ON intake (session_key, id) WHERE done_at IS NULL;

-- The replica that runs (or queued) a sub-agent run.
ALTER TABLE runs ADD COLUMN owner TEXT NOT NULL DEFAULT '';

-- The replica sending an outbox item, and the item's channel (a replica
-- sends only on the channels it runs).
ALTER TABLE outbox ADD COLUMN channel TEXT NOT NULL DEFAULT '';
ALTER TABLE outbox ADD COLUMN claimed_by TEXT NOT NULL DEFAULT '';
-- only: sqlite for next 1 lines
UPDATE outbox SET channel = substr(dest, 1, instr(dest, '|') - 1) WHERE instr(dest, '|') > 0;
-- only: postgres for next 1 lines
UPDATE outbox SET channel = split_part(dest, '|', 1);

-- The replica whose tool call waits for an approval.
ALTER TABLE approvals ADD COLUMN replica TEXT NOT NULL DEFAULT '';

-- The replica that last ran a turn or command on a session: another one
-- reloads the history before it runs the next.
ALTER TABLE sessions ADD COLUMN holder TEXT NOT NULL DEFAULT '';
