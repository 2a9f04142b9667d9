package store

import (
	"context"
	"regexp"
	"strings"
	"testing"
)

// A planCase is a query whose plan must read table through each of the
// indexes, never by a scan of the table.
type planCase struct {
	name    string
	q       string
	args    []any
	table   string
	indexes []string
}

// TestRunQueriesSearchAnIndex: the reads of runs, sessions and intake
// whose index v37, v38 and v39 changed (partial, dropped, merged), and
// the spawn limits' counts, find their rows through their index on both engines,
// never by a scan of the table. A partial index serves a query only when the query's
// WHERE states the index's condition (a bound parameter does not show
// it), so a query that lost its stated condition, or an index that lost
// its use, fails here. PostgreSQL plans with sequential scans off: on
// its near-empty test tables a scan is cheapest, and with scans off it
// still plans one when no index can serve the query.
func TestRunQueriesSearchAnIndex(t *testing.T) {
	db := newTestDB(t)
	live := []string{StatusQueued, StatusRunning, StatusAnnouncing}
	runs := func(name, q string, args []any, indexes ...string) planCase {
		return planCase{name, q, args, "runs", indexes}
	}
	list := func(name string, f RunFilter, indexes ...string) planCase {
		q, args := db.listRunsQuery(f)
		return runs(name, q, args, indexes...)
	}
	lim := SpawnLimits{MaxChildren: 5, MaxTotal: 50}
	countQ, countArgs := boundsQuery(spawnBounds([]*Run{{RequesterKey: "agent:main:main", RootKey: "agent:main:main"}}, lim))
	sessQ, sessArgs := db.listSessionsQuery(SessionFilter{Kind: KindMain, Limit: 50})
	for _, c := range []planCase{
		runs("batch live", batchLiveQuery, []any{"b1"}, "runs_batch"),
		runs("batch runs", batchRunsQuery(db.dialect), []any{"b1"}, "runs_batch"),
		runs("batch files", batchFilesQuery(db.dialect), []any{"b1"}, "runs_batch"),
		runs("group live", groupLiveQuery, []any{"intake:1", "r1"}, "runs_spawn_group"),
		runs("turn group count", turnGroupCountQuery, []any{"intake:1", StatusQueued, StatusRunning, StatusAnnouncing, AnnounceParent}, "runs_spawn_group"),
		runs("turn group last", turnGroupLastQuery, []any{"intake:1", AnnounceParent}, "runs_spawn_group"),
		runs("any live run", anyActiveRunQuery, nil, "runs_requester_active"),
		runs("claim runs", db.claimRunsQuery(false), []any{"gw-1"}, "runs_requester_active"),
		runs("reclaim runs", db.claimRunsQuery(true), []any{"gw-1"}, "runs_requester_active"),
		runs("spawn limits", countQ, countArgs, "runs_requester_active", "runs_root"),
		runs("count spawns", countSpawnsQuery, []any{"agent:main:main"}, "runs_root"),
		list("list group", RunFilter{SpawnGroup: "intake:1"}, "runs_spawn_group"),
		list("list group live", RunFilter{SpawnGroup: "intake:1", Statuses: live}, "runs_"),
		list("list batch", RunFilter{Batch: "b1"}, "runs_batch"),
		list("list live", RunFilter{Statuses: live}, "runs_requester_active"),
		list("list requester", RunFilter{RequesterKey: "agent:main:main"}, "runs_requester"),
		list("list root", RunFilter{RootKey: "agent:main:main", Limit: 20, Brief: true}, "runs_root"),
		list("list newest", RunFilter{Limit: 1}, "runs_created"),
		{"conversations", sessQ, sessArgs, "sessions", []string{"sessions_main"}},
		{"any owed", anyOwedQuery, nil, "intake", []string{"intake_"}},
		{"owed intake", owedIntakeQuery, nil, "intake", []string{"intake_owed"}},
		{"claim owed", db.claimOwedQuery(false), []any{"gw-1", 10}, "intake", []string{"intake_owed"}},
		{"reclaim owed", db.claimOwedQuery(true), []any{"gw-1", 10}, "intake", []string{"intake_owed"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := queryPlan(t, db, c.q, c.args...)
			ok := !scansTable(db, plan, c.table)
			for _, ix := range c.indexes {
				ok = ok && strings.Contains(plan, ix)
			}
			if !ok {
				t.Errorf("plan: %s\nwant %s read through %v, never scanned; query: %s", plan, c.table, c.indexes, c.q)
			}
		})
	}
}

// queryPlan is the engine's plan of q, its lines joined by "; ".
func queryPlan(tb testing.TB, db *DB, q string, args ...any) string {
	tb.Helper()
	var plan []string
	err := db.tx(context.Background(), func(c conn) error {
		explain := "EXPLAIN QUERY PLAN "
		if db.pg != nil {
			if _, err := c.exec(`SET LOCAL enable_seqscan = off`); err != nil {
				return err
			}
			explain = "EXPLAIN "
		}
		rows, err := c.query(explain+q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var line string
			if db.pg != nil {
				err = rows.Scan(&line)
			} else {
				var id, parent, unused int
				err = rows.Scan(&id, &parent, &unused, &line)
			}
			if err != nil {
				return err
			}
			plan = append(plan, strings.TrimSpace(line))
		}
		return rows.Err()
	})
	if err != nil {
		tb.Fatalf("plan of %q: %v", q, err)
	}
	return strings.Join(plan, "; ")
}

// scansTable says whether plan reads every row of a table: on
// PostgreSQL a "Seq Scan on" table, on SQLite a "SCAN" of any table (or
// alias) without an index.
func scansTable(db *DB, plan, table string) bool {
	if db.pg != nil {
		return regexp.MustCompile(`Seq Scan on ` + table + `\b`).MatchString(plan)
	}
	for _, line := range strings.Split(plan, "; ") {
		if strings.HasPrefix(line, "SCAN ") && !strings.Contains(line, " USING ") && line != "SCAN CONSTANT ROW" {
			return true
		}
	}
	return false
}
