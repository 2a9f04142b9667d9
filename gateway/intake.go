package gateway

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/web"
	"github.com/heraldhq/herald/gateway/command"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/lane"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/telemetry"
)

// Bounds of intake (issue 16): past them a message gets a "busy" reply
// instead of waiting without limit in memory.
const (
	// DefaultMaxQueued caps the main lane's queue (turns waiting for a slot).
	DefaultMaxQueued = 512
	// MaxCommands caps chat commands running at once.
	MaxCommands = 64
	// busyRetry is what a refused sender is asked to wait.
	busyRetry = 30 * time.Second
	// storeRetry is what a sender refused during a store outage is asked
	// to wait.
	storeRetry = 5 * time.Second
)

const busyText = "⏳ Busy right now: too many messages are waiting. Please send that again in a minute."

// inbound is the Sink every channel pushes to (SPEC §12 durable intake).
// A message is stored as owed before inbound returns nil, so the channel
// acknowledges only what is stored; its turn then waits on the main lane.
// Chat commands run on their own bounded goroutines and are not stored.
// A platform re-delivery of a stored message is recognised and not run again.
func (g *Gateway) inbound(ctx context.Context, in channels.Inbound) error {
	return g.intake(ctx, in, nil)
}

// webKeep is the web chat's entry of a person's message, which intake
// stores in the transaction that stores the message as owed
// (webLog.AppendInbound), or on its own before the message is refused.
type webKeep struct {
	m      *store.WebMessage
	told   func(client string) // wakes the client's streams on other replicas
	stored bool
}

// alone stores the entry on its own, as the web chat did before handing
// a message over: for a command, a message with files, or one refused.
func (k *webKeep) alone(ctx context.Context, g *Gateway, in *channels.Inbound) error {
	if k == nil || k.stored {
		return nil
	}
	seq, err := g.db.AppendWeb(ctx, in.Origin.ChatID, k.m)
	if err != nil {
		return err
	}
	k.kept(in.Origin.ChatID)
	in.Origin.MessageID = strconv.FormatInt(seq, 10)
	return nil
}

// kept records that the entry of client is stored.
func (k *webKeep) kept(client string) {
	k.stored = true
	if k.told != nil {
		k.told(client)
	}
}

// intake is inbound; keep (nil: none) is the web chat's entry of the
// message, stored with it.
func (g *Gateway) intake(ctx context.Context, in channels.Inbound, keep *webKeep) error {
	if keep != nil && (command.IsCommand(in.Text) || len(in.Attachments) > 0) {
		// Commands are not stored as owed, and files are stored before
		// the message: the entry goes first, on its own.
		if err := keep.alone(ctx, g, &in); err != nil {
			return err
		}
	}
	cfg := g.cfg()
	ch := string(in.Origin.Channel)
	// Origin → binding → session (SPEC §24): a thread bound to a child
	// session talks to the child; commands there act on it.
	bound, err := g.boundThread(ctx, cfg, in.Origin)
	if err != nil {
		g.metrics.refused.WithLabelValues(ch, "store_unavailable").Inc()
		g.log.Warn("message refused: the state store does not answer which session its thread talks to",
			zap.String("channel", ch), zap.Error(err))
		return &channels.UnavailableError{RetryAfter: storeRetry, Reason: err.Error()}
	}
	agentID := route(cfg, in.Origin)
	key := string(ids.Requester(agentID, in.Origin))
	log := g.log.With(zap.String("sessionKey", key), zap.String("agentId", agentID), zap.String("channel", ch))
	if command.IsCommand(in.Text) {
		g.mu.Lock()
		switch {
		case g.draining:
			g.mu.Unlock()
			g.metrics.refused.WithLabelValues(ch, "draining").Inc()
			log.Warn("command refused: gateway is shutting down")
			return channels.ErrDraining
		case g.commands >= MaxCommands:
			g.mu.Unlock()
			g.metrics.refused.WithLabelValues(ch, "commands_busy").Inc()
			log.Warn("command refused: too many commands running", zap.Int("running", MaxCommands))
			g.post(ctx, in.Origin, channels.KindSystem, busyText, "")
			return &channels.BusyError{RetryAfter: busyRetry, Reason: fmt.Sprintf("%d commands running", MaxCommands)}
		}
		g.commands++
		g.bg.Add(1) // under g.mu with the draining check, so shutdown's Wait sees it
		g.mu.Unlock()
		go func() {
			defer g.bg.Done()
			defer func() { g.mu.Lock(); g.commands--; g.mu.Unlock() }()
			g.runCommand(g.bgCtx, agentID, key, in, bound)
		}()
		return nil
	}
	g.mu.Lock()
	draining := g.draining
	g.mu.Unlock()
	if draining {
		if err := keep.alone(ctx, g, &in); err != nil {
			return err
		}
		g.metrics.refused.WithLabelValues(ch, "draining").Inc()
		log.Warn("message refused: gateway is shutting down")
		return channels.ErrDraining
	}
	if queued, _ := g.mainLane.Stats(); queued >= g.maxQueued() {
		if err := keep.alone(ctx, g, &in); err != nil {
			return err
		}
		g.metrics.refused.WithLabelValues(ch, "busy").Inc()
		log.Warn("message refused: main lane queue is full", zap.Int("queued", queued), zap.Int("cap", g.maxQueued()))
		g.post(ctx, in.Origin, channels.KindSystem, busyText, "")
		return &channels.BusyError{RetryAfter: busyRetry, Reason: fmt.Sprintf("%d turns queued", queued)}
	}
	if bound != nil {
		key, agentID = bound.ChildKey, ids.SessionKey(bound.ChildKey).AgentID()
		log = log.With(zap.String("sessionKey", key), zap.String("boundThread", in.Origin.String()))
	}
	// The message's trace starts here; its context is stored with the
	// row, so the turn continues it wherever and whenever it runs.
	ctx, span := g.tracer.Start(ctx, telemetry.SpanIntake, trace.WithSpanKind(trace.SpanKindConsumer))
	defer span.End()
	log = log.With(telemetry.SpanLogField(ctx))
	it := &store.Intake{SessionKey: key, AgentID: agentID, Origin: in.Origin, SenderName: in.SenderName,
		Text: in.Text, Mentioned: in.Mentioned, CreatedAt: in.At, ClaimedBy: g.cluster.id,
		TraceParent: telemetry.Traceparent(ctx)}
	if in.Origin.MessageID != "" {
		it.PlatformID = in.Origin.ChatID + "/" + in.Origin.MessageID
	}
	// Files are stored before the message (SPEC §18): a crash before the
	// message is stored leaves it unacknowledged, and its re-delivery
	// downloads them again into the same content-addressed places.
	var fileNotes []string
	if len(in.Attachments) > 0 {
		text, refs, notes, release, err := g.takeFiles(ctx, key, in, log)
		defer release() // the stored message's references count from now on
		if err != nil {
			g.metrics.refused.WithLabelValues(ch, "store_unavailable").Inc()
			log.Warn("message refused: the state store does not take its files", zap.Error(err))
			return &channels.UnavailableError{RetryAfter: storeRetry, Reason: err.Error()}
		}
		it.Text, it.Files, fileNotes = text, refs, notes
		if strings.TrimSpace(it.Text) == "" {
			// Nothing was read and nothing was said: the person hears why.
			g.post(ctx, in.Origin, channels.KindSystem, strings.Join(fileNotes, "\n"), "")
			return nil
		}
	}
	if span.IsRecording() {
		span.SetAttributes(telemetry.AttrChannel.String(ch), telemetry.AttrChatType.String(string(in.Origin.ChatType)),
			telemetry.AttrSessionKey.String(key), telemetry.AttrAgentID.String(agentID), telemetry.AttrChars.Int(len(in.Text)))
		if g.tracer.RecordContent() {
			span.SetAttributes(telemetry.AttrText.String(telemetry.Content(in.Text)))
		}
	}
	if keep != nil && !keep.stored {
		it.Web = keep.m
	}
	if bound == nil && ids.SessionKey(key).Kind() != ids.KindSubagent && !g.cluster.shared && !g.loaded(key) {
		// The session's row is stored with its message when it has none,
		// or read: one commit for a new conversation's first message, not
		// two, and no EnsureSession for one not loaded (its turn finds the
		// row in newRows). With other replicas a session's row may change
		// elsewhere before the turn runs, so the turn ensures it then, as
		// before.
		it.Session = g.newSessionRow(cfg, agentID, key, in.Origin)
	}
	added, err := g.db.AddIntake(context.WithoutCancel(ctx), it)
	if err == nil && it.Web != nil {
		keep.kept(in.Origin.ChatID)
	}
	if err == nil && added && it.Session != nil && it.ClaimedBy != "" {
		g.mu.Lock()
		if g.sessions[key] == nil {
			g.newRows[key] = storedRow{row: it.Session, created: it.SessionCreated}
		}
		g.mu.Unlock()
	}
	if err != nil {
		g.owedUnsure.Store(true) // its commit may have gone through all the same
		span.SetStatus(codes.Error, "message not stored")
		if storeFailed(err) {
			// Not acknowledged: the platform (or the web client) sends it
			// again once the store is back.
			g.metrics.refused.WithLabelValues(ch, "store_unavailable").Inc()
			log.Warn("message refused: the state store does not take it", zap.Error(err))
			return &channels.UnavailableError{RetryAfter: storeRetry, Reason: err.Error()}
		}
		log.Error("message not stored", zap.Error(err))
		return fmt.Errorf("store message: %w", err)
	}
	span.SetAttributes(telemetry.AttrIntakeID.Int64(it.ID))
	if added && len(fileNotes) > 0 {
		g.post(ctx, in.Origin, channels.KindSystem, strings.Join(fileNotes, "\n"), "")
	}
	if !added {
		// The stored message keeps its own trace; this span records the
		// re-delivery in a trace of its own.
		span.SetAttributes(telemetry.AttrRedelivered.Bool(true))
		g.metrics.redeliver.Inc()
		log.Info("platform re-delivered a stored message; not run again", zap.String("platformId", it.PlatformID))
		return nil
	}
	if it.ClaimedBy == "" {
		// The session has an owed turn (here or on another replica): this
		// one follows it, on the replica that runs it (CompleteIntake).
		log.Debug("message stored behind its session's owed turn", zap.Int64("intakeId", it.ID))
		return nil
	}
	log.Debug("message stored", zap.Int64("intakeId", it.ID), zap.Int("chars", len(in.Text)))
	g.watchers.changed()
	g.enqueueTurn(*it, log)
	return nil
}

// storedRow is a session row a message's intake stored (created) or read.
// Only the session's next load takes it (any load removes it; a turn that
// ends before loading, skipStale, drops it), so what it says still holds
// then: the row is the store's, and a created one's transcript has no
// line. This relies on one process changing the rows: on SQLite nothing
// outside the gateway writes a session row (the CLI and the console do
// not; a restore needs it stopped), and with other replicas it is off.
type storedRow struct {
	row     *store.Session
	created bool
}

// loaded reports whether the session of key is loaded.
func (g *Gateway) loaded(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sessions[key] != nil
}

// turnLog is the logger of an owed turn.
func (g *Gateway) turnLog(it store.Intake) *zap.Logger {
	return g.log.With(zap.String("sessionKey", it.SessionKey), zap.String("agentId", it.AgentID),
		zap.String("channel", string(it.Origin.Channel)), telemetry.LogField(it.TraceParent))
}

// enqueueTurn puts the owed turn of it on the main lane. A lane that is
// shutting down refuses it; the turn stays owed in the store and runs after
// the next start.
func (g *Gateway) enqueueTurn(it store.Intake, log *zap.Logger) {
	g.owedMu.Lock()
	if g.owedHere[it.ID] {
		// Queued or running already (sweepOwed took it while a completion
		// that hands it on was being retried): one turn per message.
		g.owedMu.Unlock()
		log.Debug("turn already queued", zap.Int64("intakeId", it.ID))
		return
	}
	g.owedHere[it.ID] = true
	g.owedMu.Unlock()
	err := g.mainLane.Enqueue(lane.Job{Key: it.SessionKey, Run: func(ctx context.Context) {
		defer func() {
			g.owedMu.Lock()
			done := g.owedDone[it.ID]
			delete(g.owedHere, it.ID)
			delete(g.owedDone, it.ID)
			g.owedMu.Unlock()
			if !done {
				g.owedUnsure.Store(true) // after the delete: the sweep finds it unqueued
			}
		}()
		g.turn(ctx, it)
	}})
	if err != nil {
		g.owedMu.Lock()
		delete(g.owedHere, it.ID)
		g.owedMu.Unlock()
		g.owedUnsure.Store(true)
		log.Info("turn left owed for the next start", zap.Int64("intakeId", it.ID), zap.Error(err))
	}
}

// sweepOwed queues, every few seconds, the owed turns this replica holds
// (or that are free) but has not queued: a message whose store write was
// committed while its caller saw an error (the connection dropped with the
// commit's answer), or whose turn ended without completing it (a store
// error it could not wait out), is stored and claimed, yet nobody would
// run it until a restart. A turn is taken only when two sweeps in a row
// found it unqueued, so one handed on by CompleteIntake a moment ago is
// not queued twice.
//
// On a shared store (PostgreSQL) every sweep reads the store: a commit's
// answer can be lost with the connection, and other replicas' rows
// (claims of a replica that went away, free ones) are only seen there.
// On SQLite only this process adds or claims owed messages (herald's
// commands read them), its group commit tells each caller exactly
// whether its change was committed, and every message this process
// claims is queued here (enqueueTurn) — so an owed message can be left
// unqueued only where the gateway sees it happen: a turn that ends
// without complete() ending its message, a lane that refuses a turn, a
// store write of a message that fails. Those set owedUnsure, and a sweep
// reads the store only after one (then until a sweep finds nothing
// left to take). An idle gateway then runs no SQL every 2 s: each such
// query mapped ~8 MiB of SQLite's code back into the process after start
// gave it back (docs/performance.md).
func (g *Gateway) sweepOwed(ctx context.Context) {
	const every = 2 * time.Second
	var seen map[int64]bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		g.mu.Lock()
		draining := g.draining
		g.mu.Unlock()
		if draining {
			return
		}
		if !g.cluster.shared && len(seen) == 0 && !g.owedUnsure.Swap(false) {
			continue
		}
		owed, err := g.db.OwedIntake(ctx)
		if err != nil {
			g.owedUnsure.Store(true)
			continue // an outage: the next sweep looks again
		}
		next := map[int64]bool{}
		var take []int64
		g.owedMu.Lock()
		for _, it := range owed {
			if (it.ClaimedBy == g.cluster.id || it.ClaimedBy == "") && !g.owedHere[it.ID] {
				next[it.ID] = true
				if seen[it.ID] && it.ClaimedBy == g.cluster.id {
					take = append(take, it.ID)
				}
			}
		}
		g.owedMu.Unlock()
		seen = next
		if len(take) == 0 {
			continue
		}
		// Claim them properly (own and free heads), then queue those seen.
		claimed, err := g.db.ClaimOwed(ctx, store.Claim{Holder: g.cluster.id, Reclaim: true})
		if err != nil {
			continue
		}
		for _, it := range claimed {
			g.owedMu.Lock()
			queued := g.owedHere[it.ID]
			g.owedMu.Unlock()
			if queued || !contains64(take, it.ID) {
				continue
			}
			log := g.turnLog(it)
			log.Warn("owed turn was not queued (its message was stored while the store's answer was lost); running it", zap.Int64("intakeId", it.ID))
			g.enqueueTurn(it, log)
		}
	}
}

func contains64(list []int64, v int64) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// resumeOwed claims and queues the owed turns that no live replica runs —
// this replica's own from before a restart included — in arrival order,
// before any channel delivers a new message: what was acknowledged before
// a crash, a restart or a drain is answered first. A session's later owed
// messages follow its first one (complete).
func (g *Gateway) resumeOwed(ctx context.Context) error {
	owed, err := g.db.ClaimOwed(ctx, store.Claim{Holder: g.cluster.id, Reclaim: true})
	if err != nil {
		return fmt.Errorf("read owed turns: %w", err)
	}
	if len(owed) == 0 {
		return nil
	}
	g.log.Info("resuming owed turns", zap.Int("turns", len(owed)))
	for _, it := range owed {
		g.enqueueTurn(it, g.turnLog(it))
	}
	return nil
}

// complete ends an owed turn: reply (if any) committed to the outbox and
// the message marked done, in one transaction. A store that does not take
// it is retried (retryWrite) until laneCtx ends: the turn then stays owed
// for the next start or another replica. A retry after a commit whose
// outcome was lost adds nothing twice (CompleteIntake).
func (g *Gateway) complete(laneCtx context.Context, it store.Intake, kind channels.Kind, text string, log *zap.Logger) {
	g.completeUsage(laneCtx, it, kind, text, nil, log)
}

// completeUsage is complete for a turn that called the model: its usage
// (nil: none) is added to the session's totals in the same transaction
// (store.TurnEnd), one commit where there were two.
func (g *Gateway) completeUsage(laneCtx context.Context, it store.Intake, kind channels.Kind, text string, usage *agent.Usage, log *zap.Logger) {
	g.completeTurn(laneCtx, it, kind, text, usage, false, log)
}

// completeTurn is completeUsage; noRuns says the turn spawned no run
// (store.TurnEnd.NoRuns).
func (g *Gateway) completeTurn(laneCtx context.Context, it store.Intake, kind channels.Kind, text string, usage *agent.Usage, noRuns bool, log *zap.Logger) {
	var reply *store.OutboxItem
	files := g.attached.take(it.SessionKey) // send_file's, after the text
	// The files of the announce parent/silent sub-agents whose results
	// this turn took in: they posted nothing themselves (SPEC §23). Only
	// a turn that took results in (this process saw it: startTurn), a
	// wake, or one that started before (a restart) can have any.
	_, folded := g.foldedTurns.LoadAndDelete(it.ID)
	var err error
	if folded || it.Kind == store.IntakeWake || !it.StartedAt.IsZero() {
		var kids []store.FileRef
		kids, err = g.db.FoldedFiles(context.WithoutCancel(laneCtx), it.SessionKey, fmt.Sprintf("intake:%d", it.ID))
		if err != nil {
			log.Warn("could not read the files of the sub-agents whose results this turn took in; they are not posted", zap.Error(err))
		}
		files = append(files, kids...)
	}
	if strings.TrimSpace(text) != "" || len(files) > 0 {
		reply = &store.OutboxItem{Origin: it.Origin, Kind: kind, Text: text, CreatedAt: g.clock.Now(), SessionKey: it.SessionKey, AgentID: it.AgentID,
			DraftRef: it.DraftRef, TraceParent: telemetry.Traceparent(laneCtx), Files: files}
	}
	var next *store.Intake
	// The reply is claimed for this replica in the completing transaction
	// when it sends on the reply's channel, and handed to the deliverer:
	// no delivery pass (and its commit) before it goes out.
	claimFor := ""
	if reply != nil {
		claimFor = runOutbox{g}.ClaimFor(reply.Origin.Channel)
	}
	// A web reply so claimed is also delivered there (no send, and no
	// commit of its own).
	var wd *store.WebDelivery
	if claimFor != "" {
		wd = g.webDelivery(reply)
	}
	tries := 0
	err = g.retryWrite(laneCtx, "complete the turn", log, func(ctx context.Context) error {
		var err error
		tries++
		end := store.TurnEnd{ID: it.ID, Reply: reply, At: g.clock.Now(), ClaimReply: claimFor, NoRuns: noRuns, Web: wd}
		if usage != nil {
			end.AddUsage, end.TokensIn, end.TokensOut = true, usage.Input, usage.Output
		}
		_, next, err = g.db.CompleteTurn(context.WithoutCancel(ctx), end)
		return err
	})
	if err != nil {
		log.Error("could not complete the turn; it stays owed", zap.Int64("intakeId", it.ID), zap.Error(err))
		return
	}
	g.owedMu.Lock()
	if g.owedHere[it.ID] {
		g.owedDone[it.ID] = true
	}
	g.owedMu.Unlock()
	switch {
	case wd != nil && wd.Msg.Delivers != 0:
		g.webDelivered(laneCtx, *reply, wd, true)
	case reply != nil && claimFor != "" && reply.ClaimedBy == claimFor:
		g.outbox.hand(*reply)
	case reply != nil && claimFor != "" && tries > 1:
		// A try whose commit was lost may have claimed it (the next pass
		// takes this replica's claims back), or delivered it to the web
		// chat (its streams read the conversation).
		g.outbox.reclaim()
		if wd != nil {
			g.webDelivered(laneCtx, *reply, wd, true)
		}
	case reply != nil:
		g.outbox.wakeUp()
	}
	g.watchers.changed()
	if next != nil { // the session's next message, claimed for this replica
		g.enqueueTurn(*next, g.turnLog(*next))
	}
}

// webDelivery is how reply (or an announce), when it is for the web chat
// running here, is delivered in the transaction that adds it (a turn's
// completion, a run's end), if that claims it
// (store.WebDelivery): the entry the web chat's Send would store, with the
// chat's next item claimed as the deliverer's send would. nil otherwise,
// and for an item with files (they go out through the deliverer's parts).
func (g *Gateway) webDelivery(reply *store.OutboxItem) *store.WebDelivery {
	if len(reply.Files) > 0 || reply.Origin.Channel != web.Name || !web.ValidClient(reply.Origin.ChatID) {
		return nil
	}
	if _, ok := g.outbox.channel(web.Name).(*web.Adapter); !ok {
		return nil
	}
	at := g.clock.Now()
	m := outboxWebMessage(reply, at)
	if m == nil {
		return nil
	}
	m.Next = g.outbox.nextClaim(at)
	return &store.WebDelivery{Client: reply.Origin.ChatID, Msg: *m}
}

// webDelivered tells the web chat's streams, here and on the other
// replicas, of the item w delivered in the write that added it, and the
// deliverer of the delivery. With w not delivered (a write retried after a
// commit whose answer was lost, which may have delivered it) the streams
// read the conversation. nothingElse: the write added nothing else to the
// outbox (a turn's completion).
func (g *Gateway) webDelivered(ctx context.Context, it store.OutboxItem, w *store.WebDelivery, nothingElse bool) {
	if a, ok := g.outbox.channel(web.Name).(*web.Adapter); ok {
		a.Delivered(w.Client, webEntry(&w.Msg), w.Msg.Delivers != 0 && w.Msg.Added)
	}
	g.cluster.tellWeb(w.Client)
	if w.Msg.Delivers != 0 {
		g.outbox.deliveredWith(ctx, &it, w.Msg.Next.Item, nothingElse)
	}
}

// resumeMode tells how an owed turn continues from its session's history:
// a turn that never started runs from the message; one that started and
// was cut continues without adding the message again (tool calls already
// made are in the history, their results too); one whose reply was
// written but not committed is delivered without a model call.
func resumeMode(it store.Intake, history []agent.Message) (resume bool, written string) {
	if it.StartedAt.IsZero() {
		return false, ""
	}
	for i := len(history) - 1; i >= 0; i-- {
		m := history[i]
		if !isMessage(m, it.Text) {
			continue
		}
		for _, after := range history[i+1:] {
			if after.Role == agent.RoleAssistant && len(after.ToolCalls) == 0 && strings.TrimSpace(after.Text) != "" {
				written = after.Text
			}
		}
		if written != "" {
			return false, written
		}
		return true, ""
	}
	return false, ""
}

// isMessage reports whether m is the person's message text as a turn
// adds it: the turn may have put text before the message (thread
// context, a voice transcript), so the stored message ends the line.
func isMessage(m agent.Message, text string) bool {
	return m.Role == agent.RoleUser && (m.Text == text || strings.HasSuffix(m.Text, "\n"+text))
}

// holdsMessage reports whether history has a message resumeMode would
// take for text.
func holdsMessage(history []agent.Message, text string) bool {
	return slices.ContainsFunc(history, func(m agent.Message) bool { return isMessage(m, text) })
}

// skipStale answers an owed message older than intake.maxAgeMinutes (a
// turn cut by a crash included) when its turn could start, instead of
// running it (SPEC §27): the conversation is told once, by the reply that
// completes the message (CompleteIntake: the reply and the done mark in
// one transaction), and no model is called. It reports whether it did.
func (g *Gateway) skipStale(laneCtx context.Context, it store.Intake, maxAge time.Duration, log *zap.Logger) bool {
	if maxAge <= 0 || it.CreatedAt.IsZero() {
		return false
	}
	age := g.clock.Now().Sub(it.CreatedAt)
	if age <= maxAge {
		return false
	}
	log.Warn("owed message too old to run; telling its conversation", zap.Int64("intakeId", it.ID),
		zap.Duration("age", age), zap.Duration("maxAge", maxAge), zap.Bool("started", !it.StartedAt.IsZero()))
	g.complete(laneCtx, it, channels.KindSystem, StaleLine(it.CreatedAt, maxAge), log)
	return true
}

// StaleLine is what a conversation is told about a message skipped for its
// age (SPEC §27).
func StaleLine(at time.Time, maxAge time.Duration) string {
	return fmt.Sprintf("⏳ Skipped a message from %s that waited longer than %s while Herald was unavailable — send it again if it still matters.",
		at.UTC().Format("2006-01-02 15:04 UTC"), spanWords(maxAge))
}

// spanWords renders a whole number of minutes or hours: "12 hours",
// "1 minute", "90 minutes".
func spanWords(d time.Duration) string {
	n, unit := int64(d/time.Minute), "minute"
	if n%60 == 0 && n >= 60 {
		n, unit = n/60, "hour"
	}
	if n != 1 {
		unit += "s"
	}
	return fmt.Sprintf("%d %s", n, unit)
}
