package store

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
)

func TestEnqueueOutbox(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	tests := []struct {
		name   string
		item   OutboxItem
		wantID int64 // 0 = a new id
	}{
		{"reply without run id", OutboxItem{Origin: slackOrigin, Kind: channels.KindReply, Text: "hi", CreatedAt: t0}, 0},
		{"second reply without run id", OutboxItem{Origin: slackOrigin, Kind: channels.KindReply, Text: "hi", CreatedAt: t0}, 0},
		{"announce", OutboxItem{RunID: "r1", Kind: channels.KindAnnounce, Text: "done", CreatedAt: t0}, 0},
		{"same run id again", OutboxItem{RunID: "r1", Kind: channels.KindAnnounce, Text: "dup"}, 3},
	}
	seen := map[int64]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := tt.item
			id, err := db.EnqueueOutbox(ctx, &it)
			if err != nil {
				t.Fatal(err)
			}
			if it.ID != id {
				t.Errorf("item.ID = %d, returned %d", it.ID, id)
			}
			if tt.wantID != 0 {
				if id != tt.wantID {
					t.Errorf("id = %d, want existing %d", id, tt.wantID)
				}
				return
			}
			if seen[id] {
				t.Errorf("id %d reused", id)
			}
			seen[id] = true
		})
	}
	p, d, f, err := db.OutboxStats(ctx)
	if err != nil || p != 3 || d != 0 || f != 0 {
		t.Errorf("OutboxStats = %d/%d/%d %v, want 3/0/0", p, d, f, err)
	}
	got, err := db.GetOutbox(ctx, 3)
	if err != nil || got.Text != "done" {
		t.Errorf("announce row = %+v, %v; want the first text kept", got, err)
	}
	if _, err := db.GetOutbox(ctx, 99); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetOutbox(99) = %v, want ErrNotFound", err)
	}
}

func TestOutboxDeliveryCycle(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	if _, ok, err := db.NextOutboxAt(ctx); ok || err != nil {
		t.Errorf("NextOutboxAt on empty = %v, %v", ok, err)
	}
	var ids []int64
	for i, text := range []string{"first", "second", "third"} {
		it := &OutboxItem{Origin: slackOrigin, Kind: channels.KindSystem, Text: text,
			CreatedAt: t0.Add(time.Duration(i) * time.Second)}
		if _, err := db.EnqueueOutbox(ctx, it); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, it.ID)
	}
	texts := func(now time.Time, limit int) []string {
		items, err := db.DueOutbox(ctx, now, limit)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range items {
			out = append(out, it.Text)
		}
		return out
	}
	if got := texts(t0.Add(-time.Second), 0); got != nil {
		t.Errorf("due before creation = %v", got)
	}
	if got := texts(t0.Add(time.Second), 0); !reflect.DeepEqual(got, []string{"first", "second"}) {
		t.Errorf("due = %v", got)
	}
	if got := texts(t0.Add(time.Hour), 2); !reflect.DeepEqual(got, []string{"first", "second"}) {
		t.Errorf("due with limit 2 = %v", got)
	}

	// first: retried, then delivered. second: given up. third: pending.
	next := t0.Add(30 * time.Second)
	if err := db.MarkRetry(ctx, ids[0], next, "429 rate limited"); err != nil {
		t.Fatal(err)
	}
	if got := texts(t0.Add(10*time.Second), 0); !reflect.DeepEqual(got, []string{"second", "third"}) {
		t.Errorf("due while first waits = %v", got)
	}
	it, _ := db.GetOutbox(ctx, ids[0])
	if it.Attempts != 1 || it.LastError != "429 rate limited" || !it.NextAttemptAt.Equal(ms(next)) {
		t.Errorf("after retry: %+v", it)
	}
	if err := db.MarkFailed(ctx, ids[1], t0.Add(time.Minute), "channel_not_found"); err != nil {
		t.Fatal(err)
	}
	delivered := t0.Add(31 * time.Second)
	if err := db.MarkDelivered(ctx, ids[0], delivered); err != nil {
		t.Fatal(err)
	}
	if err := db.MarkDelivered(ctx, ids[0], delivered.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	it, _ = db.GetOutbox(ctx, ids[0])
	if !it.DeliveredAt.Equal(ms(delivered)) {
		t.Errorf("DeliveredAt = %v, want the first %v", it.DeliveredAt, ms(delivered))
	}
	it, _ = db.GetOutbox(ctx, ids[1])
	if it.Attempts != 1 || it.LastError != "channel_not_found" || it.FailedAt.IsZero() {
		t.Errorf("after MarkFailed: %+v", it)
	}
	if got := texts(t0.Add(time.Hour), 0); !reflect.DeepEqual(got, []string{"third"}) {
		t.Errorf("due at the end = %v, want [third]", got)
	}
	nextAt, ok, err := db.NextOutboxAt(ctx)
	if err != nil || !ok || !nextAt.Equal(ms(t0.Add(2*time.Second))) {
		t.Errorf("NextOutboxAt = %v, %v, %v", nextAt, ok, err)
	}
	p, d, f, err := db.OutboxStats(ctx)
	if err != nil || p != 1 || d != 1 || f != 1 {
		t.Errorf("OutboxStats = %d/%d/%d %v, want 1/1/1", p, d, f, err)
	}

	for name, fn := range map[string]func() error{
		"MarkDelivered": func() error { return db.MarkDelivered(ctx, 99, t0) },
		"MarkRetry":     func() error { return db.MarkRetry(ctx, 99, t0, "x") },
		"MarkFailed":    func() error { return db.MarkFailed(ctx, 99, t0, "x") },
	} {
		if err := fn(); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s(unknown) = %v, want ErrNotFound", name, err)
		}
	}
}

func TestPostponeOutbox(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	it := &OutboxItem{Origin: slackOrigin, Kind: channels.KindReply, Text: "waits", CreatedAt: t0}
	if _, err := db.EnqueueOutbox(ctx, it); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(time.Minute)
	if err := db.PostponeOutbox(ctx, it.ID, later); err != nil {
		t.Fatal(err)
	}
	got, _ := db.GetOutbox(ctx, it.ID)
	if got.Attempts != 0 || !got.NextAttemptAt.Equal(ms(later)) {
		t.Errorf("after postpone: attempts %d next %v; want 0, %v", got.Attempts, got.NextAttemptAt, ms(later))
	}
	if due, _ := db.DueOutbox(ctx, t0.Add(time.Second), 0); len(due) != 0 {
		t.Errorf("postponed item due early: %+v", due)
	}
	if err := db.MarkDelivered(ctx, it.ID, later); err != nil {
		t.Fatal(err)
	}
	if err := db.PostponeOutbox(ctx, it.ID, later.Add(time.Hour)); !errors.Is(err, ErrNotFound) {
		t.Errorf("postpone delivered = %v, want ErrNotFound", err)
	}
	if err := db.PostponeOutbox(ctx, 99, later); !errors.Is(err, ErrNotFound) {
		t.Errorf("postpone unknown = %v, want ErrNotFound", err)
	}
}
