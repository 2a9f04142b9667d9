-- v3: outbox dest
-- only: sqlite (the whole step: PostgreSQL gets the schema of v1-v10 in v10)
-- the outbox keeps order per destination (SPEC §12): dest names the
-- chat and thread (channel|account|chatId|threadId); only the oldest
-- pending item of a destination is due, so a newer message never overtakes
-- one waiting out a rate limit or a backoff, also across restarts.

ALTER TABLE outbox ADD COLUMN dest TEXT NOT NULL DEFAULT '';
UPDATE outbox SET dest =
	coalesce(json_extract(origin, '$.channel'), '') || '|' ||
	coalesce(json_extract(origin, '$.account'), '') || '|' ||
	coalesce(json_extract(origin, '$.chatId'), '') || '|' ||
	coalesce(json_extract(origin, '$.threadId'), '');
CREATE INDEX outbox_dest_pending ON outbox (dest, id)
	WHERE delivered_at IS NULL AND failed_at IS NULL;
