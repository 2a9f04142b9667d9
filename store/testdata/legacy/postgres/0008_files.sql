-- 0008 (PostgreSQL): as SQLite's 0017: files, images and voice (SPEC §18). A file is stored once by the
-- SHA-256 of its bytes (SQLite: <state>/files/<aa>/<sha256>; PostgreSQL:
-- file_chunks). file_refs says which conversations name it (the web's
-- GET /api/files guard) and when they last did; a file none named for
-- attachments.retentionDays is removed. intake_files and outbox_files are
-- the files of a message in and a reply out, written in the same
-- transaction as their row.

CREATE TABLE files (
    id          TEXT PRIMARY KEY,
    size        BIGINT NOT NULL,
    mime        TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    last_ref_at BIGINT NOT NULL
);
CREATE INDEX files_last_ref ON files (last_ref_at);

CREATE TABLE file_refs (
    file_id TEXT NOT NULL,
    scope   TEXT NOT NULL,
    at      BIGINT NOT NULL,
    PRIMARY KEY (file_id, scope)
);

CREATE TABLE intake_files (
    intake_id BIGINT NOT NULL,
    seq       INTEGER NOT NULL,
    file_id   TEXT NOT NULL,
    name      TEXT NOT NULL,
    mime      TEXT NOT NULL,
    size      BIGINT NOT NULL,
    kind      TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (intake_id, seq)
);

CREATE TABLE outbox_files (
    outbox_id BIGINT NOT NULL,
    seq       INTEGER NOT NULL,
    file_id   TEXT NOT NULL,
    name      TEXT NOT NULL,
    mime      TEXT NOT NULL,
    size      BIGINT NOT NULL,
    kind      TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (outbox_id, seq)
);

-- PostgreSQL keeps the bytes in the database, so every replica serves
-- them: 1 MiB chunks, read and written one at a time.
CREATE TABLE file_chunks (
    file_id TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    data    BYTEA NOT NULL,
    PRIMARY KEY (file_id, seq)
);
