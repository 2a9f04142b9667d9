package main

import (
	"net/http"
	"testing"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/devtools/loopback"
)

// TestPprofRefusesForeignHost (issue 35): --pprof answers only loopback
// Hosts, so a page of another site whose name it rebinds to 127.0.0.1
// (DNS rebinding) cannot read the gateway's profiles.
func TestPprofRefusesForeignHost(t *testing.T) {
	addr, err := loopback.Addr() // no other process takes its port meanwhile
	if err != nil {
		t.Fatal(err)
	}
	stop, err := startPprof(addr, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for host, want := range map[string]int{"": http.StatusOK, "rebind.example": http.StatusForbidden} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/debug/pprof/", nil)
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET /debug/pprof/ with Host %q: %s, want %d", host, resp.Status, want)
		}
	}
}
