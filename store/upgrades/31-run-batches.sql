-- v31: run batches
-- a sessions_spawn with tasks (SPEC §23) records its runs in one
-- transaction under one batch id; with announce chat the end of the
-- batch's last run writes one announce for all of them. skipped marks a
-- run whose child replied ANNOUNCE_SKIP (left out of that announce).
-- result_files are the files a run's send_file calls attached, kept with
-- its result: they reach the chat with the batch's announce, or with the
-- reply of the turn that takes the result into its history (announce
-- parent or silent).
ALTER TABLE runs ADD COLUMN batch TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN skipped INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_batch ON runs (batch);
CREATE TABLE result_files (
    run_id  TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    file_id TEXT NOT NULL,
    name    TEXT NOT NULL,
    mime    TEXT NOT NULL,
    size    BIGINT NOT NULL,
    kind    TEXT NOT NULL DEFAULT '',
    caption TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (run_id, seq)
);
