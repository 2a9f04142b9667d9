-- v29: run output
-- a sessions_spawn outputSchema (SPEC §23) and the JSON value the run's
-- announce step gave for it (compact, '' = none), written with the run's
-- end.
ALTER TABLE runs ADD COLUMN output_schema TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN output TEXT NOT NULL DEFAULT '';
