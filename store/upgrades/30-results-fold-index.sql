-- v30: results fold index
-- every turn's start write reads the results it just folded
-- (folded_by = 'intake:<id>' AND session_key = …); v23's partial index
-- on folded_by <> '' cannot serve that query with its bound parameter, so
-- it scanned the whole table. One plain index on (session_key,
-- folded_by) serves it, the fold's update and PendingResults, and
-- replaces both of v23's.
DROP INDEX results_unfolded;
DROP INDEX results_folded_by;
CREATE INDEX results_session_folded ON results (session_key, folded_by);
