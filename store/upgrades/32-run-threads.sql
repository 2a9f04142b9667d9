-- v32: run threads
-- the thread of its own a sessions_spawn {thread: true} run gets (SPEC
-- §24), recorded in the transaction that records the run: 'pending' until
-- the chat platform opened it, then 'open' with its origin and link
-- (written with the run's new origin, the binding and the link line in one
-- transaction), or 'none' when the platform refused. draft_ref is the
-- draft the run's live output shows in the thread (§16), so a resumed run
-- edits it and its announce replaces it.
CREATE TABLE run_threads (
	run_id    TEXT PRIMARY KEY,
	state     TEXT NOT NULL,
	origin    TEXT NOT NULL DEFAULT '',
	link      TEXT NOT NULL DEFAULT '',
	draft_ref TEXT NOT NULL DEFAULT ''
);
