package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/spend"
	"github.com/heraldhq/herald/store"
)

// TestUsageCommand: herald usage sums this month's spend per agent,
// conversation and model and names the costliest runs; --json has the
// same figures.
func TestUsageCommand(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, e := range []store.SpendEntry{
		{At: now, Conversation: "agent:main:web:dm:a", AgentID: "main", Model: "anthropic/claude", RunID: "turn:1", Label: "hello there", USD: 0.25, TokensIn: 100, TokensOut: 10},
		{At: now, Conversation: "agent:main:web:dm:a", AgentID: "helper", Model: "openai/gpt-4o", RunID: "0123456789abcdef", Label: "alpha", USD: 1.5, TokensIn: 1000, TokensOut: 100},
	} {
		if err := db.RecordSpend(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	var out, errb strings.Builder
	if code := run([]string{"usage", "--state-dir", dir}, &out, &errb); code != 0 {
		t.Fatalf("usage: %d %s", code, errb.String())
	}
	for _, want := range []string{"today $1.75 (2 calls)", "helper", "$1.50", "agent:main:web:dm:a", "openai/gpt-4o",
		"1) $1.50 · run 01234567 · helper · agent:main:web:dm:a · alpha", "2) $0.25 · turn · main"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("herald usage lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"usage", "--json", "--state-dir", dir}, &out, &errb); code != 0 {
		t.Fatalf("usage --json: %d %s", code, errb.String())
	}
	var u spend.Usage
	if err := json.Unmarshal([]byte(out.String()), &u); err != nil || u.ThisMonth.USD != 1.75 || len(u.Agents) != 2 || u.Agents[0].ID != "helper" ||
		len(u.TopRuns) != 2 || u.TopRuns[0].RunID != "0123456789abcdef" {
		t.Errorf("usage --json = %s (%v)", out.String(), err)
	}
}
