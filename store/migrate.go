package store

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sync"
	"time"

	"go.mau.fi/util/dbutil"
)

// The schema is one migration tree for both engines: store/upgrades, in
// mautrix's dbutil upgrade-table format. Each file is one step:
//
//	-- v11: leases                          (header: the version it upgrades to)
//	-- only: sqlite for next 2 lines        (engine-only lines)
//	-- only: postgres until "end only" … -- end only postgres
//
// A file whose first line after the header is "-- only: sqlite" is a
// SQLite-only step (v1–v9: PostgreSQL support started with v10, which
// creates PostgreSQL's whole schema of v1–v10 at once). dbutil keeps the
// version in herald_version (version, compat) and runs each step with the
// version update in one transaction.
//
// Databases made before the one tree kept their own numbering in
// schema_migrations (version, applied_at), one row per step: SQLite 1..N
// as here, PostgreSQL 1..N-9. adoptLegacy turns that into herald_version
// once; markLegacy keeps schema_migrations up to date so an older herald
// opening a newer database still refuses it (ErrSchemaTooNew) instead of
// running its own steps.

//go:embed upgrades/*.sql
var upgradeFiles embed.FS

// upgradeTable is the embedded tree, its error set when a file of it is
// malformed (a build-time mistake the tests catch: migrate then refuses
// to run rather than the package panicking). It is parsed on first use:
// at package init it was most of the store's init in every process, CLI
// commands included, and opening a SQLite database already at the newest
// version needs none of it (atNewest).
var upgradeTable = sync.OnceValues(func() (dbutil.UpgradeTable, error) { return loadUpgrades(upgradeFiles, "upgrades") })

// newestVersion is the number of upgrade files: the newest schema version
// (loadUpgrades checks the files give versions 1..N, once each).
//
// It does not parse the files, so a malformed one (upgradeTable's error)
// does not keep a SQLite database already at N from opening: atNewest
// skips migrate, the only place that refuses it. That refusal is not what
// guards against such a file: the embedded tree is fixed at build time,
// and TestLoadUpgrades fails the build's tests unless upgradeTable()
// parses with no error and gives exactly newestVersion() steps. Parsing it
// at every start to repeat that check is what 465467f took off the start
// path (review s4 #5).
var newestVersion = sync.OnceValue(func() int {
	names, _ := fs.Glob(upgradeFiles, "upgrades/*.sql")
	return len(names)
})

// versionTable holds the schema version (dbutil's format).
const versionTable = "herald_version"

// legacyPGOffset is where PostgreSQL's own migration numbering started in
// the one tree: its version 1 was v10.
const legacyPGOffset = 9

// loadUpgrades reads an upgrade tree; versions must run 1..N without gaps.
func loadUpgrades(fsys interface {
	fs.ReadFileFS
	fs.ReadDirFS
}, dir string) (table dbutil.UpgradeTable, err error) {
	defer func() {
		if r := recover(); r != nil { // dbutil panics on a malformed file
			table, err = nil, fmt.Errorf("%s: %v", dir, r)
		}
	}()
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	table = dbutil.BuildUpgradeTable().WithFSPath(fsys, dir).Finish()
	if len(table) != len(names) {
		return nil, fmt.Errorf("%s: %d files give versions up to %d: versions must be 1, 2, 3, ... once each", dir, len(names), len(table))
	}
	return table, nil
}

// SchemaVersion is the newest schema version this binary knows.
func SchemaVersion() int { return newestVersion() }

// SchemaVersion is the newest schema version this binary knows (one
// numbering for both engines).
func (d *DB) SchemaVersion() int { return SchemaVersion() }

// migrate brings the database to the newest version of table. On
// PostgreSQL it holds the migration lock meanwhile, so replicas starting
// at once migrate one after the other.
func migrate(ctx context.Context, db *sql.DB, shown string, dl *dialect, table dbutil.UpgradeTable) error {
	if table == nil {
		_, err := upgradeTable()
		return fmt.Errorf("migrate state database %s: embedded upgrades are invalid: %w", shown, err)
	}
	if dl.advisoryLocks {
		unlock, err := pgMigrationLock(ctx, db)
		if err != nil {
			return fmt.Errorf("migrate state database %s: lock: %w", shown, err)
		}
		defer unlock()
	}
	udb, err := dbutil.NewWithDB(db, dl.name)
	if err != nil {
		return fmt.Errorf("migrate state database %s: %w", shown, err)
	}
	udb.VersionTable = versionTable
	udb.UpgradeTable = table
	// One transaction for the whole upgrade: the version is read inside it,
	// so two processes opening one database at once (a CLI command while
	// the gateway starts) upgrade one after the other; a failing step
	// leaves the database as it was before the open.
	err = udb.DoTxn(ctx, nil, func(ctx context.Context) error {
		if err := adoptLegacy(ctx, udb, dl); err != nil {
			return fmt.Errorf("adopt schema_migrations: %w", err)
		}
		if has, err := udb.TableExists(ctx, versionTable); err != nil {
			return err
		} else if has {
			var version, compat sql.NullInt64
			err := udb.QueryRow(ctx, "SELECT version, compat FROM "+versionTable+" LIMIT 1").Scan(&version, &compat)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("read version: %w", err)
			}
			if c := cmp.Or(compat.Int64, version.Int64); c > int64(len(table)) {
				return fmt.Errorf("has schema version %d, this herald knows up to %d: %w; run a newer herald, or move the file away to start with an empty state",
					version.Int64, len(table), ErrSchemaTooNew)
			}
		}
		if err := udb.Upgrade(ctx); err != nil {
			return err
		}
		if err := markLegacy(ctx, udb, dl, len(table)); err != nil {
			return fmt.Errorf("mark schema_migrations: %w", err)
		}
		return nil
	})
	if errors.Is(err, ErrSchemaTooNew) {
		return fmt.Errorf("state database %s %w", shown, err)
	}
	if err != nil {
		return fmt.Errorf("migrate state database %s: %w", shown, err)
	}
	return nil
}

// atNewest reports that a SQLite database is at version newest and needs
// nothing of migrate: herald_version says newest (compat no higher),
// schema_migrations has every step for older binaries, and no foreign
// table dbutil refuses is there. One statement instead of migrate's
// transaction of about ten (each compiled at every start) and the upgrade
// table's parsing; any error (a new, legacy or foreign database) sends
// the caller to migrate. Read outside a transaction: another process can
// only move a database at the newest version further (migrate then
// refuses it at the next open, as it would have here a moment later).
func atNewest(ctx context.Context, db *sql.DB, newest int) bool {
	var version, compat, legacy, foreign int
	err := db.QueryRowContext(ctx, `SELECT h.version, COALESCE(NULLIF(h.compat, 0), h.version),
		(SELECT COALESCE(MAX(version), 0) FROM schema_migrations),
		(SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN ('state_groups_state', 'roomserver_rooms'))
		FROM `+versionTable+` h LIMIT 1`).Scan(&version, &compat, &legacy, &foreign)
	return err == nil && newest > 0 && version == newest && compat <= newest && legacy >= newest && foreign == 0
}

// pgMigrationLock takes PostgreSQL's session advisory lock for migrations
// on a connection of its own and returns its release.
func pgMigrationLock(ctx context.Context, db *sql.DB) (func(), error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	const key = "hashtextextended('herald schema migration', 0)"
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock("+key+")"); err != nil {
		conn.Close()
		return nil, err
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = conn.ExecContext(uctx, "SELECT pg_advisory_unlock("+key+")")
		conn.Close() // a lock left by a failed unlock ends with the session
	}, nil
}

// adoptLegacy gives a database made before the one tree (schema_migrations
// only) its herald_version: SQLite's numbering is the tree's, PostgreSQL's
// is offset by legacyPGOffset.
func adoptLegacy(ctx context.Context, udb *dbutil.Database, dl *dialect) error {
	if has, err := udb.TableExists(ctx, versionTable); err != nil || has {
		return err
	}
	if has, err := udb.TableExists(ctx, "schema_migrations"); err != nil || !has {
		return err
	}
	var v int
	if err := udb.QueryRow(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&v); err != nil {
		return err
	}
	if v > 0 {
		v += dl.legacyOffset
	}
	if _, err := udb.Exec(ctx, "CREATE TABLE "+versionTable+" (version INTEGER, compat INTEGER)"); err != nil {
		return err
	}
	_, err := udb.Exec(ctx, "INSERT INTO "+versionTable+" (version, compat) VALUES ($1, $1)", v)
	return err
}

// markLegacy records versions up to top in schema_migrations, in that
// table's numbering, for older binaries (a no-op once they are there).
func markLegacy(ctx context.Context, udb *dbutil.Database, dl *dialect, top int) error {
	top -= dl.legacyOffset
	if has, err := udb.TableExists(ctx, "schema_migrations"); err != nil {
		return err
	} else if has {
		var cur int
		if err := udb.QueryRow(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&cur); err != nil || cur >= top {
			return err
		}
	} else if _, err := udb.Exec(ctx, `CREATE TABLE schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at BIGINT NOT NULL
	)`); err != nil {
		return err
	}
	_, err := udb.Exec(ctx, `WITH RECURSIVE n(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM n WHERE v < $1)
		INSERT INTO schema_migrations (version, applied_at) SELECT v, $2 FROM n WHERE true
		ON CONFLICT (version) DO NOTHING`, top, time.Now().UnixMilli())
	return err
}
