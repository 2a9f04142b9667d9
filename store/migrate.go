package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed migrations/*.sql migrations/postgres/*.sql
var migrationFiles embed.FS

// migration is one schema step. Version n is applied after n-1, once, in its
// own transaction together with its schema_migrations row.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations are the embedded steps, ordered by version (file NNNN_name.sql).
var migrations = embeddedMigrations(migrationFiles, "migrations")

// pgMigrations are PostgreSQL's steps (migrations/postgres): their own
// numbering, starting from the whole schema of SQLite's first ten.
var pgMigrations = embeddedMigrations(migrationFiles, "migrations/postgres")

// embeddedMigrations reads the embedded migration files. It runs at package
// init on files compiled into the binary, so a bad file name is a build-time
// mistake that the tests catch; it reports it through an invalid migration
// rather than a panic, and migrate refuses to run.
func embeddedMigrations(fsys fs.FS, dir string) []migration {
	ms, err := loadMigrations(fsys, dir)
	if err != nil {
		return []migration{{version: -1, name: "invalid", sql: err.Error()}}
	}
	return ms
}

func loadMigrations(fsys fs.FS, dir string) ([]migration, error) {
	names, err := fs.Glob(fsys, dir+"/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, n := range names {
		base := path.Base(n)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_description.sql", n)
		}
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: strings.TrimSuffix(base, ".sql"), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: expected version %d (versions must be 1, 2, 3, ...)", m.name, i+1)
		}
	}
	return ms, nil
}

// SchemaVersion is the newest SQLite schema version this binary knows.
func SchemaVersion() int { return len(migrations) }

// SchemaVersion is the newest schema version this binary knows for the
// database's driver.
func (d *DB) SchemaVersion() int {
	if d.pg != nil {
		return len(pgMigrations)
	}
	return len(migrations)
}

// migrate applies every migration newer than the database's version. It is
// safe against a second process migrating at the same time: each step
// re-reads the version inside its BEGIN IMMEDIATE transaction (SQLite) or
// after taking the migration lock (PostgreSQL, pg set).
func migrate(ctx context.Context, db *sql.DB, dbPath string, ms []migration, pg bool) error {
	for _, m := range ms {
		if m.version <= 0 {
			return fmt.Errorf("migrate state database %s: embedded migrations are invalid: %s", dbPath, m.sql)
		}
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at BIGINT NOT NULL
	)`); err != nil {
		return fmt.Errorf("migrate state database %s: %w", dbPath, err)
	}
	known := len(ms)
	for {
		done, err := migrateStep(ctx, db, dbPath, ms, known, pg)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}

// migrateStep applies the next pending migration, if any.
func migrateStep(ctx context.Context, db *sql.DB, dbPath string, ms []migration, known int, pg bool) (done bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("migrate state database %s: %w", dbPath, err)
	}
	defer func() {
		if err != nil || done {
			_ = tx.Rollback()
		}
	}()
	insert := "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)"
	if pg {

		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtextextended('herald schema migration', 0))"); err != nil {
			return false, fmt.Errorf("migrate state database %s: lock: %w", dbPath, err)
		}
	}
	var cur int
	if err := tx.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&cur); err != nil {
		return false, fmt.Errorf("migrate state database %s: read version: %w", dbPath, err)
	}
	if cur > known {
		return false, fmt.Errorf("state database %s has schema version %d, this herald knows up to %d: %w; run a newer herald, or move the file away to start with an empty state",
			dbPath, cur, known, ErrSchemaTooNew)
	}
	if cur == known {
		return true, nil
	}
	m := ms[cur]
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return false, fmt.Errorf("migrate state database %s to version %d (%s): %w", dbPath, m.version, m.name, err)
	}
	if _, err := tx.ExecContext(ctx, insert,
		m.version, time.Now().UnixMilli()); err != nil {
		return false, fmt.Errorf("migrate state database %s to version %d (%s): %w", dbPath, m.version, m.name, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("migrate state database %s to version %d (%s): commit: %w", dbPath, m.version, m.name, err)
	}
	return false, nil
}
