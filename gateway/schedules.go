package gateway

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/web"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/schedule"
)

// newScheduler builds the scheduler (SPEC §19): its firings are sub-agent
// runs of g.subs, counted in herald_schedule_firings_total{result}, and
// herald_schedules{state} counts the stored schedules.
func (g *Gateway) newScheduler() {
	firings := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herald_schedule_firings_total",
		Help: "Schedule due times by result: started (a run), skipped (the previous run still ran), missed (no gateway ran; catchUp), failed (no run could be made)."},
		[]string{"result"})
	for _, r := range []string{schedule.ResultStarted, schedule.ResultSkipped, schedule.ResultMissed, schedule.ResultFailed} {
		firings.WithLabelValues(r)
	}
	count := func(state string) prometheus.GaugeFunc {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "herald_schedules",
			Help: "Stored schedules by state: active, paused, done (a one-off that fired).", ConstLabels: prometheus.Labels{"state": state}},
			func() float64 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a scrape never hangs on the store
				defer cancel()
				c, err := g.db.CountSchedules(ctx)
				if err != nil {
					return 0
				}
				switch state {
				case "paused":
					return float64(c.Paused)
				case "done":
					return float64(c.Done)
				}
				return float64(c.Active)
			})
	}
	g.metrics.add(firings, count("active"), count("paused"), count("done"))
	g.sched = schedule.New(schedule.Deps{
		Store: g.db, Runs: g.subs, Config: g.cfg(), Clock: g.clock, Logger: g.log,
		SessionKey: func(agentID string, o channels.Origin) string { return string(ids.Requester(agentID, o)) },
		OnFiring: func(result string, n int) {
			firings.WithLabelValues(result).Add(float64(n))
			if result == schedule.ResultFailed {
				// FireDue stored the failure's notice: nothing else wakes
				// the outbox for it.
				g.outbox.wakeUp()
			}
		},
		OnChange:  g.panel.changed,
		Exclusive: !g.cluster.shared,
	})
}

// startScheduler stores the config's schedules and starts firing; the
// returned func stops the loop and waits for it.
func (g *Gateway) startScheduler(ctx context.Context) (stop func(), err error) {
	if err := g.sched.SyncConfig(ctx); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.sched.Run(sctx) }()
	return func() { cancel(); <-done }, nil
}

// runChanged is told the root session of a run that was spawned, started
// or ended: the web panel refreshes.
func (g *Gateway) runChanged(rootKey string) {
	g.panel.changed(rootKey)
	g.watchers.changed()
}

// scheduleEnded is told that a scheduled run's end was stored: the
// scheduler looks again (a catchUp "all" schedule waits for its previous
// run to end). Only such an end changes what is due (it clears the
// schedule's active run); every other run's spawn, start and end woke the
// scheduler for a read that found nothing new: 10,000 reads in the
// 10,000 case (docs/performance.md).
func (g *Gateway) scheduleEnded() {
	if g.sched != nil {
		g.sched.Wake()
	}
}

// scheduleViews are a web conversation's schedules for its panel.
func (g *Gateway) scheduleViews(ctx context.Context, key string) []web.ScheduleView {
	list, err := g.db.ListSchedules(ctx, key)
	if err != nil {
		g.log.Debug("schedules panel not refreshed", zap.String("sessionKey", key), zap.Error(err))
		return nil
	}
	views := make([]web.ScheduleView, 0, len(list))
	for i := range list {
		sc := &list[i]
		v := web.ScheduleView{ID: sc.ID, When: sc.Kind + " " + sc.Expr, Task: sc.Task, State: "active", NextDue: sc.NextDue}
		switch {
		case sc.Paused:
			v.State = "paused"
		case sc.NextDue.IsZero():
			v.State = "done"
		}
		if w, err := schedule.Parse(sc.Kind, sc.Expr, sc.Timezone); err == nil {
			v.When = w.Label()
			if !sc.NextDue.IsZero() {
				v.Next = w.FormatTime(sc.NextDue)
			}
		}
		views = append(views, v)
	}
	return views
}
