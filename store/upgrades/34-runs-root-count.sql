-- v34: runs root count index
-- every spawn checks maxTotalSpawns with COUNT(*) of the conversation's
-- runs (root_key = … AND schedule_id = ''); runs_root (root_key,
-- created_at) made that read every run row of the conversation, so the
-- 100th spawn of one read 99 rows (4 % of the gateway's CPU with 10,000
-- sub-agents, 100 a conversation). This index answers the count alone.
CREATE INDEX runs_root_schedule ON runs (root_key, schedule_id);
