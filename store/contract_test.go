package store_test

import (
	"context"
	"testing"

	"github.com/heraldhq/herald/devtools/pgtest"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/storetest"
)

// The contract suite on this run's engine: SQLite, then PostgreSQL in the
// second pass of TestMain (pgtest.RunBoth).
func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store {
		var db *store.DB
		var err error
		if pgtest.OnPostgres() {
			db, err = store.OpenPostgres(context.Background(), pgtest.URL(t), t.TempDir())
		} else {
			db, err = store.Open(context.Background(), t.TempDir())
		}
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() {
			if err := db.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		return db
	})
}
