package admin_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/admin"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

// idleLive is a gateway where nothing happens.
type idleLive struct{}

func (idleLive) Status(context.Context) admin.Status {
	return admin.Status{Version: "bench", Channels: []admin.Channel{{Name: "web", State: "up"}}, MCP: []any{}, ACP: []any{}, Cluster: []admin.Member{}, Lanes: []admin.Lane{}}
}
func (idleLive) StopRun(context.Context, string) int { return 0 }
func (idleLive) SendRun(context.Context, *store.Run, string) admin.SendResult {
	return admin.SendResult{Status: "error"}
}
func (idleLive) Schedule(context.Context, string, string) (string, error) {
	return "", store.ErrNotFound
}
func (idleLive) WakeOutbox()                        {}
func (idleLive) Budgets() config.Budgets            { return config.Budgets{} }
func (idleLive) Changed() (<-chan struct{}, func()) { return make(chan struct{}), func() {} }

// seeded opens a SQLite store with n conversations, each with one run (a
// tenth of them with a child run under it).
func seeded(b *testing.B, n int) *store.DB {
	b.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	t0 := time.Now().Add(-time.Hour)
	for i := range n {
		key := fmt.Sprintf("agent:main:telegram:dm:%d", i)
		o := channels.Origin{Channel: "telegram", ChatID: fmt.Sprint(i), ChatType: channels.ChatDM, SenderName: fmt.Sprintf("user %d", i)}
		if _, err := db.EnsureSession(ctx, &store.Session{Key: key, AgentID: "main", Origin: o}); err != nil {
			b.Fatal(err)
		}
		r := &store.Run{ID: fmt.Sprintf("run-%05d", i), RequesterKey: key, AgentID: "main", Task: "task", Label: fmt.Sprint("l", i),
			Status: store.StatusDone, Outcome: store.OutcomeSuccess, TokensIn: 100, TokensOut: 10, CostUSD: 0.01, CreatedAt: t0.Add(time.Duration(i) * time.Millisecond)}
		if err := db.CreateRun(ctx, r, &store.Session{Key: "agent:main:subagent:" + r.ID, ID: "s-" + r.ID}); err != nil {
			b.Fatal(err)
		}
		if i%10 == 0 {
			c := *r
			c.ID, c.RequesterKey, c.ChildKey = r.ID+"-c", "agent:main:subagent:"+r.ID, ""
			if err := db.CreateRun(ctx, &c, &store.Session{Key: "agent:main:subagent:" + c.ID, ID: "s-" + c.ID}); err != nil {
				b.Fatal(err)
			}
		}
	}
	return db
}

func serve(db *store.DB) *httptest.Server {
	c := admin.New(admin.Options{Store: db, Live: idleLive{}})
	mux := http.NewServeMux()
	for p, h := range c.Routes() {
		mux.Handle(p, h)
	}
	return httptest.NewServer(mux)
}

// BenchmarkConsoleAPI10k: GET runs and conversations (with and without a
// search) with 10,000 conversations and 11,000 runs (docs/performance.md).
func BenchmarkConsoleAPI10k(b *testing.B) {
	db := seeded(b, 10_000)
	srv := serve(db)
	defer srv.Close()
	for _, path := range []string{"runs", "runs?status=running", "conversations", "conversations?q=dm:9999", "overview", "outbox?state=dead"} {
		b.Run(path, func(b *testing.B) {
			for b.Loop() {
				resp, err := http.Get(srv.URL + "/admin/api/" + path)
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("%s: %v %v", path, resp, err)
				}
				n, _ := bufio.NewReader(resp.Body).WriteTo(discard{})
				resp.Body.Close()
				b.SetBytes(n)
			}
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkConsoleEventsIdle: the CPU time one open event stream costs the
// process per minute while nothing changes (its 5 s look at the state),
// on an empty state and on 10,000 conversations and runs.
func BenchmarkConsoleEventsIdle(b *testing.B) {
	for _, n := range []int{0, 10_000} {
		b.Run(fmt.Sprint(n, "rows"), func(b *testing.B) {
			db := seeded(b, n)
			srv := serve(db)
			defer srv.Close()
			for b.Loop() {
				resp, err := http.Get(srv.URL + "/admin/api/events")
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatal(resp, err)
				}
				rd := bufio.NewReader(resp.Body)
				// Past the first snapshot: read until the outbox event.
				for {
					line, err := rd.ReadString('\n')
					if err != nil {
						b.Fatal(err)
					}
					if strings.HasPrefix(line, "event: outbox") {
						break
					}
				}
				const window = 20 * time.Second
				before := cpu()
				time.Sleep(window) // idle: the stream's own polling is what is measured
				used := cpu() - before
				resp.Body.Close()
				b.ReportMetric(float64(used.Milliseconds())*float64(time.Minute/window), "cpu-ms/min")
			}
		})
	}
}

func cpu() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
