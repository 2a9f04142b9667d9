package gateway

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/heraldhq/herald/channels"
)

func (g *Gateway) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", g.readyz)
	mux.HandleFunc("GET /mcp", g.mcpList)
	mux.Handle("GET /metrics", g.metricsAuth(promhttp.HandlerFor(g.metrics.reg, promhttp.HandlerOpts{})))
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
	if _, _, _, err := g.db.OutboxStats(ctx); err != nil {
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

// metricsAuth guards /metrics (SPEC §13): on a listener that is not
// loopback it needs the web token (Bearer or ?token=), like the web API;
// without a token configured it is refused there.
func (g *Gateway) metricsAuth(h http.Handler) http.Handler {
	if g.cfg().ListenerIsLoopback() {
		return h
	}
	token := strings.TrimSpace(g.cfg().Channels.Web.Token.Value())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := strings.TrimSpace(r.URL.Query().Get("token"))
		if scheme, rest, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
			got = strings.TrimSpace(rest)
		}
		if token == "" || got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="herald"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "/metrics needs the web token (channels.web.token) when the listener is not loopback"})
			return
		}
		h.ServeHTTP(w, r)
	})
}
