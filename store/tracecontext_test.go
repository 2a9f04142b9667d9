package store

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
)

// TestTraceParentKeptWithRows: the trace context stored with an intake
// row, a run row and an outbox row comes back wherever the row is read
// again — by the claim of a restarted or another replica, as the session's
// next turn, by the outbox claim — so the work continues the trace.
func TestTraceParentKeptWithRows(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	const (
		tpA   = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		tpB   = "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-00"
		tpRun = "00-2af7651916cd43dd8448eb211c80319c-d7ad6b7169203331-01"
		tpOut = "00-3af7651916cd43dd8448eb211c80319c-e7ad6b7169203331-01"
	)
	origin := channels.Origin{Channel: "web", ChatID: "c1", ChatType: channels.ChatDM}
	a := &Intake{SessionKey: "k1", AgentID: "main", Origin: origin, Text: "first", TraceParent: tpA, ClaimedBy: "r1"}
	b := &Intake{SessionKey: "k1", AgentID: "main", Origin: origin, Text: "second", TraceParent: tpB, ClaimedBy: "r1"}
	for _, in := range []*Intake{a, b} {
		if _, err := db.AddIntake(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	owed, err := db.ClaimOwed(ctx, Claim{Holder: "r2", Reclaim: true})
	if err != nil || len(owed) != 1 || owed[0].TraceParent != tpA {
		t.Fatalf("ClaimOwed = %+v, %v; want the first message with %s", owed, err, tpA)
	}
	reply := &OutboxItem{Origin: origin, Kind: channels.KindReply, Text: "answer", TraceParent: tpOut}
	_, next, err := db.CompleteIntake(ctx, a.ID, reply, time.Now())
	if err != nil || next == nil || next.TraceParent != tpB {
		t.Fatalf("CompleteIntake next = %+v, %v; want the second message with %s", next, err, tpB)
	}
	items, err := db.ClaimOutbox(ctx, Claim{Holder: "r2", Reclaim: true, Limit: 10}, nil, time.Now().Add(time.Second))
	if err != nil || len(items) != 1 || items[0].TraceParent != tpOut {
		t.Fatalf("ClaimOutbox = %+v, %v; want the reply with %s", items, err, tpOut)
	}
	if got, err := db.GetOutbox(ctx, items[0].ID); err != nil || got.TraceParent != tpOut {
		t.Fatalf("GetOutbox = %+v, %v", got, err)
	}

	r, child := newRun("run-1")
	r.Status, r.Owner, r.TraceParent = StatusQueued, "r1", tpRun
	child.Key, child.ID, child.AgentID, child.Kind, child.TranscriptPath = r.ChildKey, r.ChildSessionID, "main", KindSubagent, db.TranscriptPath("main", r.ChildSessionID)
	if err := db.CreateRun(ctx, r, child); err != nil {
		t.Fatal(err)
	}
	runs, err := db.ClaimRuns(ctx, Claim{Holder: "r2", Reclaim: true})
	if err != nil || len(runs) != 1 || runs[0].TraceParent != tpRun {
		t.Fatalf("ClaimRuns = %+v, %v; want run-1 with %s", runs, err, tpRun)
	}
	if got, err := db.GetRun(ctx, "run-1"); err != nil || got.TraceParent != tpRun {
		t.Fatalf("GetRun = %+v, %v", got, err)
	}
}
