package store

import (
	"context"
	"os"
	"testing"

	"github.com/heraldhq/herald/devtools/pgtest"
)

// The package's tests are the store's contract: they run on SQLite, then
// again on a throwaway PostgreSQL cluster (pgtest.RunBoth).
func TestMain(m *testing.M) { os.Exit(pgtest.RunBoth(m, "store")) }

// onPostgres reports whether this run is the PostgreSQL one.
func onPostgres() bool { return pgtest.OnPostgres() }

// sqliteOnly skips a test of SQLite's files in the PostgreSQL run.
func sqliteOnly(tb testing.TB) {
	if onPostgres() {
		tb.Skip("SQLite only")
	}
}

// newTestDB opens a database — SQLite in a fresh temp dir, or a fresh
// PostgreSQL database in the PostgreSQL run — and closes it at cleanup.
func newTestDB(tb testing.TB) *DB {
	tb.Helper()
	var db *DB
	var err error
	if onPostgres() {
		db, err = OpenPostgres(context.Background(), pgtest.URL(tb), tb.TempDir())
	} else {
		db, err = Open(context.Background(), tb.TempDir())
	}
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return db
}
