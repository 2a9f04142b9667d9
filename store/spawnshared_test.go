package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"
)

// The rows of a SpawnEach go in with the values of their own runs and
// child sessions whether the batch's rows agree on the columns a chunk
// binds once on SQLite (multiRow.shared) or one of them differs (then
// each row binds all its columns): a batch of 8 that agree, 8 where one
// run has another model, depth and agent (its child session too), and 3
// (chunks of 2 and 1). And in the order they were given: a batch's runs
// and results are listed by creation time, then insertion (rowid), and
// these runs share their creation time.
func TestSpawnEachRowsSharedOrNot(t *testing.T) {
	db := newTestDB(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		n    int
		odd  int // the run that differs; -1: none
	}{{"agree", 8, -1}, {"one differs", 8, 5}, {"three", 3, -1}} {
		t.Run(tc.name, func(t *testing.T) {
			runs, children := spawnRunsOK(t, db, "shared-"+tc.name, tc.n, func(i int, r *Run) {
				r.Task, r.Label, r.Batch = "task "+strconv.Itoa(i), "label "+strconv.Itoa(i), "batch-"+tc.name
				if i == tc.odd {
					r.Model, r.Depth, r.AgentID = "openai/gpt-test", 2, "other"
				}
			})
			for i, r := range runs {
				if g, w := runShape(storedRun(t, db, r.ID)), runShape(r); g != w {
					t.Errorf("run %d stored as\n%s\nwant\n%s", i, g, w)
				}
				s, err := db.GetSession(ctx, r.ChildKey)
				if err != nil {
					t.Fatal(err)
				}
				if g, w := sessionShape(s), sessionShape(children[i]); g != w {
					t.Errorf("child session %d stored as\n%s\nwant\n%s", i, g, w)
				}
			}
			rows, err := db.reader(ctx).query(batchRunsQuery(db.dialect), "batch-"+tc.name)
			if err != nil {
				t.Fatal(err)
			}
			listed, err := scanRuns(rows)
			if err != nil {
				t.Fatal(err)
			}
			var got, want []string
			for i := range listed {
				got = append(got, listed[i].ID)
			}
			for _, r := range runs {
				want = append(want, r.ID)
			}
			if !slices.Equal(got, want) {
				t.Errorf("the batch's runs in its order are %q, want the spawn order %q", got, want)
			}
		})
	}
}

func runShape(r *Run) string {
	return fmt.Sprintf("%s %s %s %s %s %d %s %q %q %s %s %d %d %q %+v %s %d %d %d %s %s %.2f",
		r.ID, r.ChildKey, r.ChildSessionID, r.RequesterKey, r.RootKey, r.Depth, r.AgentID, r.Task, r.Label,
		r.Model, r.Cleanup, r.TimeoutSeconds, r.MaxIterations, r.AllowedTools, r.Origin, r.Status,
		r.CreatedAt.UnixMilli(), r.StartedAt.UnixMilli(), r.StretchAt.UnixMilli(), r.RequesterSessionID, r.Announce, r.CostUSD)
}

func sessionShape(s *Session) string {
	return fmt.Sprintf("%s %s %s %s %s %s %d %q %s %+v %s %d",
		s.Key, s.ID, s.AgentID, s.Kind, s.ParentKey, s.RootKey, s.Depth, s.Label, s.Model, s.Origin, s.TranscriptPath, s.CreatedAt.UnixMilli())
}

// spawnRunsOK records n runs of requester "agent:main:web:dm:"+kind
// (spawnedRun's of id "<kind>-<i>", each changed by tweak first) and their child sessions
// with one SpawnEach, every one of them or the test fails.
func spawnRunsOK(t *testing.T, db *DB, kind string, n int, tweak func(i int, r *Run)) ([]*Run, []*Session) {
	t.Helper()
	runs, children := make([]*Run, n), make([]*Session, n)
	now := time.Now()
	for i := range n {
		runs[i], children[i] = spawnedRun(kind, kind+"-"+strconv.Itoa(i), "agent:main:web:dm:"+kind, "s-"+kind, now)
		tweak(i, runs[i])
	}
	errs, err := db.SpawnEach(context.Background(), runs, children, SpawnLimits{MaxChildren: 100, MaxTotal: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("run %d: %v", i, e)
		}
	}
	return runs, children
}

// storedRun is the run id as stored.
func storedRun(t *testing.T, db *DB, id string) *Run {
	t.Helper()
	r, err := db.GetRun(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The runs of one SpawnEach keep each its own allowed tools, although
// the batch encodes a list only when it differs from the one before:
// equal lists in separate slices, no list (nil: no restriction), an empty
// one (no tools) and a different one, in an order that goes back and
// forth between them.
func TestSpawnEachAllowedToolsPerRun(t *testing.T) {
	db := newTestDB(t)
	lists := [][]string{{"read", "exec"}, {"read", "exec"}, nil, {}, {"read"}, {}, nil, {"read", "exec"}}
	runs, _ := spawnRunsOK(t, db, "tools", len(lists), func(i int, r *Run) {
		r.AllowedTools = slices.Clone(lists[i]) // a slice of its own, as each spawn's
	})
	for i, r := range runs {
		got := storedRun(t, db, r.ID)
		if (got.AllowedTools == nil) != (lists[i] == nil) || !slices.Equal(got.AllowedTools, lists[i]) {
			t.Errorf("run %d: allowed tools %#v, want %#v", i, got.AllowedTools, lists[i])
		}
	}
}
