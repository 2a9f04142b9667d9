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
	if _, ok, err := db.NextOutboxAt(ctx, ""); ok || err != nil {
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
	// Another thread of the same chat is another destination.
	elsewhere := slackOrigin
	elsewhere.ThreadID = "1700000000.000999"
	other := &OutboxItem{Origin: elsewhere, Kind: channels.KindReply, Text: "elsewhere", CreatedAt: t0.Add(time.Second)}
	if _, err := db.EnqueueOutbox(ctx, other); err != nil {
		t.Fatal(err)
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
	// Only the oldest pending message of each destination is due.
	if got := texts(t0.Add(time.Hour), 0); !reflect.DeepEqual(got, []string{"first", "elsewhere"}) {
		t.Errorf("due = %v, want [first elsewhere]", got)
	}
	if got := texts(t0.Add(time.Hour), 1); !reflect.DeepEqual(got, []string{"first"}) {
		t.Errorf("due with limit 1 = %v", got)
	}

	// first waits out a rate limit: second and third wait behind it (also
	// after a restart: the order is in the store), elsewhere does not.
	next := t0.Add(30 * time.Second)
	if err := db.MarkRetry(ctx, ids[0], next, "429 rate limited"); err != nil {
		t.Fatal(err)
	}
	if got := texts(t0.Add(10*time.Second), 0); !reflect.DeepEqual(got, []string{"elsewhere"}) {
		t.Errorf("due while first waits = %v, want [elsewhere]", got)
	}
	if at, ok, err := db.NextOutboxAt(ctx, ""); err != nil || !ok || !at.Equal(ms(t0.Add(time.Second))) {
		t.Errorf("NextOutboxAt while first waits = %v, %v, %v; want elsewhere's time", at, ok, err)
	}
	it, _ := db.GetOutbox(ctx, ids[0])
	if it.Attempts != 1 || it.LastError != "429 rate limited" || !it.NextAttemptAt.Equal(ms(next)) {
		t.Errorf("after retry: %+v", it)
	}
	if err := db.MarkDelivered(ctx, other.ID, t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if at, ok, _ := db.NextOutboxAt(ctx, ""); !ok || !at.Equal(ms(next)) {
		t.Errorf("NextOutboxAt = %v, want first's retry %v (not second's earlier time)", at, ms(next))
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
	if got := texts(t0.Add(time.Hour), 0); !reflect.DeepEqual(got, []string{"second"}) {
		t.Errorf("due after first = %v, want [second]", got)
	}
	if err := db.MarkFailed(ctx, ids[1], t0.Add(time.Minute), "channel_not_found"); err != nil {
		t.Fatal(err)
	}
	it, _ = db.GetOutbox(ctx, ids[1])
	if it.Attempts != 1 || it.LastError != "channel_not_found" || it.FailedAt.IsZero() {
		t.Errorf("after MarkFailed: %+v", it)
	}
	if got := texts(t0.Add(time.Hour), 0); !reflect.DeepEqual(got, []string{"third"}) {
		t.Errorf("due at the end = %v, want [third]", got)
	}
	nextAt, ok, err := db.NextOutboxAt(ctx, "")
	if err != nil || !ok || !nextAt.Equal(ms(t0.Add(2*time.Second))) {
		t.Errorf("NextOutboxAt = %v, %v, %v", nextAt, ok, err)
	}
	p, d, f, err := db.OutboxStats(ctx)
	if err != nil || p != 1 || d != 2 || f != 1 {
		t.Errorf("OutboxStats = %d/%d/%d %v, want 1/2/1", p, d, f, err)
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

func TestOutboxPartProgress(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	it := &OutboxItem{Origin: slackOrigin, Kind: channels.KindReply, Text: "long"}
	if _, err := db.EnqueueOutbox(ctx, it); err != nil {
		t.Fatal(err)
	}
	got, _ := db.GetOutbox(ctx, it.ID)
	if got.PartsSent != 0 || got.SendingPart != -1 || len(got.PartIDs) != 0 {
		t.Fatalf("new item: %+v", got)
	}
	if err := db.BeginPart(ctx, it.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := db.EndPart(ctx, it.ID, 0, "1700000000.000300"); err != nil {
		t.Fatal(err)
	}
	if err := db.EndPart(ctx, it.ID, 0, "again"); err != nil { // already ended: no change
		t.Fatal(err)
	}
	if err := db.BeginPart(ctx, it.ID, 1); err != nil {
		t.Fatal(err)
	}
	// A crash here leaves part 2 "sending": its outcome is unknown.
	got, _ = db.GetOutbox(ctx, it.ID)
	if got.PartsSent != 1 || got.SendingPart != 1 || !reflect.DeepEqual(got.PartIDs, []string{"1700000000.000300"}) {
		t.Fatalf("mid-send: %+v", got)
	}
	if err := db.AbortPart(ctx, it.ID); err != nil {
		t.Fatal(err)
	}
	if err := db.EndPart(ctx, it.ID, 1, ""); err != nil {
		t.Fatal(err)
	}
	got, _ = db.GetOutbox(ctx, it.ID)
	if got.PartsSent != 2 || got.SendingPart != -1 || !reflect.DeepEqual(got.PartIDs, []string{"1700000000.000300", ""}) {
		t.Fatalf("after two parts: %+v", got)
	}
}
