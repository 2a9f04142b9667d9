package gateway

import (
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
)

// route picks the agent for an origin: the first binding whose match fits,
// else the default agent.
func route(cfg *config.Config, o channels.Origin) string {
	for _, b := range cfg.Bindings {
		m := b.Match
		if (m.Channel == "" || m.Channel == string(o.Channel)) &&
			(m.AccountID == "" || m.AccountID == o.Account) &&
			(m.ChatID == "" || m.ChatID == o.ChatID) &&
			(m.ChatType == "" || m.ChatType == o.ChatType) {
			return b.AgentID
		}
	}
	return cfg.DefaultAgentID()
}
