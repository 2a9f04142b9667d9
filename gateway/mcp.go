package gateway

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldhq/herald/agent/mcptools"
	"github.com/heraldhq/herald/agent/tools"
	"github.com/heraldhq/herald/config"
)

// newMCP builds the MCP server manager and its metrics; the servers start
// in Run (startMCP) and stop in shutdown.
func (g *Gateway) newMCP() {
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_mcp_calls_total",
		Help: "MCP tool calls by server."}, []string{"server"})
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_mcp_call_errors_total",
		Help: "MCP tool calls that failed, timed out or returned isError, by server."}, []string{"server"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "herald_mcp_call_seconds",
		Help: "MCP tool call latency by server.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}, []string{"server"})
	up := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "herald_mcp_server_up",
		Help: "1 when the MCP server is connected and its tools are offered."}, []string{"server"})
	for name, s := range g.cfg().MCP.Servers {
		if s.On() {
			calls.WithLabelValues(name)
			errs.WithLabelValues(name)
			up.WithLabelValues(name)
		}
	}
	g.metrics.add(calls, errs, latency, up)
	g.mcp = mcptools.New(mcptools.Options{
		Logger:    g.log,
		MaxOutput: g.cfg().Tools.Exec.MaxOutputBytes,
		Sandbox:   tools.ExecSandbox(g.cfg().Tools.Exec),
		OnCall: func(server string, took time.Duration, failed bool) {
			calls.WithLabelValues(server).Inc()
			if failed {
				errs.WithLabelValues(server).Inc()
			}
			latency.WithLabelValues(server).Observe(took.Seconds())
		},
		OnState: func(server, state string) {
			v := 0.0
			if state == mcptools.StateUp {
				v = 1
			}
			up.WithLabelValues(server).Set(v)
		},
	})
}

// startMCP starts the configured MCP servers (in the background).
func (g *Gateway) startMCP() { g.mcp.Apply(g.cfg().MCP.Servers) }

// ApplyMCP makes the running MCP servers match servers (a reloaded config's
// mcp.servers): new ones start, removed or disabled ones stop, changed ones
// restart, unchanged ones keep running. Agents' mcpServers lists are read
// from the gateway's config on every turn.
func (g *Gateway) ApplyMCP(servers map[string]config.MCPServer) { g.mcp.Apply(servers) }

// MCPStatus reports every configured MCP server: state, error, tools.
func (g *Gateway) MCPStatus() []mcptools.ServerStatus { return g.mcp.Status() }

// mcpChecks adds one readiness check per MCP server. A server that is down
// degrades the gateway but does not make it unready: agents go on without
// its tools.
func (g *Gateway) mcpChecks(checks map[string]string) (degraded bool) {
	for _, st := range g.mcp.Status() {
		switch st.State {
		case mcptools.StateUp:
			checks["mcp:"+st.Name] = "ok"
		case mcptools.StateDisabled:
		default:
			degraded = true
			msg := st.State
			if st.Error != "" {
				msg += ": " + st.Error
			}
			checks["mcp:"+st.Name] = msg
		}
	}
	return degraded
}

// mcpList serves GET /mcp: every MCP server's status and tools (herald mcp
// list reads it).
func (g *Gateway) mcpList(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"servers": g.mcp.Status()})
}
