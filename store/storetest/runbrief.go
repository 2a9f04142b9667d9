package storetest

import (
	"context"
	"reflect"
	"testing"

	"github.com/heraldhq/herald/store"
)

// checkBrief lists the runs under full's root with RunFilter.Brief: full
// (the only one there) comes back with what a list shows and nothing else.
func checkBrief(t *testing.T, s Store, full *store.Run) {
	t.Helper()
	list, err := s.ListRuns(context.Background(), store.RunFilter{RootKey: full.RootKey, Brief: true})
	if err != nil || len(list) != 1 {
		t.Fatalf("ListRuns(Brief) = %d runs, %v; want 1", len(list), err)
	}
	want := store.Run{ID: full.ID, ChildKey: full.ChildKey, RequesterKey: full.RequesterKey, RootKey: full.RootKey,
		AgentID: full.AgentID, Task: full.Task, Label: full.Label, Status: full.Status, Outcome: full.Outcome, Note: full.Note,
		CreatedAt: full.CreatedAt, StartedAt: full.StartedAt, EndedAt: full.EndedAt, TokensIn: full.TokensIn,
		TokensOut: full.TokensOut, Resumes: full.Resumes, Announce: full.Announce, Batch: full.Batch}
	if !reflect.DeepEqual(list[0], want) {
		t.Errorf("brief run =\n%+v\nwant\n%+v", list[0], want)
	}
}
