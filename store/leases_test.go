package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestLeases(t *testing.T) {
	db := newTestDB(t)
	ctx := context.Background()
	if _, err := db.GetLease(ctx, "gateway"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetLease of nothing: %v", err)
	}
	a, err := db.AcquireLease(ctx, "gateway", "gw-a", time.Minute)
	if err != nil || a.Holder != "gw-a" || !a.ExpiresAt.After(a.AcquiredAt) {
		t.Fatalf("acquire: %+v, %v", a, err)
	}
	// Another replica cannot take a live lease; it is told who has it.
	cur, err := db.AcquireLease(ctx, "gateway", "gw-b", time.Minute)
	if !errors.Is(err, ErrLeaseHeld) || cur.Holder != "gw-a" {
		t.Fatalf("second replica: %+v, %v; want ErrLeaseHeld by gw-a", cur, err)
	}
	// The holder renews: later expiry, same acquisition time.
	r, err := db.AcquireLease(ctx, "gateway", "gw-a", 2*time.Minute)
	if err != nil || !r.ExpiresAt.After(a.ExpiresAt) || !r.AcquiredAt.Equal(a.AcquiredAt) {
		t.Fatalf("renew: %+v (first %+v), %v", r, a, err)
	}
	// Released: the other takes it at once.
	if err := db.ReleaseLease(ctx, "gateway", "gw-b"); err != nil { // not the holder: no effect
		t.Fatal(err)
	}
	if _, err := db.AcquireLease(ctx, "gateway", "gw-b", time.Minute); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("a release by a non-holder freed the lease: %v", err)
	}
	if err := db.ReleaseLease(ctx, "gateway", "gw-a"); err != nil {
		t.Fatal(err)
	}
	if b, err := db.AcquireLease(ctx, "gateway", "gw-b", 50*time.Millisecond); err != nil || b.Holder != "gw-b" {
		t.Fatalf("after release: %+v, %v", b, err)
	}
	// Expired: taken over; the old holder's renewal now fails.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := db.AcquireLease(ctx, "gateway", "gw-c", time.Minute)
		if err == nil {
			if c.Holder != "gw-c" {
				t.Fatalf("takeover: %+v", c)
			}
			break
		}
		if !errors.Is(err, ErrLeaseHeld) || time.Now().After(deadline) {
			t.Fatalf("takeover after expiry: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := db.AcquireLease(ctx, "gateway", "gw-b", time.Minute); !errors.Is(err, ErrLeaseHeld) {
		t.Errorf("the expired holder renewed a lease another took: %v", err)
	}
}

// Many replicas racing for a free lease: exactly one wins.
func TestLeaseRace(t *testing.T) {
	db := newTestDB(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	winners := 0
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := db.AcquireLease(context.Background(), "gateway", string(rune('a'+i)), time.Minute)
			if err == nil {
				mu.Lock()
				winners++
				mu.Unlock()
			} else if !errors.Is(err, ErrLeaseHeld) {
				t.Errorf("acquire: %v", err)
			}
		}()
	}
	wg.Wait()
	if winners != 1 {
		t.Errorf("%d replicas took the lease, want 1", winners)
	}
}
