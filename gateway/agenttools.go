package gateway

import (
	"context"
	"os"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/memory"
	"github.com/heraldhq/herald/skills"
)

// agentContext is what the system prompt of a turn or run of agentID in
// the conversation rootKey adds (SPEC §28): the agent's skills, read from
// their folders at each turn (so a new skill is seen at once), and the
// pinned memories the conversation sees. aws is the agent's workspace
// under cfg. A failed read is logged and the prompt goes on without it.
func (g *Gateway) agentContext(ctx context.Context, cfg *config.Config, agentID, rootKey, aws string) string {
	list, probs := skills.Load(skills.Dirs(aws, cfg.Skills.Paths, g.stateDir))
	for _, p := range probs {
		g.log.Debug("skill skipped", zap.String("path", p.Path), zap.String("problem", p.Error))
	}
	block := skills.Prompt(list)
	sc := memory.Scope(cfg.Memory, agentID, rootKey)
	var pinned string
	var err error
	if g.pins != nil {
		pinned, err = g.pins.Pinned(ctx, sc, cfg.Memory.InjectTokens)
	} else {
		// A shared state: other replicas write memories, and a turn here
		// right after one must see its pin, so it is read every time.
		pinned, err = memory.Pinned(ctx, g.db, sc, cfg.Memory.InjectTokens)
	}
	if err != nil {
		g.log.Warn("could not read the pinned memories; the prompt goes without them", zap.String("agentId", agentID), zap.Error(err))
	}
	if block != "" && pinned != "" {
		return block + "\n" + pinned
	}
	return block + pinned
}

// skillDirs are the folders of skills.paths under cfg that exist: tools
// read them and exec sees them, read-only.
func (g *Gateway) skillDirs(cfg *config.Config) []string {
	var out []string
	for _, d := range skills.Shared(cfg.Skills.Paths, g.stateDir) {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

// memoryCommand runs /memory for the conversation key of agentID.
func (g *Gateway) memoryCommand(ctx context.Context, key, agentID, args string) string {
	return memory.Command(ctx, g.memories, g.cfg().Memory, agentID, key, args)
}
