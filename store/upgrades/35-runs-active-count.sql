-- v35: runs active count index
-- every spawn checks maxChildrenPerSession with COUNT(*) of the
-- requester's runs that are queued, running or announcing and not a
-- schedule's (schedule_id = ''); runs_requester_active (requester_key)
-- held neither schedule_id nor status, so the count read each of those
-- run rows: the 100th spawn of one session read 99 rows (4 % of the
-- gateway's CPU with 10,000 sub-agents, 100 a conversation). With both
-- columns in it the index answers the count alone.
DROP INDEX runs_requester_active;
CREATE INDEX runs_requester_active ON runs (requester_key, schedule_id, status)
	WHERE status IN ('queued', 'running', 'announcing');
