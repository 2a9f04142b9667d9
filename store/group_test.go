package store

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"
)

// holdWriter starts a write transaction that waits until n more are queued
// behind it, so those n share one commit; it returns a wait for it.
func holdWriter(t *testing.T, db *DB, n int) func() {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		done <- db.tx(context.Background(), func(c conn) error {
			deadline := time.Now().Add(10 * time.Second)
			for {
				db.group.mu.Lock()
				queued := len(db.group.queue)
				db.group.mu.Unlock()
				if queued >= n {
					return nil
				}
				if time.Now().After(deadline) {
					return errors.New("the other transactions never queued")
				}
				time.Sleep(time.Millisecond)
			}
		})
	}()
	// The holder leads once it is queued alone.
	deadline := time.Now().Add(10 * time.Second)
	for {
		db.group.mu.Lock()
		busy := db.group.busy
		db.group.mu.Unlock()
		if busy || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	return func() {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// Transactions committed together stay apart: one that fails is rolled
// back alone, the others are committed, and each caller gets its own result.
func TestGroupCommitKeepsTransactionsApart(t *testing.T) {
	sqliteOnly(t)
	db := newTestDB(t)
	ctx := context.Background()
	const n = 20
	wait := holdWriter(t, db, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			key := "k" + strconv.Itoa(i)
			if i%2 == 0 {
				errs[i] = db.SetKV(ctx, key, "kept")
				return
			}
			errs[i] = db.tx(ctx, func(c conn) error {
				if _, err := c.exec(`INSERT INTO kv (key, value, updated_at) VALUES ($1, 'lost', 0)`, key); err != nil {
					return err
				}
				return errors.New("fails after its write")
			})
		})
	}
	wg.Wait()
	wait()
	for i := range n {
		v, found, err := db.GetKV(ctx, "k"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case i%2 == 0 && (errs[i] != nil || !found || v != "kept"):
			t.Errorf("write %d: err %v, stored %q %v; want committed", i, errs[i], v, found)
		case i%2 == 1 && (errs[i] == nil || errs[i].Error() != "fails after its write" || found):
			t.Errorf("failed write %d: err %v, stored %q %v; want its own error and nothing stored", i, errs[i], v, found)
		}
	}
}

// A caller whose context ends while it waits for the writer is not run; one
// whose context ends while its transaction runs does not cut the others'.
func TestGroupCommitCancelledCaller(t *testing.T) {
	sqliteOnly(t)
	db := newTestDB(t)
	wait := holdWriter(t, db, 2)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	var wg sync.WaitGroup
	var errGone, errKept error
	wg.Go(func() { errGone = db.SetKV(gone, "gone", "x") })
	wg.Go(func() { errKept = db.SetKV(context.Background(), "kept", "x") })
	wg.Wait()
	wait()
	if !errors.Is(errGone, context.Canceled) || errKept != nil {
		t.Fatalf("cancelled caller: %v; other caller: %v", errGone, errKept)
	}
	if _, found, _ := db.GetKV(context.Background(), "gone"); found {
		t.Errorf("the cancelled caller's write was stored")
	}
	if _, found, _ := db.GetKV(context.Background(), "kept"); !found {
		t.Errorf("the other caller's write was lost")
	}
}
