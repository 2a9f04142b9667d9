package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
)

// startPprof serves net/http/pprof on addr for profiling a running gateway
// (`herald gateway --pprof 127.0.0.1:6060`, see docs/performance.md). It
// refuses anything but a loopback address: profiles show memory contents.
// The returned stop shuts the listener down within a second.
func startPprof(addr string, log *zap.Logger) (stop func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof %q: %v", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--pprof %q: only a loopback address is allowed (e.g. 127.0.0.1:6060)", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// Only loopback Hosts: a page of another site that rebinds its name
	// to 127.0.0.1 (DNS rebinding) sends its own Host (issue 35).
	guarded := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !channels.LoopbackHost(r.Host) {
			http.Error(w, "pprof answers only Host localhost, 127.0.0.1 or [::1]", http.StatusForbidden)
			return
		}
		mux.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: guarded, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof listener stopped", zap.Error(err))
		}
	}()
	log.Info("pprof listening", zap.String("addr", ln.Addr().String()))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}
