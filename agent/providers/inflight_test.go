package providers

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/agent/tools"
	"github.com/heraldhq/herald/config"
)

// h2ModelEnv makes this test binary serve the fake model of
// BenchmarkCallsInFlight instead of running tests (see TestMain).
const h2ModelEnv = "HERALD_TEST_H2_MODEL_LATENCY"

func TestMain(m *testing.M) {
	if v := os.Getenv(h2ModelEnv); v != "" {
		serveH2Model(v)
		return
	}
	os.Exit(m.Run())
}

// serveH2Model serves an OpenAI fake over HTTP/2 TLS whose every answer
// waits latency; it prints its URL and certificate, answers GET /count with
// the number of model calls that arrived, and exits when stdin closes.
func serveH2Model(latency string) {
	d, err := time.ParseDuration(latency)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var arrived atomic.Int64
	answer := func(llmtest.Call) llmtest.Reply {
		arrived.Add(1)
		return llmtest.Reply{Text: "hello", Delay: d}
	}
	openAI, anthropic := llmtest.NewHandler(llmtest.APIOpenAI, answer, false), llmtest.NewHandler(llmtest.APIAnthropic, answer, false)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/count":
			fmt.Fprint(w, arrived.Load())
		case strings.HasPrefix(r.URL.Path, "/anthropic/"):
			r.URL.Path = strings.TrimPrefix(r.URL.Path, "/anthropic")
			anthropic.ServeHTTP(w, r)
		default:
			openAI.ServeHTTP(w, r)
		}
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	fmt.Printf("%s\n%s", srv.URL, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	_, _ = io.Copy(io.Discard, os.Stdin)
	srv.CloseClientConnections()
	os.Exit(0)
}

// startH2Model starts serveH2Model in a child process; it ends with the
// benchmark.
func startH2Model(tb testing.TB, latency time.Duration) (url string, client *http.Client) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), h2ModelEnv+"="+latency.String())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	r := bufio.NewReader(stdout)
	line, err := r.ReadString('\n')
	if err != nil {
		tb.Fatalf("fake model: %v", err)
	}
	url = strings.TrimSpace(line)
	var cert strings.Builder
	for !strings.HasPrefix(line, "-----END") {
		if line, err = r.ReadString('\n'); err != nil {
			tb.Fatalf("fake model: %v", err)
		}
		cert.WriteString(line)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cert.String())) {
		tb.Fatalf("fake model: no certificate in %q", cert.String())
	}
	// The transport of a configured provider, trusting the fake's
	// certificate: HTTP/2 over TLS as with a real provider.
	t := transportFor(0)
	t.TLSClientConfig = &tls.Config{RootCAs: pool}
	return url, &http.Client{Transport: t}
}

// BenchmarkCallsInFlight reports what a model call waiting for its answer
// holds: goroutine stack and heap bytes per call, with 1,000 streamed
// calls (Chat Completions, Anthropic Messages) in flight at once over
// HTTP/2 TLS, each made by agent.Session.Run on a goroutine of its own
// with the built-in tools.
// The fake model runs in a child process, so only the gateway side is
// counted: the caller's goroutine (its stack holds every frame down to
// net/http's roundTrip while it waits), net/http's per-stream
// writeRequest goroutine, and the heap both hold. docs/performance.md,
// "memory per model call in flight".
func BenchmarkCallsInFlight(b *testing.B) {
	const calls = 1000
	url, client := startH2Model(b, 5*time.Second)
	count := func() int {
		resp, err := client.Get(url + "/count")
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		n, err := strconv.Atoi(string(body))
		if err != nil {
			b.Fatalf("count: %q", body)
		}
		return n
	}
	for _, bc := range []struct{ api, base string }{{APIOpenAICompatible, url + "/v1"}, {APIAnthropic, url + "/anthropic"}} {
		b.Run(bc.api, func(b *testing.B) {
			p, err := New("bench", config.Provider{API: bc.api, BaseURL: bc.base, APIKey: "k", Models: []config.Model{{ID: "m"}}},
				Options{HTTPClient: client, MaxRetries: -1})
			if err != nil {
				b.Fatal(err)
			}
			model := &agent.Model{Ref: "bench/m", ProviderID: "bench", ID: "m", API: bc.api, Provider: p}
			// The built-in tools, as a sub-agent's first request sends
			// them (~3.5 KB of their ~7 KB of schemas).
			reg := agent.NewRegistry(tools.New(tools.Options{})...)
			var stack, heap float64
			b.ResetTimer()
			for round := range b.N {
				var before, during runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				start := count()
				var wg sync.WaitGroup
				var failed atomic.Int64
				for i := range calls {
					wg.Go(func() {
						s := &agent.Session{Key: fmt.Sprintf("bench:%d:%d", round, i)}
						res, err := s.Run(context.Background(), agent.Turn{Model: model, System: "You are a benchmark.", Tools: reg, OnText: func(string) {}}, "say hello")
						if err != nil || res.Text != "hello" {
							failed.Add(1)
						}
					})
				}
				deadline := time.Now().Add(30 * time.Second)
				for count() < start+calls {
					if time.Now().After(deadline) {
						b.Fatalf("only %d of %d calls reached the model", count()-start, calls)
					}
					time.Sleep(20 * time.Millisecond)
				}
				// Collections shrink stacks that grew past what their
				// goroutine holds now; two, as the gateway has in a call's
				// wait.
				runtime.GC()
				runtime.GC()
				runtime.ReadMemStats(&during)
				stack += float64(during.StackInuse) - float64(before.StackInuse)
				heap += float64(during.HeapInuse) - float64(before.HeapInuse)
				wg.Wait()
				if n := failed.Load(); n > 0 {
					b.Fatalf("%d of %d calls failed", n, calls)
				}
			}
			b.ReportMetric(stack/float64(b.N*calls), "stack-B/call")
			b.ReportMetric(heap/float64(b.N*calls), "heap-B/call")
		})
	}
}
