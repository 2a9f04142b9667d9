package store

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
)

// runLifecycle is the store work of one sub-agent run: CreateRun →
// StartRun → FinishRun with its announce → MarkDelivered.
func runLifecycle(b *testing.B, db *DB, id string) {
	ctx := context.Background()
	now := time.Now()
	r, child := newRun(id)
	if err := db.CreateRun(ctx, r, child); err != nil {
		b.Fatal(err)
	}
	if err := db.StartRun(ctx, r.ID, now); err != nil {
		b.Fatal(err)
	}
	r.Status, r.Outcome, r.Result, r.TokensIn, r.TokensOut = StatusDone, OutcomeSuccess, "done", 1200, 300
	r.EndedAt, r.ArchiveAt = now, now.Add(time.Hour)
	ann := &OutboxItem{Origin: r.Origin, Kind: channels.KindAnnounce, Text: "✅ summary finished"}
	if err := db.FinishRun(ctx, r, ann); err != nil {
		b.Fatal(err)
	}
	if err := db.MarkDelivered(ctx, ann.ID, now); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRunLifecycle is one run's store work, one run at a time.
func BenchmarkRunLifecycle(b *testing.B) {
	db := newTestDB(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runLifecycle(b, db, "bench-"+strconv.Itoa(i))
	}
}

// BenchmarkRunLifecycleConcurrent is the same from 32 goroutines per CPU at
// once, as thousands of in-flight runs write: on SQLite their transactions
// share commits (group.go).
func BenchmarkRunLifecycleConcurrent(b *testing.B) {
	db := newTestDB(b)
	var seq atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			runLifecycle(b, db, "bench-"+strconv.FormatInt(seq.Add(1), 10))
		}
	})
}

// BenchmarkClaimOutboxBacklog is one delivery pass with a backlog: 100
// destinations with 50 pending announces each; each iteration claims the
// due heads and marks them delivered (as the deliverer does), refilling
// the backlog so it stays at 5,000 items.
func BenchmarkClaimOutboxBacklog(b *testing.B) {
	db := newTestDB(b)
	ctx := context.Background()
	now := time.Now()
	enqueue := func(dest int) {
		o := &OutboxItem{Origin: channels.Origin{Channel: "web", ChatID: "c" + strconv.Itoa(dest)}, Kind: channels.KindAnnounce, Text: "✅ done", CreatedAt: now}
		if _, err := db.EnqueueOutbox(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < 50; i++ {
		for dest := 0; dest < 100; dest++ {
			enqueue(dest)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		items, err := db.ClaimOutbox(ctx, Claim{Holder: "bench", Limit: 64}, nil, now)
		if err != nil || len(items) == 0 {
			b.Fatalf("claimed %d, %v", len(items), err)
		}
		b.StopTimer()
		for _, it := range items {
			if err := db.MarkDelivered(ctx, it.ID, now); err != nil {
				b.Fatal(err)
			}
			n, _ := strconv.Atoi(it.Origin.ChatID[1:])
			enqueue(n)
		}
		b.StartTimer()
	}
}
