package gateway_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/devtools/pgtest"
	"github.com/heraldhq/herald/store"
)

var roleSeq atomic.Int64

// TestE2EReplicasStopsOutliveALostListener: /stop and /subagents stop
// sent to gw-1 while gw-0, which holds the turn and the runs, has no
// listener (its LISTEN connection cut by pg_terminate_backend, and it
// cannot log in again until the test lets it) still take effect on gw-0:
// the notification is lost, but the request is in the store, which gw-0
// reads each poll and once it listens again. A web event stream open on
// gw-0 shows the entries gw-1 wrote meanwhile once gw-0 listens again.
func TestE2EReplicasStopsOutliveALostListener(t *testing.T) {
	t.Parallel()
	if !pgtest.OnPostgres() {
		t.Skip("replicas share a PostgreSQL state (the PostgreSQL run of the suite)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := pgtest.URL(t)
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	// gw-0 connects as a role of its own, so that it alone can be kept
	// from logging in. The cluster is shared with other tests (and may be
	// a server of HERALD_TEST_POSTGRES_URL's): the role is dropped once
	// the gateways are closed (cleanups run last in, first out).
	role := fmt.Sprintf("herald_gw0_%d_%d", os.Getpid(), roleSeq.Add(1))
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN SUPERUSER"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropRole(t, base, role) })
	login := func(can bool) {
		t.Helper()
		opt := "LOGIN"
		if !can {
			opt = "NOLOGIN"
		}
		if _, err := admin.Exec(ctx, "ALTER ROLE "+role+" "+opt); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { _, _ = admin.Exec(context.Background(), "ALTER ROLE "+role+" LOGIN") }()
	u, _ := url.Parse(base)
	u.User = url.User(role)
	seen := make(chan string, 64)
	var gws []*testGW
	for i, dbURL := range []string{u.String(), base} {
		dir := t.TempDir()
		pgURLs.Store(dir, dbURL)
		gws = append(gws, newTestGatewayIn(t, dir, replicaConfig, replicaModel(seen), func(c *config.Config) {
			c.Gateway.ReplicaID = fmt.Sprintf("gw-%d", i)
			// While gw-0 may not log in it renews its lease on the pool
			// connections it has; a long lease keeps a loaded machine's
			// slow window from costing it the lease (nothing here waits
			// for a takeover).
			c.State.LeaseSeconds = 10
		}))
	}
	a, b := gws[0], gws[1]
	db := openTestStore(t, b.StateDir)
	defer db.Close()

	// gw-0 runs a turn that hangs and two sub-agents that hang.
	webPost(t, a.URL, "ann", "hang")
	waitSeen(t, seen, "hang")
	webPost(t, a.URL, "sam", "spawn two")
	waitSeen(t, seen, "wait a long time")
	waitSeen(t, seen, "wait a long time")
	runs, err := db.ListRuns(ctx, store.RunFilter{Statuses: []string{store.StatusRunning}})
	if err != nil || len(runs) != 2 {
		t.Fatalf("two running runs expected, have %+v, %v", runs, err)
	}

	// A web client whose event stream is open on gw-0 and whose turns run
	// on gw-1: gw-0 learns of its new entries only from gw-1's NOTIFY.
	stream := openEvents(t, a.URL, "cid")

	// gw-0 loses its listener and cannot listen again for now.
	login(false)
	listeners := func() int {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND application_name = $2`,
			role, store.ListenerName).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := listeners(); n != 1 {
		t.Fatalf("gw-0 has %d listeners, want 1", n)
	}
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1 AND application_name = $2`,
		role, store.ListenerName); err != nil {
		t.Fatal(err)
	}
	if !waitFor(e2eWait, func() bool { return listeners() == 0 }) {
		t.Fatal("gw-0's listener did not end")
	}

	// The stops, sent to gw-1 meanwhile: told over NOTIFY, which gw-0
	// cannot hear now.
	webPost(t, b.URL, "ann", "/stop")
	waitText(t, b, "ann", "⚙️ Agent was aborted. Stopped 0 sub-agents.")
	webPost(t, b.URL, "sam", "/subagents stop all")
	waitText(t, b, "sam", "⚙️ Stopped 2 subagents.")
	webPost(t, b.URL, "cid", "while gw-0 is deaf")
	waitText(t, b, "cid", "plain answer to: while gw-0 is deaf")
	login(true)

	// Once gw-0 listens again its streams read what they missed.
	deadline := time.After(e2eWait)
	for shown := false; !shown; {
		select {
		case ev, ok := <-stream:
			if !ok {
				t.Fatal("gw-0's event stream ended")
			}
			shown = ev.Name == "" && strings.Contains(ev.Data, "plain answer to: while gw-0 is deaf")
		case <-deadline:
			t.Fatal("gw-0's event stream never showed the reply written on gw-1 while gw-0 had no listener")
		}
	}

	// The turn was cut: the next message is answered.
	webPost(t, b.URL, "ann", "after the stop")
	if got := waitText(t, b, "ann", "plain answer to:"); !strings.HasSuffix(got, "after the stop") {
		t.Errorf("the message after /stop got %q", got)
	}
	// The runs ended stopped.
	if !waitFor(e2eWait, func() bool {
		ended, err := db.ListRuns(ctx, store.RunFilter{Statuses: []string{store.StatusDone}})
		return err == nil && len(ended) == 2
	}) {
		t.Fatalf("the runs on gw-0 did not end after /subagents stop all on gw-1; %s", a.state(t))
	}
	for _, r := range runs {
		if got, err := db.GetRun(ctx, r.ID); err != nil || got.Outcome != store.OutcomeStopped {
			t.Errorf("run %s: %+v, %v; want outcome stopped", r.Label, got, err)
		}
	}
	if !waitFor(e2eWait, func() bool { return listeners() == 1 }) {
		t.Error("gw-0 did not listen again")
	}
}

// dropRole drops a role that a test made in the database at dbURL: what
// it owns there (gw-0 made the schema) is given to the test's own role
// first.
func dropRole(t *testing.T, dbURL, role string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Errorf("drop role %s: %v", role, err)
		return
	}
	defer admin.Close(context.Background())
	for _, q := range []string{"REASSIGN OWNED BY " + role + " TO CURRENT_USER", "DROP OWNED BY " + role, "DROP ROLE " + role} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Errorf("%s: %v", q, err)
			return
		}
	}
	var left int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_roles WHERE rolname = $1`, role).Scan(&left); err != nil || left != 0 {
		t.Errorf("role %s is still there (%d, %v)", role, left, err)
	}
}
