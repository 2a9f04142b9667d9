package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/gateway"
)

// BenchmarkTracedMessage is the gateway's CPU per inbound message with
// tracing off, on at sampleRatio 1 and on at 0. Each message comes in by
// the web API ("spawn 1 researcher on …", the demo model answering at
// once) and makes 11 spans: intake, turn, two model calls and one
// sessions_spawn call of the turn, the run with its two model calls, and
// the delivery of the reply and of the announce. b.N messages from 64
// conversations; the benchmark waits until every reply and announce is
// delivered. The collector is a stub that reads and drops each export, so
// its decoding is not counted; "file" writes the traces file instead.
func BenchmarkTracedMessage(b *testing.B) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	for _, bc := range []struct{ name, telemetry string }{
		{"off", `{}`},
		{"ratio1", fmt.Sprintf(`{ otlp: { endpoint: %q }, sampleRatio: 1.0 }`, collector.URL)},
		{"ratio0", fmt.Sprintf(`{ otlp: { endpoint: %q }, sampleRatio: 0.0 }`, collector.URL)},
		{"file", `{ traces: { file: "traces.jsonl" } }`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			g, base := benchGateway(b, bc.telemetry)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			cpu0, start := rusageCPU(b), time.Now()
			b.ResetTimer()
			for i := range b.N {
				benchPost(b, client, base, fmt.Sprintf("b%d", i%64), fmt.Sprintf("spawn 1 researcher on topic %d", i))
			}
			deadline := time.Now().Add(5 * time.Minute)
			for {
				p, d, f, err := g.Store().OutboxStats(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				if d+f >= 2*b.N && p == 0 {
					if f > 0 {
						b.Fatalf("%d messages failed", f)
					}
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("outbox: %d pending, %d delivered, want %d delivered", p, d, 2*b.N)
				}
				time.Sleep(5 * time.Millisecond)
			}
			b.StopTimer()
			cpu := rusageCPU(b) - cpu0
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/msg")
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}

// benchGateway runs a gateway with the web chat, the demo model and the
// given telemetry section until the benchmark ends.
func benchGateway(b *testing.B, telemetry string) (*gateway.Gateway, string) {
	b.Helper()
	return benchGatewayOf(b, `{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { demo: { api: "demo", models: [{ id: "demo" }] } } },
  agents: { defaults: { model: "demo/demo", maxConcurrent: 8,
    subagents: { maxConcurrent: 8, maxChildrenPerSession: 1000000, maxTotalSpawns: 1000000 } }, list: [{ id: "main" }] },
  channels: { web: { enabled: true, rateLimit: { perMinute: 1000000, burst: 1000000 } } },
  telemetry: `+telemetry+`,
}`)
}

// benchGatewayOf runs a gateway configured by src until the benchmark
// ends.
func benchGatewayOf(b *testing.B, src string) (*gateway.Gateway, string) {
	b.Helper()
	cfg, err := config.Parse("bench.json5", []byte(src), func(string) (string, bool) { return "", false })
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	g, err := gateway.New(context.Background(), gateway.Options{Config: cfg, StateDir: filepath.Join(dir, "state"), Listener: ln, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		<-done
	})
	base := "http://" + g.Addr()
	for deadline := time.Now().Add(20 * time.Second); ; {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("gateway not ready: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		b.Fatalf("gateway on %s", base)
	}
	return g, base
}

// benchPost posts text from the web client to the gateway at base.
func benchPost(b *testing.B, client *http.Client, base, from, text string) {
	body, _ := json.Marshal(map[string]string{"client": from, "text": text})
	resp, err := client.Post(base+"/api/messages", "application/json", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		b.Fatalf("POST /api/messages: %s", resp.Status)
	}
}

// rusageCPU is the user+system CPU time this process has used.
func rusageCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
