package tools

import (
	"slices"
	"strings"

	"github.com/heraldhq/herald/agent"
)

// Decision is what security.toolPolicy says about one tool call.
type Decision string

// The decisions, from most to least permissive.
const (
	Allow      Decision = "allow"
	Supervised Decision = "supervised" // ask a human with /approve <code> first
	Deny       Decision = "deny"
)

// ParseDecision returns the Decision s names (case and surrounding space
// ignored) and whether it is one.
func ParseDecision(s string) (Decision, bool) {
	switch d := Decision(strings.ToLower(strings.TrimSpace(s))); d {
	case Allow, Supervised, Deny:
		return d, true
	}
	return "", false
}

// Policy is security.toolPolicy. config.ToolPolicy converts to it directly:
// tools.Policy(cfg.Security.ToolPolicy).
type Policy struct {
	Default string            // allow|supervised|deny; "" = allow
	Groups  map[string]string // group name → decision
	Tools   map[string]string // tool name → decision
}

// groupFloor holds built-in group defaults (SPEC §5: exec is supervised by
// default). They apply when neither the tool nor its group is configured,
// and only make Default stricter, never looser.
var groupFloor = map[string]Decision{agent.GroupExec: Supervised}

// Decide returns the decision for tool in group; the most specific entry
// wins: Tools[tool] > Groups[group] > Default > "allow", with exec at least
// supervised unless tools or groups say otherwise. A value that is not
// allow, supervised or deny denies (fail closed); config validation should
// have caught it earlier.
func (p Policy) Decide(tool, group string) Decision {
	if v, ok := p.Tools[tool]; ok {
		return parseOrDeny(v)
	}
	if group != "" {
		if v, ok := p.Groups[group]; ok {
			return parseOrDeny(v)
		}
	}
	d := Allow
	if strings.TrimSpace(p.Default) != "" {
		d = parseOrDeny(p.Default)
	}
	if floor, ok := groupFloor[group]; ok {
		d = stricter(d, floor)
	}
	return d
}

func parseOrDeny(s string) Decision {
	if d, ok := ParseDecision(s); ok {
		return d
	}
	return Deny
}

func stricter(a, b Decision) Decision {
	rank := map[Decision]int{Allow: 0, Supervised: 1, Deny: 2}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// SessionTools are the tools that reach other sessions. A sub-agent does not
// get them by default (SPEC §5).
var SessionTools = []string{"sessions_spawn", "sessions_send", "sessions_list", "sessions_history"}

// IsSessionTool reports whether name is one of SessionTools.
func IsSessionTool(name string) bool { return slices.Contains(SessionTools, name) }

// SubagentToolAllowed applies tools.subagents.tools to one tool name: deny
// always wins; a non-empty allow makes the set allow-only (and may name a
// session tool to grant it); with an empty allow every tool except the
// session tools is allowed. Callers that permit nesting (maxDepth > 1) decide
// about session tools for non-deepest children themselves.
func SubagentToolAllowed(name string, allow, deny []string) bool {
	if slices.Contains(deny, name) {
		return false
	}
	if len(allow) > 0 {
		return slices.Contains(allow, name)
	}
	return !IsSessionTool(name)
}
