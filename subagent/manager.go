package subagent

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/tools"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/lane"
	"github.com/heraldhq/herald/media"
	"github.com/heraldhq/herald/spend"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/telemetry"
)

// LaneName is the name of the sub-agent lane.
const LaneName = "subagent"

// Store is the part of the state a Manager uses: runs and their child
// sessions and transcripts, announces into the outbox.
type Store interface {
	store.Runs
	store.Results
	// AddIntake adds the wake of a spawn group at its deadline (SPEC §23).
	AddIntake(ctx context.Context, in *store.Intake) (added bool, err error)
	store.Sessions
	store.Outbox
	store.Transcripts
	store.Bindings
}

// Deps is what a Manager needs from the gateway.
type Deps struct {
	Config  *config.Config // the config at start; SetConfig replaces it
	Store   Store
	Catalog *agent.Catalog
	// Tools returns the built-in (non-session) tools of an agent, given its
	// settings as the run resolved them at its start. The registry is
	// read only (the Manager adds to a Clone); returning the same one
	// while its tools stay the same lets children share their tool set
	// (childTools).
	Tools func(a config.AgentSettings) *agent.Registry
	// Workspace returns an agent's absolute workspace dir under cfg (the
	// config the run took at its start).
	Workspace func(cfg *config.Config, agentID string) string
	// SystemContext, if set, is added to a child's system prompt: the
	// agent's skills and the pinned memories its conversation rootKey
	// sees (SPEC §28). aws is the agent's workspace under cfg.
	SystemContext func(ctx context.Context, cfg *config.Config, agentID, rootKey, aws string) string
	// ReadOnlyDirs, if set, are the folders under cfg a child's tools may
	// read and its exec sees, read-only (skills.paths, SPEC §28).
	ReadOnlyDirs func(cfg *config.Config) []string
	// Authorize gates tool calls (tool policy, approvals). Optional.
	Authorize agent.Authorizer
	// Notify wakes the outbox deliverer after an announce was written.
	Notify func()
	// Outbox, if set, sends the announces this replica claims in the
	// transaction that ends their run (store.RunEnd.ClaimAnnounce) without
	// a delivery pass of their own.
	Outbox Outbox
	// RetryWrite, if set, runs a store write that must not be lost until
	// the store takes it (an outage is retried with backoff; the gateway
	// stops the process after a long one). Nil: one attempt.
	RetryWrite func(ctx context.Context, what string, log *zap.Logger, write func(context.Context) error) error
	Logger     *zap.Logger
	Clock      agent.Clock
	// AnnounceTimeout bounds the announce step; default 60 s.
	AnnounceTimeout time.Duration
	// OnUsage, if set, is told the usage of every model call of a run
	// (announce step included) and of a delegate call, for the metrics.
	OnUsage func(agentID, model string, u agent.Usage)
	// Replica is this gateway's gateway.replicaId: the owner of the runs it
	// spawns or adopts. Default "local".
	Replica string
	// Peers reach the other replicas of a shared state (nil: none).
	Peers Peers
	// Spend, if set, checks budgets before every model call of a run (its
	// announce step and schedules' runs included) and counts its spend
	// against the run's root conversation (SPEC §20).
	Spend *spend.Ledger
	// OnChange, if set, is told the root session key of a run that was
	// spawned, started or ended (the web chat's sub-agents panel). It must
	// not block.
	OnChange func(rootKey string)
	// ScheduleEnded, if set, is told that the end of a scheduled run was
	// stored, which frees its schedule (a catchUp "all" schedule waits
	// for it). It must not block.
	ScheduleEnded func()
	// WorkspaceFile, if set, stores the file at path (relative) of the
	// conversation workspace ws and returns it (sessions_spawn's
	// attachments); OpenFile reads a stored file for a model.
	WorkspaceFile func(ctx context.Context, ws, path string) (agent.File, error)
	OpenFile      func(ctx context.Context, id string) (io.ReadCloser, error)
	// Files, if set, returns (and forgets) the files a run's send_file
	// calls attached, by the run's child session key: they go out with its
	// announce, after the text (SPEC §18).
	Files func(childKey string) []store.FileRef
	// Tracer starts the herald.run spans (SPEC §22); nil = off.
	Tracer *telemetry.Tracer
	// StartThread, if set, opens a thread of its own in the chat of
	// requester for a child spawned with thread: true (SPEC §24); an error
	// wrapping channels.ErrNoThreads says the chat has none.
	StartThread func(ctx context.Context, requester channels.Origin, t channels.NewThread) (channels.Thread, error)
	// Live, if set, shows a running child in its own thread (SPEC §16,
	// §24): typing, and its text as it writes it, through the streaming a
	// top-level turn uses. draftRef is the draft an earlier stretch of the
	// run left ("" = none), to go on with. It returns nil when the channel
	// shows nothing live.
	Live func(run *store.Run, draftRef string) Progress
	// LiveAt, if set, shows run live in thread (one /focus bound to its
	// child, SPEC §24), the same way; nil when the channel shows nothing
	// live there.
	LiveAt func(thread channels.Origin, run *store.Run) Progress
	// Wake, if set, runs the owed turn of a wake this replica claimed
	// (SPEC §23: the requester of announce "parent" children, woken once
	// with their results) on the gateway's main lane.
	Wake func(store.Intake)
	// ArchiveLater holds the archiver back from Start until StartArchiver
	// (the gateway starts it once ready: archiving ended runs' transcripts
	// is not part of recovering, and its first look read the store while
	// the start-up's own reads ran).
	ArchiveLater bool
}

// Peers are the other replicas of a PostgreSQL state (SPEC §14): a run
// lives in the memory of the replica that owns it, so stopping it from
// another replica is a message to that one.
type Peers interface {
	// StopRun asks the other replicas to stop a run and the runs below it
	// (StopLocal there); StopBelow to stop the runs below a session key
	// (StopBelowLocal). runs are the runs not ended yet that the stop
	// reaches and this replica does not hold: the stop is recorded on them
	// first (store.Stops), so whoever holds one stops it even if the
	// message is lost. Neither waits for the runs to end.
	StopRun(ctx context.Context, runID string, runs []string)
	StopBelow(ctx context.Context, sessionKey string, runs []string)
	// Alive reports whether replica holds its lease.
	Alive(ctx context.Context, replica string) bool
}

// Manager runs sub-agents. Run state lives in the store; the Manager keeps
// only live (queued, running, announcing) runs in memory.
type Manager struct {
	d    Deps
	log  *zap.Logger
	lane *lane.Lane
	conf atomic.Pointer[config.Config] // read with config(); SetConfig replaces it

	// sessTools are the session tools, made once (SessionTools).
	sessOnce  sync.Once
	sessTools []agent.Tool
	// childRegs are the children's shared tool sets (childTools);
	// guarded by childMu.
	childMu   sync.Mutex
	childRegs map[childToolsKey][]*childToolSet

	mu       sync.Mutex
	live     map[string]*liveRun // by run id; guarded by mu
	liveKeys map[string]string   // live runs' child session keys → run ids; guarded by mu
	// spawning are the runs a spawn has recorded (or is recording) but
	// not yet made live, by run id; a stop that comes meanwhile marks
	// them, and enqueueSpawned stops them as soon as they are live.
	// Guarded by mu.
	spawning  map[string]*spawningRun
	turnLocks map[string]*turnLock // turns of finished runs in progress, by run id; guarded by mu

	spawned atomic.Int64 // runs spawned since start

	groupTimers   map[string]*time.Timer // by spawn group: its groupTimeoutSeconds wake; nil after Shutdown; guarded by mu
	groupDeadline map[string]time.Time   // the deadline each timer is set for; guarded by mu

	archiveWake chan struct{}
	// archiveNext is when the archiver looks next (Clock unix nanos; 0
	// while it is looking): a run end whose archive deadline is no earlier
	// need not wake it (wakeArchiver).
	archiveNext atomic.Int64
	archiveOnce sync.Once      // StartArchiver
	bg          sync.WaitGroup // archiver and one-more-turn goroutines
	stopBG      context.CancelFunc
	bgCtx       context.Context
}

// liveRun is a run that has not ended yet.
type liveRun struct {
	// run is the run's record, owned by the liveRun from enqueue on:
	// Status, StartedAt, StretchAt, Origin, Note and tokens are updated
	// under Manager.mu; the other fields are not changed while it is live.
	run      *store.Run
	cancel   context.CancelFunc
	steer    chan agent.Steer
	ended    chan struct{} // closed when the run is no longer live (forgetLocked)
	kidEnded chan struct{} // closed and replaced when a child of the run ends (awaitChildren); nil until it waits; guarded by Manager.mu
	stopped  bool
	usage    agent.Usage
	span     trace.Span // the herald.run span while it runs; nil before
	fallback string     // "Answered by …" notes of the run's calls; guarded by Manager.mu
	calls    int        // model calls counted by onCall; guarded by Manager.mu
	cost     float64    // their USD at the cost of the model that answered each; guarded by Manager.mu
	priced   bool       // some call's model had a cost; guarded by Manager.mu
	waiting  int        // children spawned with announce parent it waits for; guarded by Manager.mu
	draft    string     // the platform id of the draft its live view left ("" = none); guarded by Manager.mu
	drafted  string     // the child's text that draft was showing; guarded by Manager.mu
	// focus shows the running child live in the thread /focus bound to
	// it (focusAt); focusEnded: its runner returned. focusAt and
	// focusEnded are guarded by Manager.mu; focus is stored under
	// Manager.mu too but loaded without it, once per streamed chunk
	// (RunCtx.Text), so that chunks of all runs never share a lock.
	focus      atomic.Pointer[liveView]
	focusAt    channels.Origin
	focusEnded bool
	// parent: a run was enqueued in this process with this run's session
	// as its requester; guarded by Manager.mu. With fresh (not a run
	// resumed after a restart, whose children may be older) it says
	// whether the run can have children at all (mayHaveChildren).
	parent bool
	fresh  bool // set by execute: the run had not started before (StartedAt was zero, Resumes 0)
	// startAt, when set, is when the store has it running from: its
	// spawn took a free lane slot (startSlot), or the run whose slot it
	// takes recorded its start with its own end (handOn). execute then
	// writes no StartRun. Guarded by Manager.mu.
	startAt time.Time
	// spawnedHere: this process spawned it (Spawn, spawnBatch), with a
	// new child session, and it has not run: there is no transcript to
	// read (modelRunner opens a new one). Neither is changed after the
	// run is queued.
	spawnedHere bool
}

// New returns a Manager. Call Start before spawning.
func New(d Deps) *Manager {
	if d.Logger == nil {
		d.Logger = zap.NewNop()
	}
	if d.Clock == nil {
		d.Clock = agent.SystemClock{}
	}
	if d.AnnounceTimeout <= 0 {
		d.AnnounceTimeout = 60 * time.Second
	}
	if d.Notify == nil {
		d.Notify = func() {}
	}
	if d.Replica == "" {
		d.Replica = "local"
	}
	log := d.Logger.Named("subagent")
	lim := d.Config.SubagentLimits(d.Config.DefaultAgentID())
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		d: d, log: log,
		lane:        lane.New(LaneName, lim.MaxConcurrent, d.Logger),
		live:        make(map[string]*liveRun),
		liveKeys:    make(map[string]string),
		spawning:    make(map[string]*spawningRun),
		turnLocks:   make(map[string]*turnLock),
		archiveWake: make(chan struct{}, 1),
		groupTimers: map[string]*time.Timer{}, groupDeadline: map[string]time.Time{},
		bgCtx: ctx, stopBG: cancel,
	}
	m.conf.Store(d.Config)
	return m
}

// config is the current config: agents, models, limits and policies are
// read from it when a run or tool call needs them.
func (m *Manager) config() *config.Config { return m.conf.Load() }

// SetConfig applies a reloaded, validated config: spawns, runs and tool
// calls from now on use its agents, models and limits, and the sub-agent
// lane takes its maxConcurrent. Runs already running keep their model.
func (m *Manager) SetConfig(cfg *config.Config) {
	m.conf.Store(cfg)
	m.lane.SetMax(cfg.SubagentLimits(cfg.DefaultAgentID()).MaxConcurrent)
}

// Spawned counts runs spawned since this Manager started.
func (m *Manager) Spawned() int64 { return m.spawned.Load() }

// Lane exposes the sub-agent lane (for metrics).
func (m *Manager) Lane() *lane.Lane { return m.lane }

// Start recovers after a restart — runs this replica left running or
// announcing are queued again to resume from their transcripts (past
// maxResumes they are announced with Status unknown), queued runs are
// queued again (Adopt) — and starts the archiver.
func (m *Manager) Start(ctx context.Context) error {
	if _, err := m.adopt(ctx, store.Claim{Holder: m.d.Replica, Reclaim: true}); err != nil {
		return err
	}
	if !m.d.ArchiveLater {
		m.StartArchiver()
	}
	return nil
}

// StartArchiver starts the archiver (once): Start does unless
// Deps.ArchiveLater. Runs that end before it starts are archived by its
// first look (their deadlines are in the store).
func (m *Manager) StartArchiver() {
	m.archiveOnce.Do(func() {
		m.bg.Add(1)
		go m.archiver()
	})
}

// Adopt takes over the live runs no live replica owns (on SQLite: every
// one but this process's): queued ones are queued here, oldest first;
// running or announcing ones were cut when their replica stopped and are
// queued to resume from their transcripts (SPEC §25), or announced with
// Status unknown, once, past maxResumes. It returns how many it took.
// Start adopts this replica's own runs from before a restart too.
func (m *Manager) Adopt(ctx context.Context) (int, error) {
	return m.adopt(ctx, store.Claim{Holder: m.d.Replica})
}

func (m *Manager) adopt(ctx context.Context, c store.Claim) (int, error) {
	runs, err := m.d.Store.ClaimRuns(ctx, c)
	if err != nil {
		return 0, fmt.Errorf("recover runs: %w", err)
	}
	for i := range runs {
		r := runs[i]
		m.armGroup(&r)
		if r.Status == store.StatusQueued {
			m.enqueue(&r)
			continue
		}
		if err := m.resume(ctx, &r); err != nil {
			return i, err
		}
	}
	if len(runs) > 0 {
		m.log.Info("recovered sub-agent runs", zap.Int("runs", len(runs)), zap.String("replicaId", m.d.Replica))
		m.d.Notify()
	}
	return len(runs), nil
}

// finishUnknown ends a run the gateway lost track of (it died mid-run)
// with note.
func (m *Manager) finishUnknown(ctx context.Context, r *store.Run, note string) error {
	now := m.d.Clock.Now()
	r.Status, r.Outcome, r.EndedAt = store.StatusDone, store.OutcomeUnknown, now
	r.Note = note
	// The run's span died with the process: this one, in the same trace,
	// stands for its end here, and its announce's delivery follows it.
	ctx, span := m.startSpan(ctx, r)
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(telemetry.AttrResumed.Bool(true), telemetry.AttrRunOutcome.String(store.OutcomeUnknown))
	}
	path := m.d.Store.TranscriptPath(r.AgentID, r.ChildSessionID)
	var usage agent.Usage
	if _, entries, err := m.d.Store.ReadTranscript(ctx, path); err == nil {
		msgs := agent.MessagesFromTranscript(entries)
		r.Result = agent.LastAssistantText(msgs)
		usage = usageFromTranscript(entries)
	}
	r.TokensIn, r.TokensOut, r.CacheRead, r.CacheWrite = usage.Input, usage.Output, usage.CacheRead, usage.CacheWrite
	m.setCost(r, usage)
	m.setArchive(r)
	end := m.runEnd(ctx, r, r.Result, r.Note, telemetry.Traceparent(ctx))
	if end.Announce != nil {
		if rt, _ := m.runThread(ctx, r); rt != nil {
			end.Announce.DraftRef = rt.DraftRef // its live output's draft becomes the announce
		}
	}
	lastOfBatch := watchBatchEnd(&end)
	if err := m.d.Store.EndRun(ctx, r, end); err != nil {
		return fmt.Errorf("recover run %s: %w", r.ID, err)
	}
	m.groupEnded(r, *lastOfBatch, end.Wake)
	m.handWake(end.Wake)
	m.runEnded(r)
	m.scheduleEnded(r)
	m.runLog(r).Info("run ended while the gateway was down", zap.String("outcome", r.Outcome))
	return nil
}

// Shutdown stops the lane (runs not yet started stay queued in the store and
// start after the next Start) and the archiver.
func (m *Manager) Shutdown(ctx context.Context) {
	m.lane.Shutdown(ctx)
	m.stopGroupTimers()
	m.stopBG()
	m.bg.Wait()
}

// SpawnParams are sessions_spawn's arguments.
type SpawnParams struct {
	Task              string   `json:"task"`
	Label             string   `json:"label,omitempty"`
	AgentID           string   `json:"agentId,omitempty"`
	Model             string   `json:"model,omitempty"`
	Thinking          string   `json:"thinking,omitempty"`
	RunTimeoutSeconds *int     `json:"runTimeoutSeconds,omitempty"`
	Cleanup           string   `json:"cleanup,omitempty"`
	AllowedTools      []string `json:"allowedTools,omitempty"`
	AllowedToolsPRX   []string `json:"allowed_tools,omitempty"`
	Action            string   `json:"action,omitempty"`
	SessionKey        string   `json:"sessionKey,omitempty"`
	Message           string   `json:"message,omitempty"`
	// Attachments are workspace files handed to the child (SPEC §18):
	// named in its task, and images given to its model as content.
	Attachments []string `json:"attachments,omitempty"`
	// Thread gives the child a chat thread of its own (SPEC §24).
	Thread bool `json:"thread,omitempty"`
	// Announce is where the result goes (SPEC §23): "chat", "parent" or
	// "silent"; default chat for a top-level caller, parent deeper down.
	Announce string `json:"announce,omitempty"`
	// GroupTimeoutSeconds bounds how long the caller waits for its
	// announce "parent" children of one turn (0: the config's, else the
	// longest child's runTimeoutSeconds).
	GroupTimeoutSeconds *int `json:"groupTimeoutSeconds,omitempty"`
	// OutputSchema is a JSON Schema the child's result must match
	// (SPEC §23): its announce step gives one JSON value, stored with the
	// run as its output.
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	// Tasks, in place of Task, spawns a batch (SPEC §23): one child per
	// TaskSpec, all or none, under the other arguments here.
	Tasks []json.RawMessage `json:"tasks,omitempty"`
}

// SpawnResult is sessions_spawn's result.
type SpawnResult struct {
	Status          string `json:"status"` // accepted | forbidden | error
	RunID           string `json:"runId,omitempty"`
	ChildSessionKey string `json:"childSessionKey,omitempty"`
	ModelApplied    string `json:"modelApplied,omitempty"`
	Warning         string `json:"warning,omitempty"`
	Error           string `json:"error,omitempty"`
	// BatchID and Runs answer a spawn with tasks: its runs in the order
	// of its tasks.
	BatchID string       `json:"batchId,omitempty"`
	Runs    []SpawnedRun `json:"runs,omitempty"`
}

func forbidden(format string, a ...any) SpawnResult {
	return SpawnResult{Status: "forbidden", Error: fmt.Sprintf(format, a...)}
}

func spawnError(format string, a ...any) SpawnResult {
	return SpawnResult{Status: "error", Error: fmt.Sprintf(format, a...)}
}

// Spawn checks the limits, records a queued run and puts it on the lane. It
// never waits for the run.
func (m *Manager) Spawn(ctx context.Context, cc agent.CallContext, p SpawnParams) SpawnResult {
	if p.Tasks != nil {
		return m.spawnBatch(ctx, cc, p)
	}
	// A turn resumed after a crash runs its unanswered tool calls again: a
	// call that already spawned a run answers with that run (SPEC §12).
	// The spawn's transaction finds it (store.SpawnCallError), so no read
	// comes first — unless building the run stores its attachments again.
	if len(p.Attachments) > 0 {
		if res, ok := m.spawnedBy(ctx, cc); ok {
			return res
		}
	}
	run, child, warning, fail := m.build(cc, p)
	if fail != nil {
		if res, ok := m.spawnedBy(ctx, cc); ok { // the config changed since
			return res
		}
		return *fail
	}
	if p.Thread {
		// The child's own thread is its delivery target: its live
		// output, approvals and announce go there (SPEC §24). It is
		// recorded with the run and opened once the run is.
		if w := m.noThread(cc); w != "" {
			warning = joinWarnings(warning, w)
		} else {
			run.ThreadPending = true
		}
	}
	// The run's spans continue the trace of the tool call that made it,
	// wherever and whenever it runs.
	run.TraceParent = telemetry.Traceparent(ctx)
	lim := m.config().SubagentLimits(cc.AgentID)
	var slot *lane.Slot
	if !run.ThreadPending { // a thread is opened between the record and the start
		slot = m.startSlot(run)
	}
	// The children and total-spawn limits are checked in the transaction
	// that records the run, so two parallel spawns cannot both take the last
	// slot and no lock is held across the store round trip.
	m.markSpawning(run)
	err := m.d.Store.SpawnRun(ctx, run, child, spawnLimits(lim))
	if err != nil {
		slot.Release()
		m.unmarkSpawning(run)
	}
	if sc := (*store.SpawnCallError)(nil); errors.As(err, &sc) {
		if res, ok := m.spawnedBy(ctx, cc); ok {
			return res
		}
	}
	if le := (*store.LimitError)(nil); errors.As(err, &le) {
		return limitReached(le)
	}
	if err != nil {
		return spawnError("could not record the run: %v", err)
	}
	if run.ThreadPending {
		if stepStops("recorded") {
			m.unmarkSpawning(run)
			return spawnError("%v", errStopped)
		}
		w, err := m.openRunThread(ctx, run, false)
		if errors.Is(err, errStopped) || stepStops("bound") {
			m.unmarkSpawning(run)
			return spawnError("%v", errStopped)
		}
		if err != nil {
			// Left pending: the run opens its thread when it starts.
			m.runLog(run).Warn("sessions_spawn thread: not opened yet; the run opens it when it starts", zap.Error(err))
		}
		warning = joinWarnings(warning, w)
	}
	return m.startSpawned(run, slot, warning)
}

// limitReached is a spawn's answer when the store refused it for le.
func limitReached(le *store.LimitError) SpawnResult {
	if le.Limit == "maxTotalSpawns" {
		return forbidden("limit reached: %d sub-agents were already spawned for this conversation (maxTotalSpawns %d)", le.Count, le.Max)
	}
	return forbidden("limit reached: this session already has %d running or queued sub-agents (maxChildrenPerSession %d); wait for an announce or stop one", le.Count, le.Max)
}

// startSpawned starts the run a spawn recorded (in slot, when it has one)
// and gives the spawn's answer.
func (m *Manager) startSpawned(run *store.Run, slot *lane.Slot, warning string) SpawnResult {
	// run is the live run's record once enqueued, changed by its
	// goroutine under m.mu (its Origin when it opens a pending thread):
	// its line's fields are taken first. The run's fields on the line
	// itself, not through runLog: a logger made for one line cost its
	// clone and, at the write, an encoder with its buffer (~0.5 KB a
	// spawn). The same line.
	fields := append(runFields(run, 2), zap.String("model", run.Model), zap.Int("depth", run.Depth))
	res := SpawnResult{Status: "accepted", RunID: run.ID, ChildSessionKey: run.ChildKey, ModelApplied: run.Model, Warning: warning}
	root := run.RootKey
	m.enqueueSpawned(run, slot)
	m.armGroup(run)
	m.changed(root)
	m.spawned.Add(1)
	m.log.Info("sub-agent spawned", fields...)
	return res
}

// spawnedBy answers a sessions_spawn call made again (a turn replayed
// after a crash) with the run it spawned the first time; ok is false when
// it spawned none.
func (m *Manager) spawnedBy(ctx context.Context, cc agent.CallContext) (_ SpawnResult, ok bool) {
	if cc.CallID == "" {
		return SpawnResult{}, false
	}
	r, err := m.d.Store.RunBySpawnCall(ctx, cc.SessionKey, cc.CallID)
	if err != nil {
		return SpawnResult{}, false
	}
	m.runLog(r).Info("sessions_spawn call already spawned this run; not spawning again", zap.String("callId", cc.CallID))
	return SpawnResult{Status: "accepted", RunID: r.ID, ChildSessionKey: r.ChildKey, ModelApplied: r.Model}, true
}

// build checks a spawn's arguments against the caller and the config and
// makes its queued run and child session (not stored yet); fail is the
// refusal.
func (m *Manager) build(cc agent.CallContext, p SpawnParams) (run *store.Run, child *store.Session, warning string, fail *SpawnResult) {
	task := strings.TrimSpace(p.Task)
	if task == "" {
		return nil, nil, "", spawnErrorP(`"task" is required: describe what the sub-agent should do`)
	}
	var outputSchema string
	if len(p.OutputSchema) > 0 && string(p.OutputSchema) != "null" {
		if _, err := resolveSchema(p.OutputSchema); err != nil {
			return nil, nil, "", spawnErrorP("outputSchema is not a valid JSON Schema: %v", err)
		}
		var b bytes.Buffer
		if err := json.Compact(&b, p.OutputSchema); err != nil {
			return nil, nil, "", spawnErrorP("outputSchema is not valid JSON: %v", err)
		}
		outputSchema = b.String()
	}
	cfg := m.config()
	lim := cfg.SubagentLimits(cc.AgentID)
	if cc.Depth+1 > lim.MaxDepth {
		return nil, nil, "", forbiddenP("depth exceeded: this session is at depth %d and maxDepth is %d, so it cannot spawn sub-agents; do the work yourself", cc.Depth, lim.MaxDepth)
	}
	target := cc.AgentID
	if p.AgentID != "" {
		target = p.AgentID
	}
	if _, ok := cfg.Agent(target); !ok {
		return nil, nil, "", spawnErrorP("unknown agentId %q; known agents: %s", target, strings.Join(m.agentIDs(), ", "))
	}
	if target != cc.AgentID && !lim.AllowsAgent(target) { // its own agent is always allowed
		return nil, nil, "", forbiddenP("agent %q is not allowed: agent %q may spawn only %s", target, cc.AgentID, strings.Join(lim.AllowAgents, ", "))
	}
	allowed := p.AllowedTools
	if len(allowed) == 0 {
		allowed = p.AllowedToolsPRX
	}
	for _, name := range allowed {
		if !callerHas(cc, name) {
			return nil, nil, "", spawnErrorP("unknown tool %q in allowedTools: it must be one of your tools (%s)", name, strings.Join(cc.Tools, ", "))
		}
	}
	if len(allowed) == 0 {
		// Without a list the child is still limited to the caller's tools
		// (childTools intersects its agent's with them), like a delegate:
		// spawning never widens what the caller may do (SPEC §3, §17).
		// The caller's list itself: nothing writes a run's AllowedTools
		// or a CallContext's Tools (a child's is its shared tool set's
		// names, childTools), and a copy per child was ~270 B live in
		// each run in flight.
		allowed = slices.Clip(cc.Tools)
	}
	if len(p.Attachments) > 0 {
		if m.d.WorkspaceFile == nil {
			return nil, nil, "", spawnErrorP("attachments are not available here")
		}
		ws := m.conversationWorkspace(cfg, cmp.Or(cc.RootKey, cc.SessionKey), cc.AgentID)
		var lines []string
		fctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, path := range p.Attachments {
			f, err := m.d.WorkspaceFile(fctx, ws, path)
			if err != nil {
				return nil, nil, "", spawnErrorP("attachments: %q: %v", path, err)
			}
			lines = append(lines, fmt.Sprintf("[file: %s · %s · %s]", f.Path, f.MIME, media.Size(f.Size)))
		}
		task += "\n" + strings.Join(lines, "\n")
	}
	cleanup := p.Cleanup
	switch cleanup {
	case "":
		cleanup = "keep"
	case "keep", "delete":
	default:
		return nil, nil, "", spawnErrorP(`cleanup must be "keep" or "delete", not %q`, cleanup)
	}
	targetLim := cfg.SubagentLimits(target)
	model, warning := m.resolveModel(p.Model, targetLim.Model, cc.Model)
	if _, ok := cfg.ACP(target); ok {
		// An ACP agent brings its own model (SPEC §26).
		model, warning = &agent.Model{Ref: ACPModel}, ""
	}
	if model == nil {
		return nil, nil, "", spawnErrorP("no usable model for the sub-agent: %s", warning)
	}
	// Thinking (SPEC §3): explicit > the target's subagents.thinking (its
	// own, else the defaults') > the caller's own level; an invalid level is
	// skipped with a warning, like an invalid model.
	callerThinking := cc.Thinking
	if callerThinking == "" && cc.Depth == 0 {
		callerThinking = cfg.AgentThinking(cc.AgentID)
	}
	thinking := ""
	var skippedThinking []string
	for _, level := range []string{p.Thinking, targetLim.Thinking, callerThinking} {
		if level == "" {
			continue
		}
		if !agent.ValidThinking(level) {
			skippedThinking = append(skippedThinking, fmt.Sprintf("%q", level))
			continue
		}
		thinking = level
		break
	}
	if len(skippedThinking) > 0 {
		w := fmt.Sprintf("thinking %s is not one of off, low, medium, high; using %s instead", strings.Join(skippedThinking, ", "), cmp.Or(thinking, "none"))
		warning = strings.TrimPrefix(warning+"; "+w, "; ")
	}
	timeout := lim.RunTimeoutSeconds
	if p.RunTimeoutSeconds != nil && *p.RunTimeoutSeconds > 0 {
		timeout = *p.RunTimeoutSeconds
	}
	announce, groupTimeout, fail := announceOf(p, cc, lim, timeout)
	if fail != nil {
		return nil, nil, "", fail
	}
	rootKey := cc.RootKey
	if rootKey == "" {
		rootKey = cc.SessionKey
	}

	now := m.d.Clock.Now()
	childID := uuid.NewString()
	run = &store.Run{
		ID:                 string(ids.NewRunID()),
		ChildKey:           string(ids.NewSubagent(target)),
		ChildSessionID:     childID,
		RequesterKey:       cc.SessionKey,
		RequesterSessionID: cc.SessionID,
		Announce:           announce,
		OutputSchema:       outputSchema,
		SpawnCallID:        cc.CallID,
		RootKey:            rootKey,
		Depth:              cc.Depth + 1,
		AgentID:            target,
		Task:               task,
		Label:              strings.TrimSpace(p.Label),
		Model:              model.Ref,
		Thinking:           thinking,
		Cleanup:            cleanup,
		TimeoutSeconds:     timeout,
		MaxIterations:      targetLim.MaxIterations,
		AllowedTools:       allowed,
		Origin:             cc.Origin,
		Status:             store.StatusQueued,
		CreatedAt:          now,
		CostUSD:            -1,
		Owner:              m.d.Replica,
	}
	if announce == store.AnnounceParent {
		run.SpawnGroup = cmp.Or(cc.Turn, cc.SessionKey)
		if groupTimeout > 0 {
			run.GroupDeadline = now.Add(time.Duration(groupTimeout) * time.Second)
		}
	}
	child = &store.Session{
		Key: run.ChildKey, ID: childID, AgentID: target, Kind: store.KindSubagent,
		ParentKey: cc.SessionKey, RootKey: rootKey, Depth: run.Depth, Label: run.Label,
		Model: model.Ref, Origin: cc.Origin, TranscriptPath: m.d.Store.TranscriptPath(target, childID),
		CreatedAt: now, UpdatedAt: now,
	}
	return run, child, warning, nil
}

func forbiddenP(format string, a ...any) *SpawnResult {
	r := forbidden(format, a...)
	return &r
}

func spawnErrorP(format string, a ...any) *SpawnResult {
	r := spawnError(format, a...)
	return &r
}

// resolveModel walks the model chain explicit > agent/defaults subagents
// model > caller's model, skipping unknown models with a warning.
func (m *Manager) resolveModel(chain ...string) (*agent.Model, string) {
	var skipped []string
	for _, ref := range chain {
		if ref == "" {
			continue
		}
		if mod, ok := m.d.Catalog.Lookup(ref); ok {
			w := ""
			if len(skipped) > 0 {
				w = fmt.Sprintf("model %s is not configured; using %s instead", strings.Join(skipped, ", "), mod.Ref)
			}
			return mod, w
		}
		skipped = append(skipped, fmt.Sprintf("%q", ref))
	}
	return nil, fmt.Sprintf("none of the models %s is configured", strings.Join(skipped, ", "))
}

func (m *Manager) agentIDs() []string {
	ids := make([]string, 0, len(m.config().Agents.List))
	for _, a := range m.config().Agents.List {
		ids = append(ids, a.ID)
	}
	return ids
}

func (m *Manager) enqueue(r *store.Run) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.enqueueLocked(r, nil, false)
}

// enqueueSpawned is enqueue for a run this process just spawned, started
// in slot when it has one (startSlot). A stop that came while the spawn
// recorded it (markSpawning) stops it now.
func (m *Manager) enqueueSpawned(r *store.Run, slot *lane.Slot) {
	m.mu.Lock()
	sp := m.spawning[r.ID]
	delete(m.spawning, r.ID)
	m.enqueueLocked(r, slot, true)
	m.mu.Unlock()
	if sp != nil && sp.stop {
		m.stopOne(r.ID) // finds the run in m.live under the lock
	}
}

// spawningRun is a run being recorded by a spawn, not yet live.
type spawningRun struct {
	requester, root string
	stop            bool // a stop came for it meanwhile
}

// markSpawning notes runs a spawn is about to record, before the
// transaction: from then on a stop below their requester or root finds
// them (stopSpawningLocked) although they are not live yet.
func (m *Manager) markSpawning(runs ...*store.Run) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range runs {
		m.spawning[r.ID] = &spawningRun{requester: r.RequesterKey, root: r.RootKey}
	}
}

// unmarkSpawning forgets runs a spawn did not record or will not start.
func (m *Manager) unmarkSpawning(runs ...*store.Run) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range runs {
		delete(m.spawning, r.ID)
	}
}

// stopSpawningLocked marks the runs being spawned whose requester is one
// of keys or whose root is root, and counts them. m.mu must be held.
func (m *Manager) stopSpawningLocked(keys map[string]bool, root string) int {
	n := 0
	for _, sp := range m.spawning {
		if !sp.stop && (keys[sp.requester] || sp.root == root) {
			sp.stop = true
			n++
		}
	}
	return n
}

// startSlot takes a free slot of the lane for the new run r, if there is
// one, and makes r running from its spawn: its spawn's transaction then
// records it running, with its start, and execute writes no StartRun —
// one statement and one commit fewer per run. This changes nothing a
// crash or a reader of the store could tell: the run starts at once in
// its slot (a crash between the record and the start leaves a run that
// is running in the store and resumes from an empty transcript, as a
// crash between StartRun and the first transcript line did), and a run
// spawned while the lane is full or has runs waiting is queued as before.
// The caller starts r in the slot (enqueueSpawned) or releases it.
func (m *Manager) startSlot(r *store.Run) *lane.Slot {
	slot := m.lane.Reserve()
	if slot != nil {
		r.Status, r.StartedAt, r.StretchAt = store.StatusRunning, r.CreatedAt, r.CreatedAt
	}
	return slot
}

// mayHaveChildren reports whether the live run can have children: it
// was resumed (its children may be older than this process) or a run was
// enqueued here with its session as the requester. A run that never
// spawned skips the store reads for children's results and waits (one
// write and one query per run, 6 % of a run's CPU in BenchmarkRunLifecycle).
func (m *Manager) mayHaveChildren(runID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	lr, ok := m.live[runID]
	return !ok || !lr.fresh || lr.parent
}

// enqueueLocked registers r as live and puts it on the lane, or starts it
// in slot (startSlot) when that is not nil; spawned: this process just
// spawned it (liveRun.spawnedHere). m.mu must be held. The live run keeps
// r itself, not a copy (a store.Run is ~0.9 KB, copied once per run
// before): from here on the caller reads only r's fields that do not
// change while the run is live (liveRun.run), or reads it under m.mu.
func (m *Manager) enqueueLocked(r *store.Run, slot *lane.Slot, spawned bool) {
	lr := &liveRun{run: r, steer: make(chan agent.Steer, 16), ended: make(chan struct{}), spawnedHere: spawned}
	if slot != nil {
		lr.startAt = r.StartedAt
	}
	m.live[r.ID] = lr
	m.liveKeys[r.ChildKey] = r.ID
	if p, ok := m.live[m.liveKeys[r.RequesterKey]]; ok {
		p.parent = true
	}
	id := r.ID
	job := lane.Job{Key: id, Run: func(ctx context.Context) {
		growRunStack()
		m.execute(ctx, id)
	}}
	if slot != nil {
		slot.Start(job)
		return
	}
	if err := m.lane.Enqueue(job); err != nil {
		// The gateway is shutting down: the run stays queued in the store
		// and starts after the restart.
		m.forgetLocked(id)
	}
}

// forgetLocked drops a run that is no longer live. m.mu must be held.
func (m *Manager) forgetLocked(id string) {
	if lr, ok := m.live[id]; ok {
		if lr.ended != nil {
			close(lr.ended)
		}
		if m.liveKeys[lr.run.ChildKey] == id {
			delete(m.liveKeys, lr.run.ChildKey)
		}
	}
	delete(m.live, id)
}

// runLog is the logger of lines about run r, with its fields (runFields).
// The fields are added lazily (zap's WithLazy): the logger is copied with
// them only when it first writes a line. A run holds its loggers for its
// whole life and most runs write no line while their model calls are in
// flight; the eager copy was ~1 KB a logger, three a run
// (docs/performance.md, memory per model call in flight).
func (m *Manager) runLog(r *store.Run) *zap.Logger {
	return m.log.WithLazy(runFields(r, 0)...)
}

// runFields are the fields every log line about a run carries (SPEC §13),
// with room for extra more.
func runFields(r *store.Run, extra int) []zap.Field {
	return appendRunFields(make([]zap.Field, 0, 5+extra), r)
}

// withRunFields is agent.WithLogFields(ctx, runFields(run, 0)...) without
// the heap slice: WithLogFields keeps a copy of the fields. Not inlined,
// so that the array is not in the frame of a run's runner, which stays on
// the run's stack while its model calls are in flight.
//
//go:noinline
func withRunFields(ctx context.Context, run *store.Run) context.Context {
	var fields [5]zap.Field
	return agent.WithLogFields(ctx, appendRunFields(fields[:0], run)...)
}

// appendRunFields appends runFields' fields to dst.
func appendRunFields(dst []zap.Field, r *store.Run) []zap.Field {
	return append(dst, zap.String("runId", r.ID), zap.String("sessionKey", r.ChildKey),
		zap.String("agentId", r.AgentID), zap.String("channel", string(r.Origin.Channel)), telemetry.LogField(r.TraceParent))
}

// execute runs one sub-agent on the lane: it marks the run running, hands
// its work to the run's runner and records how the runner says it ended.
func (m *Manager) execute(laneCtx context.Context, runID string) {
	m.mu.Lock()
	lr, ok := m.live[runID]
	if !ok || lr.stopped {
		m.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(laneCtx)
	lr.cancel = cancel
	lr.run.Status = store.StatusRunning
	now := m.d.Clock.Now()
	recorded := !lr.startAt.IsZero() // running in the store already
	if recorded {
		now = lr.startAt
	}
	if lr.run.StartedAt.IsZero() { // a resumed run keeps its start (SPEC §25)
		lr.run.StartedAt = now
		lr.fresh = lr.run.Resumes == 0
	}
	lr.fresh = lr.fresh || lr.spawnedHere
	lr.run.StretchAt = now
	// The run's one copy for this execution: execute's and its runner's
	// (RunCtx.Run), on the heap while the run waits for its model.
	rc := &RunCtx{Run: *lr.run, Steer: lr.steer, m: m, lr: lr, lane: laneCtx}
	run := &rc.Run
	ctx, lr.span = m.startSpan(ctx, run)
	span := lr.span
	if run.Resumes > 0 && span.IsRecording() {
		span.SetAttributes(telemetry.AttrResumed.Bool(true))
	}
	m.mu.Unlock()
	defer span.End() // end ends it first with the outcome; this covers a shutdown
	defer cancel()
	log := m.runLog(run)

	rt, err := m.runThread(ctx, run)
	if err != nil && laneCtx.Err() != nil {
		m.mu.Lock()
		m.forgetLocked(run.ID)
		m.mu.Unlock()
		return // the gateway is stopping: still queued in the store
	}
	if rt != nil && rt.State == store.ThreadPending {
		// The gateway stopped between recording the run and recording its
		// thread: open it now, once (SPEC §24).
		if _, err := m.openRunThread(ctx, run, true); err != nil {
			if laneCtx.Err() != nil {
				m.mu.Lock()
				m.forgetLocked(run.ID)
				m.mu.Unlock()
				return // still queued in the store: the next start goes on
			}
			log.Warn("sessions_spawn thread: could not record it; the run works in its requester's thread", zap.Error(err))
		}
		m.mu.Lock()
		lr.run.Origin = run.Origin
		m.mu.Unlock()
		rt, _ = m.runThread(ctx, run)
	}
	m.changed(run.RootKey)
	if !recorded {
		if err := m.d.Store.StartRun(ctx, run.ID, now); err != nil {
			log.Error("could not mark run running", zap.Error(err))
		}
	}
	if _, ok := m.config().Agent(run.AgentID); !ok {
		m.finish(lr, run, store.OutcomeError, "", fmt.Sprintf("agent %s is no longer configured", run.AgentID), agent.Usage{})
		return
	}
	rc.live, rc.log = m.startLive(run, rt), log
	out := m.runnerFor(run).Run(ctx, rc)
	draft, drafted := rc.live.stop()
	m.focusEnd(ctx, lr, run, out.Status)
	m.mu.Lock()
	lr.draft, lr.drafted = draft, drafted
	m.mu.Unlock()
	if out.Status == "" {
		// The gateway is shutting down mid-run: leave the run "running" in
		// the store; the next Start resumes it (SPEC §25).
		log.Warn("run interrupted by shutdown")
		m.mu.Lock()
		m.forgetLocked(run.ID)
		m.mu.Unlock()
		return
	}
	run.BudgetStopped, run.Output = out.BudgetStopped, out.Output
	if out.Skip {
		m.finishSkip(lr, run, out.Status, out.Result, out.Note)
		return
	}
	m.finish(lr, run, out.Status, out.Result, out.Note, m.usageOf(lr))
}

// modelRunner runs a child as the model loop of package agent: a work
// turn in the child session, then the announce step.
type modelRunner struct{ m *Manager }

var _ Runner = modelRunner{}

func (r modelRunner) Run(ctx context.Context, rc *RunCtx) Outcome {
	m, lr, run := r.m, rc.lr, &rc.Run
	log := rc.Log()
	model, ok := m.d.Catalog.Lookup(run.Model)
	if !ok {
		return Outcome{Status: store.OutcomeError, Note: fmt.Sprintf("model %s is no longer configured", run.Model)}
	}
	open := agent.LoadSessionFrom
	if lr.spawnedHere {
		// A child session made with the run has no transcript yet: no
		// read (a missing file is an open and an error made per run).
		open = func(ctx context.Context, ts store.Transcripts, key, id, agentID, parentKey, path string, now time.Time) (*agent.Session, error) {
			return agent.OpenSessionFrom(ctx, ts, nil, key, id, agentID, parentKey, path, now)
		}
	}
	sess, err := open(ctx, m.d.Store, run.ChildKey, run.ChildSessionID, run.AgentID, run.RequesterKey,
		m.d.Store.TranscriptPath(run.AgentID, run.ChildSessionID), run.StartedAt)
	if err != nil {
		if rc.ShuttingDown() {
			return Outcome{} // cut before it began: it runs after the restart
		}
		return Outcome{Status: store.OutcomeError, Note: err.Error()}
	}
	defer sess.Close()

	turn := m.childTurn(lr, run, model, log)
	if rc.live != nil || m.d.LiveAt != nil {
		turn.OnText = rc.Text // the work, not the announce step, is shown live (its thread, a /focus thread)
		// Streamed only in case a /focus comes, text seen by nobody does
		// not keep a failing call from its fallback model.
		turn.Shown = func() bool { return rc.live != nil || lr.focus.Load() != nil }
	}
	problems := &agent.ProblemLog{}
	ctx = withRunFields(agent.WithProblemLog(ctx, problems), run)
	runCtx := ctx
	if run.TimeoutSeconds > 0 {
		// A resumed run has the rest of its time: the downtime is not
		// counted (SPEC §25).
		var c context.CancelFunc
		runCtx, c = context.WithTimeout(ctx, max(time.Duration(run.TimeoutSeconds)*time.Second-run.Ran, 0))
		defer c()
	}
	var point resumePoint
	if run.Resumes > 0 {
		point = m.loadResumePoint(ctx, lr, run)
	}
	var res agent.Result
	var runErr error
	if point.worked {
		res.Text = point.workText
	} else {
		turn.Files, turn.OpenFile = m.taskFiles(ctx, turn.Call.Workspace, run.Task), m.d.OpenFile
		turn.Resume, turn.Used = point.started, point.used
		// The task goes into the transcript with the first answer, in
		// its write: a crash before it finds the transcript without the
		// task, and the run starts again from its row's (SPEC §25).
		turn.DeferInput = true
		res, runErr = sess.Run(runCtx, turn, run.Task)
	}
	if res.Fallback != "" {
		m.noteFallback(lr, res.Fallback)
	}
	// Children spawned with announce "parent" are waited for; their
	// results are the input of the run's next turn (SPEC §23).
	turn.Files, turn.Resume, turn.Used, turn.DeferInput = nil, false, 0, false
	for runErr == nil && !rc.Stopped() {
		input, err := m.awaitChildren(runCtx, rc, sess)
		if err != nil || input == "" {
			runErr = err
			break
		}
		res, runErr = sess.Run(runCtx, turn, input)
		if res.Fallback != "" {
			m.noteFallback(lr, res.Fallback)
		}
	}

	outcome, note := store.OutcomeSuccess, ""
	switch {
	case rc.Stopped():
		return Outcome{Status: store.OutcomeStopped, Result: agent.LastAssistantText(sess.History), Note: "stopped by request"}
	case rc.ShuttingDown():
		return Outcome{}
	case errors.Is(runErr, context.DeadlineExceeded):
		outcome, note = store.OutcomeTimeout, fmt.Sprintf("Run timed out after %ds.", run.TimeoutSeconds)
		if p := problems.Summary(); p != "" {
			note += " Model calls failed before it: " + p + "."
		}
	case errors.Is(runErr, spend.ErrBudget):
		// Over budget: no announce step either (it would be a model call).
		// Not a failure of a schedule (store.Run.BudgetStopped).
		return Outcome{Status: store.OutcomeError, Result: agent.LastAssistantText(sess.History),
			Note: m.withFallback(lr, budgetLine(runErr)), BudgetStopped: true}
	case runErr != nil:
		outcome, note = store.OutcomeError, runErr.Error()
	}
	result := res.Text
	if result == "" {
		result = agent.LastAssistantText(sess.History)
	}

	// The announce step runs in the child session with a fresh deadline.
	rc.Announcing()
	// Announcing is stored only for other replicas' lists (/subagents,
	// session_status): here the lists show the live run's status
	// (overlay), and after a crash running and announcing are the same
	// (both resume, ClaimRuns and ResumeRun; where the step stood is read
	// from the transcript, loadResumePoint). Alone, one statement and one
	// commit fewer per run.
	if m.d.Peers != nil {
		if err := m.d.Store.SetRunStatus(ctx, run.ID, store.StatusAnnouncing); err != nil {
			log.Error("could not mark run announcing", zap.Error(err))
		}
	}
	var annRes agent.Result
	var annErr error
	annTurn := agent.Turn{
		Model: model, System: turn.System, Thinking: "", MaxIterations: 1,
		Call: turn.Call, OnUsage: turn.OnUsage, Logger: log, Clock: m.d.Clock,
		Fallbacks: turn.Fallbacks, Health: turn.Health, BeforeCall: turn.BeforeCall, OnCall: turn.OnCall,
		Resume: point.announcing,
		// The prompt goes into the transcript with the reply, as the
		// task with the first answer: a crash before the reply finds the
		// work done and the step not begun, and it begins again (fold,
		// prompt, call), as it would have from the prompt alone. Not
		// after folded results: with one of them last, the transcript
		// reads as a work turn waiting for its answer.
		DeferInput: true,
	}
	if point.announced {
		// Cut after its announce reply was recorded: that reply is the
		// announce (SPEC §25).
		annRes.Text = point.announceText
	} else {
		if !point.announcing && m.mayHaveChildren(run.ID) {
			// The results of the run's own children that ended meanwhile
			// come before its announce step (SPEC §23); a step resumed
			// after its prompt was recorded took them already.
			if m.fold(ctx, sess, run) {
				annTurn.DeferInput = false
			}
		}
		prompt := announcePrompt
		if run.OutputSchema != "" {
			prompt = schemaPrompt(run.OutputSchema)
		}
		annRes, annErr = m.announceTurn(ctx, sess, annTurn, prompt)
	}
	if annRes.Fallback != "" {
		m.noteFallback(lr, annRes.Fallback)
	}
	if rc.Stopped() {
		return Outcome{Status: store.OutcomeStopped, Result: result, Note: "stopped by request"}
	}
	switch {
	case errors.Is(annErr, spend.ErrBudget):
		// The budget was reached between the work turn and the announce
		// step: the run ends "error" with the exact line (SPEC §20),
		// keeping the sub-agent's last reply as its result.
		if note != "" {
			note = "\n" + note
		}
		return Outcome{Status: store.OutcomeError, Result: result, Note: m.withFallback(lr, budgetLine(annErr)+note), BudgetStopped: true}
	case annErr != nil:
		if note != "" {
			note += "\n"
		}
		note += fmt.Sprintf("The announce step failed (%v); the result is the sub-agent's last reply.", annErr)
	case strings.TrimSpace(annRes.Text) == AnnounceSkip:
		return Outcome{Status: outcome, Result: result, Note: note, Skip: true}
	case run.OutputSchema != "":
		output, err := checkOutput(run.OutputSchema, annRes.Text)
		if err != nil {
			// One correction turn (SPEC §23).
			annTurn.Resume, annTurn.DeferInput = false, false
			corr, cerr := m.announceTurn(ctx, sess, annTurn, schemaCorrection(err))
			if corr.Fallback != "" {
				m.noteFallback(lr, corr.Fallback)
			}
			if cerr == nil {
				output, err = checkOutput(run.OutputSchema, corr.Text)
			}
		}
		if err != nil {
			if note != "" {
				note = "\n" + note
			}
			note = "output did not match the schema: " + err.Error() + note
			break
		}
		result = fencedJSON(output)
		return Outcome{Status: outcome, Result: result, Note: m.withFallback(lr, note), Output: output}
	default:
		r, n := ParseAnnounce(annRes.Text)
		if r != "" {
			result = r
		}
		if n != "" && n != "(none)" {
			if note != "" {
				note = n + "\n" + note
			} else {
				note = n
			}
		}
	}
	return Outcome{Status: outcome, Result: result, Note: m.withFallback(lr, note)}
}

// announceTurn runs one turn of the announce step (its prompt, or the
// schema correction) with a fresh deadline.
func (m *Manager) announceTurn(ctx context.Context, sess *agent.Session, t agent.Turn, prompt string) (agent.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, m.d.AnnounceTimeout)
	defer cancel()
	return sess.Run(ctx, t, prompt)
}

// onCall counts a call's cost at the model that answered it (a fallback's
// when one did), for the Stats line, and hands it to the spend ledger.
func (m *Manager) onCall(lr *liveRun, sc spend.Call) func(*agent.Model, agent.Usage) {
	counter := m.d.Spend.Counter(sc)
	return func(model *agent.Model, u agent.Usage) {
		usd, priced := model.EstimateCost(u)
		m.addCall(lr, usd, priced)
		if counter != nil {
			counter(model, u)
		}
	}
}

// addCall counts one call of a run costing usd (priced: its cost is
// known) for the Stats line.
func (m *Manager) addCall(lr *liveRun, usd float64, priced bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	lr.calls++
	lr.cost += usd
	lr.priced = lr.priced || priced
}

// noteFallback keeps the fallback note of a run's call for its Notes.
func (m *Manager) noteFallback(lr *liveRun, note string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !strings.Contains(lr.fallback, note) {
		lr.fallback = strings.TrimSpace(lr.fallback + "\n" + note)
	}
}

// withFallback puts the run's fallback notes ("Answered by …") first in
// its Notes.
func (m *Manager) withFallback(lr *liveRun, note string) string {
	m.mu.Lock()
	fb := lr.fallback
	m.mu.Unlock()
	return joinNonEmpty(fb, note, "\n")
}

// chain resolves the fallbacks of a run's model under cfg: the configured
// setting of the run's agent whose primary is the run's model (SPEC §20).
func (m *Manager) chain(cfg *config.Config, run *store.Run, model *agent.Model) []*agent.Model {
	models, _ := m.d.Catalog.Chain(cfg.ModelChain(run.AgentID, run.Model).Refs())
	if len(models) > 0 && models[0].Ref == model.Ref {
		return models[1:]
	}
	return nil
}

// childTurn builds the turn configuration of a child session. It takes the
// config once and resolves the run's agent once (the model, thinking level
// and iteration cap were fixed in the run at its spawn), so a reload while
// the run is built or runs never mixes old and new settings in it.
func (m *Manager) childTurn(lr *liveRun, run *store.Run, model *agent.Model, log *zap.Logger) agent.Turn {
	cfg := m.config()
	a := cfg.Resolve(run.AgentID)
	aws := m.d.Workspace(cfg, run.AgentID)
	reg, names := m.childTools(cfg, a, run)
	sc := spend.Call{Conversation: run.RootKey, AgentID: run.AgentID, RunID: run.ID, Label: TaskTitle(run.Label, run.Task)}
	cc := agent.CallContext{
		SessionKey: run.ChildKey, SessionID: run.ChildSessionID, RootKey: run.RootKey,
		AgentID: run.AgentID, RunID: run.ID, Depth: run.Depth, Turn: "run:" + run.ID,
		Workspace: m.conversationWorkspace(cfg, run.RootKey, run.AgentID), AgentWorkspace: aws, ReadOnlyDirs: m.readOnlyDirs(cfg), Origin: run.Origin, Model: run.Model, Thinking: run.Thinking, Tools: names,
	}
	return agent.Turn{
		Model: model, System: childSystem(a, aws, run, m.systemContext(cfg, run, aws)), Tools: reg, Thinking: run.Thinking,
		MaxIterations: run.MaxIterations, Call: cc, Authorize: m.d.Authorize, Steer: lr.steer,
		OnUsage: func(u agent.Usage) { m.addUsage(lr, run, u) },
		Logger:  log, Clock: m.d.Clock,
		Fallbacks: m.chain(cfg, run, model), Health: m.d.Catalog.Health(),
		BeforeCall: m.d.Spend.Guard(sc), OnCall: m.onCall(lr, sc),
	}
}

// conversationWorkspace is the workspace of the requester conversation
// rootKey, which its sub-agent and delegate runs share (SPEC §17): under
// the workspace of the agent the key names (agent:<id>:…), else of
// fallbackAgent, under cfg. It is created (0700) if missing.
func (m *Manager) conversationWorkspace(cfg *config.Config, rootKey, fallbackAgent string) string {
	agentID := fallbackAgent
	if id := ids.SessionKey(rootKey).AgentID(); id != "" {
		if _, known := cfg.Agent(id); known {
			agentID = id
		}
	}
	aws := m.d.Workspace(cfg, agentID)
	ws := tools.ConversationWorkspace(aws, rootKey)
	if err := tools.EnsureWorkspace(aws, ws); err != nil {
		m.log.Warn("could not create the conversation workspace", zap.String("rootKey", rootKey), zap.Error(err))
	}
	return ws
}

// systemContextTimeout bounds reading what SystemContext adds.
const systemContextTimeout = 5 * time.Second

// systemContext is what Deps.SystemContext adds to run's system prompt.
func (m *Manager) systemContext(cfg *config.Config, run *store.Run, aws string) string {
	if m.d.SystemContext == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), systemContextTimeout)
	defer cancel()
	return m.d.SystemContext(ctx, cfg, run.AgentID, run.RootKey, aws)
}

// readOnlyDirs is Deps.ReadOnlyDirs under cfg (nil without it).
func (m *Manager) readOnlyDirs(cfg *config.Config) []string {
	if m.d.ReadOnlyDirs == nil {
		return nil
	}
	return m.d.ReadOnlyDirs(cfg)
}

// childContextHead opens a child's sub-agent context block, up to its task.
const childContextHead = "# Sub-agent context\nYou are a sub-agent working in the background for another session. Do the task below and finish with a clear answer; it is announced back to the requester.\n- Task: "

// childSystem is the child's system prompt: the agent's own prompt, the
// sub-agent context block, only AGENTS.md and TOOLS.md of the agent
// workspace aws, and extra (Deps.SystemContext).
func childSystem(a config.AgentSettings, aws string, run *store.Run, extra string) string {
	boot, err := tools.LoadBootstrap(aws, true)
	if err != nil {
		boot = ""
	}
	// One buffer at its size, the parts written as they are: this runs
	// once per child as it starts (fmt and the concatenations were ~10
	// allocations a child).
	var b strings.Builder
	b.Grow(len(a.SystemPrompt) + len(childContextHead) + len(run.Task) + len(run.Label) + len(run.RequesterKey) + len(run.ChildKey) +
		len(ResultNote) + len(boot) + len(extra) + 80)
	if a.SystemPrompt != "" {
		b.WriteString(a.SystemPrompt)
		b.WriteString("\n\n")
	}
	b.WriteString(childContextHead)
	b.WriteString(run.Task)
	if run.Label != "" {
		b.WriteString("\n- Label: ")
		b.WriteString(run.Label)
	}
	b.WriteString("\n- Requester session: ")
	b.WriteString(run.RequesterKey)
	b.WriteString("\n- Your session: ")
	b.WriteString(run.ChildKey)
	b.WriteString("\n")
	if run.Depth < a.Subagents.MaxDepth {
		b.WriteString(ResultNote)
		b.WriteString("\n")
	}
	if boot != "" {
		b.WriteString("\n")
		b.WriteString(boot)
	}
	if extra != "" {
		b.WriteString("\n")
		b.WriteString(extra)
	}
	return b.String()
}

// childTools is the tool set of a child and its names: the agent's tools
// and the session tools, less the session tools at the deepest level,
// filtered by the agent's allowedTools, tools.subagents.tools and the
// spawn's allowedTools (a: the agent's settings under cfg). Both are
// shared, read only, by the children of the same agent, deepest or not
// and spawn allowedTools under the same config and base tools (Deps.Tools
// returning the same registry): a child's tool set was a copy of its own,
// ~1.1 KB in flight per child, with a new set of session tools each
// (docs/performance.md, session 8). What differs per run (workspace,
// session, run id, depth, origin) is in its CallContext, never in a tool.
func (m *Manager) childTools(cfg *config.Config, a config.AgentSettings, run *store.Run) (*agent.Registry, []string) {
	base := m.d.Tools(a)
	deepest := run.Depth >= a.Subagents.MaxDepth
	key := childToolsKey{agentID: run.AgentID, deepest: deepest}
	m.childMu.Lock()
	defer m.childMu.Unlock()
	sets := m.childRegs[key]
	for _, e := range sets {
		if e.cfg == cfg && e.base == base && slices.Equal(e.allowed, run.AllowedTools) {
			return e.reg, e.names
		}
	}
	reg := base.Clone()
	for _, t := range m.SessionTools(run.Depth) {
		reg.Add(t)
	}
	agentAllowed := a.AllowedTools
	filter := cfg.Tools.Subagents.Tools
	reg = reg.Filter(func(name string, _ agent.Tool) bool {
		if tools.IsSessionTool(name) {
			// Below the deepest level a child may nest (maxDepth > 1):
			// it keeps the session tools unless they are denied.
			return !deepest && !slices.Contains(filter.Deny, name) &&
				(len(filter.Allow) == 0 || slices.Contains(filter.Allow, name)) &&
				(len(agentAllowed) == 0 || slices.Contains(agentAllowed, name)) &&
				(len(run.AllowedTools) == 0 || slices.Contains(run.AllowedTools, name))
		}
		if len(agentAllowed) > 0 && !slices.Contains(agentAllowed, name) {
			return false
		}
		if len(run.AllowedTools) > 0 && !slices.Contains(run.AllowedTools, name) {
			return false
		}
		return tools.SubagentToolAllowed(name, filter.Allow, filter.Deny)
	}).Freeze()
	e := &childToolSet{cfg: cfg, base: base, allowed: run.AllowedTools, reg: reg, names: slices.Clip(reg.Names())}
	// Sets made under another config or base are dropped; past
	// maxChildToolSets lists (spawn allowedTools are the model's
	// choice) the oldest goes.
	sets = slices.DeleteFunc(slices.Clone(sets), func(o *childToolSet) bool { return o.cfg != cfg || o.base != base })
	if len(sets) >= maxChildToolSets {
		sets = sets[1:]
	}
	if m.childRegs == nil || len(m.childRegs) >= maxChildToolSets {
		m.childRegs = make(map[childToolsKey][]*childToolSet)
	}
	m.childRegs[key] = append(sets, e)
	return e.reg, e.names
}

// maxChildToolSets bounds Manager.childRegs: the (agent, deepest) keys
// and the allowedTools lists kept for each.
const maxChildToolSets = 64

// childToolsKey is what a child's tool set depends on besides the config,
// its agent's base tools and its spawn's allowedTools (compared in each
// childToolSet, without a key string made per run): its agent and
// whether it is at the deepest level.
type childToolsKey struct {
	agentID string
	deepest bool
}

// childToolSet is a shared child tool set, the config, base tools and
// spawn allowedTools (the run's, never written) it was made under, and
// its tool names.
type childToolSet struct {
	cfg     *config.Config
	base    *agent.Registry
	allowed []string
	reg     *agent.Registry
	names   []string
}

func (m *Manager) setStatus(lr *liveRun, status string) {
	m.mu.Lock()
	lr.run.Status = status
	m.mu.Unlock()
}

func (m *Manager) usageOf(lr *liveRun) agent.Usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return lr.usage
}

func (m *Manager) setCost(r *store.Run, u agent.Usage) {
	r.CostUSD = -1
	if mod, ok := m.d.Catalog.Lookup(r.Model); ok {
		if c, ok := mod.EstimateCost(u); ok {
			r.CostUSD = c
		}
	}
}

func (m *Manager) setArchive(r *store.Run) {
	r.ArchiveAt = time.Time{}
	if r.Cleanup == "delete" {
		r.ArchiveAt = r.EndedAt
		return
	}
	if mins := m.config().SubagentLimits(r.AgentID).ArchiveAfterMinutes; mins > 0 {
		r.ArchiveAt = r.EndedAt.Add(time.Duration(mins) * time.Minute)
	}
}

// announceItem renders the announce of r as an outbox row.
func (m *Manager) announceItem(r *store.Run, result, notes, status string) *store.OutboxItem {
	start := r.StartedAt
	if start.IsZero() {
		start = r.CreatedAt
	}
	a := Announce{
		Status: status, Label: r.Label, Task: r.Task, Result: result, Notes: notes,
		Runtime: r.EndedAt.Sub(start), TokensIn: r.TokensIn, TokensOut: r.TokensOut,
		CostUSD: r.CostUSD, HasCost: r.CostUSD >= 0,
		SessionKey: r.ChildKey, SessionID: r.ChildSessionID,
		Transcript: m.d.Store.TranscriptPath(r.AgentID, r.ChildSessionID),
	}
	if r.ScheduleID != "" {
		a.Schedule = r.ScheduleID + " @ " + r.ScheduleDue.UTC().Format(time.RFC3339)
	}
	return &store.OutboxItem{RunID: r.ID, Origin: r.Origin, Kind: channels.KindAnnounce, Text: a.Render(), CreatedAt: r.EndedAt,
		SessionKey: r.RequesterKey, AgentID: r.AgentID}
}

// runEnd is what the end of r writes beside the run row: its announce
// (announce chat, unless skipped or stopped), its share of its batch's
// announce, its result for the session that spawned it and the wake of
// its group (SPEC §6, §23). The files its send_file calls attached, and
// those of its own announce parent/silent children it took in, go with
// its announce; without one, with its result (the batch's announce, or
// the reply of the turn that takes the result in); a skipped or stopped
// run's are dropped. traceParent is its announce's trace context.
func (m *Manager) runEnd(ctx context.Context, r *store.Run, result, note, traceParent string) store.RunEnd {
	files := m.runFiles(ctx, r)
	posts := !r.Skipped && r.Outcome != store.OutcomeStopped
	if !posts {
		files = nil
	}
	var end store.RunEnd
	switch {
	case r.Batch != "" && announcesInChat(r):
		end.Batch = &store.BatchEnd{Render: func(runs []store.Run) *store.OutboxItem {
			item := m.batchAnnounce(runs)
			if item != nil {
				item.TraceParent = traceParent
			}
			return item
		}}
	case posts && announcesInChat(r):
		end.Announce = m.announceItem(r, result, note, r.Outcome)
		end.Announce.TraceParent, end.Announce.Files, files = traceParent, files, nil
	}
	end.Result = resultOf(r, r.Outcome, result, note)
	if end.Result != nil {
		end.Result.Files = files
	}
	end.Wake = m.wakeOf(r, r.Outcome, resultText(end.Result))
	return end
}

// runFiles takes the files r's send_file calls attached, and adds those
// of the announce parent/silent children it took in (SPEC §23: they post
// nothing themselves).
func (m *Manager) runFiles(ctx context.Context, r *store.Run) []store.FileRef {
	var files []store.FileRef
	if m.d.Files != nil {
		files = m.d.Files(r.ChildKey)
	}
	if !m.mayHaveChildren(r.ID) {
		return files // it folded no child's result: no files of theirs
	}
	kids, err := m.d.Store.FoldedFiles(ctx, r.ChildKey, "run:"+r.ID)
	if err != nil {
		m.runLog(r).Warn("could not read the files of the run's sub-agents; they are not posted", zap.Error(err))
	}
	return append(files, kids...)
}

// finish ends a run: run row and (unless stopped) its announce in one
// transaction, then forgets the live run.
func (m *Manager) finish(lr *liveRun, run *store.Run, outcome, result, note string, u agent.Usage) {
	m.end(lr, run, outcome, result, note, u, false)
}

// finishSkip ends a run whose child replied ANNOUNCE_SKIP.
func (m *Manager) finishSkip(lr *liveRun, run *store.Run, outcome, result, note string) {
	m.end(lr, run, outcome, result, note, m.usageOf(lr), true)
}

func (m *Manager) end(lr *liveRun, run *store.Run, outcome, result, note string, u agent.Usage, skip bool) {
	r := *run
	r.Skipped = skip
	if r.ScheduleID != "" && run.Note != "" && !strings.HasPrefix(note, run.Note) {
		// A scheduled run's own note (how late a catch-up run is) opens
		// its Notes.
		note = strings.TrimSuffix(run.Note+"\n"+note, "\n")
	}
	note = withResumed(note, r.Resumes)
	r.Status, r.Outcome, r.EndedAt, r.Note, r.Result = store.StatusDone, outcome, m.d.Clock.Now(), note, result
	r.TokensIn, r.TokensOut, r.CacheRead, r.CacheWrite = u.Input, u.Output, u.CacheRead, u.CacheWrite
	m.setCost(&r, u)
	if lr != nil {
		m.mu.Lock()
		if lr.calls > 0 {
			r.CostUSD = -1
			if lr.priced {
				r.CostUSD = math.Round(lr.cost*1e8) / 1e8
			}
		}
		m.mu.Unlock()
	}
	m.setArchive(&r)
	m.mu.Lock()
	span, draft, drafted := lr.span, lr.draft, lr.drafted
	m.mu.Unlock()
	tp := ""
	if span != nil {
		tp = telemetry.FormatTraceparent(span.SpanContext())
	}
	ends := m.runEnd(context.Background(), &r, result, note, tp)
	item, wake := ends.Announce, ends.Wake
	if item != nil {
		// The run was shown live in its thread: the announce replaces
		// that draft, so the thread shows it once (SPEC §16, §24).
		item.DraftRef = draft
	} else if draft != "" && drafted != "" {
		// No announce in the thread (stopped, ANNOUNCE_SKIP, announce
		// parent/silent): the draft is finished instead, once, so it
		// does not look like a child still writing.
		ends.Announce = &store.OutboxItem{RunID: r.ID, Origin: r.Origin, Kind: channels.KindReply, Text: drafted + "\n\nStatus: " + outcome,
			CreatedAt: r.EndedAt, SessionKey: r.RequesterKey, AgentID: r.AgentID, DraftRef: draft, TraceParent: tp}
		item = ends.Announce
	}
	if span != nil {
		if span.IsRecording() {
			span.SetAttributes(telemetry.AttrRunOutcome.String(outcome), telemetry.GenAIInputTokens.Int64(u.Input),
				telemetry.GenAIOutputTokens.Int64(u.Output))
			if outcome == store.OutcomeError || outcome == store.OutcomeTimeout {
				span.SetStatus(codes.Error, "run ended with "+outcome)
			}
		}
		defer span.End() // after the run's end is stored
	}
	// A shutdown must not lose the end of a run: write with a fresh
	// context; a store that does not take it is retried (an outage), so
	// the announce is not left for a restart.
	log := m.runLog(&r)
	lastOfBatch := watchBatchEnd(&ends)
	own, claimFor := ends.Announce, ""
	if own != nil && m.d.Outbox != nil {
		claimFor = m.d.Outbox.ClaimFor(own.Origin.Channel)
		ends.ClaimAnnounce = claimFor
		if claimFor != "" {
			ends.Web = m.d.Outbox.WebDelivery(own)
		}
	}
	next := m.handOn(lr, &ends)
	tries := 0
	finish := func(ctx context.Context) error {
		tries++
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := m.d.Store.EndRun(wctx, &r, ends)
		if err != nil && next != nil {
			// The end's write failed (it is retried through an outage, which
			// can last minutes): the run handed this slot goes back to the
			// queue's head, to take the first free slot, and records its own
			// start.
			m.mu.Lock()
			next.startAt = time.Time{}
			m.mu.Unlock()
			m.lane.GiveBack(lr.run.ID)
			ends.Start, next = nil, nil
		}
		return err
	}
	var err error
	if m.d.RetryWrite != nil {
		err = m.d.RetryWrite(context.Background(), "record the end of a run", log, finish)
	} else {
		err = finish(context.Background())
	}
	batched := err == nil && ends.Batch != nil && ends.Batch.Announce != nil
	if err != nil {
		// finish gave the handed run back on its failed write (next is nil).
		log.Error("could not record the end of a run; it will be announced as unknown after a restart", zap.Error(err))
	} else {
		log.Info("sub-agent run ended", zap.String("outcome", outcome), zap.Int64("tokens", u.Total()),
			zap.Duration("runtime", r.EndedAt.Sub(r.StartedAt)), zap.Bool("announced", item != nil && item.Kind == channels.KindAnnounce),
			zap.Bool("wakes", wake != nil && wake.ID != 0), zap.Bool("batchAnnounced", batched))
		m.groupEnded(&r, *lastOfBatch, wake)
		m.handWake(wake)
		m.scheduleEnded(&r)
		if batched {
			item = ends.Batch.Announce
		}
	}
	m.mu.Lock()
	m.forgetLocked(r.ID)
	m.mu.Unlock()
	m.runEnded(&r)
	handed := false
	switch {
	case err == nil && ends.Web != nil && ends.Web.Msg.Delivers != 0:
		// Delivered with the run's end, which may have added a batch's
		// announce or a schedule's pause notice after it.
		m.d.Outbox.Delivered(*own, ends.Web, !batched && r.ScheduleID == "")
		handed = true
	case err == nil && claimFor != "" && own.ClaimedBy == claimFor:
		m.d.Outbox.Hand(*own)
		handed = true
	case claimFor != "" && tries > 1:
		// A try whose commit was lost may have claimed it unseen, or
		// delivered it to the web chat.
		m.d.Outbox.Reclaim()
		if ends.Web != nil {
			m.d.Outbox.Delivered(*own, ends.Web, false)
		}
	}
	if item != nil && (!handed || item != own) {
		m.d.Notify()
	}
	m.changed(r.RootKey)
	m.wakeArchiver(r.ArchiveAt)
}

// Outbox is the deliverer as a run's end uses it (Deps.Outbox).
type Outbox interface {
	// ClaimFor is the replica that claims an announce to channel ch with
	// its run's end ("" = none: the deliverer's pass takes it).
	ClaimFor(ch channels.Name) string
	// Hand starts the send of an announce claimed for this replica.
	Hand(item store.OutboxItem)
	// Reclaim makes the deliverer take this replica's claims back.
	Reclaim()
	// WebDelivery is how an announce claimed by its run's end is also
	// delivered there when it is for the web chat (store.WebDelivery;
	// nil: not so).
	WebDelivery(item *store.OutboxItem) *store.WebDelivery
	// Delivered tells the web chat and the deliverer of item, which its
	// run's end delivered as w asked (or, not delivered, may have in a
	// lost commit); nothingElse says the end added no other outbox item.
	Delivered(item store.OutboxItem, w *store.WebDelivery, nothingElse bool)
}

// handOn gives the lane slot of the ending run lr, when its runner
// returned (lr runs on the lane), to the queued run the lane would start
// next (lane.TakeNext), and records that run's start in ends: the end's
// transaction moves it to running (RunEnd.Start), so it writes no
// StartRun commit of its own. It starts as soon as lr's job returns,
// in the same slot. It returns that run (nil: none); a crash before it
// starts leaves it running in the store with no transcript line —
// resumed from nothing, as after a crash between StartRun and its
// first line.
func (m *Manager) handOn(lr *liveRun, ends *store.RunEnd) *liveRun {
	m.mu.Lock()
	inJob := lr != nil && lr.cancel != nil // a queued run stopped ends off the lane
	m.mu.Unlock()
	if !inJob {
		return nil
	}
	id, ok := m.lane.TakeNext(lr.run.ID)
	if !ok {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	next, live := m.live[id]
	if !live || next.stopped {
		return nil // its job returns at once (execute)
	}
	next.startAt = m.d.Clock.Now()
	ends.Start = &store.RunStart{RunID: id, At: next.startAt}
	return next
}

// startSpan starts the herald.run span of r, a child of the span that
// spawned it (its stored trace context), with the tracer in the returned
// context for the run's model and tool calls.
func (m *Manager) startSpan(ctx context.Context, r *store.Run) (context.Context, trace.Span) {
	ctx = telemetry.WithTracer(telemetry.Resume(ctx, r.TraceParent), m.d.Tracer)
	ctx, span := m.d.Tracer.Start(ctx, telemetry.SpanRun)
	if span.IsRecording() {
		span.SetAttributes(telemetry.AttrRunID.String(r.ID), telemetry.AttrSessionKey.String(r.ChildKey),
			telemetry.AttrAgentID.String(r.AgentID), telemetry.AttrRunDepth.Int(r.Depth), telemetry.GenAIRequestModel.String(r.Model),
			telemetry.AttrChannel.String(string(r.Origin.Channel)), telemetry.AttrReplica.String(m.d.Replica))
		if m.d.Tracer.RecordContent() {
			span.SetAttributes(telemetry.AttrTask.String(telemetry.Content(r.Task)))
		}
	}
	return ctx, span
}

// scheduleEnded tells Deps.ScheduleEnded of r's stored end when r is a
// schedule's run.
func (m *Manager) scheduleEnded(r *store.Run) {
	if r.ScheduleID != "" && m.d.ScheduleEnded != nil {
		m.d.ScheduleEnded()
	}
}

func (m *Manager) changed(rootKey string) {
	if m.d.OnChange != nil {
		m.d.OnChange(rootKey)
	}
}

// usageFromTranscript sums the usage recorded on transcript lines.
func usageFromTranscript(entries []store.TranscriptEntry) agent.Usage {
	var total agent.Usage
	for _, e := range entries {
		if len(e.Usage) == 0 {
			continue
		}
		var u agent.Usage
		if json.Unmarshal(e.Usage, &u) == nil {
			total = total.Add(u)
		}
	}
	return total
}

// budgetLine is the exact 💸 line of a budget-stopped call's error
// (SPEC §20), without any wrapping.
func budgetLine(err error) string {
	var be *spend.BudgetError
	if errors.As(err, &be) {
		return be.Error()
	}
	return err.Error()
}

// taskFiles are the files a spawn handed its child (the task's
// "[file: <path> · <type> · <size>]" lines), stored again from the
// conversation workspace so the child's model can take them as content.
func (m *Manager) taskFiles(ctx context.Context, ws, task string) []agent.File {
	if m.d.WorkspaceFile == nil || ws == "" {
		return nil
	}
	var out []agent.File
	for _, line := range strings.Split(task, "\n") {
		rest, ok := strings.CutPrefix(line, "[file: ")
		if !ok {
			continue
		}
		path, _, ok := strings.Cut(rest, " · ")
		if !ok {
			continue
		}
		f, err := m.d.WorkspaceFile(ctx, ws, path)
		if err != nil {
			m.log.Warn("a file handed to a sub-agent is no longer readable", zap.String("path", path), zap.Error(err))
			continue
		}
		out = append(out, f)
	}
	return out
}

// spawnLimits is what the store checks of an agent's sub-agent limits when
// it records spawns.
func spawnLimits(lim config.Limits) store.SpawnLimits {
	return store.SpawnLimits{MaxChildren: lim.MaxChildrenPerSession, MaxTotal: lim.MaxTotalSpawns}
}
