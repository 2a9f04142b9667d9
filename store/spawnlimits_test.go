package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

func TestSpawnRunLimitsInTheTransaction(t *testing.T) {
	db := newTestDB(t)
	ctx := context.Background()
	lim := SpawnLimits{MaxChildren: 3, MaxTotal: 5}

	// Sixteen parallel spawns for one requester: exactly three take a slot.
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, s := newRun(fmt.Sprintf("p%02d", i))
			errs[i] = db.SpawnRun(ctx, r, s, lim)
		}()
	}
	wg.Wait()
	accepted := 0
	for i, err := range errs {
		var le *LimitError
		switch {
		case err == nil:
			accepted++
		case errors.As(err, &le):
			if le.Limit != "maxChildrenPerSession" || le.Max != 3 || le.Count != 3 {
				t.Errorf("spawn %d: %+v", i, le)
			}
		default:
			t.Errorf("spawn %d: %v", i, err)
		}
	}
	if accepted != 3 {
		t.Fatalf("accepted %d parallel spawns, want 3 (maxChildrenPerSession)", accepted)
	}
	// A refused spawn stores neither its run nor its child session.
	for i, err := range errs {
		if err == nil {
			continue
		}
		id := fmt.Sprintf("p%02d", i)
		if _, err := db.GetRun(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("refused run %s: GetRun = %v, want ErrNotFound", id, err)
		}
		if _, err := db.GetSession(ctx, "agent:main:subagent:"+id); !errors.Is(err, ErrNotFound) {
			t.Errorf("refused run %s: child session GetSession = %v, want ErrNotFound", id, err)
		}
	}

	// A finished child frees its slot; the total budget still counts it.
	runs, err := db.ListRuns(ctx, RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	done := runs[0]
	done.Status, done.Outcome, done.EndedAt = StatusDone, OutcomeSuccess, t0
	if err := db.FinishRun(ctx, &done, nil); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"", "", "maxTotalSpawns"} {
		r, s := newRun(fmt.Sprintf("q%d", i))
		r.RequesterKey = fmt.Sprintf("agent:main:slack:group:C42:thread:%d", i) // own children budget
		r.RootKey = "agent:main:slack:group:C42"
		err := db.SpawnRun(ctx, r, s, lim)
		var le *LimitError
		switch {
		case want == "" && err != nil:
			t.Errorf("spawn q%d: %v", i, err)
		case want != "" && (!errors.As(err, &le) || le.Limit != want || le.Count != 5):
			t.Errorf("spawn q%d = %v, want %s with 5 counted", i, err, want)
		}
	}
	if n, err := db.CountSpawns(ctx, "agent:main:slack:group:C42"); err != nil || n != 5 {
		t.Errorf("CountSpawns = %d, %v; want 5", n, err)
	}
}
