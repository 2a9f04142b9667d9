package store

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
)

// BenchmarkRunLifecycle is the store work of one sub-agent run: CreateRun →
// StartRun → FinishRun with its announce → MarkDelivered.
func BenchmarkRunLifecycle(b *testing.B) {
	db := newTestDB(b)
	ctx := context.Background()
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, child := newRun("bench-" + strconv.Itoa(i))
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
}
