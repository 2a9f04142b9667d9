package store

import (
	"context"
	"testing"
	"time"
)

// TestDeferReadPool: while deferred (the gateway until ready), reads run
// on the writer's connection and the read pool opens no connection (each
// would parse the schema); a read waits for a write transaction holding
// the writer instead of failing or deadlocking; once the returned func is
// called, reads go to the read pool.
func TestDeferReadPool(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	d := newTestDB(t)
	if n := d.r.Stats().OpenConnections; n != 0 {
		t.Fatalf("the read pool holds %d connections after Open, want 0 (it connects on first use)", n)
	}
	open := d.DeferReadPool()
	if err := d.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := d.PendingApprovals(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := d.SpendTotals(ctx, "2026-01-01"); err != nil {
		t.Fatal(err)
	}

	// A read while another goroutine's write transaction holds the writer
	// waits for it.
	inTx, release := make(chan struct{}), make(chan struct{})
	txDone := make(chan error, 1)
	go func() {
		txDone <- d.tx(ctx, func(c conn) error {
			close(inTx)
			<-release
			_, err := c.exec(`INSERT INTO kv (key, value, updated_at) VALUES ('t:k', 'v', 0)`)
			return err
		})
	}()
	<-inTx
	readDone := make(chan error, 1)
	go func() { readDone <- d.Check(ctx) }()
	select {
	case err := <-readDone:
		t.Fatalf("a read on the writer returned while a transaction held it (%v)", err)
	case <-time.After(50 * time.Millisecond): // waiting, as it should; the next select proves it ends
	}
	close(release)
	for _, ch := range []chan error{txDone, readDone} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the read or the transaction did not end")
		}
	}
	if n := d.r.Stats().OpenConnections; n != 0 {
		t.Fatalf("the read pool opened %d connections while deferred, want 0", n)
	}

	open()
	if _, err := d.PendingApprovals(ctx); err != nil {
		t.Fatal(err)
	}
	if n := d.r.Stats().OpenConnections; n != 1 {
		t.Fatalf("the read pool holds %d connections after a read once opened, want 1", n)
	}
}
