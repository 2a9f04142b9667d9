// Package spend keeps model spend and enforces budgets (SPEC §20): every
// model call's cost (tokens × the model's configured cost) is counted per
// requester conversation, agent and in total, by UTC day and calendar
// month, and a call that would go past a budget is not made.
//
// The check reads memory only. A Ledger holds the sums of the current day
// and month, loaded from the store at start; each call's spend is added in
// memory at once and written to the store as one row (store.Spend), the
// way its transcript line is; replicas of a PostgreSQL state re-read the
// sums every RefreshEvery, so a budget is overshot by at most the calls in
// flight and the spend other replicas made since their last refresh.
//
// It must not import gateway, subagent or any channels package: the
// gateway and the sub-agent manager call it (Guard before each call,
// Counter after it), and so can any other caller of a model (schedules
// run as sub-agent runs and are counted there).
package spend

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

// RefreshEvery is how often a Ledger re-reads the sums from the store.
const RefreshEvery = 10 * time.Second

// Call names who makes a model call: the requester conversation it counts
// against (a sub-agent run's or a schedule's root key), its agent, and
// the run ("turn:<intake id>" for a top-level turn).
type Call struct {
	Conversation string
	AgentID      string
	RunID        string
	Label        string
}

// BudgetError is a budget reached: no call is made. Its Error is the line
// the person sees.
type BudgetError struct {
	Which  string // "conversation", "agent main", "total"
	Spent  float64
	Limit  float64
	Period string // "today" or "this month"
	Resets time.Time
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("💸 Budget reached: %s %s of %s %s (resets %s).", e.Which, Money(e.Spent), Money(e.Limit), e.Period,
		e.Resets.UTC().Format("2006-01-02 15:04 UTC"))
}

// ErrBudget matches every *BudgetError (errors.Is).
var ErrBudget = errors.New("budget reached")

// Is makes errors.Is(err, ErrBudget) find a BudgetError.
func (e *BudgetError) Is(target error) bool { return target == ErrBudget }

// Money formats USD as the announces do: $x.xx from a cent, else $x.xxxx.
func Money(usd float64) string {
	if usd != 0 && math.Abs(usd) < 0.01 {
		return fmt.Sprintf("$%.4f", usd)
	}
	return fmt.Sprintf("$%.2f", usd)
}

// scope kinds.
const (
	scopeConversation = "conversation"
	scopeAgent        = "agent"
	scopeTotal        = "total"
)

type key struct {
	scope, id, period string // period: YYYY-MM-DD or YYYY-MM
}

// Ledger counts spend and checks budgets.
type Ledger struct {
	st      store.Spend
	log     *zap.Logger
	now     func() time.Time
	budgets atomic.Pointer[config.Budgets]
	names   atomic.Pointer[periodNames]
	// OnSpend, if set, is told each call's agent, model and USD (metrics).
	OnSpend func(agentID, model string, usd float64)
	// OnWarn, if set, is told the line for a conversation that passed
	// budgets.warnAtPercent of a budget, once per budget and period.
	OnWarn func(conversation, line string)

	mu     sync.Mutex
	sums   map[key]float64 // guarded by mu
	warned map[key]bool    // guarded by mu
	// pending is spend this replica counted whose row is not (yet, or
	// ever: the write failed) in the store; Load adds it to what it read,
	// so a refresh neither drops a call in flight nor one it could not
	// write. Guarded by mu.
	pending map[key]float64
}

// New returns a Ledger over st with the budgets of cfg; call Load before
// use. now nil = the wall clock.
func New(st store.Spend, b config.Budgets, now func() time.Time, log *zap.Logger) *Ledger {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = zap.NewNop()
	}
	l := &Ledger{st: st, log: log.Named("spend"), now: now, sums: map[key]float64{}, warned: map[key]bool{}, pending: map[key]float64{}}
	l.SetBudgets(b)
	return l
}

// SetBudgets applies a reloaded config's budgets.
func (l *Ledger) SetBudgets(b config.Budgets) { l.budgets.Store(&b) }

func periods(t time.Time) (day, month string) {
	t = t.UTC()
	return t.Format(time.DateOnly), t.Format("2006-01")
}

// Load (re)reads this month's sums from the store.
func (l *Ledger) Load(ctx context.Context) error {
	now := l.now().UTC()
	day, month := periods(now)
	totals, err := l.st.SpendTotals(ctx, month+"-01")
	if err != nil {
		return fmt.Errorf("load spend: %w", err)
	}
	sums := map[key]float64{}
	for _, t := range totals {
		for _, p := range []string{t.Day[:7], t.Day} {
			if p != month && p != day {
				continue
			}
			sums[key{scopeConversation, t.Conversation, p}] += t.USD
			sums[key{scopeAgent, t.AgentID, p}] += t.USD
			sums[key{scopeTotal, "", p}] += t.USD
		}
	}
	l.mu.Lock()
	for k, v := range l.pending {
		if k.period == day || k.period == month {
			sums[k] += v
		}
	}
	l.sums = sums
	for k := range l.warned {
		if k.period != day && k.period != month {
			delete(l.warned, k)
		}
	}
	l.mu.Unlock()
	return nil
}

// Run re-reads the sums every RefreshEvery until ctx ends (replicas
// share one budget through the store).
func (l *Ledger) Run(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = RefreshEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lctx, cancel := context.WithTimeout(ctx, every)
		if err := l.Load(lctx); err != nil && ctx.Err() == nil {
			l.log.Warn("could not refresh spend from the store; budgets use what this replica counted", zap.Error(err))
		}
		cancel()
	}
}

// limitOf returns the budget of a scope.
func limitOf(b *config.Budgets, scope string) config.BudgetLimit {
	switch scope {
	case scopeConversation:
		return b.Conversation
	case scopeAgent:
		return b.Agent
	}
	return b.Total
}

// check is one budget a call counts against.
type check struct {
	k      key
	scope  string
	limit  float64
	period string // "today" or "this month"
}

// which names the budget of a check for people: "conversation", "agent
// main", "total".
func (c check) which() string {
	if c.scope == scopeAgent {
		return "agent " + c.k.id
	}
	return c.scope
}

// resets is when a check's period ends.
func (c check) resets(now time.Time) time.Time {
	now = now.UTC()
	if c.period == "today" {
		return time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	}
	return time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC)
}

// periodNames caches the day and month names of the current UTC day.
type periodNames struct {
	start      time.Time // the day's first instant
	day, month string
}

func (l *Ledger) periodsNow(now time.Time) (day, month string) {
	now = now.UTC()
	if p := l.names.Load(); p != nil && !now.Before(p.start) && now.Sub(p.start) < 24*time.Hour {
		return p.day, p.month
	}
	d, m := periods(now)
	l.names.Store(&periodNames{start: time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC), day: d, month: m})
	l.prune(d, m)
	return d, m
}

// prune drops the sums and warnings of past days and months (a new UTC
// day began): without it a long-running gateway on SQLite, which loads the
// sums only at start, would keep three keys per conversation per day.
// Callers must not hold l.mu.
func (l *Ledger) prune(day, month string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.sums {
		if k.period != day && k.period != month {
			delete(l.sums, k)
		}
	}
	for k := range l.warned {
		if k.period != day && k.period != month {
			delete(l.warned, k)
		}
	}
	for k := range l.pending {
		if k.period != day && k.period != month {
			delete(l.pending, k)
		}
	}
}

// forEach calls fn for every budget the call counts against, until fn
// returns false.
func (l *Ledger) forEach(c Call, day, month string, fn func(check) bool) {
	b := l.budgets.Load()
	if b == nil || !b.Any() {
		return
	}
	for _, s := range [3]struct{ scope, id string }{{scopeConversation, c.Conversation}, {scopeAgent, c.AgentID}, {scopeTotal, ""}} {
		lim := limitOf(b, s.scope)
		if lim.DailyUSD > 0 && !fn(check{key{s.scope, s.id, day}, s.scope, lim.DailyUSD, "today"}) {
			return
		}
		if lim.MonthlyUSD > 0 && !fn(check{key{s.scope, s.id, month}, s.scope, lim.MonthlyUSD, "this month"}) {
			return
		}
	}
}

// Check returns a *BudgetError when a budget the call counts against is
// reached (spent ≥ limit), else nil. It reads memory only.
func (l *Ledger) Check(c Call) error { return l.CheckPending(c, 0) }

// CheckPending is Check with pending USD more spent than the ledger
// counts yet: what a call still in flight has cost so far (an ACP
// agent's prompt, which is counted when it ends).
func (l *Ledger) CheckPending(c Call, pending float64) error {
	if l == nil {
		return nil
	}
	if b := l.budgets.Load(); b == nil || !b.Any() {
		return nil
	}
	now := l.now()
	day, month := l.periodsNow(now)
	var over *BudgetError
	l.mu.Lock()
	l.forEach(c, day, month, func(ch check) bool {
		if spent := l.sums[ch.k] + pending; spent >= ch.limit {
			over = &BudgetError{Which: ch.which(), Spent: spent, Limit: ch.limit, Period: ch.period, Resets: ch.resets(now)}
			return false
		}
		return true
	})
	l.mu.Unlock()
	if over != nil {
		return over
	}
	return nil
}

// Record counts one model call's spend: in memory at once, then one row in
// the store. A conversation that passed warnAtPercent of a budget is told
// (OnWarn) once per budget and period.
func (l *Ledger) Record(ctx context.Context, c Call, model string, usd float64, u agent.Usage) {
	if l == nil {
		return
	}
	now := l.now()
	day, month := l.periodsNow(now)
	var warnings []string
	l.mu.Lock()
	ks := make([]key, 0, 6)
	for _, p := range []string{day, month} {
		ks = append(ks, key{scopeConversation, c.Conversation, p}, key{scopeAgent, c.AgentID, p}, key{scopeTotal, "", p})
	}
	for _, k := range ks {
		l.sums[k] += usd
		if usd > 0 {
			l.pending[k] += usd
		}
	}
	if b := l.budgets.Load(); b != nil && b.Warn() > 0 && usd > 0 {
		l.forEach(c, day, month, func(ch check) bool {
			spent := l.sums[ch.k]
			if spent >= ch.limit*b.Warn()/100 && !l.warned[ch.k] {
				l.warned[ch.k] = true
				warnings = append(warnings, fmt.Sprintf("💸 Budget warning: %s %s of %s %s (%.0f%%).", ch.which(), Money(spent), Money(ch.limit), ch.period,
					math.Min(999, 100*spent/ch.limit)))
			}
			return true
		})
	}
	l.mu.Unlock()
	if l.OnSpend != nil {
		l.OnSpend(c.AgentID, model, usd)
	}
	if usd == 0 {
		// A model without cost (or a call that cost nothing) changes no
		// sum: no row, so unpriced and demo models cost no write per call.
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := l.st.RecordSpend(wctx, store.SpendEntry{At: now, Conversation: c.Conversation, AgentID: c.AgentID,
		Model: model, RunID: c.RunID, Label: cut(c.Label, 80), USD: usd, TokensIn: u.Input, TokensOut: u.Output})
	if err != nil {
		l.log.Warn("could not record spend; this replica still counts it", zap.String("conversation", c.Conversation), zap.Error(err))
	} else {
		l.mu.Lock()
		for _, k := range ks {
			if v := l.pending[k] - usd; v > 1e-12 {
				l.pending[k] = v
			} else {
				delete(l.pending, k)
			}
		}
		l.mu.Unlock()
	}
	if l.OnWarn != nil {
		for _, w := range warnings {
			l.OnWarn(c.Conversation, w)
		}
	}
}

// Guard is a Turn.BeforeCall for calls made for c.
func (l *Ledger) Guard(c Call) func(ctx context.Context, m *agent.Model) error {
	if l == nil {
		return nil
	}
	return func(context.Context, *agent.Model) error { return l.Check(c) }
}

// Counter is a Turn.OnCall that records the spend of calls made for c at
// the cost of the model that answered.
func (l *Ledger) Counter(c Call) func(m *agent.Model, u agent.Usage) {
	if l == nil {
		return nil
	}
	return func(m *agent.Model, u agent.Usage) {
		usd, _ := m.EstimateCost(u)
		l.Record(context.Background(), c, m.Ref, usd, u)
	}
}

// Spent returns the memory's sums of a conversation and an agent, today
// and this month, and the totals.
type Spent struct {
	ConversationDay, ConversationMonth float64
	AgentDay, AgentMonth               float64
	TotalDay, TotalMonth               float64
}

// SpentOf reads the sums the checks use.
func (l *Ledger) SpentOf(conversation, agentID string) Spent {
	if l == nil {
		return Spent{}
	}
	day, month := periods(l.now())
	l.mu.Lock()
	defer l.mu.Unlock()
	return Spent{
		ConversationDay: l.sums[key{scopeConversation, conversation, day}], ConversationMonth: l.sums[key{scopeConversation, conversation, month}],
		AgentDay: l.sums[key{scopeAgent, agentID, day}], AgentMonth: l.sums[key{scopeAgent, agentID, month}],
		TotalDay: l.sums[key{scopeTotal, "", day}], TotalMonth: l.sums[key{scopeTotal, "", month}],
	}
}

// Unpriced lists the configured models without cost (they count $0),
// and as acp:<id> (the model their spend is counted at) the ACP agents
// without runtime.cost: their tokens count $0 unless the agent reports its
// own cost, which cannot be known before it runs.
func Unpriced(cfg *config.Config) []string {
	var out []string
	for _, id := range cfg.ACPAgents() {
		if rt, _ := cfg.ACP(id); rt.Cost == nil {
			out = append(out, "acp:"+id)
		}
	}
	for id, p := range cfg.Models.Providers {
		if p.API == "demo" {
			continue
		}
		for _, m := range p.Models {
			if m.Cost == nil {
				out = append(out, id+"/"+m.ID)
			}
		}
	}
	return out
}

func cut(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
