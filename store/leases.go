package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Lease is a named role and who holds it until when.
type Lease struct {
	Name       string
	Holder     string
	AcquiredAt time.Time // when Holder took it (kept across renewals)
	ExpiresAt  time.Time
}

// ErrLeaseHeld: another holder has the lease and it has not expired.
var ErrLeaseHeld = errors.New("lease is held by another replica")

// AcquireLease takes the lease name for holder for ttl, or renews it when
// holder already has it. It succeeds when nobody holds the lease, when its
// holder let it expire, or when holder is the holder (even after expiry, as
// long as nobody else took it). Otherwise it returns the current lease and
// an error wrapping ErrLeaseHeld. Times come from the database's clock
// (dialect.nowMS), so replicas' clocks need not agree.
func (d *DB) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error) {
	if name == "" || holder == "" {
		return Lease{}, errors.New("acquire lease: name and holder must be set")
	}
	now := d.dialect.nowMS
	q := `INSERT INTO leases (name, holder, acquired_at, expires_at) VALUES ($1, $2, ` + now + `, ` + now + ` + $3)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at,
			acquired_at = CASE WHEN leases.holder = excluded.holder THEN leases.acquired_at ELSE excluded.acquired_at END
		WHERE leases.holder = excluded.holder OR leases.expires_at <= ` + now + `
		RETURNING name, holder, acquired_at, expires_at`
	var l Lease
	err := d.writer(ctx).queryRow(func(rows *sql.Rows) error { return scanLease(rows, &l) }, q, name, holder, ttl.Milliseconds())
	if errors.Is(err, ErrNotFound) {
		cur, gerr := d.GetLease(ctx, name)
		if gerr != nil {
			return Lease{}, gerr
		}
		return cur, fmt.Errorf("acquire lease %s: %w: %s until %s", name, ErrLeaseHeld, cur.Holder, cur.ExpiresAt.Format(time.RFC3339))
	}
	if err != nil {
		return Lease{}, d.wrap("acquire lease "+name, err)
	}
	return l, nil
}

// ReleaseLease gives the lease up if holder has it (a clean shutdown: the
// next replica need not wait for it to expire).
func (d *DB) ReleaseLease(ctx context.Context, name, holder string) error {
	_, err := d.writer(ctx).exec(`DELETE FROM leases WHERE name = $1 AND holder = $2`, name, holder)
	return d.wrap("release lease "+name, err)
}

// GetLease returns the lease name as stored (expired or not); ErrNotFound.
func (d *DB) GetLease(ctx context.Context, name string) (Lease, error) {
	var l Lease
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return scanLease(rows, &l) },
		`SELECT name, holder, acquired_at, expires_at FROM leases WHERE name = $1`, name)
	if err != nil {
		return Lease{}, d.wrap("get lease "+name, err)
	}
	return l, nil
}

func scanLease(rows *sql.Rows, l *Lease) error {
	var acq, exp int64
	if err := rows.Scan(&l.Name, &l.Holder, &acq, &exp); err != nil {
		return err
	}
	l.AcquiredAt, l.ExpiresAt = time.UnixMilli(acq).UTC(), time.UnixMilli(exp).UTC()
	return nil
}
