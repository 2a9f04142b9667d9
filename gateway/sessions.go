package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/spend"
	"github.com/heraldhq/herald/store"
)

// sessionDeps are the few things the session commands use; the Gateway
// wires them once (New) and each command's sessionControl shares them.
type sessionDeps struct {
	db interface {
		store.Sessions
		store.Transcripts
	}
	// lock loads the requester session of key and locks it for the
	// caller, once a turn of it in progress ended; unlock lets it go; drop
	// forgets one whose transcript could not be loaded again.
	lock   func(ctx context.Context, agentID, key string, origin channels.Origin) (*sessionState, error)
	unlock func(*sessionState)
	drop   func(*sessionState)
	// compactTurn is the turn configuration /compact runs with: the
	// conversation's model, tools and system prompt, from one config.
	compactTurn func(ctx context.Context, agentID, key string, origin channels.Origin) (agent.Turn, error)
	clock       agent.Clock
	log         *zap.Logger
}

// sessionControl is the gateway's command.SessionControl: /new, /reset,
// /compact, /model and /think on a conversation's requester session.
type sessionControl struct {
	*sessionDeps
	agentID string
	origin  channels.Origin
}

// locked loads the session of key and runs fn holding its turn lock, so a
// turn of that session in progress ends first.
func (c sessionControl) locked(ctx context.Context, key string, fn func(s *sessionState) error) error {
	wctx, cancel := context.WithTimeout(ctx, sessionWait)
	defer cancel()
	s, err := c.lock(wctx, c.agentID, key, c.origin)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return errSessionBusy
	}
	if err != nil {
		return err
	}
	defer c.unlock(s)
	return fn(s)
}

// sessionWait bounds how long a session command waits for a running turn.
const sessionWait = 2 * time.Minute

// NewSession gives the conversation a new session id and transcript; the
// old transcript stays on disk (and is recorded in session_resets). Runs
// the old session spawned keep the conversation's key and announce here.
func (c sessionControl) NewSession(ctx context.Context, key string) error {
	return c.locked(ctx, key, func(s *sessionState) error {
		now := c.clock.Now()
		id := uuid.NewString()
		path := c.db.TranscriptPath(s.agentID, id)
		sess, err := agent.LoadSessionFrom(ctx, c.db, key, id, s.agentID, "", path, now)
		if err != nil {
			return err
		}
		// The old transcript is closed and archived as <path>.reset.<UTC ts>.
		oldPath := s.row.TranscriptPath
		if s.sess != nil {
			s.sess.Close()
		}
		archived, err := c.db.ArchiveTranscriptAs(ctx, oldPath, "reset", now)
		if err == nil {
			if err = c.db.ResetSession(ctx, key, id, path, archived, now); err != nil && archived != "" {
				_ = c.db.UnarchiveTranscript(ctx, archived, oldPath) // keep the conversation as it was
			}
		}
		if err != nil {
			sess.Close()
			if old, lerr := agent.LoadSessionFrom(ctx, c.db, key, s.row.ID, s.agentID, "", oldPath, s.row.CreatedAt); lerr == nil {
				s.sess = old
			} else {
				c.drop(s) // load it again on the next message
			}
			return err
		}
		s.sess, s.row.ID, s.row.TranscriptPath = sess, id, path
		c.log.Info("new session started", zap.String("sessionKey", key), zap.String("sessionId", id))
		return nil
	})
}

// Compact summarises the session's older turns with its model now.
func (c sessionControl) Compact(ctx context.Context, key, focus string) (before, after int, err error) {
	err = c.locked(ctx, key, func(s *sessionState) error {
		turn, err := c.compactTurn(ctx, s.agentID, key, c.origin)
		if err != nil {
			return err
		}
		res, err := s.sess.Compact(ctx, turn, focus, 0)
		before, after = res.Before, res.After
		if err == nil {
			if uerr := c.db.AddSessionUsage(context.WithoutCancel(ctx), key, res.Usage.Input, res.Usage.Output); uerr != nil {
				c.log.Warn("could not record usage", zap.Error(uerr))
			}
		}
		return err
	})
	return before, after, err
}

// compactTurn is sessionDeps.compactTurn: the conversation's model, tools
// and system prompt under one config.
func (g *Gateway) compactTurn(ctx context.Context, agentID, key string, origin channels.Origin) (agent.Turn, error) {
	cfg := g.cfg()
	ag := cfg.Resolve(agentID)
	ref, _, err := g.effective(ctx, ag, key)
	if err != nil {
		return agent.Turn{}, err
	}
	model, ok := g.catalog.Lookup(ref)
	if !ok {
		return agent.Turn{}, fmt.Errorf("model %s is not configured", ref)
	}
	sc := spend.Call{Conversation: key, AgentID: agentID, RunID: "compact:" + key, Label: "/compact"}
	return agent.Turn{Model: model, System: systemPrompt(ag, g.workspace(cfg, agentID), origin, g.agentContext(ctx, cfg, agentID, key, g.workspace(cfg, agentID))), Tools: g.topTools(ag),
		Logger: g.log, Clock: g.clock, OnUsage: func(u agent.Usage) { g.metrics.tokens(agentID, model.Ref, u) },
		BeforeCall: g.spend.Guard(sc), OnCall: g.spend.Counter(sc)}, nil
}

// dropSession forgets a session (the caller holds it) whose transcript
// could not be loaded again: the next message loads it from the store.
func (g *Gateway) dropSession(s *sessionState) {
	s.evicted = true
	g.mu.Lock()
	if g.sessions[s.key] == s {
		delete(g.sessions, s.key)
	}
	g.mu.Unlock()
}

func (c sessionControl) Settings(ctx context.Context, key string) (store.ConversationSettings, error) {
	return c.db.ConversationSettings(ctx, key)
}

func (c sessionControl) SetSettings(ctx context.Context, key string, s store.ConversationSettings) error {
	return c.db.SetConversationSettings(ctx, key, s)
}

// effective returns the model ref and thinking level a turn of key uses:
// the conversation's own (/model, /think), else the agent's (a).
func (g *Gateway) effective(ctx context.Context, a config.AgentSettings, key string) (model, thinking string, err error) {
	set, err := g.db.ConversationSettings(ctx, key)
	if err != nil {
		return "", "", err
	}
	model, thinking = set.Model, set.Thinking
	if model == "" {
		model = a.Model.Primary
	}
	if thinking == "" {
		thinking = a.Thinking
	}
	if _, ok := g.catalog.Lookup(model); !ok && set.Model != "" {
		// The chosen model left the config (a reload): the agent's again.
		model = a.Model.Primary
	}
	return model, thinking, nil
}

// errSessionBusy: a session command waited too long for a turn to end.
var errSessionBusy = errors.New("a turn of this conversation is still running; try again when it has answered")

// EvictIdle drops from memory the requester sessions that no turn or
// command has used since before now − session.idleMinutes, closing their
// transcript files; the next message of such a conversation loads it again
// from its transcript. A session in use is skipped. It returns how many
// were evicted. The janitor calls it every minute (or half the idle time).
func (g *Gateway) EvictIdle(now time.Time) int {
	idle := time.Duration(g.cfg().Session.IdleMinutes) * time.Minute
	g.mu.Lock()
	candidates := make([]*sessionState, 0, len(g.sessions))
	for _, s := range g.sessions {
		candidates = append(candidates, s)
	}
	g.mu.Unlock()
	n := 0
	for _, s := range candidates {
		select {
		case s.use <- struct{}{}: // not in use: ours now
		default:
			continue
		}
		if s.evicted || now.Sub(s.idle) < idle {
			s.unlock()
			continue
		}
		g.evict(s)
		s.unlock()
		n++
	}
	if n > 0 {
		g.log.Debug("idle sessions left memory", zap.Int("sessions", n), zap.Duration("idle", idle))
	}
	return n
}

// janitor evicts idle sessions until ctx ends.
func (g *Gateway) janitor(ctx context.Context) {
	for {
		every := min(time.Minute, time.Duration(g.cfg().Session.IdleMinutes)*time.Minute/2)
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(every, time.Second)):
		}
		g.EvictIdle(g.clock.Now())
	}
}

// loadedSessions is how many requester sessions are in memory.
func (g *Gateway) loadedSessions() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sessions)
}
