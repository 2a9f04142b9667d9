-- v28: spawn group index
-- every completed turn asks whether it spawned a group with announce
-- parent (runs.spawn_group = 'intake:<id>'); a partial index cannot serve
-- that query with its bound parameter, so a plain index replaces v27's.
DROP INDEX runs_group_active;
CREATE INDEX runs_spawn_group ON runs (spawn_group);
