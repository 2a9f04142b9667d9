package gateway

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent/mcptools"
)

// Start-up phases (SPEC §13, §15). The HTTP listener serves from the start
// of Run, so a supervisor and a load balancer can tell a replica that waits
// from one that is gone:
//
//   - standby: joining the replicas — the replica lease of this
//     gateway.replicaId is held by another live process (it takes over when
//     that one ends) or the database does not answer yet;
//   - starting: joined; every enabled MCP server gets its first connection
//     attempt (each within 2 × its timeoutSeconds) before owed turns, queued
//     sub-agent runs and the channels start, so that turns see their tools;
//   - running.
//
// Until running, /readyz answers 503 with the phase and why, and every path
// but /healthz, /readyz, /metrics and /mcp answers 503 with Retry-After, so
// no message is taken that could not be answered with its tools.
const (
	phaseStandby  = "standby"
	phaseStarting = "starting"
	phaseRunning  = "running"
)

// startRetry is what a client refused during start-up is asked to wait.
const startRetry = 5 * time.Second

type phase struct {
	mu     sync.Mutex
	name   string
	reason string
}

func (p *phase) set(name, reason string) {
	p.mu.Lock()
	p.name, p.reason = name, reason
	p.mu.Unlock()
}

func (p *phase) get() (name, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.name, p.reason
}

// gated serves h once the gateway runs; before, only the operator paths.
func (g *Gateway) gated(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name, reason := g.phase.get(); name != phaseRunning {
			switch r.URL.Path {
			case "/healthz", "/readyz", "/metrics", "/mcp":
			default:
				w.Header().Set("Retry-After", "5")
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": name,
					"error": "the gateway is " + name + " (" + reason + "); try again in a few seconds"})
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// waitTools waits until every enabled MCP server has had its first
// connection attempt (bounded per server), and reports those that failed
// it or did not finish it: turns go on without their tools meanwhile.
func (g *Gateway) waitTools(ctx context.Context) {
	var on []string
	for name, s := range g.cfg().MCP.Servers {
		if s.On() {
			on = append(on, name)
		}
	}
	if len(on) == 0 {
		return
	}
	g.phase.set(phaseStarting, "waiting for the first connection attempt of MCP servers "+strings.Join(on, ", "))
	start := time.Now()
	late := g.mcp.WaitFirstAttempts(ctx)
	for _, st := range g.mcp.Status() {
		switch {
		case st.State == mcptools.StateUp:
		case st.State == mcptools.StateDisabled:
		case contains(late, st.Name):
			g.log.Warn("MCP server did not finish its first connection attempt in time; turns start without its tools (retried in the background)",
				zap.String("server", st.Name), zap.Duration("waited", time.Since(start).Round(time.Millisecond)))
		default:
			g.log.Warn("MCP server failed its first connection attempt; turns start without its tools (retried in the background)",
				zap.String("server", st.Name), zap.String("error", st.Error))
		}
	}
	g.log.Info("MCP servers had their first connection attempt", zap.Int("servers", len(on)),
		zap.Duration("took", time.Since(start).Round(time.Millisecond)))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
