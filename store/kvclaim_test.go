package store

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestClaimKVOnceAndSweep: of many callers claiming one key at once exactly
// one wins; DeleteKVBefore removes only old values under its prefix, with
// LIKE's wildcards in the prefix taken literally.
func TestClaimKVOnceAndSweep(t *testing.T) {
	db := newTestDB(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := db.ClaimKV(ctx, "a_b:v0=abc", "x")
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				won++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d of 8 claims of one key won, want 1", won)
	}
	if err := db.SetKV(ctx, "aXb:other", "y"); err != nil {
		t.Fatal(err)
	}
	n, err := db.DeleteKVBefore(ctx, "a_b:", time.Now().Add(time.Minute))
	if err != nil || n != 1 {
		t.Fatalf("DeleteKVBefore = %d, %v; want the one claimed key", n, err)
	}
	if _, found, _ := db.GetKV(ctx, "aXb:other"); !found {
		t.Error("a key outside the prefix was deleted")
	}
	if ok, err := db.ClaimKV(ctx, "a_b:v0=abc", "x"); err != nil || !ok {
		t.Errorf("claim after the sweep = %v, %v; want it new again", ok, err)
	}
	if n, _ := db.DeleteKVBefore(ctx, "a_b:", time.Now().Add(-time.Minute)); n != 0 {
		t.Errorf("DeleteKVBefore an earlier time deleted %d fresh keys", n)
	}
}
