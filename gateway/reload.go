package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/tools"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
)

// ReloadKey is the store key under which replica records the outcome of
// its last config reload (a ReloadResult as JSON), so `herald reload` can
// report what the gateway it signalled did; one per replica, as replicas
// share a PostgreSQL state.
func ReloadKey(replica string) string { return "config.reload:" + replica }

// ReloadResult is the outcome of one config reload.
type ReloadResult struct {
	Seq    int64     `json:"seq"` // increases with every reload attempt
	At     time.Time `json:"at"`
	Result string    `json:"result"` // "ok" or "rejected" (the old config is kept)
	// Errors say why a reload was rejected (config problems with
	// line:column, a provider or channel that cannot be built).
	Errors []string `json:"errors,omitempty"`
	// Changed names what the reload changed: "agents", "models",
	// "channels.slack (reconnected)", "mcp.servers", …
	Changed []string `json:"changed,omitempty"`
	// NeedsRestart names changed settings a reload cannot apply; they take
	// effect at the next start.
	NeedsRestart []string `json:"needsRestart,omitempty"`
}

// Reload re-reads the config with load and applies it without dropping
// running turns or runs: agents, models, tool policy, limits, bindings and
// MCP servers take effect for what starts next; a channel whose settings
// changed is reconnected, the others keep their connections. A config that
// does not load or validate, or whose providers or channels cannot be
// built, is rejected: its errors are logged and the old config stays.
// Reloads are serialised.
func (g *Gateway) Reload(ctx context.Context, load func() (*config.Config, error)) ReloadResult {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	if g.reloadClosed {
		return ReloadResult{Result: "rejected", Errors: []string{"the gateway is shutting down"}}
	}
	res := g.reload(ctx, load)
	res.At = g.clock.Now().UTC()
	g.metrics.reloads.WithLabelValues(res.Result).Inc()
	if res.Result == "ok" {
		g.log.Info("config reloaded", zap.Strings("changed", res.Changed), zap.Strings("needsRestart", res.NeedsRestart))
	} else {
		g.log.Error("config reload rejected; the old config stays", zap.Strings("errors", res.Errors))
	}
	g.recordReload(ctx, &res)
	return res
}

func (g *Gateway) reload(ctx context.Context, load func() (*config.Config, error)) ReloadResult {
	reject := func(errs ...string) ReloadResult { return ReloadResult{Result: "rejected", Errors: errs} }
	next, err := load()
	if err != nil {
		return reject(strings.Split(strings.TrimSpace(err.Error()), "\n")...)
	}
	old := g.cfg()

	// Build everything that can fail before anything is swapped.
	// Providers are built again on every reload: API keys set aside after
	// a 401/403 come back (SPEC §20).
	cat, err := agent.NewCatalog(next, g.newProvider)
	if err != nil {
		return reject(err.Error())
	}
	for _, a := range next.Agents.List {
		if err := os.MkdirAll(next.AgentWorkspace(a.ID, g.stateDir), tools.DirMode); err != nil {
			return reject(fmt.Sprintf("workspace of agent %s: %v", a.ID, err))
		}
	}
	type swap struct {
		name channels.Name
		ch   channels.Channel // nil: the channel was disabled
	}
	var swaps []swap
	var settled []string // channels whose change needs no reconnect
	for _, m := range channels.Modules() {
		name := m.Name
		o, n := old.Channels.Options(string(name)), next.Channels.Options(string(name))
		if !m.NeedsReconnect(o, n) {
			for _, k := range channels.ChangedKeys(o, n) {
				settled = append(settled, "channels."+string(name)+"."+k)
			}
			continue
		}
		ch, err := g.buildChannel(name, next)
		if err != nil {
			return reject(err.Error())
		}
		swaps = append(swaps, swap{name, ch})
	}

	// The config's schedules.list is stored before anything else changes:
	// one the store refuses (an id a chat schedule has) rejects the reload.
	if err := g.sched.SetConfig(ctx, next); err != nil {
		return reject("schedules: " + err.Error())
	}
	res := ReloadResult{Result: "ok"}
	changed := func(what string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			res.Changed = append(res.Changed, what)
		}
	}
	changed("agents", old.Agents, next.Agents)
	changed("models", old.Models, next.Models)
	changed("bindings", old.Bindings, next.Bindings)
	changed("tools", old.Tools, next.Tools)
	changed("security", old.Security, next.Security)
	changed("mcp.servers", old.MCP, next.MCP)
	changed("schedules", old.Schedules, next.Schedules)
	changed("gateway.shutdownGraceSeconds", old.Gateway.ShutdownGraceSeconds, next.Gateway.ShutdownGraceSeconds)
	res.Changed = append(res.Changed, settled...)
	restart := func(what string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			res.NeedsRestart = append(res.NeedsRestart, what)
		}
	}
	restart("gateway.http.listen", old.Gateway.HTTP.Listen, next.Gateway.HTTP.Listen)
	restart("gateway.http.behindProxy", old.Gateway.HTTP.BehindProxy, next.Gateway.HTTP.BehindProxy)
	restart("gateway.logLevel", old.Gateway.LogLevel, next.Gateway.LogLevel)
	restart("gateway.logFormat", old.Gateway.LogFormat, next.Gateway.LogFormat)
	restart("channels.web", old.Channels.Web, next.Channels.Web)
	restart("gateway.replicaId", old.Gateway.ReplicaID, next.Gateway.ReplicaID)
	restart("state", old.State, next.State)
	restart("telemetry", old.Telemetry, next.Telemetry)

	g.conf.Store(next)
	if cat != nil {
		g.catalog.Replace(cat)
	}
	g.setToolOptions(next)
	g.mainLane.SetMax(next.Agents.Defaults.MaxConcurrent)
	g.subs.SetConfig(next)
	g.spend.SetBudgets(next.Budgets)
	g.mcp.SetSandbox(tools.ExecSandbox(next.Tools.Exec))
	g.ApplyMCP(next.MCP.Servers)
	for _, s := range swaps {
		g.replaceChannel(ctx, s.name, s.ch)
		what := "channels." + string(s.name)
		switch {
		case s.ch == nil:
			what += " (stopped)"
		default:
			what += " (reconnected)"
		}
		res.Changed = append(res.Changed, what)
	}
	if len(swaps) > 0 {
		g.handler.Store(g.routes()) // webhook paths may have changed
	}
	slices.Sort(res.Changed)
	return res
}

// replaceChannel stops the running adapter of name (if any) and starts ch
// in its place (nil: the channel stays off). The stop is bounded by 5 s;
// messages for the channel wait in the outbox meanwhile.
func (g *Gateway) replaceChannel(ctx context.Context, name channels.Name, ch channels.Channel) {
	g.chMu.Lock()
	old, cancel := g.channels[name], g.chStop[name]
	delete(g.channels, name)
	delete(g.chStop, name)
	g.chMu.Unlock()
	if cancel != nil {
		cancel()
	}
	if old != nil {
		sctx, done := context.WithTimeout(ctx, 5*time.Second)
		if err := old.Stop(sctx); err != nil {
			g.log.Warn("channel stop on reload", zap.String("channel", string(name)), zap.Error(err))
		}
		done()
	}
	if ch == nil {
		g.metrics.channelUp.WithLabelValues(string(name)).Set(0)
		return
	}
	g.chMu.Lock()
	g.channels[name] = ch
	g.chMu.Unlock()
	g.launchChannel(ch)
	g.outbox.wakeUp() // messages that waited for the channel
}

// recordReload stores res under ReloadKey with the next sequence number.
func (g *Gateway) recordReload(ctx context.Context, res *ReloadResult) {
	key := ReloadKey(g.cluster.id)
	if prev, ok, err := g.db.GetKV(ctx, key); err == nil && ok {
		var p ReloadResult
		if json.Unmarshal([]byte(prev), &p) == nil {
			res.Seq = p.Seq
		}
	}
	res.Seq++
	b, err := json.Marshal(res)
	if err == nil {
		err = g.db.SetKV(ctx, key, string(b))
	}
	if err != nil {
		g.log.Warn("could not record the reload result", zap.Error(err))
	}
}

// LastReload returns the outcome of the last reload replica recorded in
// the store, and false when there was none.
func LastReload(ctx context.Context, db interface {
	GetKV(ctx context.Context, key string) (string, bool, error)
}, replica string) (ReloadResult, bool, error) {
	var res ReloadResult
	v, ok, err := db.GetKV(ctx, ReloadKey(replica))
	if err != nil || !ok {
		return res, false, err
	}
	if err := json.Unmarshal([]byte(v), &res); err != nil {
		return res, false, fmt.Errorf("%s: %w", ReloadKey(replica), err)
	}
	return res, true, nil
}
