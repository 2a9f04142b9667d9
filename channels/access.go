package channels

import (
	"slices"

	"github.com/heraldhq/herald/config"
)

// Group policies.
const (
	GroupAllowlist = "allowlist" // only chats listed in Groups (default)
	GroupOpen      = "open"      // any group
	GroupDisabled  = "disabled"  // no groups
)

// GroupRule configures one group chat.
type GroupRule struct {
	RequireMention bool     // default true
	AllowFrom      []string // senders allowed in this group; empty = the channel's AllowFrom
}

// Access is the allowlist every chat channel applies before an Inbound
// reaches the gateway (SPEC §9).
type Access struct {
	AllowFrom   []string // user ids; empty = anyone (in DMs)
	GroupPolicy string   // GroupAllowlist (default) | GroupOpen | GroupDisabled
	Groups      map[string]GroupRule
}

// Admit reports whether a message from sender in chat should reach the
// gateway. mentioned says whether the bot was addressed (an @mention, a reply
// to the bot, a thread the bot is in, or a slash command).
func (a Access) Admit(chatType, chatID, sender string, mentioned bool) bool {
	if chatType != ChatGroup {
		return len(a.AllowFrom) == 0 || slices.Contains(a.AllowFrom, sender)
	}
	rule, listed := a.Groups[chatID]
	switch a.GroupPolicy {
	case GroupDisabled:
		return false
	case GroupOpen:
		if !listed {
			rule = GroupRule{RequireMention: true}
		}
	default: // allowlist
		if !listed {
			return false
		}
	}
	allow := rule.AllowFrom
	if len(allow) == 0 {
		allow = a.AllowFrom
	}
	if len(allow) > 0 && !slices.Contains(allow, sender) {
		return false
	}
	return mentioned || !rule.RequireMention
}

// AccessOf is the allowlist of a channel's config section (SPEC §9).
func AccessOf(a config.Access) Access {
	groups := make(map[string]GroupRule, len(a.Groups))
	for id, g := range a.Groups {
		groups[id] = GroupRule{RequireMention: g.RequiresMention(), AllowFrom: g.AllowFrom}
	}
	return Access{AllowFrom: a.AllowFrom, GroupPolicy: a.GroupPolicy, Groups: groups}
}
