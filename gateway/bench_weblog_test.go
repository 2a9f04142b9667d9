package gateway

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/web"
	"github.com/heraldhq/herald/store"
)

// BenchmarkWebAnnounceBacklog is the delivery of the 10,000 case's
// announces (docs/performance.md): 100 web chats with 100 announces
// queued each, delivered by a deliverer through the web chat into the
// store. It reports the process's CPU per announce (getrusage), the web
// log's writes (commits) per announce, and the time until the last one
// is stored.
func BenchmarkWebAnnounceBacklog(b *testing.B) {
	const chats, per = 100, 100
	ctx := context.Background()
	var cpu, wall time.Duration
	var writes int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db, err := store.Open(ctx, b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		wl := &countingWebLog{DB: db}
		ch, err := web.New(web.Options{Log: webLog{db: wl}})
		if err != nil {
			b.Fatal(err)
		}
		for k := range per {
			for c := range chats {
				it := &store.OutboxItem{Origin: channels.Origin{Channel: web.Name, ChatID: "c" + strconv.Itoa(c), ChatType: channels.ChatDM},
					Kind: channels.KindAnnounce, Text: "✅ run " + strconv.Itoa(k), RunID: strconv.Itoa(c) + "-" + strconv.Itoa(k), CreatedAt: time.Now()}
				if _, err := db.EnqueueOutbox(ctx, it); err != nil {
					b.Fatal(err)
				}
			}
		}
		c0, t0 := benchCPU(b), time.Now()
		b.StartTimer()
		_, stop := startDeliverer(wl, ch, maxSends)
		for { // a look every 20 ms: the count reads the pending index
			p, err := db.OutboxPending(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if p == 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		b.StopTimer()
		wall += time.Since(t0)
		cpu += benchCPU(b) - c0
		writes += wl.appends.Load()
		// This iteration's deliverer and store end before the next one
		// is measured (getrusage counts the whole process).
		stop()
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
	}
	n := float64(b.N * chats * per)
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/n, "cpu-µs/announce")
	b.ReportMetric(float64(writes)/n, "writes/announce")
	b.ReportMetric(wall.Seconds()/float64(b.N), "s/backlog")
}

func benchCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
