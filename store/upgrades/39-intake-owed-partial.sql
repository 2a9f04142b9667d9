-- v39: owed intake index
-- intake_owed (done_at, id) held every message ever received, and a
-- turn's completion moved its message in it (done_at set). Every read of
-- it asks for the owed messages (done_at IS NULL: ClaimOwed, OwedIntake);
-- a partial index of those alone serves them in the same order, and a
-- completion takes its message out instead of moving it.
DROP INDEX intake_owed;
CREATE INDEX intake_owed ON intake (id) WHERE done_at IS NULL;
