package admin_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/admin"
	"github.com/heraldhq/herald/store"
)

// countingStore counts the console's snapshots (one dead-outbox read each)
// and fingerprints (one owed-intake read each, when no run is active).
type countingStore struct {
	*store.DB
	snapshots, fingerprints atomic.Int64
}

func (s *countingStore) OutboxInState(ctx context.Context, state string, limit int) ([]store.OutboxItem, error) {
	if state == store.OutboxDead {
		s.snapshots.Add(1)
	}
	return s.DB.OutboxInState(ctx, state, limit)
}

func (s *countingStore) OwedIntake(ctx context.Context) ([]store.Intake, error) {
	s.fingerprints.Add(1)
	return s.DB.OwedIntake(ctx)
}

// changingLive is a gateway whose change notices the test sends.
type changingLive struct {
	idleLive
	changed chan struct{}
}

func (l changingLive) Changed() (<-chan struct{}, func()) { return l.changed, func() {} }

const poll = 40 * time.Millisecond

func streamServer(t *testing.T, live admin.Live) (*countingStore, *httptest.Server) {
	t.Helper()
	db, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cs := &countingStore{DB: db}
	c := admin.New(admin.Options{Store: cs, Live: live})
	admin.SetPoll(c, poll)
	mux := http.NewServeMux()
	for p, h := range c.Routes() {
		mux.Handle(p, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { c.EndStreams(); srv.Close() })
	return cs, srv
}

// openStream opens an event stream and reads past its first snapshot.
func openStream(t *testing.T, srv *httptest.Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/admin/api/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatal(resp, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	rd := bufio.NewReader(resp.Body)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "event: outbox") {
			return
		}
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never happened: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEventsRebuildOnceAfterAChange: a change notice rebuilds the snapshot
// once; the looks after it, with nothing changed, do not rebuild it again.
func TestEventsRebuildOnceAfterAChange(t *testing.T) {
	live := changingLive{changed: make(chan struct{}, 1)}
	cs, srv := streamServer(t, live)
	openStream(t, srv)
	if n := cs.snapshots.Load(); n != 1 {
		t.Fatalf("%d snapshots after opening, want 1", n)
	}
	live.changed <- struct{}{}
	waitUntil(t, "the snapshot after the change", func() bool { return cs.snapshots.Load() == 2 })
	looks := cs.fingerprints.Load()
	waitUntil(t, "three more looks", func() bool { return cs.fingerprints.Load() >= looks+3 })
	if n := cs.snapshots.Load(); n != 2 {
		t.Errorf("%d snapshots, want 2: the looks after the change rebuilt it with nothing changed", n)
	}
}

// TestEventsShareTheSnapshot: with a run active (every look rebuilds), four
// open streams build one snapshot per look between them, not four.
func TestEventsShareTheSnapshot(t *testing.T) {
	cs, srv := streamServer(t, idleLive{})
	ctx := context.Background()
	key := "agent:main:web:dm:x"
	run := &store.Run{ID: "run-1", RequesterKey: key, AgentID: "main", Task: "task", Status: store.StatusRunning, CreatedAt: time.Now()}
	if err := cs.CreateRun(ctx, run, &store.Session{Key: "agent:main:subagent:run-1", ID: "s-run-1"}); err != nil {
		t.Fatal(err)
	}
	const streams, builds = 4, 12
	for range streams {
		openStream(t, srv)
	}
	start, first := time.Now(), cs.snapshots.Load()
	waitUntil(t, "more snapshots", func() bool { return cs.snapshots.Load() >= first+builds })
	looks := int64(time.Since(start)/poll) + 2
	if n := cs.snapshots.Load() - first; n > looks+2 {
		t.Errorf("%d snapshots in %d looks of %d streams, want one a look", n, looks, streams)
	}
}
