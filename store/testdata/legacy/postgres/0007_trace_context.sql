-- 0007 (PostgreSQL): as SQLite's 0016: traces (SPEC §22). The W3C trace context (traceparent) of the span
-- that made each intake, run and outbox row, so the work a row stands for
-- continues its message's trace after a restart or on another replica.
-- '' = not traced (tracing off, or a row from before this version).

ALTER TABLE intake ADD COLUMN trace_parent TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN trace_parent TEXT NOT NULL DEFAULT '';
ALTER TABLE outbox ADD COLUMN trace_parent TEXT NOT NULL DEFAULT '';
