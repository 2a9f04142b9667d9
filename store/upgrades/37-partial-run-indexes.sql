-- v37: partial run indexes
-- a sub-agent run's spawn inserted its row into ten indexes, and its end
-- moved it in three more (docs/performance.md, 2026-11-28 "the store's
-- writes per run"). Four of them held every run although their queries
-- read only a few:
-- * runs_status (status, created_at) served only reads of the queued,
--   running and announcing runs (ClaimRuns, the console's live runs),
--   which runs_requester_active holds already (v13, partial on those
--   statuses): a scan of that index serves them, and runs_status goes.
--   A run's start and end no longer move it in a second index;
-- * runs_spawn_group and runs_batch: a run has a spawn group only with
--   announce parent, a batch only from a sessions_spawn with tasks; the
--   others ('') are left out;
-- * sessions_agent_kind (agent_id, kind, updated_at): the one list that
--   filters sessions by kind reads the top-level conversations, newest
--   first (the console), and none filters by agent; sessions_main holds
--   the 'main' sessions alone, so a child session's insert and the
--   update of its tokens at the run's end leave it alone.
-- The queries state each condition (a bound parameter does not show
-- SQLite or PostgreSQL that a partial index holds the rows asked for);
-- TestRunQueriesSearchAnIndex checks their plans.
DROP INDEX runs_status;
DROP INDEX runs_spawn_group;
CREATE INDEX runs_spawn_group ON runs (spawn_group) WHERE spawn_group <> '';
DROP INDEX runs_batch;
CREATE INDEX runs_batch ON runs (batch) WHERE batch <> '';
DROP INDEX sessions_agent_kind;
CREATE INDEX sessions_main ON sessions (updated_at) WHERE kind = 'main';
