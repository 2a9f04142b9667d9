package schedule

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

// Firing results (herald_schedule_firings_total{result}).
const (
	ResultStarted = "started" // a run was recorded and queued
	ResultSkipped = "skipped" // the previous run still ran
	ResultMissed  = "missed"  // passed over while no gateway ran (catchUp)
	ResultFailed  = "failed"  // no run could be made (the agent or model is gone)
)

// Runs makes and starts the sub-agent runs of firings (*subagent.Manager).
type Runs interface {
	ScheduledRun(s *store.Schedule, due time.Time, note string) (*store.Run, *store.Session, error)
	StartScheduled(r *store.Run)
}

// Clock is the scheduler's time; tests use a fake one.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Deps is what a Scheduler needs.
type Deps struct {
	Store  store.Schedules
	Runs   Runs
	Config *config.Config
	Clock  Clock
	Logger *zap.Logger
	// SessionKey names the conversation of an agent at an origin
	// (gateway.SessionKey): a config schedule's runs belong to it.
	SessionKey func(agentID string, o channels.Origin) string
	// OnFiring, if set, counts firings by result (metrics).
	OnFiring func(result string, n int)
	// OnChange, if set, is told the conversation whose schedules were
	// added, paused, resumed or removed (the web panel). It must not block.
	OnChange func(sessionKey string)
	// Batch bounds the schedules fired in one transaction; default 100.
	Batch int
	// Parallel is how many passes fire at once when many schedules are
	// due together; default 4.
	Parallel int
	// MaxWait bounds a sleep between passes (another replica may have
	// added a schedule); default 5 s.
	MaxWait time.Duration
	// Exclusive says no other process adds or resumes schedules (SQLite:
	// herald's commands only list them; this process's writers call
	// Wake). A pass then runs only when woken or when the next due time
	// the last pass saw has come, not every MaxWait: an idle gateway
	// runs no SQL every 5 s. It still looks at the clock every MaxWait,
	// so a clock step or a suspend delays a due time by MaxWait at most,
	// as before.
	Exclusive bool
}

// Scheduler fires due schedules. Any number of replicas may run one on a
// shared PostgreSQL state: each due time is fired by one of them.
type Scheduler struct {
	d    Deps
	log  *zap.Logger
	conf atomic.Pointer[config.Config]
	wake chan struct{}
	mu   sync.Mutex // serialises passes of this process
	// started: due times before it were missed while no gateway (this
	// one) ran; catchUp "all" lets only those wait for a previous run.
	started time.Time
}

// New returns a Scheduler; Run starts it.
func New(d Deps) *Scheduler {
	if d.Clock == nil {
		d.Clock = systemClock{}
	}
	if d.Logger == nil {
		d.Logger = zap.NewNop()
	}
	if d.Batch <= 0 {
		d.Batch = 100
	}
	if d.Parallel <= 0 {
		d.Parallel = 4
	}
	if d.MaxWait <= 0 {
		d.MaxWait = 5 * time.Second
	}
	if d.OnFiring == nil {
		d.OnFiring = func(string, int) {}
	}
	if d.OnChange == nil {
		d.OnChange = func(string) {}
	}
	s := &Scheduler{d: d, log: d.Logger.Named("schedule"), wake: make(chan struct{}, 1), started: d.Clock.Now()}
	s.conf.Store(d.Config)
	return s
}

func (s *Scheduler) config() *config.Config { return s.conf.Load() }

// SetConfig applies a reloaded config: its schedules.list is stored first,
// and on an error the scheduler keeps the config it had.
func (s *Scheduler) SetConfig(ctx context.Context, cfg *config.Config) error {
	if err := s.sync(ctx, cfg); err != nil {
		return err
	}
	s.conf.Store(cfg)
	s.Wake()
	return nil
}

// ConfigOrigin is the destination of a config schedule.
func ConfigOrigin(d config.ScheduleDeliver) channels.Origin {
	return channels.Origin{Channel: channels.Name(d.Channel), Account: d.Account, ChatID: d.Chat,
		ChatType: d.ChatType, ThreadID: d.Thread}
}

// SyncConfig stores the config's schedules.list (new ones start from now;
// unchanged ones keep their next due time).
func (s *Scheduler) SyncConfig(ctx context.Context) error { return s.sync(ctx, s.config()) }

func (s *Scheduler) sync(ctx context.Context, cfg *config.Config) error {
	now := s.d.Clock.Now()
	list := make([]store.Schedule, 0, len(cfg.Schedules.List))
	for i, l := range cfg.Schedules.List {
		kind, expr := store.ScheduleCron, l.Cron
		switch {
		case l.Every != "":
			kind, expr = store.ScheduleEvery, l.Every
		case l.At != "":
			kind, expr = store.ScheduleAt, l.At
		}
		w, err := Parse(kind, expr, l.Timezone)
		if err != nil {
			return fmt.Errorf("schedules.list[%d] (%s): %w", i, l.ID, err)
		}
		o := ConfigOrigin(l.Deliver)
		key := ""
		if s.d.SessionKey != nil {
			key = s.d.SessionKey(l.AgentID, o)
		}
		next := w.First(now)
		if kind == store.ScheduleAt && next.Before(now) {
			next = time.Time{} // a one-off in the past: nothing to do
		}
		list = append(list, store.Schedule{
			ID: l.ID, SessionKey: key, AgentID: l.AgentID, Kind: kind, Expr: w.Expr, Timezone: l.Timezone,
			Task: l.Task, Origin: o, CatchUp: l.CatchUp, MaxFailures: l.MaxFailures, NextDue: next,
			CreatedAt: now, CreatedBy: "config",
		})
	}
	if err := s.d.Store.SyncConfigSchedules(ctx, list); err != nil {
		return err
	}
	return nil
}

// Wake makes the loop look at the schedules now (one was added, resumed,
// or a run ended).
func (s *Scheduler) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run fires due schedules until ctx ends.
func (s *Scheduler) Run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	var backoff time.Duration // after failed passes in a row; 0 = none
	// With Exclusive: the last pass and look succeeded and found nothing
	// due before next (zero: no schedule due at all), so a pass before
	// then, unless woken, would find nothing either.
	var (
		settled bool
		next    time.Time
	)
	for {
		woken := false
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.wake:
			woken = true
		}
		if settled && !woken {
			if now := s.d.Clock.Now(); next.IsZero() || now.Before(next) {
				timer.Reset(s.wait(next, 0))
				continue
			}
		}
		// A pass is a write transaction; most wake-ups (a scheduled run's
		// end wakes the loop) find nothing due, which a read
		// tells (NextScheduleAt selects with FireDue's condition). A read
		// that fails lets the pass run and report.
		if n, ok, lerr := s.d.Store.NextScheduleAt(ctx, s.started); lerr == nil && (!ok || s.d.Clock.Now().Before(n)) {
			next = time.Time{}
			if ok {
				next = n
			}
			settled = s.d.Exclusive && backoff == 0
			resetTimer(timer, s.wait(next, backoff))
			continue
		}
		_, err := s.Tick(ctx)
		if err != nil && ctx.Err() == nil {
			// A failing pass (or row) would otherwise be retried every
			// millisecond while its due time stays in the past.
			backoff = nextBackoff(backoff)
			s.log.Error("could not fire due schedules; trying again", zap.Error(err), zap.Duration("retryIn", backoff))
		} else {
			backoff = 0
		}
		n, ok, lerr := s.d.Store.NextScheduleAt(ctx, s.started)
		next = time.Time{}
		if lerr == nil && ok {
			next = n
		}
		settled = s.d.Exclusive && err == nil && lerr == nil
		resetTimer(timer, s.wait(next, backoff))
	}
}

// resetTimer sets t to fire after d, dropping a firing not yet received.
func resetTimer(t *time.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	t.Reset(d)
}

// wait is the sleep before the next look: until next (zero: none known),
// at most MaxWait, at least backoff.
func (s *Scheduler) wait(next time.Time, backoff time.Duration) time.Duration {
	wait := s.d.MaxWait
	if !next.IsZero() {
		if d := next.Sub(s.d.Clock.Now()); d < wait {
			wait = max(d, time.Millisecond)
		}
	}
	return max(wait, backoff)
}

// Tick fires every schedule due at the clock's now and returns how many
// runs it started. When the first batch is full (many schedules due at
// once) Parallel passes share the rest: each takes its own batch in its own
// transaction (rows another pass holds are skipped on PostgreSQL; SQLite
// commits the passes' transactions together).
func (s *Scheduler) Tick(ctx context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, full, err := s.pass(ctx)
	if err != nil || !full {
		return n, err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range s.d.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k, full, err := s.pass(ctx)
				mu.Lock()
				n += k
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
				if err != nil || !full {
					return
				}
			}
		}()
	}
	wg.Wait()
	return n, errors.Join(errs...)
}

// pass fires one batch; full reports that the batch was full (more may be
// due).
func (s *Scheduler) pass(ctx context.Context) (started int, full bool, err error) {
	now := s.d.Clock.Now()
	fired, err := s.d.Store.FireDue(ctx, now, s.started, s.d.Batch, func(sc *store.Schedule) store.Firing {
		return s.plan(sc, now)
	})
	// On err, fired still holds the schedules that did fire (a row that
	// could not be recorded is left alone and named in err).
	for _, f := range fired {
		s.report(f)
		if r := f.Firing.Run; r != nil {
			s.d.Runs.StartScheduled(r)
			started++
		}
	}
	return started, err == nil && len(fired) == s.d.Batch, err
}

// plan turns Plan's decision into the store's firing, with the run made as
// sessions_spawn would make it.
func (s *Scheduler) plan(sc *store.Schedule, now time.Time) store.Firing {
	w, err := Parse(sc.Kind, sc.Expr, sc.Timezone)
	if err != nil {
		// Stored by an older config or binary and no longer valid: stop it.
		return store.Firing{Failed: true, Notice: s.notice(sc, fmt.Sprintf("⚠️ Schedule %s cannot fire: %v. Remove it with /schedule remove %s.", sc.ID, err, sc.ID))}
	}
	dec := PlanSince(w, sc, now, s.started)
	f := store.Firing{Skipped: dec.Skipped, Missed: dec.Missed, Next: dec.Next}
	if dec.Due.IsZero() {
		return f
	}
	run, child, err := s.d.Runs.ScheduledRun(sc, dec.Due, dec.Note)
	if err != nil {
		f.Failed = true
		f.Notice = s.notice(sc, fmt.Sprintf("⚠️ Schedule %s could not start its run due %s: %v", sc.ID, dec.Due.UTC().Format(time.RFC3339), err))
		return f
	}
	f.Run, f.Child = run, child
	return f
}

func (s *Scheduler) notice(sc *store.Schedule, text string) *store.OutboxItem {
	return &store.OutboxItem{Origin: sc.Origin, Kind: channels.KindSystem, Text: text,
		SessionKey: sc.SessionKey, AgentID: sc.AgentID, CreatedAt: s.d.Clock.Now()}
}

func (s *Scheduler) report(f store.Fired) {
	sc := f.Schedule
	log := s.log.With(zap.String("scheduleId", sc.ID), zap.String("sessionKey", sc.SessionKey),
		zap.String("agentId", sc.AgentID), zap.String("channel", string(sc.Origin.Channel)))
	if f.Firing.Run != nil {
		s.d.OnFiring(ResultStarted, 1)
	}
	if n := f.Firing.Skipped; n > 0 {
		s.d.OnFiring(ResultSkipped, n)
		log.Info("schedule firing skipped: its previous run still runs", zap.String("activeRun", sc.ActiveRun))
	}
	if n := f.Firing.Missed; n > 0 {
		s.d.OnFiring(ResultMissed, n)
		log.Info("schedule due times missed while no gateway ran", zap.Int("missed", n), zap.String("catchUp", sc.CatchUp))
	}
	if f.Firing.Failed {
		s.d.OnFiring(ResultFailed, 1)
		log.Warn("schedule firing failed")
	}
	if f.Paused {
		log.Warn("schedule paused after failed runs in a row", zap.Int("failures", sc.Failures))
	}
}

// Backoff after failed firing passes in a row: 1 s, doubling, at most
// MaxFireBackoff.
const (
	minFireBackoff = time.Second
	MaxFireBackoff = time.Minute
)

func nextBackoff(d time.Duration) time.Duration {
	if d <= 0 {
		return minFireBackoff
	}
	return min(2*d, MaxFireBackoff)
}
