package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Result is a sub-agent run's result for the session that spawned it
// (SPEC §23): the "[sub-agent result]" message its history takes. It is
// written with the run's end (EndRun) and folded into that session's
// history by the turn that first reads it (FoldResults).
type Result struct {
	RunID      string
	SessionKey string // the requester session
	SessionID  string // its session id at spawn ("" = any: a run from before v23)
	Text       string
	// Files are the files the run's send_file calls attached (SPEC §18),
	// written with the result: they reach the chat with the batch's
	// announce, or with the reply of the turn that folds the result
	// (FoldedFiles). Not read back by FoldResults or PendingResults.
	Files     []FileRef
	CreatedAt time.Time
	// FoldedBy names the turn that took it into the history ("" = not yet);
	// FoldedAt is when.
	FoldedBy string
	FoldedAt time.Time
}

// Fold asks FoldResults to take a session's results into a turn.
type Fold struct {
	SessionKey string
	SessionID  string // the session's current id: results of an older one stay out
	// By names the turn ("intake:<id>", "run:<id>"): the results it folds
	// are marked with it, and a turn that runs again under the same name
	// (resumed after a crash) gets them back.
	By string
	// IntakeID, when set, is the owed message whose turn this is: its
	// start is recorded in the same transaction (the turn's start write).
	IntakeID int64
	At       time.Time
}

const resultCols = `run_id, session_key, session_id, text, created_at, folded_by, folded_at`

func scanResults(rows *sql.Rows) ([]Result, error) {
	defer rows.Close()
	var out []Result
	for rows.Next() {
		var r Result
		var created, folded sql.NullInt64
		if err := rows.Scan(&r.RunID, &r.SessionKey, &r.SessionID, &r.Text, &created, &r.FoldedBy, &folded); err != nil {
			return nil, err
		}
		r.CreatedAt, r.FoldedAt = fromMS(created), fromMS(folded)
		out = append(out, r)
	}
	return out, rows.Err()
}

// insertResult writes res for the run r (in EndRun's transaction); a
// result already stored for the run is kept.
func insertResult(c conn, r *Run, res *Result) error {
	if res.RunID == "" {
		res.RunID = r.ID
	}
	if res.SessionKey == "" {
		res.SessionKey = r.RequesterKey
	}
	if res.SessionID == "" {
		res.SessionID = r.RequesterSessionID
	}
	if res.CreatedAt.IsZero() {
		res.CreatedAt = r.EndedAt
	}
	res.CreatedAt = truncMS(res.CreatedAt)
	n, err := c.execN(`INSERT INTO results (run_id, session_key, session_id, text, created_at)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id) DO NOTHING`,
		res.RunID, res.SessionKey, res.SessionID, res.Text, msOrNow(res.CreatedAt))
	if err != nil || n == 0 || len(res.Files) == 0 {
		return err
	}
	return insertFiles(c, "result_files", "run_id", res.RunID, res.SessionKey, res.Files, msOrNow(res.CreatedAt))
}

// FoldedFiles returns the files of the results the turn by of the
// session key folded
// (FoldResults) whose runs posted nothing themselves (announce parent or
// silent), in the order of those results: the reply of that turn carries
// them to the chat (SPEC §23). A batch's announce carries its runs' files.
func (d *DB) FoldedFiles(ctx context.Context, key, by string) ([]FileRef, error) {
	rows, err := d.reader(ctx).query(`SELECT f.file_id, f.name, f.mime, f.size, f.kind, f.caption
		FROM results r JOIN result_files f ON f.run_id = r.run_id JOIN runs ON runs.id = r.run_id
		WHERE r.session_key = $1 AND r.folded_by = $2 AND runs.announce IN ($3, $4)
		ORDER BY r.created_at, r.run_id, f.seq`, key, by, AnnounceParent, AnnounceSilent)
	if err != nil {
		return nil, d.wrap("files of the results folded by "+by, err)
	}
	out, err := scanFileRefs(rows)
	return out, d.wrap("files of the results folded by "+by, err)
}

// The queries of every turn's start write (FoldResults), served by the
// index results_session_folded (v30).
const (
	foldQuery = `UPDATE results SET folded_by = $1, folded_at = $2
		WHERE session_key = $3 AND folded_by = '' AND (session_id = $4 OR session_id = '')`
	foldedQuery = `SELECT ` + resultCols + ` FROM results WHERE folded_by = $1 AND session_key = $2
		ORDER BY created_at, run_id`
)

// FoldResults marks the results of f's session that no turn took yet as
// taken by f.By and returns every result f.By took (these and those it
// took before), oldest first; with f.IntakeID it also records that turn's
// start, in the same transaction. Results of an older session id (before
// /new) are left out and stay unfolded.
func (d *DB) FoldResults(ctx context.Context, f Fold) ([]Result, error) {
	if f.By == "" {
		return nil, fmt.Errorf("fold results of %s: no turn named", f.SessionKey)
	}
	at := msOrNow(f.At)
	var out []Result
	err := d.tx(ctx, func(c conn) error {
		out = nil
		first := false // the turn's first start: nothing was folded by it before
		if f.IntakeID != 0 {
			n, err := c.execN(`UPDATE intake SET started_at = $1 WHERE id = $2 AND started_at IS NULL`, at, f.IntakeID)
			if err != nil {
				return err
			}
			first = n == 1
		}
		n, err := c.execN(foldQuery, f.By, at, f.SessionKey, f.SessionID)
		if err != nil || first && n == 0 {
			return err
		}
		rows, err := c.query(foldedQuery, f.By, f.SessionKey)
		if err != nil {
			return err
		}
		out, err = scanResults(rows)
		return err
	})
	if err != nil {
		return nil, d.wrap("fold results of "+f.SessionKey, err)
	}
	return out, nil
}

// PendingResults returns the results of the session key that no turn has
// folded yet, oldest first; with sessionID set, only those for that
// session id (and those from before v23).
func (d *DB) PendingResults(ctx context.Context, key, sessionID string) ([]Result, error) {
	q := `SELECT ` + resultCols + ` FROM results WHERE session_key = $1 AND folded_by = ''`
	args := []any{key}
	if sessionID != "" {
		q += ` AND (session_id = $2 OR session_id = '')`
		args = append(args, sessionID)
	}
	rows, err := d.reader(ctx).query(q+` ORDER BY created_at, run_id`, args...)
	if err != nil {
		return nil, d.wrap("pending results of "+key, err)
	}
	out, err := scanResults(rows)
	if err != nil {
		return nil, d.wrap("pending results of "+key, err)
	}
	return out, nil
}
