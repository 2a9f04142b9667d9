package harness

import (
	"fmt"
	"os"
)

// Config is what the dev tools vary in the gateway's config; the rest is
// the embedded default.
type Config struct {
	Listen, ModelURL string
	// MainConcurrent is the main lane's size (agents.defaults.maxConcurrent).
	MainConcurrent int
	// Subagents is the sub-agent lane's size, and Children the limit of
	// children per session (the total per root is the same).
	Subagents, Children int
	GraceSeconds        int
	MaxQueued           int    // agents.defaults.maxQueued; 0 = the default
	Channels            string // more members of "channels" (web is on), verbatim JSON5
	Extra               string // more top-level JSON5 members, verbatim
	ReplicaID           string // gateway.replicaId; "" = the default (hostname-pid)
	// Agents is more members of "agents" (a list: …), and Subagents more
	// members of agents.defaults.subagents (allowAgents: …), verbatim JSON5.
	Agents, SubagentsExtra string
	// NoMaxStreams leaves channels.web.maxStreams out (it is 100000
	// otherwise): builds older than the key reject it (comparisons with
	// an older commit, herald-load -compare).
	NoMaxStreams bool
	// MaxConnections is the fake provider's maxConnections; 0 = the
	// default (a quarter of the open-file limit).
	MaxConnections int
}

// Write writes the config as JSON5 to path.
func (c Config) Write(path string) error {
	src := fmt.Sprintf(`// Written by herald's dev tools (devtools/harness).
{
  gateway: { http: { listen: %q }, shutdownGraceSeconds: %d%s },
  models: { providers: {
    fake: { api: "openai", baseUrl: %q, apiKey: "k", models: [{ id: "m" }]%s },
  } },
  agents: {
    defaults: {
      model: "fake/m",
      maxConcurrent: %d,%s
      subagents: { maxConcurrent: %d, maxChildrenPerSession: %d, maxTotalSpawns: %d, %s },
    },
    %s
  },
  channels: { web: { enabled: true%s }, %s },
  %s
}
`, c.Listen, max(c.GraceSeconds, 1), replicaID(c.ReplicaID), c.ModelURL, maxConnections(c.MaxConnections), max(c.MainConcurrent, 1), maxQueued(c.MaxQueued), max(c.Subagents, 1), max(c.Children, 1), max(c.Children, 1), c.SubagentsExtra, c.Agents, maxStreams(c.NoMaxStreams), c.Channels, c.Extra)
	return os.WriteFile(path, []byte(src), 0o600)
}

func replicaID(id string) string {
	if id == "" {
		return ""
	}
	return fmt.Sprintf(", replicaId: %q", id)
}

func maxConnections(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(", maxConnections: %d", n)
}

func maxQueued(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(" maxQueued: %d,", n)
}

func maxStreams(omit bool) string {
	if omit {
		return ""
	}
	return ", maxStreams: 100000"
}
