package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/web"
)

func (g *Gateway) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", g.readyz)
	mux.Handle("GET /mcp", g.guarded(http.HandlerFunc(g.mcpList)))
	mux.Handle("GET /metrics", g.metricsAuth(g.metrics.handler()))
	// The operator's console, a peer of the web chat (SPEC §27).
	if g.console == nil {
		g.console = g.newConsole()
	}
	for pattern, h := range g.console.Routes() {
		mux.Handle(pattern, h)
	}
	for _, ch := range g.channelSet() {
		if m, ok := ch.(channels.HTTPMounter); ok {
			for pattern, h := range m.Routes() {
				mux.Handle(pattern, h)
			}
		}
	}
	return mux
}

// readyz reports the store and every channel's health.
func (g *Gateway) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{}
	ready := true
	if err := g.db.Check(ctx); err != nil {
		checks["store"] = err.Error()
		ready = false
	} else {
		checks["store"] = "ok"
	}
	chans := g.channelSet()
	names := make([]string, 0, len(chans))
	for n := range chans {
		names = append(names, string(n))
	}
	sort.Strings(names)
	for _, n := range names {
		status := "ok"
		if !g.cluster.runs(channels.Name(n)) {
			// One replica at a time runs it; this one stands by.
			checks["channel:"+n] = "standby: runs on replica " + cmp.Or(g.cluster.holder(ctx, channels.Name(n)), "(being elected)")
			continue
		}
		if h, ok := chans[channels.Name(n)].(channels.Healther); ok {
			if err := h.Health(); err != nil {
				status = err.Error()
				ready = false
			}
		}
		up := 1.0
		if status != "ok" {
			up = 0
		}
		g.metrics.channelUp.WithLabelValues(n).Set(up)
		checks["channel:"+n] = status
	}
	phase, reason := g.phase.get()
	if phase != phaseRunning {
		// Standing by for the replica lease, or starting (MCP servers'
		// first connection attempts, owed turns): not ready for traffic.
		ready = false
		checks["gateway"] = phase + ": " + reason
	}
	code := http.StatusOK
	if !ready {
		code = http.StatusServiceUnavailable
	}
	if !g.webGuard().Allows(r) {
		// The bare status stays open for load balancers; what is up or
		// down, and why, follows the web API's guard (SPEC §17).
		writeJSON(w, code, map[string]any{"ready": ready, "status": phase})
		return
	}
	body := map[string]any{"ready": ready, "status": phase, "checks": checks, "replicaId": g.cluster.id}
	if g.mcpChecks(checks) {
		body["degraded"] = true
	}
	writeJSON(w, code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// webGuard is the web API's access check on the current config: a foreign
// Host refused on loopback without a token, the token (Authorization:
// Bearer or the page's cookie; never a URL off loopback) otherwise.
func (g *Gateway) webGuard() web.Guard {
	cfg := g.cfg()
	return web.Guard{Token: strings.TrimSpace(cfg.Channels.Web.Token.Value()), OffLoopback: !cfg.ListenerIsLoopback()}
}

// guarded puts h behind the web API's guard (/mcp, SPEC §17).
func (g *Gateway) guarded(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.webGuard().Wrap(h).ServeHTTP(w, r) })
}

// metricsAuth guards /metrics (SPEC §13): on a listener that is not
// loopback it needs the web token (Authorization: Bearer or the page's
// cookie, never ?token=), like the web API; without a token configured it
// is refused there.
func (g *Gateway) metricsAuth(h http.Handler) http.Handler {
	loopback := g.cfg().ListenerIsLoopback()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if loopback && !channels.Forwarded(r) {
			if !channels.LoopbackHost(r.Host) {
				// DNS rebinding: a page of another site whose name now
				// resolves to 127.0.0.1 sends its own Host (issue 35).
				writeJSON(w, http.StatusForbidden, map[string]string{"error": "/metrics on a loopback listener answers only Host localhost, 127.0.0.1 or [::1]"})
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		// Off loopback, or through a proxy (gateway.http.behindProxy, or a
		// Forwarded / X-Forwarded-For header on a loopback listener).
		guard := g.webGuard()
		if guard.Token == "" || !guard.Allows(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="herald"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "/metrics needs the web token (channels.web.token) in \"Authorization: Bearer <token>\" when the listener is not loopback or the request came through a proxy"})
			return
		}
		h.ServeHTTP(w, r)
	})
}
