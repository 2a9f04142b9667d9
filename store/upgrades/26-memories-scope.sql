-- v26: memories scope
-- only: sqlite until "end only"
-- SQLite: the full-text index also holds each memory's scope as two
-- tokens (its agent, and its agent and conversation, hex-encoded), so a
-- search ANDs the words with the scope inside FTS5 instead of walking
-- every memory with a common word and filtering afterwards
-- (BenchmarkMemorySearch, 100,000 memories: a conversation's search for
-- common words went from ~250 ms to ~60 ms). PostgreSQL filters by its
-- B-tree index first.

DROP TRIGGER memories_fts_insert;
DROP TRIGGER memories_fts_delete;
DROP TABLE memories_fts;
ALTER TABLE memories ADD COLUMN scope TEXT GENERATED ALWAYS AS
    ('a' || hex(agent_id) || ' c' || hex(agent_id || '|' || conversation)) VIRTUAL;
CREATE VIRTUAL TABLE memories_fts USING fts5(text, tags, scope, content='memories', content_rowid='seq');
INSERT INTO memories_fts (memories_fts) VALUES ('rebuild');
CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, text, tags, scope) VALUES (new.seq, new.text, new.tags, new.scope);
END;
CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text, tags, scope) VALUES ('delete', old.seq, old.text, old.tags, old.scope);
END;
-- end only sqlite
