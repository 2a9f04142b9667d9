package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

const approvalCols = `code, session_key, run_id, tool, args, origin, status, created_at, expires_at,
	resolved_at, resolved_by, replica`

func scanApproval(rows *sql.Rows, a *Approval) error {
	var origin string
	var created, expires, resolved sql.NullInt64
	if err := rows.Scan(&a.Code, &a.SessionKey, &a.RunID, &a.Tool, &a.Args, &origin, &a.Status,
		&created, &expires, &resolved, &a.ResolvedBy, &a.Replica); err != nil {
		return err
	}
	a.CreatedAt, a.ExpiresAt, a.ResolvedAt = fromMS(created), fromMS(expires), fromMS(resolved)
	return parseOrigin(origin, &a.Origin)
}

// CreateApproval stores a pending approval (Status defaults to pending,
// CreatedAt to now). A code already stored gives an error wrapping ErrExists.
func (d *DB) CreateApproval(ctx context.Context, a *Approval) error {
	if a.Code == "" {
		return errors.New("create approval: code is empty")
	}
	if a.Status == "" {
		a.Status = ApprovalPending
	}
	if a.CreatedAt.IsZero() {
		a.CreatedAt = nowMS()
	}
	a.CreatedAt, a.ExpiresAt, a.ResolvedAt = truncMS(a.CreatedAt), truncMS(a.ExpiresAt), truncMS(a.ResolvedAt)
	origin, err := originJSON(a.Origin)
	if err != nil {
		return fmt.Errorf("create approval %s: %w", a.Code, err)
	}
	_, err = d.writer(ctx).exec(`INSERT INTO approvals (`+approvalCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		a.Code, a.SessionKey, a.RunID, a.Tool, a.Args, origin, a.Status, a.CreatedAt.UnixMilli(),
		msOrNull(a.ExpiresAt), msOrNull(a.ResolvedAt), a.ResolvedBy, a.Replica)
	if err != nil {
		return d.wrap("create approval "+a.Code, err)
	}
	return nil
}

// GetApproval returns the approval as stored; ErrNotFound.
func (d *DB) GetApproval(ctx context.Context, code string) (*Approval, error) {
	var a Approval
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return scanApproval(rows, &a) },
		`SELECT `+approvalCols+` FROM approvals WHERE code = $1`, code)
	if err != nil {
		return nil, d.wrap("get approval "+code, err)
	}
	return &a, nil
}

// ResolveApproval atomically moves a pending approval to status (approved,
// denied or expired) and returns it. Only a pending approval resolves: one
// already resolved gives its stored state and an error wrapping
// ErrResolved. A pending approval whose ExpiresAt is ≤ at cannot be
// approved or denied any more: it is marked expired (ResolvedAt = ExpiresAt)
// and reported with ErrResolved too. Unknown code → ErrNotFound.
func (d *DB) ResolveApproval(ctx context.Context, code, status, by string, at time.Time) (*Approval, error) {
	switch status {
	case ApprovalApproved, ApprovalDenied, ApprovalExpired:
	default:
		return nil, fmt.Errorf("resolve approval %s: status %q is not approved, denied or expired", code, status)
	}
	atMS := msOrNow(at)
	var a Approval
	err := d.tx(ctx, func(c conn) error {
		if err := c.queryRow(func(rows *sql.Rows) error { return scanApproval(rows, &a) },
			`SELECT `+approvalCols+` FROM approvals WHERE code = $1`+c.dialect.forUpdate, code); err != nil {
			return err
		}
		if a.Status != ApprovalPending {
			return ErrResolved
		}
		expired := !a.ExpiresAt.IsZero() && a.ExpiresAt.UnixMilli() <= atMS && status != ApprovalExpired
		a.Status, a.ResolvedAt, a.ResolvedBy = status, time.UnixMilli(atMS).UTC(), by
		if expired {
			a.Status, a.ResolvedAt, a.ResolvedBy = ApprovalExpired, a.ExpiresAt, ""
		}
		_, err := c.exec(`UPDATE approvals SET status = $1, resolved_at = $2, resolved_by = $3
			WHERE code = $4 AND status = $5`, a.Status, a.ResolvedAt.UnixMilli(), a.ResolvedBy, code, ApprovalPending)
		if err != nil {
			return err
		}
		if expired {
			return errCommitThen{ErrResolved}
		}
		return nil
	})
	var ct errCommitThen
	if errors.As(err, &ct) {
		err = ct.err
	}
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, fmt.Errorf("resolve approval %s: %w", code, ErrNotFound)
	case errors.Is(err, ErrResolved):
		return &a, fmt.Errorf("resolve approval %s: %s: %w", code, a.Status, ErrResolved)
	case err != nil:
		return nil, d.wrap("resolve approval "+code, err)
	}
	return &a, nil
}

// errCommitThen asks tx to commit and then report err.
type errCommitThen struct{ err error }

func (e errCommitThen) Error() string { return e.err.Error() }

// PendingApprovals returns every approval still pending, oldest first,
// including ones past their ExpiresAt (so a restarted gateway can expire
// them).
func (d *DB) PendingApprovals(ctx context.Context) ([]Approval, error) {
	rows, err := d.reader(ctx).query(`SELECT ` + approvalCols + ` FROM approvals
		WHERE status = 'pending' ORDER BY created_at, ` + d.dialect.rowid)
	if err != nil {
		return nil, d.wrap("pending approvals", err)
	}
	defer rows.Close()
	var out []Approval
	for rows.Next() {
		var a Approval
		if err := scanApproval(rows, &a); err != nil {
			return nil, d.wrap("pending approvals", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, d.wrap("pending approvals", err)
	}
	return out, nil
}
