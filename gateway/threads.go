package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent"
)

// Thread-bound sub-agents (SPEC §24): a thread bound to a child session
// talks to that child. The router asks the store's bindings before it
// names a thread's session; a thread without a binding (or whose binding
// ended threadIdleMinutes after its last message) talks to its
// conversation's agent as before.

// boundThread returns the live binding of the thread o is in, and
// extends it: a message in the thread starts its idle time again. nil
// when o is not in a thread or the thread is not bound.
func (g *Gateway) boundThread(ctx context.Context, cfg *config.Config, o channels.Origin) (*store.Binding, error) {
	if o.ThreadID == "" {
		return nil, nil
	}
	now := g.clock.Now()
	b, err := g.db.ThreadBinding(ctx, o, now)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if _, err := g.db.TouchBinding(ctx, o, now, now.Add(threadIdle(cfg, b.AgentID))); err != nil {
		g.log.Warn("could not extend a thread's binding", zap.String("origin", o.String()), zap.Error(err))
	}
	return b, nil
}

// threadIdle is how long a binding lasts after the last message in its
// thread, by the settings of the agent the thread talked to before.
func threadIdle(cfg *config.Config, agentID string) time.Duration {
	return time.Duration(cfg.SubagentLimits(agentID).ThreadIdleMinutes) * time.Minute
}

// boundTurn runs the owed turn of a message in a bound thread: the
// child's answer (steering a running child, or one more turn of a
// finished one) is committed to the thread like a reply, and nothing is
// announced again or posted in the requester's thread.
func (g *Gateway) boundTurn(laneCtx context.Context, it store.Intake, log *zap.Logger) (outcome string) {
	cfg := g.cfg()
	run, err := g.subs.RunOfChild(laneCtx, it.SessionKey)
	if err != nil {
		if laneCtx.Err() != nil {
			return "cut"
		}
		if storeFailed(err) {
			g.retryTurn(laneCtx, it, log, err)
			return "cut"
		}
		log.Warn("the sub-agent of a bound thread is gone", zap.Error(err))
		g.complete(laneCtx, it, channels.KindSystem, "⚠️ The sub-agent this thread talked to is gone; /unfocus to talk to the agent again.", log)
		return "failed"
	}
	resume := false
	if it.StartedAt.IsZero() {
		if err := g.db.StartIntake(context.WithoutCancel(laneCtx), it.ID, g.clock.Now()); err != nil {
			log.Warn("could not record the turn's start", zap.Error(err))
		}
	} else if hist, err := g.subs.History(laneCtx, run); err == nil {
		var written string
		if resume, written = resumeMode(it, hist); written != "" {
			g.complete(laneCtx, it, channels.KindReply, written, log)
			return "done"
		}
	}
	ctx, cancel := context.WithCancel(laneCtx)
	defer cancel()
	g.mu.Lock()
	if g.followUps == nil {
		g.followUps = make(map[string]turnCut)
	}
	g.followUps[it.SessionKey] = turnCut{ctx, cancel}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.followUps, it.SessionKey)
		g.mu.Unlock()
	}()
	// The message's files go to the child's workspace, as a top-level
	// turn's go to its conversation's (SPEC §18).
	text, files := g.turnFiles(ctx, it, g.subs.RunWorkspace(run), log)
	live := g.startLive(cfg, it, log)
	defer live.stop()
	res, err := g.subs.FollowUp(ctx, run, subagent.FollowUp{Text: text, Files: files, Resume: resume, OnText: live.textHook()})
	if ref := live.stop(); ref != "" {
		it.DraftRef = ref
	}
	name := subagent.Truncate(subagent.TaskTitle(run.Label, run.Task), 72)
	switch {
	case laneCtx.Err() != nil:
		log.Info("turn cut by shutdown; it stays owed", zap.Int64("intakeId", it.ID))
		return "cut"
	case ctx.Err() != nil:
		g.complete(laneCtx, it, channels.KindReply, "", log)
		return "aborted"
	case err != nil:
		log.Warn("a message in a bound thread did not reach its sub-agent", zap.String("runId", run.ID), zap.Error(err))
		g.complete(laneCtx, it, channels.KindSystem, fmt.Sprintf("⚠️ %s could not answer: %v", name, err), log)
		return "failed"
	case res.Steered:
		g.complete(laneCtx, it, channels.KindSystem, fmt.Sprintf("⏳ %s is still working; it has your message.", name), log)
	default:
		g.complete(laneCtx, it, channels.KindReply, res.Reply, log)
	}
	log.Info("message in a bound thread answered by its sub-agent", zap.String("runId", run.ID), zap.Bool("steered", res.Steered))
	return "done"
}

// abortFollowUp cancels a turn of a child session answering in its bound
// thread (as abortTurn).
func (g *Gateway) abortFollowUp(key string) (running, cut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t, ok := g.followUps[key]
	if !ok {
		return false, false
	}
	return true, t.cut()
}

// threadBindings are the gateway's bindings as the commands see them
// (command.Threads).
type threadBindings struct {
	g       *Gateway
	agentID string // the agent of the thread's own conversation
}

func (t threadBindings) Focus(ctx context.Context, thread channels.Origin, run *store.Run, by string) error {
	now := t.g.clock.Now()
	if err := t.g.db.BindThread(ctx, &store.Binding{Thread: thread, ChildKey: run.ChildKey, RunID: run.ID, AgentID: t.agentID,
		CreatedBy: by, CreatedAt: now, ExpiresAt: now.Add(threadIdle(t.g.cfg(), t.agentID))}); err != nil {
		return err
	}
	if t.g.subs != nil {
		t.g.subs.Unfocused(thread)       // it talked to another child
		t.g.subs.Focused(run.ID, thread) // a running child streams here (§24)
	}
	return nil
}

func (t threadBindings) Unfocus(ctx context.Context, thread channels.Origin) (bool, error) {
	_, err := t.g.db.UnbindThread(ctx, thread, t.g.clock.Now())
	if t.g.subs != nil && err == nil {
		t.g.subs.Unfocused(thread)
	}
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (t threadBindings) Bound(ctx context.Context, childKeys []string) map[string]bool {
	list, err := t.g.db.ChildBindings(ctx, childKeys, t.g.clock.Now())
	if err != nil {
		t.g.log.Warn("could not read thread bindings", zap.Error(err))
		return nil
	}
	out := make(map[string]bool, len(list))
	for _, b := range list {
		out[b.ChildKey] = true
	}
	return out
}

// startThread opens a thread of its own in the chat of requester, on a
// channel that can (channels.ThreadStarter); ErrNoThreads elsewhere.
func (g *Gateway) startThread(ctx context.Context, requester channels.Origin, t channels.NewThread) (channels.Thread, error) {
	ts, ok := g.channel(requester.Channel).(channels.ThreadStarter)
	if !ok {
		return channels.Thread{}, fmt.Errorf("%s has no threads Herald can open: %w", requester.Channel, channels.ErrNoThreads)
	}
	return ts.StartThread(ctx, requester, t)
}

// threadBound reports whether the thread at o is bound to a sub-agent:
// adapters count it as a thread the bot is in (channels.Deps.Bound).
func (g *Gateway) threadBound(ctx context.Context, o channels.Origin) bool {
	if o.ThreadID == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := g.db.ThreadBinding(ctx, o, g.clock.Now())
	return err == nil
}
