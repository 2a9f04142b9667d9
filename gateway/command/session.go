package command

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/spend"
	"github.com/heraldhq/herald/store"
)

// SessionControl is what the gateway lets the session commands do to the
// requester session of a conversation. Each call waits for a turn of that
// session in progress to end, so it never changes a history mid-turn.
type SessionControl interface {
	// NewSession starts a fresh session (new id and transcript) for key;
	// the old transcript is kept.
	NewSession(ctx context.Context, key string) error
	// Compact summarises the session's older turns now, focusing on focus
	// if set; it returns the estimated context tokens before and after.
	Compact(ctx context.Context, key, focus string) (before, after int, err error)
	// Settings and SetSettings read and store the conversation's own model
	// and thinking ("" = the agent's from the config).
	Settings(ctx context.Context, key string) (store.ConversationSettings, error)
	SetSettings(ctx context.Context, key string, s store.ConversationSettings) error
}

const replySessionUnavailable = "⚠️ Session commands are not available in this gateway."

func (h handler) newSession(ctx context.Context) string {
	if h.env.Session == nil {
		return replySessionUnavailable
	}
	if err := h.env.Session.NewSession(ctx, h.req.SessionKey); err != nil {
		return "⚠️ Could not start a new session: " + err.Error()
	}
	return "🆕 New session started."
}

func (h handler) compact(ctx context.Context, focus string) string {
	if h.env.Session == nil {
		return replySessionUnavailable
	}
	before, after, err := h.env.Session.Compact(ctx, h.req.SessionKey, focus)
	var over *spend.BudgetError
	switch {
	case errors.As(err, &over):
		return over.Error() // exactly the 💸 line (SPEC §20)
	case errors.Is(err, agent.ErrNothingToCompact):
		return "🧹 Nothing to compact yet: this session has no earlier turns."
	case err != nil:
		return "⚠️ Could not compact: " + err.Error()
	}
	return fmt.Sprintf("🧹 Compacted: %d → %d tokens.", before, after)
}

func (h handler) model(ctx context.Context, arg string) string {
	if h.env.Session == nil || h.env.Config == nil {
		return replySessionUnavailable
	}
	agentModel := h.env.Config.AgentModel(h.env.AgentID)
	set, err := h.env.Session.Settings(ctx, h.req.SessionKey)
	if err != nil {
		return "⚠️ Could not read this conversation's settings: " + err.Error()
	}
	// Only the models the agent allows (agents.list[].models, default its
	// chain), and one without cost only with allowUnpriced: a chat cannot
	// pick a dearer model than the operator chose, nor one the budgets
	// would count as free.
	allowed, unpriced := h.env.Config.ChatModels(h.env.AgentID)
	list := strings.Join(allowed, ", ")
	switch {
	case arg == "":
		if set.Model != "" {
			return fmt.Sprintf("🤖 Model: %s (this conversation; /model default goes back to %s)", set.Model, agentModel)
		}
		return fmt.Sprintf("🤖 Model: %s (the agent's). Allowed: %s", agentModel, list)
	case arg == ArgDefault:
		set.Model = ""
	case slices.Contains(unpriced, arg):
		return fmt.Sprintf("⚠️ Model %q has no cost in the config, so the budgets would not count it; agents.list[].allowUnpriced allows it. Allowed: %s", arg, list)
	case !slices.Contains(allowed, arg):
		return fmt.Sprintf("⚠️ Unknown model %q, or not one this agent allows (agents.list[].models). Allowed: %s", arg, list)
	default:
		set.Model = arg
	}
	if err := h.env.Session.SetSettings(ctx, h.req.SessionKey, set); err != nil {
		return "⚠️ Could not store the model: " + err.Error()
	}
	if set.Model == "" {
		return fmt.Sprintf("🤖 Model back to the agent's: %s.", agentModel)
	}
	return fmt.Sprintf("🤖 Model for this conversation: %s.", set.Model)
}

var thinkingLevels = []string{"off", "low", "medium", "high"}

func (h handler) think(ctx context.Context, arg string) string {
	if h.env.Session == nil || h.env.Config == nil {
		return replySessionUnavailable
	}
	agentLevel := cmp.Or(h.env.Config.AgentThinking(h.env.AgentID), "off")
	set, err := h.env.Session.Settings(ctx, h.req.SessionKey)
	if err != nil {
		return "⚠️ Could not read this conversation's settings: " + err.Error()
	}
	switch {
	case arg == "":
		if set.Thinking != "" {
			return fmt.Sprintf("🧠 Thinking: %s (this conversation; /think default goes back to %s)", set.Thinking, agentLevel)
		}
		return fmt.Sprintf("🧠 Thinking: %s (the agent's). Levels: %s", agentLevel, strings.Join(thinkingLevels, ", "))
	case arg == ArgDefault:
		set.Thinking = ""
	case !slices.Contains(thinkingLevels, arg):
		return fmt.Sprintf("⚠️ Unknown thinking level %q. Levels: %s", arg, strings.Join(thinkingLevels, ", "))
	default:
		set.Thinking = arg
	}
	if err := h.env.Session.SetSettings(ctx, h.req.SessionKey, set); err != nil {
		return "⚠️ Could not store the thinking level: " + err.Error()
	}
	if set.Thinking == "" {
		return fmt.Sprintf("🧠 Thinking back to the agent's: %s.", agentLevel)
	}
	return fmt.Sprintf("🧠 Thinking for this conversation: %s.", set.Thinking)
}
