package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
)

// BenchmarkOutboxPendingScrape is what /metrics reads for
// herald_outbox_pending at each scrape, on an outbox of 131,072 delivered
// items and 16 pending ones: OutboxStats (which also counts every item)
// and OutboxPending (the pending items alone, on their partial index).
func BenchmarkOutboxPendingScrape(b *testing.B) {
	sqliteOnly(b)
	db := newTestDB(b)
	ctx := context.Background()
	now := time.Now()
	o := &OutboxItem{Origin: channels.Origin{Channel: "web", ChatID: "c"}, Kind: channels.KindAnnounce, Text: "✅ done", CreatedAt: now}
	id, err := db.EnqueueOutbox(ctx, o)
	if err != nil {
		b.Fatal(err)
	}
	if err := db.MarkDelivered(ctx, id, now); err != nil {
		b.Fatal(err)
	}
	var cols []string
	rows, err := db.r.QueryContext(ctx, `SELECT name FROM pragma_table_info('outbox') WHERE name <> 'id'`)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			b.Fatal(err)
		}
		cols = append(cols, c)
	}
	rows.Close()
	list := strings.Join(cols, ", ")
	for range 17 { // 1 → 131,072 delivered items
		if _, err := db.w.ExecContext(ctx, `INSERT INTO outbox (`+list+`) SELECT `+list+` FROM outbox`); err != nil {
			b.Fatal(err)
		}
	}
	for range 16 {
		if _, err := db.EnqueueOutbox(ctx, &OutboxItem{Origin: o.Origin, Kind: o.Kind, Text: "waiting", CreatedAt: now}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("OutboxStats", func(b *testing.B) {
		for b.Loop() {
			if p, _, _, err := db.OutboxStats(ctx); err != nil || p != 16 {
				b.Fatalf("%d pending, %v", p, err)
			}
		}
	})
	b.Run("OutboxPending", func(b *testing.B) {
		for b.Loop() {
			if p, err := db.OutboxPending(ctx); err != nil || p != 16 {
				b.Fatalf("%d pending, %v", p, err)
			}
		}
	})
}
