package gateway

import (
	"context"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/admin"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent"
)

// The operator's console (SPEC §27) is its own package, a peer of the web
// chat on the HTTP listener; the gateway is its Live: what only the
// running process knows, and the actions that need it.

// consoleLive is the Gateway as the console's Live.
type consoleLive struct{ g *Gateway }

var _ admin.Live = consoleLive{}

// newConsole builds the console on the config New started with (the
// token is read anew at every request).
func (g *Gateway) newConsole() *admin.Console {
	cfg := g.cfg()
	return admin.New(admin.Options{
		Token:       func() string { return g.cfg().Gateway.Admin.Token.Value() },
		OffLoopback: !cfg.ListenerIsLoopback(),
		BehindProxy: cfg.Gateway.HTTP.BehindProxy,
		Store:       consoleStore{g.db, g.subs},
		Live:        consoleLive{g},
		Log:         g.log,
		Now:         g.clock.Now,
	})
}

// consoleStore is the state as the console reads it: a run live on this
// replica shows its in-memory status, note, start, tokens and waits, as
// /subagents list shows it — "announcing" and a run's tokens so far are
// not in the store while it runs alone (subagent: only other replicas
// read them there).
type consoleStore struct {
	store.Store
	subs *subagent.Manager
}

func (s consoleStore) ListRuns(ctx context.Context, f store.RunFilter) ([]store.Run, error) {
	runs, err := s.Store.ListRuns(ctx, f)
	if err == nil && s.subs != nil {
		s.subs.Overlay(runs)
	}
	return runs, err
}

func (s consoleStore) GetRun(ctx context.Context, id string) (*store.Run, error) {
	r, err := s.Store.GetRun(ctx, id)
	if err != nil || s.subs == nil {
		return r, err
	}
	runs := []store.Run{*r}
	s.subs.Overlay(runs)
	return &runs[0], nil
}

func (l consoleLive) Status(ctx context.Context) admin.Status {
	g := l.g
	st := admin.Status{Version: version(), Replica: g.cluster.id, Channels: []admin.Channel{}, MCP: []any{}, ACP: []any{},
		Cluster: []admin.Member{}, Lanes: []admin.Lane{}}
	chans := g.channelSet()
	names := make([]string, 0, len(chans))
	for n := range chans {
		names = append(names, string(n))
	}
	slices.Sort(names)
	held := map[string][]string{} // replica → leases
	for _, n := range names {
		c := admin.Channel{Name: n, State: "up"}
		switch h, ok := chans[channels.Name(n)].(channels.Healther); {
		case !g.cluster.runs(channels.Name(n)):
			c.State = "standby"
		case ok:
			if err := h.Health(); err != nil {
				c.State, c.Error = "down", err.Error()
			}
		}
		st.Channels = append(st.Channels, c)
		if l, err := g.db.GetLease(ctx, "channel:"+n); err == nil && l.ExpiresAt.After(time.Now()) {
			held[l.Holder] = append(held[l.Holder], "channel:"+n)
		}
	}
	if g.mcp != nil {
		for _, s := range g.mcp.Status() {
			st.MCP = append(st.MCP, s)
		}
	}
	cfg := g.cfg()
	for _, id := range cfg.ACPAgents() {
		rt, _ := cfg.ACP(id)
		st.ACP = append(st.ACP, admin.ACPAgent{Name: id, Command: rt.Command, Network: rt.Network})
	}
	members, _ := g.db.LiveReplicas(ctx)
	if !slices.Contains(members, g.cluster.id) {
		members = append(members, g.cluster.id)
	}
	for _, id := range members {
		st.Cluster = append(st.Cluster, admin.Member{ID: id, Leases: append([]string{}, held[id]...), Self: id == g.cluster.id})
	}
	q, r := g.mainLane.Stats()
	st.Lanes = append(st.Lanes, admin.Lane{Name: "main", Running: r, Queued: q})
	if g.subs != nil {
		q, r := g.subs.Lane().Stats()
		st.Lanes = append(st.Lanes, admin.Lane{Name: "subagent", Running: r, Queued: q})
	}
	return st
}

func (l consoleLive) StopRun(ctx context.Context, runID string) int { return l.g.subs.Stop(ctx, runID) }

// consoleSendWait is how long a console Send waits for the run's reply (as
// sessions_send's default).
const consoleSendWait = 30 * time.Second

func (l consoleLive) SendRun(ctx context.Context, run *store.Run, message string) admin.SendResult {
	r := l.g.subs.Send(ctx, run, message, consoleSendWait)
	return admin.SendResult{Status: r.Status, Reply: r.Reply, Error: r.Error}
}

func (l consoleLive) Schedule(ctx context.Context, id, action string) (string, error) {
	if l.g.sched == nil {
		return "", store.ErrNotFound
	}
	return l.g.sched.Operate(ctx, id, action)
}

func (l consoleLive) WakeOutbox() { l.g.outbox.wakeUp() }

func (l consoleLive) Budgets() config.Budgets { return l.g.cfg().Budgets }

func (l consoleLive) Changed() (<-chan struct{}, func()) { return l.g.watchers.watch() }

// watchers are the console's event streams waiting for a change here.
type watchers struct {
	mu   sync.Mutex
	subs map[chan struct{}]bool
}

func (w *watchers) watch() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	if w.subs == nil {
		w.subs = map[chan struct{}]bool{}
	}
	w.subs[ch] = true
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		delete(w.subs, ch)
		w.mu.Unlock()
	}
}

// changed tells every stream that runs, the outbox or the intake changed
// (never waits: a signal already pending stands for both).
func (w *watchers) changed() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.subs {
		nudge(ch)
	}
}

// version is buildVersion, read once: the build info does not change.
var version = sync.OnceValue(buildVersion)

// buildVersion is the module version and short VCS revision.
func buildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 7 {
			v = strings.TrimSpace(v + " " + s.Value[:7])
		}
	}
	if v == "" {
		return "devel"
	}
	return v
}
