package store

import (
	"context"
	"database/sql"
	"time"
)

// RequestStop records that the runs are to stop (those not ended yet):
// the replica holding each stops it when it reads StopRequests, should
// the NOTIFY that tells it at once be lost.
func (d *DB) RequestStop(ctx context.Context, runIDs []string, at time.Time) error {
	if len(runIDs) == 0 {
		return nil
	}
	err := d.tx(ctx, func(c conn) error {
		for _, id := range runIDs {
			if _, err := c.exec(`UPDATE runs SET stop_at = $1 WHERE id = $2 AND stop_at IS NULL AND `+activeRun,
				msOrNow(at), id); err != nil {
				return err
			}
		}
		return nil
	})
	return d.wrap("request stop", err)
}

// RequestAbort records that the running turn of a session is to be cut
// (/stop): its owed message that started, held by a replica other than
// except. It returns how many messages it marked (0 or 1: one turn per
// session runs at a time).
func (d *DB) RequestAbort(ctx context.Context, sessionKey, except string, at time.Time) (int64, error) {
	n, err := d.writer(ctx).execN(`UPDATE intake SET abort_at = $1 WHERE session_key = $2 AND done_at IS NULL
		AND started_at IS NOT NULL AND abort_at IS NULL AND claimed_by <> '' AND claimed_by <> $3`, msOrNow(at), sessionKey, except)
	return n, d.wrap("request abort", err)
}

// StopRequests are what holder is asked to stop and has not ended yet:
// the runs it owns whose stop was requested, and the sessions whose
// running turn it holds and /stop cut.
func (d *DB) StopRequests(ctx context.Context, holder string) (runs, sessions []string, err error) {
	rows, err := d.reader(ctx).query(`SELECT 'r', id FROM runs WHERE owner = $1 AND stop_at IS NOT NULL AND `+activeRun+`
		UNION ALL SELECT 's', session_key FROM intake WHERE claimed_by = $1 AND abort_at IS NOT NULL AND done_at IS NULL`, holder)
	if err != nil {
		return nil, nil, d.wrap("stop requests", err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind string
		var v sql.NullString
		if err := rows.Scan(&kind, &v); err != nil {
			return nil, nil, d.wrap("stop requests", err)
		}
		if kind == "r" {
			runs = append(runs, v.String)
		} else {
			sessions = append(sessions, v.String)
		}
	}
	return runs, sessions, d.wrap("stop requests", rows.Err())
}
