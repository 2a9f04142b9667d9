package store

import (
	"context"
	"math"
	"testing"
	"time"
)

func TestSpendTotalsAndTopRuns(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	day1 := time.Date(2026, 11, 24, 23, 59, 0, 0, time.UTC)
	day2 := day1.Add(2 * time.Minute) // the next UTC day
	for _, e := range []SpendEntry{
		{At: day1, Conversation: "c1", AgentID: "main", Model: "a/m", RunID: "turn:1", Label: "hello", USD: 0.5, TokensIn: 100, TokensOut: 10},
		{At: day2, Conversation: "c1", AgentID: "main", Model: "a/m", RunID: "r1", Label: "research", USD: 0.25, TokensIn: 50, TokensOut: 5},
		{At: day2, Conversation: "c1", AgentID: "main", Model: "a/m", RunID: "r1", Label: "research", USD: 0.25, TokensIn: 50, TokensOut: 5},
		{At: day2, Conversation: "c2", AgentID: "other", Model: "b/n", RunID: "turn:2", Label: "hey", USD: 2, TokensIn: 1, TokensOut: 1},
	} {
		if err := db.RecordSpend(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	totals, err := db.SpendTotals(ctx, SpendDay(day2))
	if err != nil {
		t.Fatal(err)
	}
	sum := map[string]float64{}
	for _, x := range totals {
		sum[x.Day+" "+x.Conversation] += x.USD
	}
	if len(sum) != 2 || math.Abs(sum["2026-11-25 c1"]-0.5) > 1e-9 || sum["2026-11-25 c2"] != 2 {
		t.Errorf("totals from 2026-11-25 = %v", sum)
	}
	all, err := db.SpendTotals(ctx, "2026-11-01")
	if err != nil || len(all) != 3 {
		t.Errorf("month totals = %+v, %v", all, err)
	}
	top, err := db.TopSpendRuns(ctx, "2026-11-01", "c1", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != 2 || top[0].RunID != "turn:1" || top[1].RunID != "r1" || math.Abs(top[1].USD-0.5) > 1e-9 || top[1].Tokens != 110 || top[1].Label != "research" {
		t.Errorf("top runs of c1 = %+v", top)
	}
	if top, _ := db.TopSpendRuns(ctx, "2026-11-01", "", 1); len(top) != 1 || top[0].RunID != "turn:2" {
		t.Errorf("top run of all = %+v", top)
	}
}
