package store

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
)

func TestIntakeOwedUntilCompletedWithItsReply(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	origin := channels.Origin{Channel: "telegram", ChatID: "42", ChatType: "dm"}
	a := &Intake{SessionKey: "k1", AgentID: "main", PlatformID: "update:100", Origin: origin, Text: "first"}
	b := &Intake{SessionKey: "k1", AgentID: "main", PlatformID: "update:101", Origin: origin, Text: "second"}
	for _, in := range []*Intake{a, b} {
		if added, err := db.AddIntake(ctx, in); err != nil || !added || in.ID == 0 {
			t.Fatalf("AddIntake(%s) = %v, %v (id %d)", in.Text, added, err, in.ID)
		}
	}
	// A re-delivery of the first update is recognised, not stored again.
	again := &Intake{SessionKey: "k1", AgentID: "main", PlatformID: "update:100", Origin: origin, Text: "first"}
	if added, err := db.AddIntake(ctx, again); err != nil || added || again.ID != a.ID {
		t.Fatalf("re-delivery: added=%v err=%v id=%d, want not added, id %d", added, err, again.ID, a.ID)
	}
	// The same platform id on another channel is another message.
	other := &Intake{SessionKey: "k2", AgentID: "main", PlatformID: "update:100", Origin: channels.Origin{Channel: "slack", ChatID: "C1"}, Text: "x"}
	if added, err := db.AddIntake(ctx, other); err != nil || !added {
		t.Fatalf("other channel: %v %v", added, err)
	}
	owed, err := db.OwedIntake(ctx)
	if err != nil || len(owed) != 3 || owed[0].Text != "first" || owed[1].Text != "second" || owed[0].Origin.ChatID != "42" {
		t.Fatalf("owed = %+v, %v; want first, second, x in arrival order", owed, err)
	}
	if err := db.StartIntake(ctx, a.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	reply := &OutboxItem{Origin: origin, Kind: channels.KindReply, Text: "answer"}
	id, _, err := db.CompleteIntake(ctx, a.ID, reply, time.Now())
	if err != nil || id == 0 {
		t.Fatalf("CompleteIntake = %d, %v", id, err)
	}
	// Completing twice adds no second reply.
	if id2, _, err := db.CompleteIntake(ctx, a.ID, &OutboxItem{Origin: origin, Kind: channels.KindReply, Text: "answer"}, time.Now()); err != nil || id2 != 0 {
		t.Fatalf("second CompleteIntake = %d, %v; want 0, nil", id2, err)
	}
	if _, _, err := db.CompleteIntake(ctx, other.ID, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	owed, _ = db.OwedIntake(ctx)
	if len(owed) != 1 || owed[0].ID != b.ID || !owed[0].StartedAt.IsZero() {
		t.Fatalf("owed after completing = %+v, want only the second, not started", owed)
	}
	due, _ := db.DueOutbox(ctx, time.Now(), 0)
	if len(due) != 1 || due[0].Text != "answer" {
		t.Fatalf("outbox = %+v, want the one reply", due)
	}
}
