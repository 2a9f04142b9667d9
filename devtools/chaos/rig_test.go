package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/devtools/harness"
)

// rig is what every test here needs: a herald binary built from the tree,
// the scripted fake model, a loopback address, a config and a state dir.
type rig struct {
	t                          *testing.T
	ctx                        context.Context
	bin                        string
	model                      *harness.Model
	addr                       string
	cfgPath, stateDir, logPath string
}

// newRig builds the binary, starts the model with latency, and writes the
// config cfg (Listen and ModelURL are filled in). It skips under -short.
func newRig(t *testing.T, latency time.Duration, cfg harness.Config) *rig {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped with -short: runs real gateway processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	t.Cleanup(cancel)
	dir := t.TempDir()
	bin, err := harness.BuildOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	model, err := harness.StartModel(harness.ModelOptions{Latency: latency})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, ctx: ctx, bin: bin, model: model, addr: addr,
		cfgPath: filepath.Join(dir, "herald.json5"), stateDir: filepath.Join(dir, "state"), logPath: filepath.Join(dir, "gateway.log")}
	cfg.Listen, cfg.ModelURL = addr, model.URL
	if err := cfg.Write(r.cfgPath); err != nil {
		t.Fatal(err)
	}
	return r
}

// start starts a gateway and waits until it is ready; it is killed at the
// end of the test if still running.
func (r *rig) start() *harness.Gateway {
	r.t.Helper()
	gw, err := harness.StartGateway(r.bin, r.cfgPath, r.stateDir, r.logPath, "http://"+r.addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = gw.Kill() })
	if err := gw.WaitReady(r.ctx); err != nil {
		r.t.Fatal(err)
	}
	return gw
}

// waitUntil polls cond until it holds, or fails the test with the log tail.
func (r *rig) waitUntil(what string, cond func() bool) {
	r.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s; gateway log:\n%s", what, r.tail(30))
		}
	}
}

// tail is the end of the gateway log.
func (r *rig) tail(n int) string {
	b, _ := os.ReadFile(r.logPath)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// metric reads one sample from a gateway's /metrics (-1 when absent).
func metric(t *testing.T, base, sample string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}
