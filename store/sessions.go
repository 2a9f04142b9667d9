package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

const sessionCols = `key, id, agent_id, kind, parent_key, root_key, depth, label, model, origin,
	transcript_path, created_at, updated_at, deleted_at, tokens_in, tokens_out`

func scanSession(rows *sql.Rows, s *Session) error {
	var origin string
	var created, updated, deleted sql.NullInt64
	if err := rows.Scan(&s.Key, &s.ID, &s.AgentID, &s.Kind, &s.ParentKey, &s.RootKey, &s.Depth,
		&s.Label, &s.Model, &origin, &s.TranscriptPath, &created, &updated, &deleted,
		&s.TokensIn, &s.TokensOut); err != nil {
		return err
	}
	s.CreatedAt, s.UpdatedAt, s.DeletedAt = fromMS(created), fromMS(updated), fromMS(deleted)
	return parseOrigin(origin, &s.Origin)
}

// normalizeSession fills the defaults a new session row gets: a uuid ID, kind
// main, the transcript path under the state dir and the creation time.
func (d *DB) normalizeSession(s *Session) error {
	if s.Key == "" {
		return errors.New("session key is empty")
	}
	if s.ID == "" {
		s.ID = uuid.NewString()
	}
	if s.Kind == "" {
		s.Kind = KindMain
	}
	if s.TranscriptPath == "" {
		s.TranscriptPath = d.TranscriptPath(s.AgentID, s.ID)
	}
	if s.CreatedAt.IsZero() {
		s.CreatedAt = nowMS()
	}
	if s.UpdatedAt.IsZero() {
		s.UpdatedAt = s.CreatedAt
	}
	s.CreatedAt, s.UpdatedAt, s.DeletedAt = truncMS(s.CreatedAt), truncMS(s.UpdatedAt), truncMS(s.DeletedAt)
	return nil
}

const insertSession = `INSERT INTO sessions (` + sessionCols + `)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`

func sessionArgs(s *Session) ([]any, error) {
	origin, err := originJSON(s.Origin)
	if err != nil {
		return nil, err
	}
	return sessionRow(s, origin), nil
}

// sessionRow is s's row with its origin encoded as origin.
func sessionRow(s *Session, origin string) []any {
	return []any{s.Key, s.ID, s.AgentID, s.Kind, s.ParentKey, s.RootKey, s.Depth, s.Label, s.Model,
		origin, s.TranscriptPath, s.CreatedAt.UnixMilli(), s.UpdatedAt.UnixMilli(), msOrNull(s.DeletedAt),
		s.TokensIn, s.TokensOut}
}

// EnsureSession stores s if no session with s.Key exists. Empty fields of a
// new session get defaults: ID a new uuid, Kind KindMain, TranscriptPath
// under the state dir, CreatedAt/UpdatedAt now. On return *s holds the
// stored row (the existing one when created is false).
func (d *DB) EnsureSession(ctx context.Context, s *Session) (created bool, err error) {
	if err := d.normalizeSession(s); err != nil {
		return false, fmt.Errorf("ensure session: %w", err)
	}
	args, err := sessionArgs(s)
	if err != nil {
		return false, fmt.Errorf("ensure session %s: %w", s.Key, err)
	}
	created, err = ensureSession(d.writer(ctx), s, args)
	if err != nil {
		return false, d.wrap("ensure session "+s.Key, err)
	}
	return created, nil
}

// ensureSession is EnsureSession's statements on c (args: sessionArgs of
// the normalized s).
func ensureSession(c conn, s *Session, args []any) (created bool, err error) {
	n, err := c.execN(insertSession+` ON CONFLICT (key) DO NOTHING`, args...)
	if err != nil || n == 1 {
		return n == 1, err
	}
	return false, c.queryRow(func(rows *sql.Rows) error { return scanSession(rows, s) },
		`SELECT `+sessionCols+` FROM sessions WHERE key = $1`, s.Key)
}

// GetSession returns the session stored under key, deleted or not; ErrNotFound.
func (d *DB) GetSession(ctx context.Context, key string) (*Session, error) {
	var s Session
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return scanSession(rows, &s) },
		`SELECT `+sessionCols+` FROM sessions WHERE key = $1`, key)
	if err != nil {
		return nil, d.wrap("get session "+key, err)
	}
	return &s, nil
}

// ListSessions returns the sessions matching f, most recently updated first.
func (d *DB) ListSessions(ctx context.Context, f SessionFilter) ([]Session, error) {
	q, args := d.listSessionsQuery(f)
	rows, err := d.reader(ctx).query(q, args...)
	if err != nil {
		return nil, d.wrap("list sessions", err)
	}
	defer rows.Close()
	var out []Session
	for rows.Next() {
		var s Session
		if err := scanSession(rows, &s); err != nil {
			return nil, d.wrap("list sessions", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, d.wrap("list sessions", err)
	}
	return out, nil
}

// listSessionsQuery is ListSessions' statement for f and its arguments.
// The top-level conversations (KindMain) are read through sessions_main,
// whose condition the statement states (v37).
func (d *DB) listSessionsQuery(f SessionFilter) (string, sqlArgs) {
	var where []string
	var args sqlArgs
	if f.AgentID != "" {
		where = append(where, "agent_id = "+args.add(f.AgentID))
	}
	switch f.Kind {
	case "":
	case KindMain:
		where = append(where, "kind = '"+KindMain+"'")
	default:
		where = append(where, "kind = "+args.add(f.Kind))
	}
	if !f.IncludeDeleted {
		where = append(where, "deleted_at IS NULL")
	}
	q := `SELECT ` + sessionCols + ` FROM sessions`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY updated_at DESC, " + d.dialect.rowid + " DESC"
	if f.Limit > 0 {
		q += " LIMIT " + args.add(f.Limit)
	}
	return q, args
}

// AddSessionUsage adds in and out to the session's token totals and bumps
// UpdatedAt; ErrNotFound.
func (d *DB) AddSessionUsage(ctx context.Context, key string, in, out int64) error {
	n, err := d.writer(ctx).execN(`UPDATE sessions SET tokens_in = tokens_in + $1, tokens_out = tokens_out + $2,
		updated_at = $3 WHERE key = $4`, in, out, time.Now().UnixMilli(), key)
	if err != nil {
		return d.wrap("add session usage "+key, err)
	}
	if n == 0 {
		return fmt.Errorf("add session usage %s: %w", key, ErrNotFound)
	}
	return nil
}

// MarkSessionDeleted sets the session's DeletedAt (a session already
// deleted keeps its first time); ErrNotFound.
func (d *DB) MarkSessionDeleted(ctx context.Context, key string, at time.Time) error {
	n, err := d.writer(ctx).execN(`UPDATE sessions SET deleted_at = COALESCE(deleted_at, $1) WHERE key = $2`,
		msOrNow(at), key)
	if err != nil {
		return d.wrap("mark session deleted "+key, err)
	}
	if n == 0 {
		return fmt.Errorf("mark session deleted %s: %w", key, ErrNotFound)
	}
	return nil
}
