package store

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/heraldhq/herald/devtools/pgtest"
)

// testDriverEnv selects the backend newTestDB opens. The package's tests
// are the store's contract: TestMain runs them on SQLite, then runs the
// test binary again with HERALD_TEST_STORE=postgres against a throwaway
// PostgreSQL cluster (skipped where PostgreSQL is not installed, unless
// HERALD_REQUIRE_POSTGRES=1).
const testDriverEnv = "HERALD_TEST_STORE"

func TestMain(m *testing.M) {
	if os.Getenv(testDriverEnv) == DriverPostgres {
		os.Exit(pgtest.Main(m))
	}
	code := m.Run()
	if code != 0 {
		os.Exit(code)
	}
	if !pgtest.Installed() {
		fmt.Println("store: PostgreSQL is not installed; the contract suite ran on SQLite only (scripts/postgres.sh install)")
		if pgtest.Required() {
			os.Exit(1)
		}
		os.Exit(0)
	}
	fmt.Println("store: the contract suite again, on PostgreSQL")
	os.Exit(pgtest.Rerun(testDriverEnv + "=" + DriverPostgres))
}

// onPostgres reports whether this run is the PostgreSQL one.
func onPostgres() bool { return os.Getenv(testDriverEnv) == DriverPostgres }

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
