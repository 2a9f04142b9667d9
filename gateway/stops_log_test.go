package gateway

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
)

// A /stop that another replica recorded for a turn this replica holds is
// read again at every poll until the cut turn has ended: the holder cuts
// the turn and says so once, not at each poll while the turn unwinds.
func TestActOnStopsTellsACutTurnOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTestStore(t)
	for _, r := range []string{"r1", "r2"} {
		if _, err := db.AcquireLease(ctx, store.ReplicaLease(r), r, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	const key = "agent:main:web:dm:ann"
	in := &store.Intake{SessionKey: key, AgentID: "main", PlatformID: "m1", Text: "hang", CreatedAt: time.Now(),
		Origin: channels.Origin{Channel: "web", ChatID: "ann", ChatType: channels.ChatDM}}
	if _, err := db.AddIntake(ctx, in); err != nil {
		t.Fatal(err)
	}
	if claimed, err := db.ClaimOwed(ctx, store.Claim{Holder: "r1"}); err != nil || len(claimed) != 1 {
		t.Fatalf("r1 claims %+v, %v", claimed, err)
	}
	if err := db.StartIntake(ctx, in.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if n, err := db.RequestAbort(ctx, key, "r2", time.Now()); err != nil || n != 1 {
		t.Fatalf("RequestAbort = %d, %v", n, err)
	}

	core, logs := observer.New(zapcore.InfoLevel)
	turnCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := &Gateway{db: db, log: zap.New(core), cluster: &cluster{id: "r1"},
		sessions: map[string]*sessionState{key: {key: key, turn: turnCut{turnCtx, cancel}}}}
	// Three polls while the cut turn unwinds (it still holds its message).
	for range 3 {
		g.actOnStops(ctx)
	}
	if turnCtx.Err() == nil {
		t.Fatal("the turn another replica asked to stop was not cut")
	}
	if n := logs.FilterMessage("cut a turn another replica asked to stop (read from the store)").Len(); n != 1 {
		t.Errorf("the cut was logged %d times over three polls, want once", n)
	}
}
