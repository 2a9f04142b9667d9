-- 0018: the files of a web chat message (SPEC §18): a JSON list of
-- {id, name, mime, size}; '' = none.

ALTER TABLE web_messages ADD COLUMN files TEXT NOT NULL DEFAULT '';
