package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
)

// alive makes replica id alive (its lease held for a minute).
func alive(t *testing.T, db *DB, id string) {
	t.Helper()
	if _, err := db.AcquireLease(context.Background(), ReplicaLease(id), id, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// dies ends replica id's lease, as its expiry would.
func dies(t *testing.T, db *DB, id string) {
	t.Helper()
	if err := db.ReleaseLease(context.Background(), ReplicaLease(id), id); err != nil {
		t.Fatal(err)
	}
}

func multiReplica(t *testing.T, db *DB) {
	if db.Driver() != DriverPostgres {
		t.Skip("replicas share a PostgreSQL state; SQLite has one process")
	}
}

// One turn per session across replicas: a session's second message is not
// claimed while its first is owed; completing the first passes the second
// to the same replica; another replica takes a session only when the
// holder's lease lapsed.
func TestIntakeClaimsOneTurnPerSession(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	multiReplica(t, db)
	alive(t, db, "r1")
	alive(t, db, "r2")
	origin := channels.Origin{Channel: "web", ChatID: "c1", ChatType: "dm"}
	add := func(key, text, holder string) *Intake {
		in := &Intake{SessionKey: key, AgentID: "main", Origin: origin, Text: text, ClaimedBy: holder}
		if _, err := db.AddIntake(ctx, in); err != nil {
			t.Fatal(err)
		}
		return in
	}
	a1 := add("s1", "a1", "r1")
	a2 := add("s1", "a2", "r2") // arrives on another replica while a1 is owed
	b1 := add("s2", "b1", "")
	if a1.ClaimedBy != "r1" || a2.ClaimedBy != "" {
		t.Fatalf("claims: a1 by %q, a2 by %q; want r1 and nobody (a1 is owed)", a1.ClaimedBy, a2.ClaimedBy)
	}
	got, err := db.ClaimOwed(ctx, Claim{Holder: "r2"})
	if err != nil || len(got) != 1 || got[0].ID != b1.ID || got[0].ClaimedBy != "r2" {
		t.Fatalf("r2 claims %+v, %v; want only b1 (s1 is r1's)", got, err)
	}
	if again, _ := db.ClaimOwed(ctx, Claim{Holder: "r2"}); len(again) != 0 {
		t.Fatalf("claimed twice: %+v", again)
	}
	_, next, err := db.CompleteIntake(ctx, a1.ID, nil, time.Now())
	if err != nil || next == nil || next.ID != a2.ID || next.ClaimedBy != "r1" {
		t.Fatalf("complete a1: next %+v, %v; want a2 passed on to r1", next, err)
	}
	// A retry of that completion (its commit's answer lost with the
	// connection) adds nothing and hands a2 on again, so it is not left
	// owed with nobody to run it.
	if id, again, err := db.CompleteIntake(ctx, a1.ID, &OutboxItem{Origin: channels.Origin{Channel: "web", ChatID: "x"}, Kind: channels.KindReply, Text: "late"}, time.Now()); err != nil || id != 0 || again == nil || again.ID != a2.ID {
		t.Fatalf("complete a1 again: outbox %d, next %+v, %v; want nothing added and a2 again", id, again, err)
	}
	a3 := add("s1", "a3", "r2")
	if a3.ClaimedBy != "" {
		t.Fatal("a3 claimed while a2 is owed")
	}
	dies(t, db, "r1")
	got, err = db.ClaimOwed(ctx, Claim{Holder: "r2"})
	if err != nil || len(got) != 1 || got[0].ID != a2.ID {
		t.Fatalf("after r1 died r2 claims %+v, %v; want a2 (s1's oldest owed)", got, err)
	}
	// A replica restarted under its id takes back what it held.
	if mine, _ := db.ClaimOwed(ctx, Claim{Holder: "r2", Reclaim: true}); len(mine) != 2 || mine[0].ID != a2.ID || mine[1].ID != b1.ID {
		t.Fatalf("r2 restarted claims %+v; want a2 and b1 back, oldest first", mine)
	}
}

// Replicas claiming at once never take the same message, and every owed
// session head is taken once.
func TestIntakeClaimsRace(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	multiReplica(t, db)
	const sessions = 60
	for i := range sessions {
		for j := range 2 {
			in := &Intake{SessionKey: fmt.Sprintf("s%d", i), AgentID: "main", Origin: channels.Origin{Channel: "web", ChatID: "c"}, Text: fmt.Sprint(j)}
			if _, err := db.AddIntake(ctx, in); err != nil {
				t.Fatal(err)
			}
		}
	}
	var mu sync.Mutex
	seen := map[int64]string{}
	var wg sync.WaitGroup
	for r := range 4 {
		id := fmt.Sprintf("r%d", r)
		alive(t, db, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				got, err := db.ClaimOwed(ctx, Claim{Holder: id, Limit: 7})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, in := range got {
					if other, ok := seen[in.ID]; ok {
						t.Errorf("message %d claimed by %s and %s", in.ID, other, id)
					}
					seen[in.ID] = id
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != sessions {
		t.Fatalf("%d messages claimed, want %d (one per session)", len(seen), sessions)
	}
}

// Outbox items are claimed per destination in order, only on the channels
// the replica runs, and free again once the sender's lease lapsed.
func TestOutboxClaims(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	multiReplica(t, db)
	alive(t, db, "r1")
	alive(t, db, "r2")
	web := func(chat, text string) *OutboxItem {
		return &OutboxItem{Origin: channels.Origin{Channel: "web", ChatID: chat}, Kind: channels.KindReply, Text: text}
	}
	for _, o := range []*OutboxItem{web("A", "a1"), web("A", "a2"), web("B", "b1"),
		{Origin: channels.Origin{Channel: "telegram", ChatID: "42"}, Kind: channels.KindReply, Text: "t1"}} {
		if _, err := db.EnqueueOutbox(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().Add(time.Second)
	texts := func(items []OutboxItem) (out []string) {
		for _, o := range items {
			out = append(out, o.Text)
		}
		return out
	}
	got, err := db.ClaimOutbox(ctx, Claim{Holder: "r1"}, []string{"web"}, now)
	if err != nil || fmt.Sprint(texts(got)) != "[a1 b1]" {
		t.Fatalf("r1 claims %v, %v; want [a1 b1] (heads of A and B on web)", texts(got), err)
	}
	if got, _ := db.ClaimOutbox(ctx, Claim{Holder: "r2"}, []string{"web"}, now); len(got) != 0 {
		t.Fatalf("r2 claims %v while r1 sends A and B; a2 must wait for a1", texts(got))
	}
	if err := db.MarkDelivered(ctx, got[0].ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.ClaimOutbox(ctx, Claim{Holder: "r2"}, []string{"web", "telegram"}, now); fmt.Sprint(texts(got)) != "[a2 t1]" {
		t.Fatalf("r2 claims %v after a1 was delivered; want [a2 t1]", texts(got))
	}
	dies(t, db, "r1")
	if got, _ := db.ClaimOutbox(ctx, Claim{Holder: "r2"}, []string{"web"}, now); fmt.Sprint(texts(got)) != "[b1]" {
		t.Fatalf("r2 claims %v after r1 died; want [b1], which r1 was sending", texts(got))
	}
}
