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

// sessionControl is the gateway's command.SessionControl: /new, /reset,
// /compact, /model and /think on a conversation's requester session.
type sessionControl struct {
	g       *Gateway
	agentID string
	origin  channels.Origin
}

// locked loads the session of key and runs fn holding its turn lock, so a
// turn of that session in progress ends first.
func (c sessionControl) locked(ctx context.Context, key string, fn func(s *sessionState) error) error {
	wctx, cancel := context.WithTimeout(ctx, sessionWait)
	defer cancel()
	s, err := c.g.acquire(wctx, c.g.cfg(), c.agentID, key, c.origin)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return errSessionBusy
	}
	if err != nil {
		return err
	}
	defer c.g.release(s)
	return fn(s)
}

// sessionWait bounds how long a session command waits for a running turn.
const sessionWait = 2 * time.Minute

// NewSession gives the conversation a new session id and transcript; the
// old transcript stays on disk (and is recorded in session_resets). Runs
// the old session spawned keep the conversation's key and announce here.
func (c sessionControl) NewSession(ctx context.Context, key string) error {
	return c.locked(ctx, key, func(s *sessionState) error {
		g := c.g
		now := g.clock.Now()
		id := uuid.NewString()
		path := g.db.TranscriptPath(s.agentID, id)
		sess, err := agent.LoadSessionFrom(ctx, g.db, key, id, s.agentID, "", path, now)
		if err != nil {
			return err
		}
		// The old transcript is closed and archived as <path>.reset.<UTC ts>.
		oldPath := s.row.TranscriptPath
		if s.sess != nil {
			s.sess.Close()
		}
		archived, err := g.db.ArchiveTranscriptAs(ctx, oldPath, "reset", now)
		if err == nil {
			if err = g.db.ResetSession(ctx, key, id, path, archived, now); err != nil && archived != "" {
				_ = g.db.UnarchiveTranscript(ctx, archived, oldPath) // keep the conversation as it was
			}
		}
		if err != nil {
			sess.Close()
			if old, lerr := agent.LoadSessionFrom(ctx, g.db, key, s.row.ID, s.agentID, "", oldPath, s.row.CreatedAt); lerr == nil {
				s.sess = old
			} else {
				s.evicted = true // load it again on the next message
				g.mu.Lock()
				delete(g.sessions, key)
				g.mu.Unlock()
			}
			return err
		}
		s.sess, s.row.ID, s.row.TranscriptPath = sess, id, path
		g.log.Info("new session started", zap.String("sessionKey", key), zap.String("sessionId", id))
		return nil
	})
}

// Compact summarises the session's older turns with its model now.
func (c sessionControl) Compact(ctx context.Context, key, focus string) (before, after int, err error) {
	err = c.locked(ctx, key, func(s *sessionState) error {
		g := c.g
		cfg := g.cfg()
		ag := cfg.Resolve(s.agentID)
		ref, _, err := g.effective(ctx, ag, key)
		if err != nil {
			return err
		}
		model, ok := g.catalog.Lookup(ref)
		if !ok {
			return fmt.Errorf("model %s is not configured", ref)
		}
		reg := g.topTools(ag)
		sc := spend.Call{Conversation: key, AgentID: s.agentID, RunID: "compact:" + key, Label: "/compact"}
		res, err := s.sess.Compact(ctx, agent.Turn{Model: model, System: systemPrompt(ag, g.workspace(cfg, s.agentID), c.origin), Tools: reg,
			Logger: g.log, Clock: g.clock, OnUsage: func(u agent.Usage) { g.metrics.tokens(s.agentID, model.Ref, u) },
			BeforeCall: g.spend.Guard(sc), OnCall: g.spend.Counter(sc)}, focus, 0)
		before, after = res.Before, res.After
		if err == nil {
			if uerr := g.db.AddSessionUsage(context.WithoutCancel(ctx), key, res.Usage.Input, res.Usage.Output); uerr != nil {
				g.log.Warn("could not record usage", zap.Error(uerr))
			}
		}
		return err
	})
	return before, after, err
}

func (c sessionControl) Settings(ctx context.Context, key string) (store.ConversationSettings, error) {
	return c.g.db.ConversationSettings(ctx, key)
}

func (c sessionControl) SetSettings(ctx context.Context, key string, s store.ConversationSettings) error {
	return c.g.db.SetConversationSettings(ctx, key, s)
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
