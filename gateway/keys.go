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

// accessOf converts a channel's config allowlist.
func accessOf(a config.Access) channels.Access {
	groups := make(map[string]channels.GroupRule, len(a.Groups))
	for id, g := range a.Groups {
		groups[id] = channels.GroupRule{RequireMention: g.RequiresMention(), AllowFrom: g.AllowFrom}
	}
	return channels.Access{AllowFrom: a.AllowFrom, GroupPolicy: a.GroupPolicy, Groups: groups}
}

// derefInt is *p, or 0 when p is nil.
func derefInt(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}
