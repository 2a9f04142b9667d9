package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/web"
	"github.com/heraldhq/herald/lane"
)

// metrics are the gateway's Prometheus series (SPEC §13).
//
// The registry is made on the first scrape (registry): registering a
// collector hashes and checks its descriptors, and client_golang's Go
// collector reads the runtime's metric descriptions when it is made —
// ~1 % of a first start's CPU until ready, for a registry read only at
// /metrics. The series themselves are made at once (code counts into them
// from the start). A collector the registry refuses (a clash of names or
// labels: a programming error) fails every scrape with the error, as it
// failed the start before.
type metrics struct {
	mu        sync.Mutex
	reg       *prometheus.Registry   // made by registry()
	pending   []prometheus.Collector // added before the registry was made
	regErr    error                  // what the registry refused, reported at every scrape
	delivered *prometheus.CounterVec
	retried   *prometheus.CounterVec
	failed    *prometheus.CounterVec
	dead      *prometheus.CounterVec // dead letters (SPEC §27), by channel
	tokensIn  *prometheus.CounterVec
	tokensOut *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	channelUp *prometheus.GaugeVec
	refused   *prometheus.CounterVec
	redeliver prometheus.Counter
	// storeRetries counts store writes retried during an outage; turnRetries
	// turns put back because the store cut them short.
	storeRetries prometheus.Counter
	turnRetries  prometheus.Counter
	uncertain    *prometheus.CounterVec
	reloads      *prometheus.CounterVec
	spend        *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_outbox_delivered_total",
			Help: "Messages accepted by a channel, by kind (assistant, announce, system)."}, []string{"kind"}),
		retried: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_outbox_retried_total",
			Help: "Delivery attempts put off for a retry (errors, rate limits), by kind."}, []string{"kind"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_outbox_failed_total",
			Help: "Messages a channel rejected for good, by kind."}, []string{"kind"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_outbox_dead_total",
			Help: "Messages that became dead letters (outbox.maxAttempts failed attempts, or older than outbox.maxAgeHours), by channel."}, []string{"channel"}),
		tokensIn: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_tokens_input_total",
			Help: "Input tokens of every model call (top-level turns, sub-agent runs with their announce steps, delegate calls), by agent and model."}, []string{"agent", "model"}),
		tokensOut: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_tokens_output_total",
			Help: "Output tokens of every model call, by agent and model."}, []string{"agent", "model"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "herald_provider_latency_seconds",
			Help: "Model call latency by provider, retries included.", Buckets: prometheus.ExponentialBuckets(0.05, 2, 12)}, []string{"provider", "result"}),
		channelUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "herald_channel_up", Help: "1 when the channel reports healthy."}, []string{"channel"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_intake_refused_total",
			Help: "Inbound messages refused, by channel and reason (busy, commands_busy, rate_limited, draining, store_unavailable)."}, []string{"channel", "reason"}),
		storeRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "herald_store_write_retries_total",
			Help: "State store writes retried because the store did not take them (an outage: unreachable, busy, disk full, I/O error, no file descriptor)."}),
		turnRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "herald_turn_store_retries_total",
			Help: "Turns run again after the state store cut them short."}),
		redeliver: prometheus.NewCounter(prometheus.CounterOpts{Name: "herald_intake_redelivered_total",
			Help: "Platform re-deliveries of a message already stored (not run again)."}),
		uncertain: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_outbox_uncertain_total",
			Help: "Message parts whose delivery was uncertain after a crash, by channel and action (found, resend, skip)."}, []string{"channel", "action"}),
		spend: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_spend_usd_total",
			Help: "Estimated USD of every model call (tokens × the model's cost; $0 without cost), by agent and model (SPEC §20)."}, []string{"agent", "model"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_config_reloads_total",
			Help: "Config reloads (SIGHUP, herald reload) by result: ok, or rejected with the old config kept."}, []string{"result"}),
	}
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("rejected")
	for _, kind := range []string{"assistant", "announce", "system"} {
		m.delivered.WithLabelValues(kind)
		m.retried.WithLabelValues(kind)
		m.failed.WithLabelValues(kind)
	}
	for _, mod := range channels.Modules() {
		if mod.Uncertain != nil {
			m.uncertain.WithLabelValues(string(mod.Name), string(channels.UncertainResend))
			m.uncertain.WithLabelValues(string(mod.Name), string(channels.UncertainSkip))
		}
	}
	for _, ch := range append([]channels.Name{web.Name}, moduleNames()...) {
		for _, r := range []string{"busy", "commands_busy", "draining"} {
			m.refused.WithLabelValues(string(ch), r)
		}
		m.dead.WithLabelValues(string(ch))
	}
	m.refused.WithLabelValues("web", "rate_limited")
	m.add(m.delivered, m.retried, m.failed, m.dead, m.tokensIn, m.tokensOut, m.latency, m.channelUp, m.refused, m.redeliver, m.storeRetries, m.turnRetries, m.uncertain, m.reloads, m.spend)
	return m
}

// add registers cs, on the registry once it is made (before: when it is).
func (m *metrics) add(cs ...prometheus.Collector) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reg != nil {
		m.registerLocked(cs)
		return
	}
	m.pending = append(m.pending, cs...)
}

func (m *metrics) registerLocked(cs []prometheus.Collector) {
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			m.regErr = errors.Join(m.regErr, err)
		}
	}
}

// registry makes the registry with every collector added so far and the
// Go collector (the first scrape), and returns it with what it refused.
func (m *metrics) registry() (*prometheus.Registry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reg == nil {
		m.reg = prometheus.NewRegistry()
		m.registerLocked(append(m.pending, collectors.NewGoCollector()))
		m.pending = nil
	}
	return m.reg, m.regErr
}

// gather is the registry's samples; an error when it refused a collector
// (every scrape then answers 500 with it).
func (m *metrics) gather() ([]*dto.MetricFamily, error) {
	reg, err := m.registry()
	mfs, gerr := reg.Gather()
	return mfs, errors.Join(err, gerr)
}

// handler serves the registry (made on the first request).
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(prometheus.GathererFunc(m.gather), promhttp.HandlerOpts{})
}

// register adds the series read from live components.
func (m *metrics) register(g *Gateway) {
	laneGauge := func(l *lane.Lane, name string, queued bool) prometheus.GaugeFunc {
		help := "Jobs running on the lane."
		metric := "herald_lane_running"
		if queued {
			help, metric = "Jobs waiting on the lane.", "herald_lane_queued"
		}
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metric, Help: help, ConstLabels: prometheus.Labels{"lane": name}},
			func() float64 {
				q, r := l.Stats()
				if queued {
					return float64(q)
				}
				return float64(r)
			})
	}
	m.add(
		newHealthCollector(g),
		laneGauge(g.mainLane, "main", true), laneGauge(g.mainLane, "main", false),
		laneGauge(g.subs.Lane(), "subagent", true), laneGauge(g.subs.Lane(), "subagent", false),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "herald_subagent_spawns_total", Help: "Sub-agent runs spawned since start."},
			func() float64 { return float64(g.subs.Spawned()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "herald_sessions_loaded", Help: "Requester sessions in memory (idle ones leave after session.idleMinutes)."},
			func() float64 { return float64(g.loadedSessions()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "herald_outbox_pending", Help: "Messages waiting for delivery."},
			func() float64 {
				// The pending items alone, on their partial index: not the
				// count of every item ever sent, at every scrape.
				// A failed read is no figure (NaN), not "none pending".
				p, err := g.db.OutboxPending(context.Background())
				if err != nil {
					return math.NaN()
				}
				return float64(p)
			}),
	)
}

func (m *metrics) tokens(agentID, model string, u agent.Usage) {
	m.tokensIn.WithLabelValues(agentID, model).Add(float64(u.Input))
	m.tokensOut.WithLabelValues(agentID, model).Add(float64(u.Output))
}

// timed wraps a provider to record its latency and give every model call
// its deadline (models.providers.<id>.timeoutSeconds, SPEC §10).
func (m *metrics) timed(id string, p agent.Provider, timeout time.Duration) agent.Provider {
	return timedProvider{p: p, h: m.latency, id: id, timeout: timeout}
}

type timedProvider struct {
	p       agent.Provider
	h       *prometheus.HistogramVec
	id      string
	timeout time.Duration
}

// ErrModelTimeout is a model call that got no answer within its deadline.
var ErrModelTimeout = agent.ErrCallTimeout

func (t timedProvider) Complete(ctx context.Context, req agent.Request) (*agent.Response, error) {
	return t.call(ctx, func(ctx context.Context) (*agent.Response, error) { return t.p.Complete(ctx, req) })
}

// Stream streams through the provider when it can (else one Complete).
func (t timedProvider) Stream(ctx context.Context, req agent.Request, onText func(string)) (*agent.Response, error) {
	return t.call(ctx, func(ctx context.Context) (*agent.Response, error) {
		if st, ok := t.p.(agent.Streamer); ok {
			return st.Stream(ctx, req, onText)
		}
		resp, err := t.p.Complete(ctx, req)
		if err == nil && resp.Text != "" {
			onText(resp.Text)
		}
		return resp, err
	})
}

func (t timedProvider) call(ctx context.Context, do func(context.Context) (*agent.Response, error)) (*agent.Response, error) {
	start := time.Now()
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if t.timeout > 0 {
		cctx, cancel = context.WithTimeoutCause(ctx, t.timeout, ErrModelTimeout)
	}
	resp, err := do(cctx)
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(cctx), ErrModelTimeout) {
		err = fmt.Errorf("%w: provider %s did not answer within %s (models.providers.%s.timeoutSeconds)", ErrModelTimeout, t.id, t.timeout, t.id)
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	t.h.WithLabelValues(t.id, result).Observe(time.Since(start).Seconds())
	return resp, err
}
