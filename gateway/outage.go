package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/store"
)

// A store outage is a pause, not a wedge (SPEC §12, issue 30). While the
// state store cannot be written — PostgreSQL restarting or unreachable,
// SQLite busy past its timeout, a full disk, an I/O error, no file
// descriptor free —
//
//   - intake refuses: the message is not acknowledged (web 503 with
//     Retry-After; a platform re-delivers what it was not acked for);
//   - a write that ends a turn, a run or a delivery is retried with backoff
//     (logged) until the store takes it, so nothing waits for a restart;
//   - a turn the store cut short (its session or transcript could not be
//     read or written) waits for the store and runs again, continuing from
//     its transcript;
//   - an outage longer than state.leaseSeconds ends the process (exit 1,
//     logged) for its supervisor rather than leaving it stuck: on
//     PostgreSQL the replica's lease lapses then anyway, and another replica
//     or the restarted process takes the work over.

// outageBound is how long writes may keep failing before the process stops.
func (g *Gateway) outageBound() time.Duration {
	return time.Duration(max(g.cfg().State.LeaseSeconds, 1)) * time.Second
}

// retryWrite runs write until the store takes it (store.RetryWrite),
// logging each failure; an outage past outageBound stops the process.
// It returns nil, a permanent error, or the last error once ctx ended.
func (g *Gateway) retryWrite(ctx context.Context, what string, log *zap.Logger, write func(context.Context) error) error {
	err := store.RetryWrite(ctx, g.outageBound(), func(err error, attempt int, wait time.Duration) {
		g.metrics.storeRetries.Inc()
		log.Warn("the state store did not take a write; retrying", zap.String("write", what), zap.Int("attempt", attempt),
			zap.Duration("retryIn", wait), zap.Error(err))
	}, write)
	if errors.Is(err, store.ErrOutage) {
		g.storeLost(what, err)
	}
	return err
}

// storeLost stops the process after an outage longer than outageBound.
func (g *Gateway) storeLost(what string, err error) {
	g.cluster.lose(fmt.Sprintf("the state store could not be written (%s) for longer than state.leaseSeconds (%s): %v",
		what, g.outageBound(), err))
}

// storeFailed reports whether err is the store failing for now (an outage)
// rather than something a retry would not change.
func storeFailed(err error) bool {
	return err != nil && store.Transient(err) && !errors.Is(err, context.DeadlineExceeded)
}

// historyInStore reports whether the transcripts are rows of the state
// store (PostgreSQL) rather than files: then a history that could not be
// read for a reason other than its content (agent.ErrHistory without
// store.ErrCorrupt, which storeFailed leaves out) is the store being away,
// and the turn waits for it like any other store failure instead of
// answering that the history is unreadable. A transcript file that cannot
// be read is not retried: nothing says a retry would read it.
func (g *Gateway) historyInStore() bool { return g.db.Driver() == store.DriverPostgres }

// retryTurn puts back a turn the store cut short: once the store takes a
// write again (its start is recorded), the turn goes back on the main lane
// and continues from its session's transcript. The caller has released or
// evicted the session.
func (g *Gateway) retryTurn(laneCtx context.Context, it store.Intake, log *zap.Logger, cause error) {
	log.Warn("turn interrupted by the state store; it runs again when the store is back", zap.Int64("intakeId", it.ID), zap.Error(cause))
	g.metrics.turnRetries.Inc()
	at := g.clock.Now()
	if err := g.retryWrite(laneCtx, "record the turn's start", log, func(ctx context.Context) error {
		return g.db.StartIntake(context.WithoutCancel(ctx), it.ID, at)
	}); err != nil {
		log.Warn("turn stays owed", zap.Int64("intakeId", it.ID), zap.Error(err))
		return
	}
	if it.StartedAt.IsZero() {
		it.StartedAt = at
	}
	log.Info("state store is back; running the turn again", zap.Int64("intakeId", it.ID))
	g.enqueueTurn(it, log)
}
