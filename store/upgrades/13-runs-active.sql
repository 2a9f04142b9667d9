-- v13: runs active
-- the spawn limit counts a session's active children (queued,
-- running, announcing) in the transaction that inserts a run. The count
-- read every child row through runs_requester, so spawning the 100th child
-- read 99 rows; this index holds active runs only, and the count reads it
-- alone.
CREATE INDEX runs_requester_active ON runs (requester_key)
	WHERE status IN ('queued', 'running', 'announcing');
