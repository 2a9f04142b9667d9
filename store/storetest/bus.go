package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/store"
)

// busWait bounds how long a notification may take to arrive; a test that
// waits this long has failed.
const busWait = 30 * time.Second

// The bus delivers a message sent on a channel to whoever listens on it
// (another replica), on that channel only, in order; listening ends with
// its context. On SQLite one process runs: Notify is accepted and Listen
// returns at once without ever calling fn.
func testBus(t *testing.T, s Store) {
	ctx := context.Background()
	if s.Driver() != store.DriverPostgres {
		if err := s.Notify(ctx, "herald", "hello"); err != nil {
			t.Fatalf("Notify: %v", err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.Listen(ctx, "herald", nil, func(p string) { t.Errorf("SQLite delivered %q", p) }, nil)
		}()
		select {
		case <-done:
		case <-time.After(busWait):
			t.Fatal("Listen on SQLite did not return")
		}
		return
	}
	lctx, stop := context.WithCancel(ctx)
	ready := make(chan struct{}, 1)
	got := make(chan string, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Listen(lctx, "herald", func() { ready <- struct{}{} }, func(p string) { got <- p }, func(err error) { t.Errorf("the listener failed: %v", err) })
	}()
	select {
	case <-ready:
	case <-time.After(busWait):
		t.Fatal("the listener never became ready")
	}
	for _, m := range []struct{ channel, payload string }{{"other", "not for us"}, {"herald", "one"}, {"herald", `{"kind":"wake"}`}} {
		if err := s.Notify(ctx, m.channel, m.payload); err != nil {
			t.Fatalf("Notify(%s): %v", m.channel, err)
		}
	}
	for _, want := range []string{"one", `{"kind":"wake"}`} {
		select {
		case p := <-got:
			if p != want {
				t.Fatalf("received %q, want %q", p, want)
			}
		case <-time.After(busWait):
			t.Fatalf("%q never arrived", want)
		}
	}
	stop()
	select {
	case <-done:
	case <-time.After(busWait):
		t.Fatal("Listen did not return after its context ended")
	}
	select {
	case p := <-got:
		t.Errorf("received %q more", p)
	default:
	}
}
