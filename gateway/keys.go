package gateway

import (
	"fmt"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
)

// SessionKey is the requester session key of an origin (SPEC §2):
// agent:<agentId>:<channel>:<chatType>:<chatId>[:thread:<threadId>].
func SessionKey(agentID string, o channels.Origin) string {
	chatType := o.ChatType
	if chatType != channels.ChatGroup {
		chatType = channels.ChatDM
	}
	k := fmt.Sprintf("agent:%s:%s:%s:%s", agentID, o.Channel, chatType, o.ChatID)
	if o.ThreadID != "" {
		k += ":thread:" + o.ThreadID
	}
	return k
}

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
