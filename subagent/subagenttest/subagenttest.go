// Package subagenttest builds what a sub-agent Manager runs on, for tests: a
// validated config, a real store in a temp dir, a model catalog (the real SDK
// providers against a fake server, or any provider), a workspace and the
// built-in tools, plus waits on the store. It does not import package
// subagent, so subagent's own tests use it as well as the command and
// benchmark tests.
package subagenttest

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/providers"
	"github.com/heraldhq/herald/agent/tools"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

// Parts are a Manager's dependencies, ready to put in subagent.Deps.
type Parts struct {
	Config    *config.Config
	Store     *store.DB
	Catalog   *agent.Catalog
	Dir       string // the state dir
	Workspace string // every agent's workspace

	toolsOnce sync.Once
	tools     *agent.Registry
}

// New parses and validates the JSON5 config src, opens a store in a temp dir
// (closed at cleanup) and builds the catalog. newProvider nil means the real
// SDK providers with a 1 ms retry backoff, for a fake server at the config's
// baseUrl.
func New(tb testing.TB, src string, newProvider func(id string, p config.Provider) (agent.Provider, error)) *Parts {
	tb.Helper()
	cfg, err := config.Parse("test.json5", []byte(src), func(string) (string, bool) { return "", false })
	if err != nil {
		tb.Fatalf("config: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		tb.Fatalf("config: %v", err)
	}
	dir := tb.TempDir()
	db, err := store.Open(context.Background(), dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	if newProvider == nil {
		newProvider = func(id string, p config.Provider) (agent.Provider, error) {
			return providers.New(id, p, providers.Options{BackoffBase: time.Millisecond})
		}
	}
	cat, err := agent.NewCatalog(cfg, newProvider)
	if err != nil {
		tb.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		tb.Fatal(err)
	}
	return &Parts{Config: cfg, Store: db, Catalog: cat, Dir: dir, Workspace: ws}
}

// Tools gives every agent the built-in tools (subagent.Deps.Tools): one
// shared, read-only registry, as the gateway's is.
func (p *Parts) Tools(config.AgentSettings) *agent.Registry {
	p.toolsOnce.Do(func() { p.tools = agent.NewRegistry(tools.New(tools.Options{})...).Freeze() })
	return p.tools
}

// WorkspaceOf gives every agent the one workspace (subagent.Deps.Workspace).
func (p *Parts) WorkspaceOf(*config.Config, string) string { return p.Workspace }

// Shutdowner is what Stop needs of a Manager.
type Shutdowner interface{ Shutdown(context.Context) }

// StopAtCleanup shuts m down when the test ends, waiting at most 30 s (a
// loaded machine is slow to end runs; the store closes after this).
func StopAtCleanup(tb testing.TB, m Shutdowner) {
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
}

// FixedClock is a clock that stays at one time.
type FixedClock time.Time

func (c FixedClock) Now() time.Time { return time.Time(c) }

// WaitAnnounces waits up to 20 s until exactly n items are pending in the
// outbox and returns them; on a different count it logs every run and fails.
func WaitAnnounces(tb testing.TB, db *store.DB, n int) []store.OutboxItem {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		items, err := db.PendingOutbox(context.Background(), 1000)
		if err != nil {
			tb.Fatal(err)
		}
		if len(items) >= n || time.Now().After(deadline) {
			if len(items) != n {
				runs, _ := db.ListRuns(context.Background(), store.RunFilter{})
				for _, r := range runs {
					tb.Logf("run %s %s/%s note=%q", r.Task, r.Status, r.Outcome, r.Note)
				}
				tb.Fatalf("outbox has %d items, want %d", len(items), n)
			}
			return items
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WaitDone waits up to 20 s until the run has ended and returns it.
func WaitDone(tb testing.TB, db *store.DB, runID string) *store.Run {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		r, err := db.GetRun(context.Background(), runID)
		if err == nil && r.Status == store.StatusDone {
			return r
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.Fatalf("run %s did not end", runID)
	return nil
}
