package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/admin"
	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/mcptools"
	"github.com/heraldhq/herald/agent/providers"
	"github.com/heraldhq/herald/agent/sandbox"
	"github.com/heraldhq/herald/agent/tools"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/web"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/lane"
	"github.com/heraldhq/herald/memory"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/spend"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent"
	"github.com/heraldhq/herald/telemetry"
)

// Options configure a Gateway.
type Options struct {
	Config   *config.Config // validated
	StateDir string
	Logger   *zap.Logger
	// Providers tunes the model providers (tests shorten backoffs).
	Providers providers.Options
	// Listener, if set, is used instead of listening on gateway.http.listen.
	Listener net.Listener
	// Channels are extra channels (tests add a recording fake).
	Channels []channels.Channel
	// Clock drives archive deadlines and timestamps; nil = wall clock.
	Clock agent.Clock
	// HTTPReadTimeout bounds reading one request, body included; 0 = 30 s.
	HTTPReadTimeout time.Duration
	// OnLeaseLost, if set, is called when this replica lost its lease on a
	// PostgreSQL state, or the state store could not be written for longer
	// than state.leaseSeconds (herald exits at once); by default Run returns.
	OnLeaseLost func(reason string)
	// OwnsProcess says the gateway is the whole process (herald gateway):
	// once it is ready it gives back the memory start alone used (the Go
	// heap's garbage, the mappings of the binary's pages that package
	// initialisation touched). Tests, which run many gateways in one
	// process, leave it off.
	OwnsProcess bool
	// OnReady, if set, is called once the gateway is ready and, with
	// OwnsProcess, start's memory was given back (herald gateway restores
	// the GOGC it raised for start).
	OnReady func()
}

// Gateway is one running Herald daemon.
type Gateway struct {
	conf     atomic.Pointer[config.Config] // read with cfg(); Reload replaces it
	stateDir string
	log      *zap.Logger
	clock    agent.Clock
	// ownsProcess, onReady: Options.OwnsProcess, Options.OnReady
	ownsProcess bool
	onReady     func()

	db store.Store
	// openReads ends the store's reads on the writer's connection (SQLite:
	// store.DB.DeferReadPool); Run calls it once ready.
	openReads func()
	// memories is where the memory tools and /memory write: the store, or
	// on SQLite pins' write path, which drops the pinned blocks it keeps
	// (nil pins: a shared state, read on every turn; agentContext).
	memories store.Memories
	pins     *memory.PinCache
	attached attachedFiles // send_file's files, by session key, until the reply or announce takes them

	// foldedTurns holds the intake ids whose turn took sub-agent results
	// into its history (startTurn), until complete reads those results'
	// files for its reply.
	foldedTurns sync.Map

	inFlight atomic.Int64 // inbound files' bytes this process is storing now (the disk floor, quota.go)
	catalog  *agent.Catalog
	provOpts providers.Options
	subs     *subagent.Manager
	mainLane *lane.Lane
	chMu     sync.RWMutex
	channels map[channels.Name]channels.Channel   // guarded by chMu; a reload replaces changed ones
	chStop   map[channels.Name]context.CancelFunc // ends a channel's start/retry loop; guarded by chMu
	handler  atomic.Pointer[http.ServeMux]        // the routes; a reload rebuilds them
	web      *web.Adapter
	tools    atomic.Pointer[tools.Options] // built-in tools' options; Reload replaces them
	builtin  atomic.Pointer[builtinTools]  // the built-in tools of those options (builtinTools)
	metrics  *metrics
	outbox   *deliverer
	approv   *approvals
	mcp      *mcptools.Manager
	panel    *panel
	sessDeps sessionDeps // what the session commands use; set once in New
	cluster  *cluster
	spend    *spend.Ledger // budgets and spend (SPEC §20)
	answered answers       // per conversation: which model answered its last turn and why
	sched    *schedule.Scheduler
	// console is the operator's console and watchers its event streams
	// waiting for a change (SPEC §27).
	console  *admin.Console
	watchers watchers
	tracer   *telemetry.Tracer // spans of messages (SPEC §22); off = no-op
	phase    phase             // standby, starting, running (phase.go)

	owedMu   sync.Mutex
	owedHere map[int64]bool // intake ids whose turn is queued or running here
	owedDone map[int64]bool // those of owedHere that complete() ended: done in the store
	// owedUnsure says that a message this replica holds may be owed in the
	// store with no turn queued for it here: a turn ended without
	// completing its message, the lane refused one, or storing a message
	// failed. sweepOwed reads the store for such turns only then when
	// no other process writes the state (SQLite).
	owedUnsure atomic.Bool

	listener net.Listener
	server   *http.Server

	reloadMu     sync.Mutex // one reload at a time
	reloadClosed bool       // set by shutdown: no reload after it began; guarded by reloadMu

	mu         sync.Mutex
	sessions   map[string]*sessionState // requester sessions with a loaded history
	newRows    map[string]storedRow     // session rows a message's intake stored or read, and nothing loaded since
	followUps  map[string]turnCut       // turns of child sessions answering in a bound thread, by child key (threads.go)
	bg         sync.WaitGroup           // command goroutines, channel starters
	bgCtx      context.Context
	bgCancel   context.CancelFunc
	draining   bool
	commands   int    // chat commands running (≤ MaxCommands)
	stopOutbox func() // ends the delivery loop and waits for it (set by Run)
	stopSched  func() // ends the scheduler loop and waits for it (set by Run)
}

// New opens the state and builds every component; nothing runs until Run.
// Errors say what failed: a corrupt or unwritable state dir, a provider that
// cannot be built, a channel with bad options, an address in use.
func New(ctx context.Context, o Options) (*Gateway, error) {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Clock == nil {
		o.Clock = agent.SystemClock{}
	}
	cfg := o.Config
	// No other process of this user may read the gateway's memory or
	// /proc/<pid>/environ (its secrets).
	if err := hardenProcess(); err != nil {
		return nil, fmt.Errorf("make the gateway process non-dumpable: %w", err)
	}
	g := &Gateway{stateDir: o.StateDir, log: o.Logger, clock: o.Clock, ownsProcess: o.OwnsProcess, onReady: o.OnReady,
		channels: make(map[channels.Name]channels.Channel), chStop: make(map[channels.Name]context.CancelFunc), sessions: make(map[string]*sessionState), newRows: make(map[string]storedRow), owedHere: make(map[int64]bool), owedDone: make(map[int64]bool)}
	g.conf.Store(cfg)
	g.bgCtx, g.bgCancel = context.WithCancel(context.Background())
	g.metrics = newMetrics()

	db, err := store.OpenStore(ctx, cfg.State.Driver, cfg.State.URL.Value(), o.StateDir)
	if err != nil {
		return nil, err
	}
	g.db = db
	// Until ready, reads share the writer's connection: a read connection
	// of its own would parse the schema a second time before ready.
	g.openReads = db.DeferReadPool()
	fail := func(err error) (*Gateway, error) {
		db.Close()
		return nil, err
	}
	g.cluster = newCluster(clusterDeps{db: db, shared: db.Driver() == store.DriverPostgres, setPhase: g.phase.set,
		channels: g.channelSet, exclusive: g.exclusive,
		launch:   func(ch channels.Channel) { g.launchChannel(ch); g.outbox.wakeUp() },
		takeOver: g.claimLeft, handlers: g.busHandlers(), log: o.Logger.Named("cluster"),
	}, cfg.ReplicaID(), time.Duration(cfg.State.LeaseSeconds)*time.Second, o.OnLeaseLost)
	g.memories = db
	if !g.cluster.shared {
		g.pins = memory.NewPinCache(db)
		g.memories = g.pins.Store()
	}
	g.tracer, err = telemetry.New(telemetry.Options{Config: cfg.Telemetry, StateDir: o.StateDir, Replica: g.cluster.id, Logger: o.Logger})
	if err != nil {
		return fail(err)
	}
	fail = func(err error) (*Gateway, error) {
		_ = g.tracer.Shutdown(context.Background())
		db.Close()
		return nil, err
	}
	if err := g.newLedger(ctx); err != nil {
		return fail(err)
	}
	g.provOpts = o.Providers
	g.provOpts.Logger = o.Logger
	g.catalog, err = agent.NewCatalog(cfg, g.newProvider)
	if err != nil {
		return fail(err)
	}
	for _, a := range cfg.Agents.List {
		if err := os.MkdirAll(g.workspace(cfg, a.ID), tools.DirMode); err != nil {
			return fail(fmt.Errorf("workspace of agent %s: %w", a.ID, err))
		}
	}
	g.setToolOptions(cfg)
	g.mainLane = lane.New("main", cfg.Agents.Defaults.MaxConcurrent, o.Logger)
	g.outbox = newDeliverer(outboxDeps{db: db, replica: g.cluster.id, poll: g.cluster.pollShared(), tell: g.cluster.tellOutbox,
		channel: g.channel, sendsOn: g.sendsOn, limits: g.outboxLimits, changed: g.watchers.changed, uncertainKey: g.uncertainKey, retryWrite: g.retryWrite, writeCtx: g.bgCtx,
		clock: g.clock, metrics: g.metrics, tracer: g.tracer, log: g.log.Named("outbox")})
	g.approv = newApprovals(approvalDeps{db: db, security: func() config.Security { return g.cfg().Security },
		replica: g.cluster.id, alive: g.cluster.alive, tell: func(ctx context.Context, code string) { g.cluster.send(ctx, busApproval, code) },
		post: g.post, setNote: func(runID, note string) { g.subs.SetNote(runID, note) }, // subs is built after approvals
		clock: g.clock, log: g.log.Named("approvals")})
	g.newMCP()
	g.panel = newPanel(panelDeps{web: func() *web.Adapter { return g.web }, // set by buildChannels
		runs: func(ctx context.Context, key string, n int) ([]store.Run, error) {
			return g.subs.RecentRuns(ctx, key, n)
		},
		schedules: g.scheduleViews, spent: g.spentView, log: g.log})
	g.subs = subagent.New(subagent.Deps{
		Config: cfg, Store: db, Catalog: g.catalog,
		Tools: g.baseTools, Workspace: g.workspace, Files: g.attached.take, SystemContext: g.agentContext, ReadOnlyDirs: g.skillDirs,
		WorkspaceFile: g.workspaceFile, OpenFile: g.openFile,
		Authorize: g.approv.authorize, Notify: g.outbox.wakeUp, Outbox: runOutbox{g}, RetryWrite: g.retryWrite,
		Logger: o.Logger, Clock: o.Clock, OnUsage: g.metrics.tokens, OnChange: g.runChanged, ScheduleEnded: g.scheduleEnded,
		Replica: g.cluster.id, Peers: g.peers(), Tracer: g.tracer, Spend: g.spend,
		StartThread:  g.startThread,
		Live:         g.runLive,
		LiveAt:       g.runLiveAt,
		Wake:         func(it store.Intake) { g.enqueueTurn(it, g.turnLog(it)) },
		ArchiveLater: true, // Run starts it once ready
	})
	g.sessDeps = sessionDeps{db: db, lock: func(ctx context.Context, agentID, key string, o channels.Origin) (*sessionState, error) {
		return g.acquire(ctx, g.cfg(), agentID, key, o)
	}, unlock: g.release, drop: g.dropSession, compactTurn: g.compactTurn, clock: g.clock, log: g.log}
	g.newScheduler()
	if err := g.buildChannels(o.Channels); err != nil {
		return fail(err)
	}
	g.metrics.register(g)

	if o.Listener != nil {
		g.listener = o.Listener
	} else {
		ln, err := net.Listen("tcp", cfg.Gateway.HTTP.Listen)
		if err != nil {
			return fail(fmt.Errorf("listen on gateway.http.listen %s: %w", cfg.Gateway.HTTP.Listen, err))
		}
		g.listener = ln
	}
	// A request (headers and body) must arrive within ReadTimeout, so a
	// stalled POST cannot hold a connection; responses have no write
	// deadline because /api/events streams; idle keep-alives are closed.
	g.handler.Store(g.routes())
	serve := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.handler.Load().ServeHTTP(w, r) })
	g.phase.set(phaseStandby, "joining the replicas")
	g.server = &http.Server{Handler: g.gated(serve), ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: cmp.Or(o.HTTPReadTimeout, 30*time.Second), IdleTimeout: 2 * time.Minute}
	return g, nil
}

// newProvider builds a model provider, timed and bounded by its
// timeoutSeconds.
func (g *Gateway) newProvider(id string, p config.Provider) (agent.Provider, error) {
	prov, err := providers.New(id, p, g.provOpts)
	if err != nil {
		return nil, err
	}
	return g.metrics.timed(id, prov, time.Duration(p.TimeoutSeconds)*time.Second), nil
}

// Addr is the HTTP listener's address.
func (g *Gateway) Addr() string { return g.listener.Addr().String() }

// Store gives read access to the state (operator commands, tests).
func (g *Gateway) Store() store.Store { return g.db }

// ReplicaID is this gateway's replica id (gateway.replicaId or
// <hostname>-<pid>): the holder of its leases and claims.
func (g *Gateway) ReplicaID() string { return g.cluster.id }

// workspace is an agent's workspace under cfg.
func (g *Gateway) workspace(cfg *config.Config, agentID string) string {
	return cfg.AgentWorkspace(agentID, g.stateDir)
}

// baseTools are an agent's built-in tools and the tools of its MCP servers
// that are up, limited to its allowedTools (a: the agent as the turn or
// run resolved it at its start). The registry is shared and read only
// (frozen): every child and delegate of the agent gets the same one while
// the tool options, the agent's allowedTools and MCP servers, and the
// tools of those servers that are up stay the same; a caller adds to a
// Clone. It is made once for them, not for each run: each run kept its
// own copy (docs/performance.md, session 8).
func (g *Gateway) baseTools(a config.AgentSettings) *agent.Registry {
	b := g.builtins()
	mcp := g.mcp.Tools(a.MCPServers)
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.bases[a.ID]; e != nil && slices.Equal(e.allowed, a.AllowedTools) && slices.Equal(e.servers, a.MCPServers) && slices.Equal(e.mcp, mcp) {
		return e.reg
	}
	reg := allowedOnly(a, b.with(mcp)).Freeze()
	if b.bases == nil || len(b.bases) >= maxBases {
		b.bases = make(map[string]*baseTools)
	}
	b.bases[a.ID] = &baseTools{allowed: slices.Clone(a.AllowedTools), servers: slices.Clone(a.MCPServers), mcp: mcp, reg: reg}
	return reg
}

// maxBases bounds builtinTools.bases: past it (more agents than that in
// use) the shared base registries are made again.
const maxBases = 256

// baseTools is one agent's shared base registry and what it was made of.
type baseTools struct {
	allowed, servers []string     // the agent's allowedTools and mcpServers
	mcp              []agent.Tool // the tools of those servers that were up
	reg              *agent.Registry
}

// builtinTools are the built-in tools (tools.New) of the options in
// force, with the options they were made of.
type builtinTools struct {
	opts *tools.Options
	// reg is the tools' registry: read only, copied by agentTools, so
	// that a turn's or run's registry does not ask every built-in tool
	// for its spec again (Registry.Add), ~10 µs a run.
	reg *agent.Registry
	// bases are the agents' shared base registries (baseTools) made
	// with these tools, by agent id; guarded by mu. New options make a
	// new builtinTools, so a reload of them drops every base.
	mu    sync.Mutex
	bases map[string]*baseTools
}

// with is a new registry, the caller's own, of the built-in tools (a copy
// of the one made with them) and mcp.
func (b *builtinTools) with(mcp []agent.Tool) *agent.Registry {
	reg := b.reg.Clone()
	for _, t := range mcp {
		reg.Add(t)
	}
	return reg
}

// builtins are the built-in tools of the options in force, made once for
// them and shared by every turn and run until a reload replaces the
// options (setToolOptions swaps in new ones; they are not changed in
// place). A built-in tool holds only its options, and its spec is asked
// once, for the registry made here, so sharing it changes nothing a call
// sees; making them for each run was ~8 % of the gateway's CPU while
// 10,000 sub-agents start (their specs, an exec logger each). The caller
// must not change them.
func (g *Gateway) builtins() *builtinTools {
	opts := g.tools.Load()
	if b := g.builtin.Load(); b != nil && b.opts == opts {
		return b
	}
	b := &builtinTools{opts: opts, reg: agent.NewRegistry(tools.New(*opts)...).Freeze()}
	g.builtin.Store(b)
	return b
}

// agentTools is a new registry, the caller's own, of the built-in tools (a
// copy of the one made with them) and the tools of a's MCP servers that
// are up, before allowedTools.
func (g *Gateway) agentTools(a config.AgentSettings) *agent.Registry {
	return g.builtins().with(g.mcp.Tools(a.MCPServers))
}

// topTools is the tool set of an agent's top-level turn: its base tools,
// the session tools and the schedule tool, all limited to its allowedTools (SPEC §17: the
// session tools honour allowedTools too).
func (g *Gateway) topTools(a config.AgentSettings) *agent.Registry {
	reg := g.agentTools(a)
	for _, t := range g.subs.SessionTools(0) {
		reg.Add(t)
	}
	reg.Add(g.sched.Tool()) // SPEC §19: top-level turns only
	return allowedOnly(a, reg)
}

// allowedOnly limits reg to the agent's allowedTools (empty = all).
func allowedOnly(a config.AgentSettings, reg *agent.Registry) *agent.Registry {
	if len(a.AllowedTools) > 0 {
		reg = reg.Filter(func(name string, _ agent.Tool) bool { return slices.Contains(a.AllowedTools, name) })
	}
	return reg
}

func (g *Gateway) buildChannels(extra []channels.Channel) error {
	for _, name := range append(moduleNames(), web.Name) {
		ch, err := g.buildChannel(name, g.cfg())
		if err != nil {
			return err
		}
		if ch != nil {
			g.channels[name] = ch
		}
	}
	for _, ch := range extra {
		g.channels[ch.Name()] = ch
	}
	return nil
}

// buildChannel builds the adapter of one channel from cfg — the web chat,
// or a registered module with its options, its logger and its namespaced
// store; nil when the channel is not enabled. It does no I/O.
func (g *Gateway) buildChannel(name channels.Name, cfg *config.Config) (channels.Channel, error) {
	c := cfg.Channels
	log := g.log.Named("channel").With(zap.String("channel", string(name)))
	if m, ok := channels.Lookup(name); ok {
		opts := c.Options(string(name))
		if !opts.Common().Enabled {
			return nil, nil
		}
		a, err := m.New(channels.Deps{Options: opts, Logger: log, State: g.channelState(name), SQL: g.stateSQL, Bound: g.threadBound})
		if err != nil {
			return nil, fmt.Errorf("channels.%s: %w", name, err)
		}
		return a, nil
	}
	switch name {
	case web.Name:
		if !cfg.WebEnabled() {
			return nil, nil
		}
		a, err := web.New(web.Options{Token: c.Web.Token.Value(), Log: webLog{db: g.db, told: g.cluster.tellWeb, intake: g.intake},
			OffLoopback: !cfg.ListenerIsLoopback(), BehindProxy: cfg.Gateway.HTTP.BehindProxy, Secrets: &webSecrets{db: g.db, alone: !g.cluster.shared}, MaxStreams: c.Web.MaxStreams,
			RateLimit:     web.RateLimit{PerMinute: max(c.Web.RateLimit.PerMinute, 0), Burst: c.Web.RateLimit.Burst},
			OnRateLimited: func(string) { g.metrics.refused.WithLabelValues("web", "rate_limited").Inc() },
			SessionKey: func(client string) string {
				o := channels.Origin{Channel: web.Name, ChatID: client, ChatType: channels.ChatDM}
				return string(ids.Requester(route(g.cfg(), o), o))
			},
			OnStream: func(client string) {
				o := channels.Origin{Channel: web.Name, ChatID: client, ChatType: channels.ChatDM}
				g.panel.changed(string(ids.Requester(route(g.cfg(), o), o)))
			},
			Files: webFiles{g: g}, FileLimits: func() (int64, int) { a := g.cfg().Attachments; return a.MaxBytes, a.MaxFiles },
			SpoolDir: filepath.Join(g.stateDir, store.FilesDir, "tmp"), UploadsRefused: g.uploadsRefused,
			Logger: log})
		if err != nil {
			return nil, fmt.Errorf("channels.web: %w", err)
		}
		g.web = a
		return a, nil
	}
	return nil, fmt.Errorf("unknown channel %q", name)
}

// Run starts the channels, the lanes, the outbox and the HTTP listener, and
// serves until ctx ends; then it shuts down in order within the configured
// grace period. A clean shutdown returns nil. The listener serves from the
// start: /readyz says 503 standby or starting until the replica has joined
// and its MCP servers had their first connection attempt (phase.go).
func (g *Gateway) Run(ctx context.Context) error {
	serveErr := make(chan error, 1)
	go func() { serveErr <- g.server.Serve(g.listener) }()
	closeHTTP := func() {
		hctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = g.server.Shutdown(hctx)
	}
	if err := g.cluster.join(ctx); err != nil {
		closeHTTP()
		return fmt.Errorf("join the replicas: %w", err)
	}
	g.phase.set(phaseStarting, "starting the MCP servers, sub-agent runs and owed turns")
	listening := make(chan struct{})
	g.bg.Add(1)
	go func() { defer g.bg.Done(); g.cluster.listen(g.bgCtx, listening) }()
	if err := g.approv.expireStale(ctx, true); err != nil {
		g.log.Warn("could not expire stale approvals", zap.Error(err))
	}
	g.startMCP()
	g.waitTools(ctx)
	if err := g.subs.Start(ctx); err != nil {
		closeHTTP()
		g.mcp.Close()
		g.bgCancel()
		g.bg.Wait()
		g.cluster.leave()
		return err
	}
	if err := g.resumeOwed(ctx); err != nil {
		closeHTTP()
		g.mcp.Close()
		g.bgCancel()
		g.bg.Wait()
		g.cluster.leave()
		return err
	}
	stopSched, serr := g.startScheduler(ctx)
	if serr != nil {
		closeHTTP()
		g.mcp.Close()
		g.bgCancel()
		g.bg.Wait()
		g.cluster.leave()
		return fmt.Errorf("schedules: %w", serr)
	}
	g.stopSched = stopSched
	for _, ch := range g.channelSet() {
		g.launchChannel(ch) // not a channel another replica may run
	}
	g.cluster.elect(ctx) // takes and starts those nobody runs
	g.warnUnpriced()
	if g.cluster.shared {
		g.bg.Add(1)
		go func() { defer g.bg.Done(); g.spend.Run(g.bgCtx, spend.RefreshEvery) }()
	}
	g.bg.Add(5)
	go func() { defer g.bg.Done(); g.sweepOwed(g.bgCtx) }()
	go func() { defer g.bg.Done(); g.janitor(g.bgCtx) }()
	go func() { defer g.bg.Done(); g.panel.run(g.bgCtx) }()
	go func() { defer g.bg.Done(); g.cluster.run(g.bgCtx) }()
	go func() { defer g.bg.Done(); g.cluster.teller(g.bgCtx) }()
	select { // notifications sent from now on reach this replica
	case <-listening:
	case <-time.After(5 * time.Second):
		g.log.Warn("the listener for the other replicas is not up yet; relying on polling meanwhile")
	}
	g.openReads()
	g.phase.set(phaseRunning, "")
	// Upkeep that recovery does not need starts once ready: the file
	// retention sweep and the archiver of ended runs' transcripts. Their
	// first passes read the store; before ready they ran beside start-up's
	// recovery reads and /readyz (a second read connection, ~0.4 ms of CPU
	// until ready; docs/performance.md).
	g.bg.Add(1)
	go func() { defer g.bg.Done(); g.sweepFiles(g.bgCtx) }()
	g.subs.StartArchiver()
	// Delivery starts once ready: /readyz does not wait for the first pass
	// (replies of turns that complete before it are handed to the pass,
	// deliverer.hand).
	outboxCtx, stopOutbox := context.WithCancel(context.Background())
	outboxDone := make(chan struct{})
	go func() { defer close(outboxDone); g.outbox.run(outboxCtx) }()
	g.stopOutbox = func() { stopOutbox(); <-outboxDone }
	g.bg.Add(1)
	go func() { defer g.bg.Done(); g.afterReady() }()
	g.log.Info("gateway started", zap.String("listen", g.Addr()), zap.Int("channels", len(g.channelSet())),
		zap.String("stateDir", g.stateDir), zap.String("model", g.cfg().AgentModel(g.cfg().DefaultAgentID())))

	var err error
	select {
	case <-ctx.Done():
	case reason := <-g.cluster.lost:
		err = fmt.Errorf("stopped: %s", reason)
	case err = <-serveErr:
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		err = fmt.Errorf("http listener: %w", err)
	}
	grace := time.Duration(g.cfg().Gateway.ShutdownGraceSeconds) * time.Second
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	g.shutdown(sctx)
	return err
}

// channel returns the adapter of a channel, nil if it is not running.
func (g *Gateway) channel(name channels.Name) channels.Channel {
	g.chMu.RLock()
	defer g.chMu.RUnlock()
	return g.channels[name]
}

// sendsOn names the channels whose outbox items this replica sends: every
// channel on SQLite (one not enabled gets its messages retried, with an
// error, until it is); the channels it runs when replicas share the state
// (another replica sends the rest).
func (g *Gateway) sendsOn() []string {
	if !g.cluster.shared {
		return nil
	}
	var out []string
	for name := range g.channelSet() {
		if g.cluster.runs(name) {
			out = append(out, string(name))
		}
	}
	return out
}

// runOutbox is the deliverer as a sub-agent run's end uses it: an
// announce to a channel this replica sends on is claimed with the run's
// end and handed over (subagent.Outbox).
type runOutbox struct{ g *Gateway }

var _ subagent.Outbox = runOutbox{}

func (o runOutbox) ClaimFor(ch channels.Name) string {
	if o.g.sendsHere(ch) {
		return o.g.cluster.id
	}
	return ""
}

func (o runOutbox) Hand(item store.OutboxItem) { o.g.outbox.hand(item) }
func (o runOutbox) Reclaim()                   { o.g.outbox.reclaim() }
func (o runOutbox) WebDelivery(item *store.OutboxItem) *store.WebDelivery {
	return o.g.webDelivery(item)
}
func (o runOutbox) Delivered(item store.OutboxItem, w *store.WebDelivery, nothingElse bool) {
	o.g.webDelivered(o.g.bgCtx, item, w, nothingElse)
}

// sendsHere reports whether this replica sends the outbox items of the
// channel name (sendsOn).
func (g *Gateway) sendsHere(name channels.Name) bool {
	on := g.sendsOn()
	return on == nil || slices.Contains(on, string(name))
}

// uncertainKey is the outbox's policy for a part to the channel whose
// delivery is uncertain (its module reads it from the channel's section of
// the config in force, on every delivery), with the key that sets it.
func (g *Gateway) uncertainKey(name channels.Name) (channels.Uncertain, string) {
	m, ok := channels.Lookup(name)
	if !ok {
		return channels.UncertainResend, ""
	}
	return m.UncertainPolicy(g.cfg().Channels.Options(string(name)))
}

// channelSet is a copy of the channels map.
func (g *Gateway) channelSet() map[channels.Name]channels.Channel {
	g.chMu.RLock()
	defer g.chMu.RUnlock()
	return maps.Clone(g.channels)
}

// launchChannel starts ch in the background (startChannel) with its own
// context, so a reload that replaces ch can end a retry loop still running.
// A channel one replica at a time runs starts only where it is led.
func (g *Gateway) launchChannel(ch channels.Channel) {
	if !g.cluster.runs(ch.Name()) {
		return
	}
	ctx, cancel := context.WithCancel(g.bgCtx)
	g.chMu.Lock()
	g.chStop[ch.Name()] = cancel
	g.chMu.Unlock()
	g.bg.Add(1)
	go func() { defer g.bg.Done(); g.startChannel(ctx, ch) }()
}

// startChannel starts ch, retrying with backoff while it fails, so one
// channel that cannot connect does not keep the others down.
func (g *Gateway) startChannel(ctx context.Context, ch channels.Channel) {
	log := g.log.With(zap.String("channel", string(ch.Name())))
	backoff := time.Second
	for {
		err := ch.Start(ctx, g.inbound)
		if err == nil {
			log.Info("channel started")
			return
		}
		g.metrics.channelUp.WithLabelValues(string(ch.Name())).Set(0)
		log.Error("channel failed to start; retrying", zap.Error(err), zap.Duration("retryIn", backoff))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Minute)
	}
}

// shutdown: stop intake, drain lanes, stop channels, flush the outbox once,
// close the store.
func (g *Gateway) shutdown(ctx context.Context) {
	g.log.Info("gateway shutting down")
	g.reloadMu.Lock() // waits for a reload in progress
	g.reloadClosed = true
	g.reloadMu.Unlock()
	g.mu.Lock()
	g.draining = true
	g.mu.Unlock()
	// Each phase has its own bound: the HTTP server 2 s (event streams are
	// ended, not waited for), the lanes the grace period, the last outbox
	// pass and the channel stops 5 s each, so a slow turn cannot leave the
	// later phases with an expired context.
	if g.web != nil {
		g.server.RegisterOnShutdown(g.web.EndStreams)
	}
	g.server.RegisterOnShutdown(g.console.EndStreams)
	hctx, hcancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = g.server.Shutdown(hctx)
	hcancel()
	if g.stopSched != nil {
		g.stopSched() // no firing into lanes that are shutting down
	}
	g.mainLane.Shutdown(ctx)
	g.logOwed()
	g.subs.Shutdown(ctx)
	g.mcp.Close()
	g.stopOutbox() // the delivery loop ends before the last pass
	fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
	g.outbox.flush(fctx)
	fcancel()
	g.bgCancel()
	var wg sync.WaitGroup
	for _, ch := range g.channelSet() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := ch.Stop(cctx); err != nil {
				g.log.Warn("channel stop", zap.String("channel", string(ch.Name())), zap.Error(err))
			}
		}()
	}
	wg.Wait()
	g.bg.Wait()
	g.mu.Lock()
	for _, s := range g.sessions {
		if s.sess != nil {
			s.sess.Close()
		}
	}
	g.mu.Unlock()
	g.cluster.leave()
	tctx, tcancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := g.tracer.Shutdown(tctx); err != nil {
		g.log.Warn("could not export the last spans", zap.Error(err))
	}
	tcancel()
	if err := g.db.Close(); err != nil {
		g.log.Error("close store", zap.Error(err))
	}
	g.log.Info("gateway stopped")
}

// logOwed logs how many turns this replica leaves owed in the store (cut,
// queued, or waiting behind their session's turn): the next start, or
// another replica, answers them.
func (g *Gateway) logOwed() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	owed, err := g.db.OwedIntake(ctx)
	if err != nil {
		g.log.Warn("could not count the owed turns", zap.Error(err))
		return
	}
	n := 0
	for _, it := range owed {
		if it.ClaimedBy == "" || it.ClaimedBy == g.cluster.id {
			n++
		}
	}
	if n > 0 {
		g.log.Info("queued turns stay owed for the next start", zap.Int("turns", n))
	}
}

// cfg is the current config. A reload replaces it; code reads it when it
// needs a value, so a turn or run in progress keeps what it already read.
func (g *Gateway) cfg() *config.Config { return g.conf.Load() }

func (g *Gateway) setToolOptions(cfg *config.Config) {
	opts := tools.OptionsFromConfig(cfg.Tools)
	opts.Logger = g.log
	opts.Files = fileSink{g}
	opts.Extra = memory.Tools(g.memories, cfg.Memory)
	prev := g.tools.Swap(&opts)
	switch {
	case prev == nil && opts.Sandbox.Mechanism != sandbox.Off:
		// Run logs it once the gateway is ready: the probe starts bwrap (~80 ms).
	case prev == nil || prev.Sandbox != opts.Sandbox:
		g.logSandbox(opts.Sandbox)
	}
}

// afterReady is the start-up work that need not hold /readyz back: the
// sandbox probe and its log line (an exec meanwhile waits for the same
// probe), then, when the gateway owns the process, the memory that start
// alone used is given back — the Go heap's garbage and the mappings of the
// binary's pages that package initialisation touched (releaseStartPages)
// — with Options.OnReady (herald gateway's GOGC restored) after the
// collection. docs/performance.md has what each saves.
func (g *Gateway) afterReady() {
	if p := g.tools.Load().Sandbox; p.Mechanism != sandbox.Off {
		g.logSandbox(p)
	}
	if g.ownsProcess {
		debug.FreeOSMemory()
	}
	if g.onReady != nil {
		g.onReady()
	}
	if !g.ownsProcess {
		return
	}
	n, err := releaseStartPages()
	if err != nil {
		g.log.Debug("could not give back the start's pages of the binary", zap.Error(err))
		return
	}
	g.log.Debug("gave back the start's pages of the binary", zap.Int64("mappedBytes", n))
}

// logSandbox says at start (and on a reload that changes it) how exec
// commands are confined: a warning when they are not. It runs the sandbox
// probe (sandbox.Probe, once per process), which at start runs after the
// gateway is ready; an exec call meanwhile waits for that same probe.
func (g *Gateway) logSandbox(p sandbox.Policy) {
	log := g.log.Named("sandbox")
	if p.Mechanism == sandbox.Off {
		log.Warn("tools.exec.sandbox is \"off\": exec commands run unconfined, with the gateway's files, processes, secrets and network in reach")
		return
	}
	r := sandbox.Probe()
	mech, err := r.Pick(p.Mechanism, p.Setting)
	if err != nil {
		log.Warn("exec is refused: no sandbox works here", zap.Error(err))
		return
	}
	// The probe's finding says what enforces what here (under Landlock:
	// seccomp for sockets, a network namespace only with CAP_SYS_ADMIN).
	detail := r.Bwrap.Detail
	if mech == sandbox.Landlock {
		detail = r.Landlock.Detail
	}
	log.Info("exec commands run sandboxed", zap.String("mechanism", mech), zap.String("setting", p.Mechanism),
		zap.Bool("network", p.Network), zap.String("detail", detail))
}

// maxQueued is the main lane's queue cap.
func (g *Gateway) maxQueued() int { return cmp.Or(g.cfg().Agents.Defaults.MaxQueued, DefaultMaxQueued) }
