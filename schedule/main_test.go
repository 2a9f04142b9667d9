package schedule

import (
	"context"
	"os"
	"testing"

	"github.com/heraldhq/herald/devtools/pgtest"
	"github.com/heraldhq/herald/store"
)

// The scheduler's tests (and benchmarks) run on SQLite, then again on a
// throwaway PostgreSQL cluster.
func TestMain(m *testing.M) { os.Exit(pgtest.RunBoth(m, "schedule")) }

// openStore opens a fresh state: SQLite in a temp dir, or a fresh
// PostgreSQL database in the PostgreSQL run.
func openStore(tb testing.TB) *store.DB {
	tb.Helper()
	var db *store.DB
	var err error
	if pgtest.OnPostgres() {
		db, err = store.OpenPostgres(context.Background(), pgtest.URL(tb), tb.TempDir())
	} else {
		db, err = store.Open(context.Background(), tb.TempDir())
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}
