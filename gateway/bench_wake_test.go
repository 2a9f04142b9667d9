package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/gateway"
	"github.com/heraldhq/herald/store"
)

// BenchmarkWake is the gateway's CPU per wake (SPEC §23, issue 36): b.N
// conversations (web API) each say "spawn <announce>"; the model spawns
// one child with that announce and answers "started". Untimed, until
// every "started" is delivered, the children wait in their first model
// call. Timed: they are released and answer at once; with "parent" each
// child's end adds a wake and its parent is woken with the result — one
// more turn (the fold, a model call, the reply delivered); with "silent"
// the result only goes into the parent's history. cpu-ms/op is
// getrusage's user+system time of the whole process per child from the
// release until every child has ended (and, with "parent", every wake's
// reply delivered) — the fake Anthropic API in the same process included
// — so parent − silent is the CPU of one wake (its intake row and claim,
// the woken turn with its model call, the reply's delivery).
//
//	go test -tags goolm -run '^$' -bench BenchmarkWake -benchtime 400x ./gateway
func BenchmarkWake(b *testing.B) {
	for _, announce := range []string{"parent", "silent"} {
		b.Run(announce, func(b *testing.B) {
			var woken atomic.Int64
			release := make(chan struct{})
			llm := llmtest.NewAnthropic(b, func(c llmtest.Call) llmtest.Reply {
				last := c.LastUser()
				switch {
				case strings.Contains(c.System, "Sub-agent context"):
					if strings.Contains(last, "Announce step") {
						return llmtest.Reply{Text: "Result:\ndone\n\nNotes:\n(none)"}
					}
					select {
					case <-release:
					case <-time.After(5 * time.Minute):
					}
					return llmtest.Reply{Text: "worked on it"}
				case len(c.Messages) > 0 && c.Messages[len(c.Messages)-1].Role == agent.RoleTool:
					return llmtest.Reply{Text: "started"}
				case strings.HasPrefix(last, "[sub-agent result]"):
					woken.Add(1)
					return llmtest.Reply{Text: "woken"}
				}
				args, _ := json.Marshal(map[string]string{"task": "look into it", "label": "child", "announce": strings.TrimPrefix(last, "spawn ")})
				return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn", Args: args}}}
			})
			g, base := benchGatewayOf(b, `{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "`+llm.URL+`", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m", maxConcurrent: 8,
    subagents: { maxConcurrent: 100000, maxChildrenPerSession: 1000000, maxTotalSpawns: 1000000 } }, list: [{ id: "main" }] },
  channels: { web: { enabled: true, rateLimit: { perMinute: 1000000, burst: 1000000 } } },
}`)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			for i := range b.N {
				benchPost(b, client, base, fmt.Sprintf("w%d", i), "spawn "+announce)
			}
			// delivered waits until n replies are delivered (and, with
			// ended, no run is live).
			delivered := func(n int, ended bool) {
				ctx := context.Background()
				for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
					p, d, f, err := g.Store().OutboxStats(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if f > 0 {
						b.Fatalf("%d messages failed", f)
					}
					if d >= n && p == 0 && (!ended || !liveRuns(b, g)) {
						return
					}
					if time.Now().After(deadline) {
						b.Fatalf("outbox: %d pending, %d delivered, want %d delivered (children ended: %v)", p, d, n, ended)
					}
				}
			}
			delivered(b.N, false) // every "started"
			replies := b.N
			if announce == "parent" {
				replies *= 2 // and every "woken"
			}
			runtime.GC()
			cpu0, start := rusageCPU(b), time.Now()
			b.ResetTimer()
			close(release)
			delivered(replies, true)
			b.StopTimer()
			cpu := rusageCPU(b) - cpu0
			if want := int64(replies - b.N); woken.Load() != want {
				b.Fatalf("%d wakes reached the model, want %d", woken.Load(), want)
			}
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
		})
	}
}

// liveRuns reports whether a sub-agent run is queued, running or
// announcing.
func liveRuns(tb testing.TB, g *gateway.Gateway) bool {
	runs, err := g.Store().ListRuns(context.Background(), store.RunFilter{
		Statuses: []string{store.StatusQueued, store.StatusRunning, store.StatusAnnouncing}, Limit: 1})
	if err != nil {
		tb.Fatal(err)
	}
	return len(runs) > 0
}
