package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"
)

// GetKV returns the value stored under key; found is false when there is none.
func (d *DB) GetKV(ctx context.Context, key string) (value string, found bool, err error) {
	err = d.reader(ctx).queryRow(func(rows *sql.Rows) error { return rows.Scan(&value) },
		`SELECT value FROM kv WHERE key = $1`, key)
	if errors.Is(err, ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, d.wrap("get "+key, err)
	}
	return value, true, nil
}

// SetKV stores value under key.
func (d *DB) SetKV(ctx context.Context, key, value string) error {
	_, err := d.writer(ctx).exec(`INSERT INTO kv (key, value, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
		key, value, nowMS().UnixMilli())
	return d.wrap("set "+key, err)
}

// ClaimKV stores value under key unless key has a value already; it
// reports whether it stored it. Two callers racing for one key: exactly
// one gets true.
func (d *DB) ClaimKV(ctx context.Context, key, value string) (bool, error) {
	res, err := d.writer(ctx).exec(`INSERT INTO kv (key, value, updated_at) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING`,
		key, value, nowMS().UnixMilli())
	if err != nil {
		return false, d.wrap("claim "+key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, d.wrap("claim "+key, err)
	}
	return n == 1, nil
}

// DeleteKVBefore deletes the values whose key starts with prefix and that
// were last set before t; it returns how many it deleted.
func (d *DB) DeleteKVBefore(ctx context.Context, prefix string, t time.Time) (int64, error) {
	esc := likeEscape(prefix)
	res, err := d.writer(ctx).exec(`DELETE FROM kv WHERE key LIKE $1 ESCAPE '\' AND updated_at < $2`, esc+"%", t.UnixMilli())
	if err != nil {
		return 0, d.wrap("delete "+prefix+"*", err)
	}
	n, err := res.RowsAffected()
	return n, d.wrap("delete "+prefix+"*", err)
}

// likeEscape escapes s for a LIKE pattern with ESCAPE '\'.
func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}
