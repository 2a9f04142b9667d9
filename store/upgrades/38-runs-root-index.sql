-- v38: one root index
-- runs_root (root_key, created_at) lists a conversation's runs newest
-- first (the web chat's panel, /subagents list); runs_root_schedule
-- (root_key, schedule_id) was added in v34 so that maxTotalSpawns' count
-- (root_key = … AND schedule_id = '') is answered from an index alone.
-- One index with all three columns serves both: the list in its order
-- (SQLite sorts only runs made in the same millisecond, by rowid), the
-- count from the index alone (reading the conversation's scheduled
-- runs' entries too, where the old one skipped them; the count reads
-- every other run of the conversation ever made either way). A spawn
-- writes one index entry fewer.
DROP INDEX runs_root_schedule;
DROP INDEX runs_root;
CREATE INDEX runs_root ON runs (root_key, created_at, schedule_id);
