-- v21: memories
-- the agent's memories (SPEC §28): memory_write's text and tags (a JSON
-- list), written by an agent in a conversation (the top-level session key
-- its sub-agents share), pinned ones put into the system prompt. Full-text
-- search: an FTS5 index kept by triggers on SQLite, a tsvector column with
-- a GIN index on PostgreSQL ('simple': words as written, no stemming, the
-- same on both engines).

CREATE TABLE memories (
-- only: sqlite for next 1 line
    seq          INTEGER PRIMARY KEY, -- a stable rowid for the FTS index (VACUUM keeps it)
-- only: postgres for next 1 line
    seq          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    agent_id     TEXT NOT NULL,
    conversation TEXT NOT NULL,
    text         TEXT NOT NULL,
    tags         TEXT NOT NULL DEFAULT '[]',
    pinned       INTEGER NOT NULL DEFAULT 0,
    created_at   BIGINT NOT NULL
);
CREATE INDEX memories_conversation ON memories (agent_id, conversation, created_at);
CREATE INDEX memories_pinned ON memories (agent_id, pinned, created_at);
-- only: sqlite until "end only"

CREATE VIRTUAL TABLE memories_fts USING fts5(text, tags, content='memories', content_rowid='seq');
CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, text, tags) VALUES (new.seq, new.text, new.tags);
END;
CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text, tags) VALUES ('delete', old.seq, old.text, old.tags);
END;
-- end only sqlite
-- only: postgres until "end only"

ALTER TABLE memories ADD COLUMN tsv tsvector
    GENERATED ALWAYS AS (to_tsvector('simple', text || ' ' || tags)) STORED;
CREATE INDEX memories_tsv ON memories USING GIN (tsv);
-- end only postgres
