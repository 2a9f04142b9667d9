-- 0010: live replies (SPEC §16). The platform id of the draft a turn shows
-- while the reply is written (a Telegram message being edited), kept with
-- the owed message so a turn resumed after a crash goes on editing it, and
-- with the final reply so its delivery turns the draft into the final text.

ALTER TABLE intake ADD COLUMN draft_ref TEXT NOT NULL DEFAULT '';
ALTER TABLE outbox ADD COLUMN draft_ref TEXT NOT NULL DEFAULT '';
