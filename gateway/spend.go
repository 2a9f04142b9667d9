package gateway

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/spend"
)

// newLedger builds the spend ledger (SPEC §20) on the store, loads this
// month's sums, and wires its metrics and warnings.
func (g *Gateway) newLedger(ctx context.Context) error {
	l := spend.New(g.db, g.cfg().Budgets, g.clock.Now, g.log)
	if err := l.Load(ctx); err != nil {
		return err
	}
	l.OnSpend = func(agentID, model string, usd float64) {
		g.metrics.spend.WithLabelValues(agentID, model).Add(usd)
	}
	l.OnWarn = g.warnConversation
	g.spend = l
	return nil
}

// warnUnpriced names, in one warning, the models that count $0 because
// they have no cost while budgets are set.
func (g *Gateway) warnUnpriced() {
	cfg := g.cfg()
	if !cfg.Budgets.Any() {
		return
	}
	if un := spend.Unpriced(cfg); len(un) > 0 {
		sort.Strings(un)
		g.log.Warn("budgets are set but these models have no cost (models.providers.<id>.models[].cost; acp:<agent>: agents.list[].runtime.cost): their calls count $0 (an ACP agent's count what it reports of its own cost, if it does)",
			zap.Strings("models", un))
	}
}

// warnConversation tells a conversation it passed budgets.warnAtPercent.
func (g *Gateway) warnConversation(key, line string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := g.db.GetSession(ctx, key)
	if err != nil {
		g.log.Warn("could not find the conversation to warn about its budget", zap.String("sessionKey", key), zap.Error(err))
		return
	}
	g.post(ctx, s.Origin, channels.KindSystem, line, "")
}

// turnSpend is the spend call of a top-level turn.
func turnSpend(key, agentID string, intakeID int64, text string) spend.Call {
	return spend.Call{Conversation: key, AgentID: agentID, RunID: fmt.Sprintf("turn:%d", intakeID), Label: text}
}

// chainOf resolves a conversation's model ref to its fallbacks: the
// agent's configured setting under cfg whose primary is ref (SPEC §20).
func (g *Gateway) chainOf(cfg *config.Config, agentID string, model *agent.Model) []*agent.Model {
	models, _ := g.catalog.Chain(cfg.ModelChain(agentID, model.Ref).Refs())
	if len(models) > 0 && models[0].Ref == model.Ref {
		return models[1:]
	}
	return nil
}

// answers remembers, per conversation, which model answered its last turn
// and why (for /status).
type answers struct {
	mu sync.Mutex
	m  map[string]string // guarded by mu
}

func (a *answers) set(key, line string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string]string{}
	}
	if len(a.m) > 10000 { // a bound: /status loses old lines, nothing else does
		clear(a.m)
	}
	a.m[key] = line
}

func (a *answers) get(key string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.m[key]
}

// statusLines are /status's lines about models and spend: which model
// answered the conversation's last turn and why, models cooling down, and
// the conversation's spend.
func (g *Gateway) statusLines(key string) []string {
	var lines []string
	if a := g.answered.get(key); a != "" {
		lines = append(lines, a)
	}
	for _, h := range g.catalog.Health().Snapshot() {
		if !h.Until.IsZero() {
			lines = append(lines, fmt.Sprintf("🧊 %s cools down until %s (%d failed calls in a row, last: %s): other models are tried first.",
				h.Ref, h.Until.UTC().Format("15:04 UTC"), h.Failures, h.Reason))
		}
	}
	if g.spend != nil {
		sp := g.spend.SpentOf(key, "")
		lines = append(lines, fmt.Sprintf("Spend: today %s · this month %s", spend.Money(sp.ConversationDay), spend.Money(sp.ConversationMonth)))
	}
	return lines
}

// usageReply is /usage for a conversation.
func (g *Gateway) usageReply(ctx context.Context, key, agentID string) (string, error) {
	now := g.clock.Now()
	conv, err := spend.Report(ctx, g.db, now, key)
	if err != nil {
		return "", err
	}
	all, err := spend.Report(ctx, g.db, now, "")
	if err != nil {
		return "", err
	}
	return spend.ChatReply(conv, all, key, agentID, g.cfg().Budgets), nil
}

// healthCollector exports the models' cooldowns and failed calls.
type healthCollector struct {
	g        *Gateway
	cooling  *prometheus.Desc
	failures *prometheus.Desc
}

func newHealthCollector(g *Gateway) *healthCollector {
	return &healthCollector{g: g,
		cooling: prometheus.NewDesc("herald_model_cooldown", "1 while a model that kept failing is tried after the others of its chain (SPEC §20).",
			[]string{"model"}, nil),
		failures: prometheus.NewDesc("herald_model_failures_total", "Model calls that failed after their retries with a retryable error (each moved to a fallback or ended the turn).",
			[]string{"model"}, nil)}
}

func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.cooling; ch <- c.failures }

func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	for _, h := range c.g.catalog.Health().Snapshot() {
		v := 0.0
		if !h.Until.IsZero() {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.cooling, prometheus.GaugeValue, v, h.Ref)
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(h.TotalFailed), h.Ref)
	}
}

// spendCommands is the gateway's command.Spend.
type spendCommands struct{ g *Gateway }

func (c spendCommands) Usage(ctx context.Context, key, agentID string) (string, error) {
	return c.g.usageReply(ctx, key, agentID)
}

func (c spendCommands) StatusLines(key string) []string { return c.g.statusLines(key) }
