-- v5: web idem
-- only: sqlite (the whole step: PostgreSQL gets the schema of v1-v10 in v10)
-- a web chat message from the outbox carries the outbox item as an
-- idempotency key, so a reply re-sent after a crash (the web log append
-- committed, the outbox mark did not) shows once.

ALTER TABLE web_messages ADD COLUMN idem TEXT;
CREATE UNIQUE INDEX web_messages_idem ON web_messages (client, idem) WHERE idem IS NOT NULL;
