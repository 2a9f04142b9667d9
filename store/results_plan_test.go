package store

import (
	"context"
	"database/sql"
	"strings"
	"testing"
)

// TestFoldQueriesSearchAnIndex: every turn's start write folds the
// session's results (FoldResults); on SQLite its queries search an index,
// never scan the whole results table (v23's partial index on folded_by
// could not serve the read with its bound parameter; v30).
func TestFoldQueriesSearchAnIndex(t *testing.T) {
	if onPostgres() {
		t.Skip("SQLite's query plans")
	}
	db := newTestDB(t)
	for _, c := range []struct {
		q    string
		args []any
	}{
		{foldQuery, []any{"intake:1", 1, "k", "s"}},
		{foldedQuery, []any{"intake:1", "k"}},
	} {
		var plan []string
		err := db.reader(context.Background()).queryRow(func(rows *sql.Rows) error {
			for {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					return err
				}
				plan = append(plan, detail)
				if !rows.Next() {
					return rows.Err()
				}
			}
		}, "EXPLAIN QUERY PLAN "+c.q, c.args...)
		if err != nil {
			t.Fatal(err)
		}
		if p := strings.Join(plan, "; "); !strings.Contains(p, "SEARCH results USING INDEX") || strings.Contains(p, "SCAN results") {
			t.Errorf("plan of %q: %s, want an index search", c.q, p)
		}
	}
}
