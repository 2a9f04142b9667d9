package spend_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/spend"
	"github.com/heraldhq/herald/store"
)

func openStore(t testing.TB) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

var (
	conv = spend.Call{Conversation: "agent:main:web:dm:a", AgentID: "main", RunID: "turn:1", Label: "hi"}
	noon = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
)

func TestBudgetsStopAndReset(t *testing.T) {
	db := openStore(t)
	c := &clock{t: noon}
	l := spend.New(db, config.Budgets{Conversation: config.BudgetLimit{DailyUSD: 1}, Agent: config.BudgetLimit{MonthlyUSD: 3}}, c.now, nil)
	var warned []string
	l.OnWarn = func(key, line string) { warned = append(warned, key+" "+line) }
	if err := l.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l.Record(ctx, conv, "a/m", 0.5, agent.Usage{Input: 10})
	if err := l.Check(conv); err != nil {
		t.Fatalf("under budget: %v", err)
	}
	l.Record(ctx, conv, "a/m", 0.5, agent.Usage{Input: 10})
	err := l.Check(conv)
	var be *spend.BudgetError
	if !errors.As(err, &be) || !errors.Is(err, spend.ErrBudget) {
		t.Fatalf("at the daily limit: %v", err)
	}
	if got, want := err.Error(), "💸 Budget reached: conversation $1.00 of $1.00 today (resets 2026-11-26 00:00 UTC)."; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	if len(warned) != 1 || warned[0] != conv.Conversation+" 💸 Budget warning: conversation $1.00 of $1.00 today (100%)." {
		t.Errorf("warnings %q, want one at 80%% (passed with the second call)", warned)
	}
	other := spend.Call{Conversation: "agent:main:web:dm:b", AgentID: "main"}
	if err := l.Check(other); err != nil {
		t.Errorf("another conversation: %v", err)
	}

	// The next UTC day the conversation may spend again, until the agent's month.
	c.set(noon.Add(24 * time.Hour))
	if err := l.Check(conv); err != nil {
		t.Errorf("next day: %v", err)
	}
	l.Record(ctx, other, "a/m", 2, agent.Usage{})
	if err := l.Check(conv); err == nil || err.Error() != "💸 Budget reached: agent main $3.00 of $3.00 this month (resets 2026-12-01 00:00 UTC)." {
		t.Errorf("agent's month: %v", err)
	}

	// A restart forgets nothing: a new ledger on the same store agrees.
	l2 := spend.New(db, config.Budgets{Agent: config.BudgetLimit{MonthlyUSD: 3}}, c.now, nil)
	if err := l2.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l2.Check(conv); err == nil || !strings.Contains(err.Error(), "agent main $3.00 of $3.00 this month") {
		t.Errorf("after a restart: %v", err)
	}
	// A new month starts from zero.
	c.set(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	if err := l2.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l2.Check(conv); err != nil {
		t.Errorf("new month: %v", err)
	}
}

func TestNoBudgetsNoCheck(t *testing.T) {
	l := spend.New(openStore(t), config.Budgets{}, nil, nil)
	l.Record(context.Background(), conv, "a/m", 1e6, agent.Usage{})
	if err := l.Check(conv); err != nil {
		t.Error(err)
	}
	var nilLedger *spend.Ledger
	if nilLedger.Guard(conv) != nil || nilLedger.Check(conv) != nil {
		t.Error("a nil ledger guards")
	}
}

func TestMoney(t *testing.T) {
	for in, want := range map[float64]string{0: "$0.00", 0.004: "$0.0040", 0.01: "$0.01", 12.345: "$12.35"} {
		if got := spend.Money(in); got != want {
			t.Errorf("Money(%v) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkCheck is what a budget check adds to a model call: memory only,
// with every budget set and 10,000 conversations counted.
func BenchmarkCheck(b *testing.B) {
	db := openStore(b)
	l := spend.New(db, config.Budgets{Conversation: config.BudgetLimit{DailyUSD: 5, MonthlyUSD: 50},
		Agent: config.BudgetLimit{DailyUSD: 50, MonthlyUSD: 500}, Total: config.BudgetLimit{DailyUSD: 100, MonthlyUSD: 1000}}, nil, nil)
	for i := range 10000 {
		c := conv
		c.Conversation += string(rune('a' + i%26))
		l.Record(context.Background(), spend.Call{Conversation: c.Conversation + time.Duration(i).String(), AgentID: "main"}, "a/m", 0, agent.Usage{})
	}
	guard := l.Guard(conv)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := guard(context.Background(), nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckParallel: the check from many turns at once (one mutex).
func BenchmarkCheckParallel(b *testing.B) {
	l := spend.New(openStore(b), config.Budgets{Conversation: config.BudgetLimit{DailyUSD: 5}, Total: config.BudgetLimit{MonthlyUSD: 1000}}, nil, nil)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := l.Check(conv); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRecord is the spend row each model call writes (SQLite).
func BenchmarkRecord(b *testing.B) {
	l := spend.New(openStore(b), config.Budgets{Conversation: config.BudgetLimit{DailyUSD: 1e9}}, nil, nil)
	for b.Loop() {
		l.Record(context.Background(), conv, "a/m", 0.01, agent.Usage{Input: 1000, Output: 100})
	}
}

// Sums of past days and months are dropped from memory when a new UTC day
// begins, so a gateway that never reloads (SQLite) does not grow for ever.
func TestPastPeriodsDropped(t *testing.T) {
	db := openStore(t)
	c := &clock{t: noon}
	l := spend.New(db, config.Budgets{Conversation: config.BudgetLimit{DailyUSD: 100}}, c.now, nil)
	ctx := context.Background()
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		l.Record(ctx, spend.Call{Conversation: fmt.Sprintf("agent:main:web:dm:%d", i), AgentID: "main"}, "a/m", 0.01, agent.Usage{})
	}
	if n := l.Held(); n != 204 {
		t.Fatalf("%d sums held on day 1, want 204 (day + month of 100 conversations, the agent and the total)", n)
	}
	c.set(noon.Add(24 * time.Hour))
	l.Record(ctx, conv, "a/m", 0.01, agent.Usage{})
	if n := l.Held(); n != 106 {
		t.Fatalf("%d sums held on day 2, want 106 (this month's 103 with conv, today's 3)", n)
	}
	c.set(time.Date(2026, 12, 1, 0, 0, 1, 0, time.UTC))
	l.Record(ctx, conv, "a/m", 0.01, agent.Usage{})
	if n := l.Held(); n != 6 {
		t.Fatalf("%d sums held in a new month, want 6", n)
	}
	if err := l.Check(conv); err != nil {
		t.Fatalf("check after pruning: %v", err)
	}
}

// failingWrites is a store whose spend rows cannot be written.
type failingWrites struct{ store.Spend }

func (failingWrites) RecordSpend(context.Context, store.SpendEntry) error {
	return errors.New("disk full")
}

// A refresh from the store keeps spend this replica counted but could not
// write: the budget still stops the conversation.
func TestRefreshKeepsUnwrittenSpend(t *testing.T) {
	db := openStore(t)
	c := &clock{t: noon}
	l := spend.New(failingWrites{db}, config.Budgets{Conversation: config.BudgetLimit{DailyUSD: 1}}, c.now, nil)
	ctx := context.Background()
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	l.Record(ctx, conv, "a/m", 1.5, agent.Usage{})
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Check(conv); !errors.Is(err, spend.ErrBudget) {
		t.Fatalf("after a refresh: %v, want the budget reached by the unwritten $1.50", err)
	}
	// Written spend is not counted twice by a refresh.
	l2 := spend.New(db, config.Budgets{Conversation: config.BudgetLimit{DailyUSD: 1}}, c.now, nil)
	l2.Load(ctx)
	l2.Record(ctx, conv, "a/m", 0.6, agent.Usage{})
	l2.Load(ctx)
	if err := l2.Check(conv); err != nil {
		t.Fatalf("$0.60 written and refreshed counted twice: %v", err)
	}
}

// TestUnpricedNamesACPAgents: the start-up warning's list names the models
// without cost and, as acp:<id>, the ACP agents without runtime.cost (an
// agent may report its own cost, but that is not known before it runs).
func TestUnpricedNamesACPAgents(t *testing.T) {
	cfg, err := config.Parse("unpriced.json5", []byte(`{
  models: { providers: { p: { api: "anthropic", apiKey: "k", models: [{ id: "free" }, { id: "paid", cost: { input: 1, output: 2 } }] } } },
  agents: { defaults: { model: "p/paid" }, list: [
    { id: "main", default: true },
    { id: "codex", runtime: { type: "acp", command: "codex-acp" } },
    { id: "metered", runtime: { type: "acp", command: "codex-acp", cost: { input: 1, output: 2 } } }] },
}`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	got := spend.Unpriced(cfg)
	slices.Sort(got)
	if want := []string{"acp:codex", "p/free"}; !slices.Equal(got, want) {
		t.Errorf("Unpriced = %q, want %q", got, want)
	}
}
