-- 0010 (PostgreSQL): as SQLite's 0019: the caption posted with an outbound file (send_file's caption) and
-- the caption of an inbound one (kept for symmetry; '' = none).

ALTER TABLE intake_files ADD COLUMN caption TEXT NOT NULL DEFAULT '';
ALTER TABLE outbox_files ADD COLUMN caption TEXT NOT NULL DEFAULT '';
