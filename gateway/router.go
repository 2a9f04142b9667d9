package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/codes"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/tools"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/gateway/command"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/spend"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent"
	"github.com/heraldhq/herald/telemetry"
)

// sessionState is a requester session the gateway has loaded.
type sessionState struct {
	key     string
	agentID string
	// use holds one token while a turn or a session command uses sess and
	// row (lock/unlock); the idle janitor evicts only a session it can take.
	use     chan struct{}
	row     *store.Session
	sess    *agent.Session
	turn    turnCut   // the running turn's, zero when none; guarded by g.mu
	evicted bool      // set (holding use) when the janitor dropped it from g.sessions
	fresh   bool      // loaded and not used yet; guarded by use
	idle    time.Time // when the last turn or command let it go; guarded by use
}

// lock waits until no turn or command uses the session, or ctx ends.
func (s *sessionState) lock(ctx context.Context) error {
	select {
	case s.use <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *sessionState) unlock() { <-s.use }

// acquire returns the loaded session of key, locked for the caller; a
// session the janitor evicted meanwhile is loaded again. With other
// replicas, a session whose last turn or command ran on another one is
// loaded again from the store: what this replica had loaded is stale.
func (g *Gateway) acquire(ctx context.Context, cfg *config.Config, agentID, key string, origin channels.Origin) (*sessionState, error) {
	for {
		s, err := g.session(ctx, cfg, agentID, key, origin)
		if err != nil {
			return nil, err
		}
		if err := s.lock(ctx); err != nil {
			return nil, err
		}
		if s.evicted {
			s.unlock()
			continue
		}
		if g.cluster.shared {
			moved, err := g.db.HoldSession(ctx, key, g.cluster.id)
			if err != nil {
				s.unlock()
				return nil, err
			}
			if moved && !s.fresh {
				g.log.Debug("session ran on another replica; loading it again", zap.String("sessionKey", key))
				g.evict(s)
				s.unlock()
				continue
			}
		}
		s.fresh = false
		return s, nil
	}
}

// evict drops a session the caller has locked from memory, closing its
// transcript; the next turn loads it again.
func (g *Gateway) evict(s *sessionState) {
	g.mu.Lock()
	if g.sessions[s.key] == s {
		delete(g.sessions, s.key)
	}
	g.mu.Unlock()
	s.evicted = true
	if s.sess != nil {
		if err := s.sess.Close(); err != nil {
			g.log.Warn("close a session's transcript", zap.String("sessionKey", s.key), zap.Error(err))
		}
	}
}

// release lets the session go after a turn or command.
func (g *Gateway) release(s *sessionState) {
	s.idle = g.clock.Now()
	s.unlock()
}

func (g *Gateway) runCommand(ctx context.Context, agentID, key string, in channels.Inbound, bound *store.Binding) {
	env := command.Env{
		Subagents: g.subs, Store: g.db, Config: g.cfg(), AgentID: agentID,
		AbortTurn: g.abortAnywhere, Approve: g.approv.resolve, Now: g.clock.Now,
		Session: sessionControl{sessionDeps: &g.sessDeps, agentID: agentID, origin: in.Origin}, Schedules: g.sched, Spend: spendCommands{g},
		Threads: threadBindings{g: g, agentID: agentID},
		Memory:  g.memoryCommand,
	}
	req := command.Request{SessionKey: key, Origin: in.Origin, SenderID: in.Origin.SenderID, Text: in.Text, Unverified: in.Unverified}
	if bound != nil {
		if run, err := g.subs.RunOfChild(ctx, bound.ChildKey); err == nil {
			req.Bound = run
		} else {
			g.log.Warn("the sub-agent of a bound thread is gone", zap.String("sessionKey", bound.ChildKey), zap.Error(err))
		}
	}
	reply, handled := command.Handle(ctx, env, req)
	if handled && reply != "" {
		g.post(ctx, in.Origin, channels.KindSystem, reply, "")
	}
}

// abortTurn cancels the running turn of a session: running reports
// whether one runs, cut whether this call cut it (not cut, nor ended,
// before).
func (g *Gateway) abortTurn(key string) (running, cut bool) {
	if running, cut = g.abortFollowUp(key); running {
		return running, cut
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.sessions[key]
	if !ok || s.turn.cancel == nil {
		return false, false
	}
	return true, s.turn.cut()
}

// turnCut cuts a running turn: its context and the context's cancel.
type turnCut struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// cut cancels the turn and reports whether this call cut it: false when
// it was cut or had ended before, so that a stop read again while the
// cut turn unwinds is not told twice (actOnStops). Called holding g.mu.
func (t turnCut) cut() bool {
	first := t.ctx.Err() == nil
	t.cancel()
	return first
}

// post puts a message for a person into the outbox.
func (g *Gateway) post(ctx context.Context, to channels.Origin, kind channels.Kind, text, runID string) {
	agentID := route(g.cfg(), to) // whom the conversation at to talks to
	item := &store.OutboxItem{RunID: runID, Origin: to, Kind: kind, Text: text, CreatedAt: g.clock.Now(),
		SessionKey: string(ids.Requester(agentID, to)), AgentID: agentID, TraceParent: telemetry.Traceparent(ctx)}
	if _, err := g.db.EnqueueOutbox(context.WithoutCancel(ctx), item); err != nil {
		g.log.Error("could not queue a message", zap.String("channel", string(to.Channel)), zap.Error(err))
		return
	}
	g.outbox.wakeUp()
}

// session loads (or creates, with the agent's model under cfg) the
// requester session of key.
func (g *Gateway) session(ctx context.Context, cfg *config.Config, agentID, key string, origin channels.Origin) (*sessionState, error) {
	g.mu.Lock()
	s, ok := g.sessions[key]
	stored, known := g.newRows[key]
	delete(g.newRows, key)
	g.mu.Unlock()
	if ok {
		return s, nil
	}
	now := g.clock.Now()
	var sess *agent.Session
	var err error
	row := stored.row
	switch {
	case known && stored.created:
		// Stored with its first message, and not loaded since: a new
		// transcript, nothing to read.
		sess, err = agent.OpenSessionFrom(ctx, g.db, nil, row.Key, row.ID, agentID, "", row.TranscriptPath, row.CreatedAt)
	case known:
		sess, err = agent.LoadSessionFrom(ctx, g.db, row.Key, row.ID, agentID, "", row.TranscriptPath, row.CreatedAt)
	default:
		row = g.newSessionRow(cfg, agentID, key, origin)
		if _, err := g.db.EnsureSession(ctx, row); err != nil {
			return nil, err
		}
		sess, err = agent.LoadSessionFrom(ctx, g.db, row.Key, row.ID, agentID, "", row.TranscriptPath, row.CreatedAt)
	}
	if err != nil {
		return nil, err
	}
	s = &sessionState{key: key, agentID: agentID, row: row, sess: sess, use: make(chan struct{}, 1), idle: now, fresh: true}
	g.mu.Lock()
	if other, ok := g.sessions[key]; ok { // loaded by someone else meanwhile
		g.mu.Unlock()
		sess.Close()
		return other, nil
	}
	g.sessions[key] = s
	delete(g.newRows, key) // stored by a message while this loaded it: it has been read
	g.mu.Unlock()
	return s, nil
}

// forgetRow drops the row a message's intake left for the session of key
// (newRows) when its turn ends without loading the session.
func (g *Gateway) forgetRow(key string) {
	g.mu.Lock()
	delete(g.newRows, key)
	g.mu.Unlock()
}

// newSessionRow is the row of a new requester session of key.
func (g *Gateway) newSessionRow(cfg *config.Config, agentID, key string, origin channels.Origin) *store.Session {
	now := g.clock.Now()
	id := uuid.NewString()
	return &store.Session{Key: key, ID: id, AgentID: agentID, Kind: store.KindMain, Origin: origin,
		Model: cfg.AgentModel(agentID), TranscriptPath: g.db.TranscriptPath(agentID, id), CreatedAt: now, UpdatedAt: now}
}

var errTurnTimeout = errors.New("turn timed out")

// turn runs the owed turn of one stored message on the main lane. Its
// reply is committed to the outbox in the same transaction that marks the
// message done; a turn cut by shutdown stays owed and continues after the
// next start without repeating what its history already holds.
//
// A turn takes the config once, at its start, and resolves its agent once:
// every setting it uses (model, thinking, tools, system prompt, workspace,
// iteration cap, timeout, fallbacks, live replies) comes from that one
// snapshot, so a reload while it runs reaches the next turn, never half of
// this one. security.toolPolicy is the exception: it is read on every tool
// call, so a reload that tightens it applies at once.
func (g *Gateway) turn(laneCtx context.Context, it store.Intake) {
	cfg := g.cfg()
	agentID, key, in := it.AgentID, it.SessionKey, channels.Inbound{Origin: it.Origin, SenderName: it.SenderName, Text: it.Text, Mentioned: it.Mentioned, At: it.CreatedAt}
	ag := cfg.Resolve(agentID)
	// The turn continues the trace its message's intake started (stored
	// with the row: also after a restart, or on another replica); every
	// context below carries the span and the tracer for the model loop.
	laneCtx, span := g.tracer.Start(telemetry.WithTracer(telemetry.Resume(laneCtx, it.TraceParent), g.tracer), telemetry.SpanTurn)
	outcome := "cut"
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(telemetry.AttrOutcome.String(outcome))
		}
		span.End()
	}()
	if span.IsRecording() {
		span.SetAttributes(telemetry.AttrIntakeID.Int64(it.ID), telemetry.AttrSessionKey.String(key), telemetry.AttrAgentID.String(agentID),
			telemetry.AttrChannel.String(string(in.Origin.Channel)), telemetry.AttrResumed.Bool(!it.StartedAt.IsZero()),
			telemetry.AttrReplica.String(g.cluster.id))
	}
	log := g.log.With(zap.String("sessionKey", key), zap.String("agentId", agentID), zap.String("channel", string(in.Origin.Channel)),
		telemetry.SpanLogField(laneCtx))
	defer func() {
		if r := recover(); r != nil {
			outcome = "failed"
			span.SetStatus(codes.Error, "turn panicked")
			log.Error("turn panicked", zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
			g.complete(laneCtx, it, channels.KindSystem, "⚠️ Herald hit an internal error while answering this message; the operator's log has details.", log)
		}
	}()
	if g.skipStale(laneCtx, it, cfg.Intake.MaxAge(), log) {
		g.forgetRow(key) // no load follows to take it
		outcome = "skipped"
		return
	}
	if ids.SessionKey(key).Kind() == ids.KindSubagent {
		// A message in a thread bound to a child session (SPEC §24).
		outcome = g.boundTurn(laneCtx, it, log)
		return
	}
	s, err := g.acquire(laneCtx, cfg, agentID, key, in.Origin)
	if err != nil {
		if laneCtx.Err() != nil {
			return // shutting down: stays owed
		}
		if storeFailed(err) && (!errors.Is(err, agent.ErrHistory) || g.historyInStore()) {
			g.retryTurn(laneCtx, it, log, err)
			return
		}
		outcome = "failed"
		span.SetStatus(codes.Error, "could not open the session")
		log.Error("could not open session", zap.Error(err))
		msg := "⚠️ Could not open this conversation's session; the operator's log has details."
		if errors.Is(err, agent.ErrHistory) {
			msg = "⚠️ This conversation's history could not be read, so I did not answer rather than start over without it. The operator's log names the transcript file and line."
		}
		g.complete(laneCtx, it, channels.KindSystem, msg, log)
		return
	}
	defer g.release(s)
	if it.Kind == store.IntakeWake && it.SessionID != "" && it.SessionID != s.row.ID {
		// The conversation was started again with /new: the results stay
		// with the old session, and nothing is posted (SPEC §23).
		outcome = "done"
		log.Info("wake for a session started again with /new; nothing to answer", zap.Int64("intakeId", it.ID))
		g.complete(laneCtx, it, channels.KindReply, "", log)
		return
	}
	modelRef, thinking, err := g.effective(laneCtx, ag, key)
	if err != nil {
		if laneCtx.Err() != nil {
			return
		}
		log.Error("could not read the conversation's settings", zap.Error(err))
		modelRef, thinking = ag.Model.Primary, ag.Thinking
	}
	model, ok := g.catalog.Lookup(modelRef)
	if !ok {
		outcome = "failed"
		span.SetStatus(codes.Error, "no usable model")
		g.complete(laneCtx, it, channels.KindSystem, fmt.Sprintf("⚠️ Agent %s has no usable model (%s). Check models.providers in the config.", agentID, modelRef), log)
		return
	}
	resume, written := resumeMode(it, s.sess.History)
	if written != "" {
		outcome = "done"
		log.Info("owed turn had its reply written before a restart; delivering it", zap.Int64("intakeId", it.ID))
		g.complete(laneCtx, it, channels.KindReply, written, log)
		return
	}
	if resume {
		log.Info("continuing a turn cut short", zap.Int64("intakeId", it.ID))
	} else if err := g.startTurn(laneCtx, s, it, log); err != nil {
		if laneCtx.Err() != nil {
			return
		}
		g.retryTurn(laneCtx, it, log, err)
		return
	}
	turnTimeout := time.Duration(cfg.Agents.Defaults.TurnTimeoutSeconds) * time.Second
	tctx, tcancel := context.WithTimeoutCause(laneCtx, max(turnTimeout, time.Second), errTurnTimeout)
	defer tcancel()
	ctx, cancel := context.WithCancel(agent.WithLogFields(tctx, zap.String("sessionKey", key), zap.String("agentId", agentID),
		zap.String("channel", string(in.Origin.Channel)), telemetry.SpanLogField(tctx)))
	defer cancel()
	g.mu.Lock()
	s.turn = turnCut{ctx, cancel}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		s.turn = turnCut{}
		g.mu.Unlock()
	}()

	reg := g.topTools(ag)
	origin := in.Origin
	origin.SenderName = in.SenderName
	// Each conversation has its own workspace under the agent's (SPEC §17).
	aws := g.workspace(cfg, agentID)
	cws := tools.ConversationWorkspace(aws, key)
	if err := tools.EnsureWorkspace(aws, cws); err != nil {
		log.Warn("could not create the conversation workspace", zap.Error(err))
	}
	text, files := g.turnFiles(ctx, it, cws, log)
	cc := agent.CallContext{SessionKey: key, SessionID: s.row.ID, RootKey: key, AgentID: agentID, Depth: 0, Turn: fmt.Sprintf("intake:%d", it.ID),
		Workspace: cws, AgentWorkspace: aws, ReadOnlyDirs: g.skillDirs(cfg), Origin: origin, Model: model.Ref, Thinking: thinking, Tools: reg.Names()}
	if len(s.sess.History) == 0 && !resume {
		text = g.threadContext(ctx, in.Origin, text, log)
	}
	live := g.startLive(cfg, it, log)
	defer live.stop()
	sc := turnSpend(key, agentID, it.ID, in.Text)
	spent := g.spend.Counter(sc)
	start := time.Now()
	settles := s.sess.PendingCalls() // a cut turn's calls, made again or answered in this one
	res, err := s.sess.Run(ctx, agent.Turn{
		Model: model, System: systemPrompt(ag, aws, in.Origin, g.agentContext(ctx, cfg, agentID, key, aws)), Tools: reg,
		Thinking: thinking, MaxIterations: ag.MaxIterations,
		Call: cc, Authorize: g.approv.authorize, Logger: log, Clock: g.clock,
		OnUsage: func(u agent.Usage) { g.metrics.tokens(agentID, model.Ref, u) }, Resume: resume,
		OnText:    live.textHook(),
		Fallbacks: g.chainOf(cfg, agentID, model), Health: g.catalog.Health(),
		BeforeCall: g.spend.Guard(sc), OnCall: func(m *agent.Model, u agent.Usage) {
			spent(m, u)
			g.panel.spentChanged(key)
		},
		Files: files, OpenFile: g.openFile,
		// The message goes into the transcript with the first answer, in
		// one write, not before the call: it is in its intake row, and a
		// turn cut before that answer runs again from there (resumeMode:
		// a started turn whose history lacks the message runs from it).
		// Not when the history already holds the same text: resumeMode
		// finds the message by its text and would take that older one
		// (and its answer) for this turn's.
		DeferInput: !resume && !holdsMessage(s.sess.History, it.Text),
	}, text)
	switch {
	case res.Fallback != "":
		g.answered.set(key, res.Fallback)
	case res.AnsweredBy != "":
		g.answered.set(key, "Answered by "+res.AnsweredBy+".")
	}
	if ref := live.stop(); ref != "" {
		it.DraftRef = ref // the reply replaces the draft
	}
	// The usage is recorded with the turn's completion (completeUsage);
	// a turn left owed records it on its own.
	addUsage := func() {
		if err := g.db.AddSessionUsage(context.WithoutCancel(ctx), key, res.Usage.Input, res.Usage.Output); err != nil {
			log.Warn("could not record usage", zap.Error(err))
		}
	}
	usage := &res.Usage
	if span.IsRecording() {
		span.SetAttributes(telemetry.AttrIterations.Int(res.Iterations), telemetry.GenAIInputTokens.Int64(res.Usage.Input),
			telemetry.GenAIOutputTokens.Int64(res.Usage.Output))
	}
	switch {
	case err == nil:
		outcome = "done"
		// One model call and no tool call, in a turn that did not start
		// before and had no cut turn's calls to settle: it spawned
		// nothing, so there is no spawn group whose wake to look for.
		noRuns := res.Iterations == 1 && !resume && !settles && it.StartedAt.IsZero()
		g.completeTurn(laneCtx, it, channels.KindReply, res.Text, usage, noRuns, log)
		log.Info("turn done", zap.Int("iterations", res.Iterations), zap.Int64("tokens", res.Usage.Total()), zap.Duration("took", time.Since(start)))
	case laneCtx.Err() != nil:
		// Cut by shutdown: the turn stays owed and continues after the next
		// start; the person is not told "context canceled".
		addUsage()
		log.Info("turn cut by shutdown; it stays owed", zap.Int64("intakeId", it.ID))
	case errors.Is(context.Cause(tctx), errTurnTimeout):
		outcome = "timeout"
		span.SetStatus(codes.Error, "turn timed out")
		log.Warn("turn timed out", zap.Duration("after", turnTimeout), zap.Error(err))
		g.completeUsage(laneCtx, it, channels.KindSystem, fmt.Sprintf("⏱ This turn took longer than %s (agents.defaults.turnTimeoutSeconds) and was stopped. Try again, or ask for less at once.", turnTimeout), usage, log)
	case ctx.Err() != nil:
		outcome = "aborted"
		g.completeUsage(laneCtx, it, channels.KindReply, "", usage, log)
		log.Info("turn aborted")
	case errors.Is(err, spend.ErrBudget):
		// Over budget: no model call was made; nothing is retried into it.
		log.Warn("turn stopped by a budget", zap.Error(err))
		g.completeUsage(laneCtx, it, channels.KindSystem, err.Error(), usage, log)
	case errors.Is(err, agent.ErrTranscript):
		// The store cut the turn short: what the history holds beyond the
		// transcript is dropped with the session, and the turn runs again
		// from the transcript once the store takes writes.
		addUsage()
		g.evict(s)
		g.retryTurn(laneCtx, it, log, err)
	default:
		outcome = "failed"
		span.SetStatus(codes.Error, "the agent could not answer")
		log.Warn("turn failed", zap.Error(err))
		g.completeUsage(laneCtx, it, channels.KindSystem, "⚠️ The agent could not answer: "+err.Error(), usage, log)
	}
}

// startTurn is a turn's start write: it records the start of the owed
// message and takes the results of the session's sub-agents that ended
// since its last turn into its history, before the message (SPEC §23).
// An error is the store's: the turn runs again once the store is back.
func (g *Gateway) startTurn(ctx context.Context, s *sessionState, it store.Intake, log *zap.Logger) error {
	wctx := context.WithoutCancel(ctx)
	if s.sess.PendingCalls() {
		// A cut turn's calls close first (agent.Session.Run): the results
		// wait for the next turn.
		if it.StartedAt.IsZero() {
			if err := g.db.StartIntake(wctx, it.ID, g.clock.Now()); err != nil {
				log.Warn("could not record the turn's start", zap.Error(err))
			}
		}
		return nil
	}
	input := ""
	if it.Kind == store.IntakeWake {
		input = it.Text // a wake's input is its group's last result
	}
	n, err := subagent.Fold(wctx, g.db, s.sess, store.Fold{SessionKey: it.SessionKey, SessionID: s.row.ID,
		By: fmt.Sprintf("intake:%d", it.ID), IntakeID: it.ID, At: g.clock.Now()}, g.clock, input)
	if err != nil {
		if !storeFailed(err) && !errors.Is(err, agent.ErrTranscript) {
			log.Error("could not take the sub-agents' results into the history", zap.Error(err))
			return nil
		}
		if errors.Is(err, agent.ErrTranscript) {
			g.evict(s)
		}
		return err
	}
	if n > 0 {
		log.Info("sub-agent results taken into the history", zap.Int("results", n), zap.Int64("intakeId", it.ID))
		g.foldedTurns.Store(it.ID, true)
	}
	return nil
}

// systemPrompt is a top-level session's system prompt: the agent's own
// prompt, what Herald is, the bootstrap files of its workspace aws, and
// extra (its skills and pinned memories: agentContext).
func systemPrompt(a config.AgentSettings, aws string, o channels.Origin, extra string) string {
	var b strings.Builder
	if a.SystemPrompt != "" {
		b.WriteString(a.SystemPrompt + "\n\n")
	} else {
		b.WriteString("You are a helpful assistant reached through the Herald chat gateway.\n\n")
	}
	fmt.Fprintf(&b, "You are talking in a %s %s chat. For long or parallel work, start background sub-agents with sessions_spawn; their results are announced in this conversation automatically. %s\n", o.Channel, o.ChatType, subagent.ResultNote)
	if o.ThreadID != "" {
		b.WriteString(channels.ThreadContextNote + "\n")
	}
	if boot, _ := tools.LoadBootstrap(aws, false); boot != "" {
		b.WriteString("\n" + boot)
	}
	if extra != "" {
		b.WriteString("\n" + extra)
	}
	return b.String()
}

// threadContextTimeout bounds reading a thread's earlier messages.
const threadContextTimeout = 15 * time.Second

// threadContext puts the earlier messages of the thread a conversation's
// first message sits in before that message (SPEC §21 thread context), when
// the message is not the thread's root and its channel can read threads.
// It runs once per conversation: later turns have history, and the context
// stays in the transcript with the message; a thread the bot has posted in
// (a conversation started again with /new) is not given it again. A failed read is logged and the
// turn goes on without it.
func (g *Gateway) threadContext(ctx context.Context, o channels.Origin, text string, log *zap.Logger) string {
	if !o.MidThread() {
		return text
	}
	tr, ok := g.channel(o.Channel).(channels.ThreadReader)
	if !ok {
		return text
	}
	rctx, cancel := context.WithTimeout(ctx, threadContextTimeout)
	defer cancel()
	msgs, err := tr.ThreadHistory(rctx, o)
	if err != nil {
		log.Warn("could not read the thread's earlier messages; answering without them", zap.Error(err))
		return text
	}
	for _, m := range msgs {
		if m.FromBot {
			// The bot was part of this thread before (a conversation
			// started again with /new): its context was given then.
			return text
		}
	}
	if len(msgs) > 0 {
		log.Info("thread context given to the model", zap.Int("messages", len(msgs)))
	}
	return channels.WithThreadContext(msgs, text, contextBoundary())
}

// contextBoundary is a fresh random string fencing one turn's thread
// context: nobody in the thread can know it, so nobody can end the block.
func contextBoundary() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
