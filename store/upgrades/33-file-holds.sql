-- v33: file holds
-- the bytes of an inbound file being stored now, held against
-- attachments.maxStoredMB (conv, until its message names the file) and
-- maxTotalMB (total, until the file's row is written), so uploads on
-- several replicas at once cannot each pass a quota on the same reading of
-- the store. A hold past until_ms counts no more (its replica died).
CREATE TABLE file_holds (
    id       TEXT PRIMARY KEY,
    scope    TEXT NOT NULL,
    conv     BIGINT NOT NULL,
    total    BIGINT NOT NULL,
    until_ms BIGINT NOT NULL
);
CREATE INDEX file_holds_scope ON file_holds (scope);
