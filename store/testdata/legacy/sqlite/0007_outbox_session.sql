-- 0007: an outbox row names the session and agent it speaks for, so every
-- log line about its delivery carries sessionKey and agentId (SPEC §13).

ALTER TABLE outbox ADD COLUMN session_key TEXT NOT NULL DEFAULT '';
ALTER TABLE outbox ADD COLUMN agent_id TEXT NOT NULL DEFAULT '';
