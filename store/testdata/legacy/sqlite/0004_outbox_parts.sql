-- 0004: the outbox owns splitting and part progress (SPEC §12). For a
-- message sent part by part: parts_sent parts are on the platform, their
-- platform ids in part_ids (JSON array); sending_part is the part whose
-- send started and has no known outcome yet (-1 = none). After a crash, a
-- part still "sending" is an unknown outcome: looked up (Slack) or re-sent
-- or skipped (channels.telegram.uncertainDelivery).

ALTER TABLE outbox ADD COLUMN parts_sent INTEGER NOT NULL DEFAULT 0;
ALTER TABLE outbox ADD COLUMN part_ids TEXT NOT NULL DEFAULT '[]';
ALTER TABLE outbox ADD COLUMN sending_part INTEGER NOT NULL DEFAULT -1;
