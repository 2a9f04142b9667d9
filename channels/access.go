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

// AdmitInThread is Admit for a group message in a thread, where a thread
// bound to a sub-agent (SPEC §24) counts as one the bot is in. bound asks
// the store, so it is called only when its answer decides: for an
// un-mentioned group message that Admit refuses as it is and would take
// with a mention. It returns whether to admit the message and whether it
// counts as mentioned.
func (a Access) AdmitInThread(chatType, chatID, sender string, mentioned bool, bound func() bool) (admit, asMentioned bool) {
	if a.Admit(chatType, chatID, sender, mentioned) {
		return true, mentioned
	}
	if mentioned || chatType != ChatGroup || bound == nil || !a.Admit(chatType, chatID, sender, true) {
		return false, mentioned
	}
	if bound() {
		return true, true
	}
	return false, false
}

// AccessOf is the allowlist of a channel's config section (SPEC §9).
func AccessOf(a config.Access) Access {
	groups := make(map[string]GroupRule, len(a.Groups))
	for id, g := range a.Groups {
		groups[id] = GroupRule{RequireMention: g.RequiresMention(), AllowFrom: g.AllowFrom}
	}
	return Access{AllowFrom: a.AllowFrom, GroupPolicy: a.GroupPolicy, Groups: groups}
}
