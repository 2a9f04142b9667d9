package gateway

import (
	"context"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/memory"
)

// agentContext is what the system prompt of a turn or run of agentID in
// the conversation rootKey adds (SPEC §28): the pinned memories the
// conversation sees. aws is the agent's workspace under cfg. A failed read
// is logged and the prompt goes on without it.
func (g *Gateway) agentContext(ctx context.Context, cfg *config.Config, agentID, rootKey, aws string) string {
	pinned, err := memory.Pinned(ctx, g.db, memory.Scope(cfg.Memory, agentID, rootKey), cfg.Memory.InjectTokens)
	if err != nil {
		g.log.Warn("could not read the pinned memories; the prompt goes without them", zap.String("agentId", agentID), zap.Error(err))
	}
	return pinned
}

// memoryCommand runs /memory for the conversation key of agentID.
func (g *Gateway) memoryCommand(ctx context.Context, key, agentID, args string) string {
	return memory.Command(ctx, g.db, g.cfg().Memory, agentID, key, args)
}
