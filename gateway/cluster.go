package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent"
)

// Replicas (SPEC §14, docs/scaling.md). On a PostgreSQL state any number
// of gateways run at once, each under its gateway.replicaId:
//
//   - each holds the lease "replica:<id>", renewed every third of
//     state.leaseSeconds; the owed turns, sub-agent runs and outbox items it
//     claimed are its own while the lease lives, and free for the others
//     once it lapsed (a SIGKILL) or was given up (a clean stop);
//   - each claims free work every poll (and when told), with FOR UPDATE
//     SKIP LOCKED: owed turns that head their session (one turn per session
//     across the cluster), runs left by a dead replica, due outbox items
//     that head their destination on the channels it runs;
//   - a channel that must have one client at a time (Telegram long polling,
//     Matrix /sync) runs on the replica holding the lease "channel:<name>";
//     every other channel runs on every replica;
//   - wake-ups travel over LISTEN/NOTIFY on the channel "herald": an outbox
//     item another replica should send, a web client's new message, /stop,
//     /subagents stop and /approve for work living on another replica.
//     A notification can be lost (sent while the listener reconnects), so
//     none is the only record: what it asks for is in the store first (the
//     outbox, the decided approval, the stop request of store.Stops), and
//     every replica reads that again each poll and whenever its listener
//     is in place again (actOnStops, approvals.recheck, the delivery pass).
//
// On SQLite one process runs: it holds everything and no lease is needed.

// busChannel is the NOTIFY channel the replicas talk on.
const busChannel = "herald"

// busKind says what a notification between replicas asks for. The values
// travel in the JSON of busMsg: replicas of different versions read them.
type busKind string

const (
	busOutbox    busKind = "outbox"    // an outbox item is due: a delivery pass
	busClaims    busKind = "claims"    // work was let go (a replica left): a claim pass and a delivery pass
	busWeb       busKind = "web"       // arg: a web client with a new message for its event streams
	busAbort     busKind = "abort"     // arg: a session key whose running turn /stop cancels
	busStop      busKind = "stop"      // arg: a run id to stop with the runs below it
	busStopBelow busKind = "stopbelow" // arg: a session key whose sub-agent runs stop
	busApproval  busKind = "approval"  // arg: an approval code that was decided
	// busRelisten is this replica's own, never sent: its listener is in
	// place again, and what it may have missed meanwhile is read again.
	busRelisten busKind = "relisten"
)

// busMsg is one notification between replicas.
type busMsg struct {
	From string  `json:"from"`
	Kind busKind `json:"kind"`
	Arg  string  `json:"arg,omitempty"`
}

// clusterDeps are the few things the cluster uses; the Gateway wires them
// (New, clusterDepsOf).
type clusterDeps struct {
	db interface {
		store.Leases
		store.Bus
		store.Stops
	}
	shared bool // PostgreSQL: other replicas may run
	// setPhase says what /readyz reports (standby while the lease is held
	// elsewhere).
	setPhase func(name, reason string)
	// channels are the adapters built here; exclusive reports whether only
	// one replica at a time may run one; launch starts one this replica now
	// runs.
	channels  func() map[channels.Name]channels.Channel
	exclusive func(channels.Name) bool
	launch    func(channels.Channel)
	// takeOver claims the work other replicas left (each poll and when
	// told); handlers answer what the other replicas say, by kind.
	takeOver func(ctx context.Context)
	handlers map[busKind]func(ctx context.Context, arg string)
	log      *zap.Logger
}

// cluster is this replica's part in a shared state: its leases, the
// channel roles and the bus.
type cluster struct {
	clusterDeps
	id string
	// instance names this process: it holds the lease "instance:<id>", so
	// a second process started under the same replica id stands by
	// instead of working alongside (the replica lease names only the id).
	instance string
	ttl      time.Duration
	wake     chan struct{} // a claim pass now
	tell     chan struct{} // an outbox wake-up to pass on (coalesced)
	lost     chan string   // the replica lease or a channel lease was lost
	// onLost, if set, is called instead of ending Run when a lease is lost.
	onLost func(reason string)

	mu  sync.Mutex
	led map[channels.Name]bool // exclusive channels this replica runs; guarded by mu

	heartbeatStop context.CancelFunc
	heartbeatDone chan struct{}
}

// newCluster is the cluster of replica id whose leases last ttl.
func newCluster(deps clusterDeps, id string, ttl time.Duration, onLost func(string)) *cluster {
	return &cluster{clusterDeps: deps, id: id, instance: uuid.NewString(), ttl: ttl,
		wake: make(chan struct{}, 1), tell: make(chan struct{}, 1), lost: make(chan string, 1), onLost: onLost,
		led: make(map[channels.Name]bool)}
}

// poll is how often a replica looks for work others left and for channel
// roles: a fifth of the lease, between 100 ms and 1 s, so a takeover comes
// within about leaseSeconds + poll of the dead replica's last renewal.
func (c *cluster) poll() time.Duration { return min(max(c.ttl/5, 100*time.Millisecond), time.Second) }

// pollShared is poll with other replicas, 0 on SQLite (one process).
func (c *cluster) pollShared() time.Duration {
	if !c.shared {
		return 0
	}
	return c.poll()
}

// join takes this replica's lease and keeps it renewed until leave. While
// another live process holds the lease of this gateway.replicaId (the same
// id started twice, or a restart before the old lease expired) the replica
// stands by — /readyz answers 503 standby — and takes over once the lease
// is free. A database that does not answer is retried for one lease length,
// then join fails (the process exits for its supervisor).
func (c *cluster) join(ctx context.Context) error {
	c.heartbeatDone = make(chan struct{})
	if !c.shared {
		close(c.heartbeatDone)
		c.heartbeatStop = func() {}
		return nil
	}
	var standby bool
	var unreachable time.Time
	for {
		_, err := c.db.AcquireLease(ctx, c.instanceLease(), c.instance, c.ttl)
		if err == nil {
			_, err = c.db.AcquireLease(ctx, store.ReplicaLease(c.id), c.id, c.ttl)
		}
		if err == nil {
			break
		}
		switch {
		case ctx.Err() != nil:
			close(c.heartbeatDone)
			return ctx.Err()
		case errors.Is(err, store.ErrLeaseHeld):
			unreachable = time.Time{}
			if !standby {
				standby = true
				c.log.Warn("standby: another process runs as this replica; taking over when it ends",
					zap.String("replicaId", c.id), zap.Error(err))
			}
			c.setPhase(phaseStandby, "another process runs as replica "+c.id+" ("+err.Error()+"); taking over when it ends")
		default:
			if unreachable.IsZero() {
				unreachable = time.Now()
			}
			if time.Since(unreachable) >= c.ttl {
				close(c.heartbeatDone)
				return err
			}
			c.log.Warn("standby: cannot take the replica lease; retrying", zap.String("replicaId", c.id), zap.Error(err))
			c.setPhase(phaseStandby, "the database does not answer: "+err.Error())
		}
		select {
		case <-ctx.Done():
			close(c.heartbeatDone)
			return ctx.Err()
		case <-time.After(c.poll()):
		}
	}
	hctx, stop := context.WithCancel(context.Background())
	c.heartbeatStop = stop
	go func() { defer close(c.heartbeatDone); c.heartbeat(hctx) }()
	c.log.Info("joined the replicas", zap.String("replicaId", c.id), zap.Duration("lease", c.ttl))
	return nil
}

// leave stops renewing and gives the leases up, so the others take this
// replica's channels and what is left of its work at once.
func (c *cluster) leave() {
	c.heartbeatStop()
	<-c.heartbeatDone
	if !c.shared {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, n := range c.ledChannels() {
		if err := c.db.ReleaseLease(ctx, "channel:"+string(n), c.id); err != nil {
			c.log.Warn("could not give up a channel lease; another replica takes it when it expires", zap.String("channel", string(n)), zap.Error(err))
		}
	}
	if err := c.db.ReleaseLease(ctx, store.ReplicaLease(c.id), c.id); err != nil {
		c.log.Warn("could not give up the replica lease; the others take over when it expires", zap.Error(err))
	}
	if err := c.db.ReleaseLease(ctx, c.instanceLease(), c.instance); err != nil {
		c.log.Warn("could not give up the instance lease; a standby under the same replica id takes over when it expires", zap.Error(err))
	}
	c.send(ctx, busClaims, "")
}

// heartbeat renews the replica lease and the channel leases every third
// of their length, and every second while renewals fail (a database
// restarting). A lease another replica took, or no renewal for three
// quarters of its length, is lost: the replica must stop working at once,
// before another may take its work over (the lease runs out on the
// database's clock a quarter later). An outage shorter than that is ridden
// out.
func (c *cluster) heartbeat(ctx context.Context) {
	every := c.ttl / 3
	last := time.Now()
	wait := every
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		rctx, cancel := context.WithTimeout(ctx, min(every, c.ttl*3/4-time.Since(last)))
		err := c.renew(rctx)
		cancel()
		switch {
		case err == nil:
			if wait != every {
				c.log.Info("replica lease renewed again", zap.String("replicaId", c.id), zap.Duration("after", time.Since(last).Round(time.Millisecond)))
			}
			last, wait = time.Now(), every
		case ctx.Err() != nil:
			return
		case errors.Is(err, store.ErrLeaseHeld):
			c.lose("lost the replica lease: " + err.Error())
			return
		case time.Since(last) >= c.ttl*3/4:
			c.lose("lost the replica lease: no renewal for " + time.Since(last).Round(time.Millisecond).String() + ": " + err.Error())
			return
		default:
			wait = min(every, time.Second)
			c.log.Warn("cannot renew the replica lease; retrying", zap.String("replicaId", c.id), zap.Error(err), zap.Duration("retryIn", wait))
		}
	}
}

// ledChannels are the exclusive channels this replica runs.
func (c *cluster) ledChannels() []channels.Name {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Collect(maps.Keys(c.led))
}

// instanceLease is the lease of this process under its replica id.
func (c *cluster) instanceLease() string { return "instance:" + c.id }

func (c *cluster) renew(ctx context.Context) error {
	if _, err := c.db.AcquireLease(ctx, c.instanceLease(), c.instance, c.ttl); err != nil {
		return err
	}
	if _, err := c.db.AcquireLease(ctx, store.ReplicaLease(c.id), c.id, c.ttl); err != nil {
		return err
	}
	for _, n := range c.ledChannels() {
		if _, err := c.db.AcquireLease(ctx, "channel:"+string(n), c.id, c.ttl); err != nil {
			return err
		}
	}
	return nil
}

func (c *cluster) lose(reason string) {
	c.log.Error("stopping at once so that no work runs twice (what this replica held stays in the store for the others and the next start)",
		zap.String("replicaId", c.id), zap.String("reason", reason))
	if c.onLost != nil {
		c.onLost(reason)
		return
	}
	select {
	case c.lost <- reason:
	default:
	}
}

// claimLeft is the cluster's takeOver: with the main lane not draining,
// it takes the exclusive channels nobody runs, then claims the owed turns
// (no more than the main lane has room for), sub-agent runs and pending
// approvals that other replicas left.
func (g *Gateway) claimLeft(ctx context.Context) {
	g.mu.Lock()
	draining := g.draining
	g.mu.Unlock()
	if draining {
		return
	}
	c := g.cluster
	c.elect(ctx)
	// Take no more than the main lane has room for; the rest wait in the
	// store for this replica's next pass or another replica.
	queued, _ := g.mainLane.Stats()
	if room := g.maxQueued() - queued; room > 0 {
		owed, err := g.db.ClaimOwed(ctx, store.Claim{Holder: c.id, Limit: room})
		if err != nil && ctx.Err() == nil {
			c.log.Warn("could not claim owed turns", zap.Error(err))
		}
		if len(owed) > 0 {
			c.log.Info("took over owed turns", zap.Int("turns", len(owed)))
		}
		for _, it := range owed {
			g.enqueueTurn(it, g.turnLog(it))
		}
	}
	if _, err := g.subs.Adopt(ctx); err != nil && ctx.Err() == nil {
		c.log.Warn("could not take over sub-agent runs", zap.Error(err))
	}
	if err := g.approv.expireStale(ctx, false); err != nil && ctx.Err() == nil {
		c.log.Warn("could not expire approvals of a dead replica", zap.Error(err))
	}
	g.approv.recheck()
	g.actOnStops(ctx)
}

// actOnStops stops the runs and cuts the turns this replica holds that
// another replica recorded a stop for (store.Stops): what busStop,
// busStopBelow and busAbort tell at once, read again in case the
// notification was lost. A request ends with its run or turn, so one
// already acted on is only found again until the run or turn has ended.
func (g *Gateway) actOnStops(ctx context.Context) {
	runs, sessions, err := g.db.StopRequests(ctx, g.cluster.id)
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("could not read the stop requests of other replicas", zap.Error(err))
		}
		return
	}
	for _, id := range runs {
		if n, _ := g.subs.StopLocal(ctx, id); n > 0 {
			g.log.Info("stopped a run another replica asked to stop (read from the store)", zap.String("runId", id), zap.Int("stopped", n))
		}
	}
	for _, key := range sessions {
		if _, cut := g.abortTurn(key); cut {
			g.log.Info("cut a turn another replica asked to stop (read from the store)", zap.String("sessionKey", key))
		}
	}
}

// busHandlers answer what the other replicas say (a claims message also
// makes the cluster claim at once).
func (g *Gateway) busHandlers() map[busKind]func(ctx context.Context, arg string) {
	return map[busKind]func(ctx context.Context, arg string){
		busOutbox: func(context.Context, string) { g.outbox.wakeLocal() },
		busClaims: func(context.Context, string) { g.outbox.wakeLocal() },
		busWeb: func(_ context.Context, client string) {
			if g.web != nil {
				g.web.Wake(client)
			}
		},
		busAbort:     func(_ context.Context, key string) { g.abortTurn(key) },
		busStop:      func(ctx context.Context, runID string) { g.subs.StopLocal(ctx, runID) },
		busStopBelow: func(ctx context.Context, key string) { g.subs.StopBelowLocal(ctx, key) },
		busApproval:  func(_ context.Context, code string) { g.approv.decided(code) },
		busRelisten: func(context.Context, string) {
			if g.web != nil {
				g.web.WakeAll()
			}
		},
	}
}

// abortAnywhere cancels the running turn of a session here and, with other
// replicas, asks them to cancel it too (it runs where its message was
// claimed). It reports whether a turn was cancelled here.
func (g *Gateway) abortAnywhere(key string) bool {
	ok, _ := g.abortTurn(key)
	if !ok && g.cluster.shared {
		// Recorded first, so the holder cuts the turn even if it misses the
		// notification (actOnStops).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := g.db.RequestAbort(ctx, key, g.cluster.id, g.clock.Now()); err != nil {
			g.log.Warn("could not record /stop for a turn on another replica; telling it only", zap.String("sessionKey", key), zap.Error(err))
		}
		g.cluster.send(ctx, busAbort, key)
	}
	return ok
}

// exclusive reports whether only one replica at a time may run the
// channel, as its module says (Telegram long polling, Matrix /sync); the
// web chat runs on every replica.
func (g *Gateway) exclusive(name channels.Name) bool {
	m, ok := channels.Lookup(name)
	return ok && m.IsExclusive(g.cfg().Channels.Options(string(name)))
}

// runs reports whether this replica runs the channel: always, unless it
// is exclusive and another replica holds it.
func (c *cluster) runs(name channels.Name) bool {
	if !c.shared || !c.exclusive(name) {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.led[name]
}

// elect takes the lease of every exclusive channel nobody holds and starts
// the channel here.
func (c *cluster) elect(ctx context.Context) {
	if !c.shared {
		return
	}
	for name, ch := range c.channels() {
		if !c.exclusive(name) || c.runs(name) {
			continue
		}
		if _, err := c.db.AcquireLease(ctx, "channel:"+string(name), c.id, c.ttl); err != nil {
			if !errors.Is(err, store.ErrLeaseHeld) && ctx.Err() == nil {
				c.log.Warn("cannot read a channel lease", zap.String("channel", string(name)), zap.Error(err))
			}
			continue
		}
		c.mu.Lock()
		c.led[name] = true
		c.mu.Unlock()
		c.log.Info("this replica runs the channel now", zap.String("channel", string(name)), zap.String("replicaId", c.id))
		c.launch(ch)
	}
}

// holder names the replica running an exclusive channel ("" = none).
func (c *cluster) holder(ctx context.Context, name channels.Name) string {
	l, err := c.db.GetLease(ctx, "channel:"+string(name))
	if err != nil || !l.ExpiresAt.After(time.Now()) {
		return ""
	}
	return l.Holder
}

// wakeUp asks for a claim pass now.
func (c *cluster) wakeUp() { nudge(c.wake) }

// nudge signals ch (a one-slot wake-up channel) without waiting: a signal
// already pending stands for both.
func nudge(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// run claims what other replicas left — owed turns, sub-agent runs,
// pending approvals — and exclusive channels nobody runs, every poll and
// when told, until ctx ends.
func (c *cluster) run(ctx context.Context) {
	if !c.shared {
		return
	}
	t := time.NewTicker(c.poll())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.wake:
		}
		c.takeOver(ctx)
	}
}

// listen handles what the other replicas say, until ctx ends; ready is
// closed once the listener is in place (at once on SQLite).
func (c *cluster) listen(ctx context.Context, ready chan<- struct{}) {
	var once sync.Once
	isReady := func() { once.Do(func() { close(ready) }) }
	if !c.shared {
		isReady()
		return
	}
	var lost time.Time
	c.db.Listen(ctx, busChannel, func() {
		isReady()
		if !lost.IsZero() {
			c.log.Info("listening to the other replicas again", zap.Duration("after", time.Since(lost).Round(time.Millisecond)))
			lost = time.Time{}
		}
		// What was said while no listener was in place is read from the
		// store: a claim pass now (the stop requests, approvals), a
		// delivery pass, and every web event stream reads its Log.
		c.handle(ctx, busMsg{Kind: busClaims})
		c.handle(ctx, busMsg{Kind: busRelisten})
	}, func(payload string) {
		var m busMsg
		if err := json.Unmarshal([]byte(payload), &m); err != nil || m.From == c.id {
			return
		}
		c.handle(ctx, m)
	}, func(err error) {
		if lost.IsZero() {
			lost = time.Now()
		}
		// The error names the server and the user, never the password
		// (store.Listen takes it out).
		c.log.Warn("lost the listener to the other replicas; connecting again (what they say meanwhile is read from the store)", zap.Error(err))
	})
	isReady()
}

func (c *cluster) handle(ctx context.Context, m busMsg) {
	if m.Kind == busClaims {
		c.wakeUp()
	}
	if h := c.handlers[m.Kind]; h != nil {
		h(ctx, m.Arg)
	}
}

// send tells the other replicas kind and arg; a failure is logged (they
// poll as well).
func (c *cluster) send(ctx context.Context, kind busKind, arg string) {
	if !c.shared {
		return
	}
	b, _ := json.Marshal(busMsg{From: c.id, Kind: kind, Arg: arg})
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := c.db.Notify(sctx, busChannel, string(b)); err != nil {
		c.log.Warn("could not tell the other replicas", zap.String("kind", string(kind)), zap.Error(err))
	}
}

// tellOutbox passes an outbox wake-up on to the other replicas (one
// notification at a time; wake-ups meanwhile are folded into the next).
func (c *cluster) tellOutbox() {
	if c.shared {
		nudge(c.tell)
	}
}

// teller sends the outbox wake-ups until ctx ends.
func (c *cluster) teller(ctx context.Context) {
	if !c.shared {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.tell:
			c.send(ctx, busOutbox, "")
		}
	}
}

// tellWeb wakes the event streams of a web client open on other replicas.
func (c *cluster) tellWeb(client string) {
	if c.shared {
		c.send(context.Background(), busWeb, client)
	}
}

// peers is the cluster as the sub-agent manager sees it (nil on SQLite).
type peers struct{ c *cluster }

func (g *Gateway) peers() subagent.Peers {
	if !g.cluster.shared {
		return nil
	}
	return peers{g.cluster}
}

func (p peers) StopRun(ctx context.Context, runID string, runs []string) {
	p.request(ctx, runs)
	p.c.send(ctx, busStop, runID)
}

func (p peers) StopBelow(ctx context.Context, sessionKey string, runs []string) {
	p.request(ctx, runs)
	p.c.send(ctx, busStopBelow, sessionKey)
}

// request records the stop of runs before the other replicas are told, so
// their holder stops them even if it misses the notification (actOnStops).
// The write outlives the caller's cancellation but not a store that does
// not answer: it has the bound abortAnywhere gives RequestAbort.
func (p peers) request(ctx context.Context, runs []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := p.c.db.RequestStop(ctx, runs, time.Now()); err != nil {
		p.c.log.Warn("could not record a stop for runs on other replicas; telling them only", zap.Int("runs", len(runs)), zap.Error(err))
	}
}

func (p peers) Alive(ctx context.Context, replica string) bool { return p.c.alive(ctx, replica) }

// alive reports whether replica holds its lease (on SQLite: whether it is
// this process).
func (c *cluster) alive(ctx context.Context, replica string) bool {
	if replica == "" {
		return false
	}
	if replica == c.id {
		return true
	}
	if !c.shared {
		return false
	}
	live, err := c.db.LiveReplicas(ctx)
	return err == nil && slices.Contains(live, replica)
}
