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
	now := time.Now()
	for _, tc := range []struct {
		name string
		n    int
		odd  int // the run that differs; -1: none
	}{{"agree", 8, -1}, {"one differs", 8, 5}, {"three", 3, -1}} {
		t.Run(tc.name, func(t *testing.T) {
			var runs []*Run
			var children []*Session
			for i := range tc.n {
				id := fmt.Sprintf("%s-%d", tc.name, i)
				r, child := spawnedRun("shared", id, "agent:main:web:dm:shared", "s-shared", now)
				r.Task, r.Label, r.Batch = "task "+strconv.Itoa(i), "label "+strconv.Itoa(i), "batch-"+tc.name
				if i == tc.odd {
					r.Model, r.Depth, r.AgentID = "openai/gpt-test", 2, "other"
				}
				runs, children = append(runs, r), append(children, child)
			}
			errs, err := db.SpawnEach(ctx, runs, children, SpawnLimits{MaxChildren: 100, MaxTotal: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range runs {
				if errs[i] != nil {
					t.Fatalf("run %d: %v", i, errs[i])
				}
				got, err := db.GetRun(ctx, r.ID)
				if err != nil {
					t.Fatal(err)
				}
				if g, w := runShape(got), runShape(r); g != w {
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
