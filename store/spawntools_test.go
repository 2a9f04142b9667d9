package store

import (
	"context"
	"slices"
	"testing"
	"time"
)

// The runs of one SpawnEach keep each its own allowed tools, although
// the batch encodes a list only when it differs from the one before:
// equal lists in separate slices, no list (nil: no restriction), an empty
// one (no tools) and a different one, in an order that goes back and
// forth between them.
func TestSpawnEachAllowedToolsPerRun(t *testing.T) {
	db := newTestDB(t)
	ctx := context.Background()
	lists := [][]string{{"read", "exec"}, {"read", "exec"}, nil, {}, {"read"}, {}, nil, {"read", "exec"}}
	now := time.Now()
	var runs []*Run
	var children []*Session
	for i, tools := range lists {
		r, child := spawnedRun("tools", string(rune('a'+i)), "agent:main:web:dm:c1", "s-1", now)
		r.AllowedTools = slices.Clone(tools) // a slice of its own, as each spawn's
		runs, children = append(runs, r), append(children, child)
	}
	errs, err := db.SpawnEach(ctx, runs, children, SpawnLimits{MaxChildren: 100, MaxTotal: 100})
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
		if (got.AllowedTools == nil) != (lists[i] == nil) || !slices.Equal(got.AllowedTools, lists[i]) {
			t.Errorf("run %d: allowed tools %#v, want %#v", i, got.AllowedTools, lists[i])
		}
	}
}
