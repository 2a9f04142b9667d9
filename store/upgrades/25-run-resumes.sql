-- v25: run resumes
-- runs survive their process (SPEC §25): a run that was running when its
-- gateway stopped is queued again and resumes from its transcript. resumes
-- counts those times (maxResumes); ran_ms is how long it ran before its
-- current stretch, and stretch_at when that stretch began (NULL = at
-- started_at), so the rest of its runTimeoutSeconds does not count the
-- downtime.

ALTER TABLE runs ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0;
-- only: sqlite for next 2 lines
ALTER TABLE runs ADD COLUMN ran_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN stretch_at INTEGER;
-- only: postgres for next 2 lines
ALTER TABLE runs ADD COLUMN ran_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN stretch_at BIGINT;
