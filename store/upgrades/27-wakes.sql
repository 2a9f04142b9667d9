-- v27: wakes
-- where a sub-agent's announce goes (SPEC §23): chat (the announce of
-- §6), parent (no post; the parent is woken once when the last child of
-- its spawn group ended, or at group_deadline) or silent. A wake is an
-- owed intake row of kind 'wake' for the requester session, added in the
-- transaction that ends the group's last run; session_id names the
-- requester session it is for (a wake for a session started again with
-- /new posts nothing).
ALTER TABLE runs ADD COLUMN announce TEXT NOT NULL DEFAULT 'chat';
ALTER TABLE runs ADD COLUMN spawn_group TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN group_deadline BIGINT;
CREATE INDEX runs_group_active ON runs (spawn_group)
	WHERE spawn_group <> '' AND status IN ('queued', 'running', 'announcing');
ALTER TABLE intake ADD COLUMN kind TEXT NOT NULL DEFAULT '';
ALTER TABLE intake ADD COLUMN session_id TEXT NOT NULL DEFAULT '';
