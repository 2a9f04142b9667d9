-- v36: stop requests
-- /stop and /subagents stop for work another replica holds (SPEC §14
-- replicas) are recorded before they are answered: the holder is told at
-- once over NOTIFY, and reads these each poll and whenever its listener
-- (re)connects, so a notification it missed delays the stop, never loses
-- it. stop_at: a stop was asked for the run; abort_at: /stop was asked for
-- the owed message's running turn.
ALTER TABLE runs ADD COLUMN stop_at BIGINT;
ALTER TABLE intake ADD COLUMN abort_at BIGINT;
CREATE INDEX runs_stop ON runs (owner) WHERE stop_at IS NOT NULL AND status IN ('queued', 'running', 'announcing');
CREATE INDEX intake_abort ON intake (claimed_by) WHERE abort_at IS NOT NULL AND done_at IS NULL;
