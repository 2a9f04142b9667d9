package main

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/store"
)

// gatewayLease names the role one replica holds at a time on a PostgreSQL
// state: it runs the channels, lanes, outbox and recovery; the others wait
// as standbys and take over once its lease expires (docs/scaling.md).
const gatewayLease = "gateway"

// role is this replica's claim on the gateway role.
type role struct {
	db  store.Leases
	id  string
	ttl time.Duration
	log *zap.Logger
}

// poll is how often a standby asks for the lease: a fifth of its length,
// between 100 ms and 1 s, so a takeover comes within about ttl + poll of
// the holder's last renewal.
func (r *role) poll() time.Duration { return min(max(r.ttl/5, 100*time.Millisecond), time.Second) }

// acquire returns once this replica holds the lease, or ctx's error.
func (r *role) acquire(ctx context.Context) error {
	var waitingFor string
	for {
		l, err := r.db.AcquireLease(ctx, gatewayLease, r.id, r.ttl)
		switch {
		case err == nil:
			r.log.Info("took the gateway role", zap.String("replicaId", r.id), zap.Time("leaseUntil", l.ExpiresAt))
			return nil
		case errors.Is(err, store.ErrLeaseHeld):
			if l.Holder != waitingFor {
				waitingFor = l.Holder
				r.log.Info("standby: another replica has the gateway role; taking over when its lease expires",
					zap.String("replicaId", r.id), zap.String("holder", l.Holder), zap.Time("leaseUntil", l.ExpiresAt))
			}
		case ctx.Err() != nil:
		default:
			r.log.Warn("standby: cannot read the gateway lease; retrying", zap.String("replicaId", r.id), zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.poll()):
		}
	}
}

// hold renews the lease every third of its length until ctx ends. When a
// renewal is refused (another replica has it) or none succeeded for half
// its length (the database is unreachable), lost is called: the replica
// must stop at once, before another can take over.
func (r *role) hold(ctx context.Context, lost func(reason string)) {
	every := r.ttl / 3
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		_, err := r.db.AcquireLease(rctx, gatewayLease, r.id, r.ttl)
		cancel()
		switch {
		case err == nil:
			last = time.Now()
		case ctx.Err() != nil:
			return
		case errors.Is(err, store.ErrLeaseHeld):
			lost(err.Error())
			return
		case time.Since(last) >= r.ttl/2:
			lost("no renewal for " + time.Since(last).Round(time.Millisecond).String() + ": " + err.Error())
			return
		default:
			r.log.Warn("cannot renew the gateway lease; retrying", zap.String("replicaId", r.id), zap.Error(err))
		}
	}
}

// release gives the lease up, so a standby takes over without waiting.
func (r *role) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.db.ReleaseLease(ctx, gatewayLease, r.id); err != nil {
		r.log.Warn("could not release the gateway lease; a standby takes over when it expires", zap.Error(err))
	}
}
