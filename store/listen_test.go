package store

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/devtools/pgtest"
)

// A listener whose connection is cut (pg_terminate_backend, as a server
// restart or a network cut would) says why, without the password, and
// listens again: ready is called again and what is sent after it arrives.
func TestListenTellsWhyAndListensAgain(t *testing.T) {
	if !onPostgres() {
		t.Skip("the bus is PostgreSQL's LISTEN/NOTIFY")
	}
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	const password = "s3cret-pw" // trust authentication: accepted, never checked
	u.User = url.UserPassword(u.User.Username(), password)
	db, err := OpenPostgres(context.Background(), u.String(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lctx, stop := context.WithCancel(ctx)
	ready := make(chan struct{}, 4)
	got := make(chan string, 16)
	failed := make(chan error, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		db.Listen(lctx, "herald", func() { ready <- struct{}{} }, func(p string) { got <- p }, func(err error) { failed <- err })
	}()
	defer func() { stop(); <-done }()
	wait := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s: never", what)
		}
	}
	wait("the listener in place", ready)
	var n int
	if err := db.pg.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database()`, ListenerName).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminated %d listeners, %v; want 1", n, err)
	}
	select {
	case err := <-failed:
		if msg := err.Error(); strings.Contains(msg, password) || !strings.Contains(msg, "listen on herald") {
			t.Errorf("the listener's error %q names the password or not the channel", msg)
		}
	case <-ctx.Done():
		t.Fatal("the cut was not reported")
	}
	wait("the listener in place again", ready)
	if err := db.Notify(ctx, "herald", "after the cut"); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p != "after the cut" {
			t.Errorf("got %q", p)
		}
	case <-ctx.Done():
		t.Fatal("nothing arrived after the listener came back")
	}
}
