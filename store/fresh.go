package store

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.mau.fi/util/dbutil"
)

// A new SQLite state database is made from one file, fresh-sqlite.sql:
// the schema that upgrades 1..N leave (N in its first line), written by
// TestFreshSchemaMatchesUpgrades -update-fresh from a database the
// upgrade steps made. Running the steps one by one on an empty file cost
// about 15 ms of CPU before the gateway was ready, most of it SQLite
// parsing its whole schema again after each ALTER TABLE; the one file
// costs ~2 ms. Steps added after N still run one by one after it, so a
// new upgrade file needs no change here (regenerating the file only
// makes a first start a little cheaper). PostgreSQL and every existing
// database take the steps as before.
//
// On Linux a new database is not even made by SQL: fresh-sqlite.db is the
// file the upgrade steps leave (VACUUMed, in WAL mode, applied_at 0 in
// schema_migrations), written by the same -update-fresh. Open publishes a
// copy of it (publishImage: an unnamed file, synced, then linked into
// place, so another process opening the state dir at once sees either no
// database or the whole file) and skips quick_check on it. Executing
// fresh-sqlite.sql still cost ~2.5 ms of CPU before ready: SQLite parsing
// 57 CREATE statements, the rollback journal and four fsyncs of switching
// a new file to WAL, and the version bookkeeping; the copy is one write and
// one fdatasync. Where O_TMPFILE or /proc is missing, fresh-sqlite.sql
// makes it as before. TestFreshSchemaMatchesUpgrades opens both and
// compares them with the steps' database.

//go:embed fresh-sqlite.sql
var freshSQLite string

//go:embed fresh-sqlite.db
var freshImage []byte

// sqliteUpgrades is the upgrade table with version 0 (an empty database)
// going straight to the fresh file's version; ok says it does (the tests
// check it; without it a new database takes the steps, as PostgreSQL's).
var sqliteUpgrades = sync.OnceValues(func() (table dbutil.UpgradeTable, ok bool) {
	t, _ := upgradeTable()
	return withFresh(t, freshSQLite)
})

// withFresh returns table whose step from version 0 runs schema (whose
// first line is "-- vN: …") and lands on vN, or table as it is and false
// when schema is not usable.
func withFresh(table dbutil.UpgradeTable, schema string) (dbutil.UpgradeTable, bool) {
	v, ok := freshVersion(schema)
	if table == nil || !ok || v < 1 || v > len(table) {
		return table, false
	}
	t := slices.Clone(table)
	t[0] = dbutil.WrapUpgrade(0, v, v, "fresh schema", dbutil.TxnModeOn, func(ctx context.Context, db *dbutil.Database) error {
		if _, err := db.Exec(ctx, schema); err != nil {
			return fmt.Errorf("fresh schema v%d: %w", v, err)
		}
		return nil
	})
	return t, true
}

// freshVersion reads N from the "-- vN: …" first line of schema.
func freshVersion(schema string) (int, bool) {
	line, _, _ := strings.Cut(schema, "\n")
	num, ok := strings.CutPrefix(line, "-- v")
	if !ok {
		return 0, false
	}
	num, _, ok = strings.Cut(num, ":")
	if !ok {
		return 0, false
	}
	v, err := strconv.Atoi(num)
	return v, err == nil
}
