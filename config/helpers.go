package config

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Agent returns the agent with the given id.
func (c *Config) Agent(id string) (*Agent, bool) {
	for i := range c.Agents.List {
		if c.Agents.List[i].ID == id {
			return &c.Agents.List[i], true
		}
	}
	return nil, false
}

// DefaultAgentID is the agent unbound messages go to: the first agent with
// default: true, else the first agent, else "main".
func (c *Config) DefaultAgentID() string {
	for _, a := range c.Agents.List {
		if a.Default {
			return a.ID
		}
	}
	if len(c.Agents.List) > 0 {
		return c.Agents.List[0].ID
	}
	return DefaultAgentID
}

// AgentModel is the agent's model ref (provider/model): its own model, else
// agents.defaults.model.
func (c *Config) AgentModel(agentID string) string {
	return c.AgentModelSetting(agentID).Primary
}

// AgentThinking is the agent's thinking level: its own, else the default
// ("" = the provider's default, i.e. off).
func (c *Config) AgentThinking(agentID string) string {
	if a, ok := c.Agent(agentID); ok && a.Thinking != "" {
		return a.Thinking
	}
	return c.Agents.Defaults.Thinking
}

// AgentMaxIterations is the number of model turns one top-level turn of the
// agent may take.
func (c *Config) AgentMaxIterations(agentID string) int {
	if a, ok := c.Agent(agentID); ok && a.MaxIterations > 0 {
		return a.MaxIterations
	}
	if c.Agents.Defaults.MaxIterations > 0 {
		return c.Agents.Defaults.MaxIterations
	}
	return DefaultMaxIterations
}

// AgentWorkspace is the agent's workspace folder, with ~ expanded: its own
// workspace, else agents.defaults.workspace joined with the agent id, else
// <stateDir>/workspace/<agentId>.
func (c *Config) AgentWorkspace(agentID, stateDir string) string {
	if a, ok := c.Agent(agentID); ok && a.Workspace != "" {
		return ExpandHome(a.Workspace)
	}
	if w := c.Agents.Defaults.Workspace; w != "" {
		return filepath.Join(ExpandHome(w), agentID)
	}
	return filepath.Join(stateDir, "workspace", agentID)
}

// Limits are an agent's resolved sub-agent settings (SPEC §4): the agent's
// overrides merged over agents.defaults.subagents over the built-in defaults.
type Limits struct {
	MaxConcurrent         int // the shared subagent lane's size
	MaxDepth              int
	MaxChildrenPerSession int
	MaxTotalSpawns        int
	RunTimeoutSeconds     int // 0 = no timeout
	ArchiveAfterMinutes   int // 0 = never
	MaxIterations         int
	ThreadIdleMinutes     int      // a thread binding's life after its last message (SPEC §24)
	MaxResumes            int      // times a run is resumed after its gateway stopped (SPEC §25)
	GroupTimeoutSeconds   int      // a parent's wait for its announce-parent children; 0 = the longest child's runTimeoutSeconds (SPEC §23)
	Model                 string   // the primary of the sub-agent model setting; "" = the caller's model
	Thinking              string   // "" = the caller's thinking level
	AllowAgents           []string // ["*"] = any agent
}

// AllowsAgent reports whether a sub-agent of the given agent id may be spawned.
func (l Limits) AllowsAgent(id string) bool {
	for _, a := range l.AllowAgents {
		if a == "*" || a == id {
			return true
		}
	}
	return false
}

// SubagentLimits resolves the sub-agent settings of an agent. An unknown
// agent id gets the defaults.
func (c *Config) SubagentLimits(agentID string) Limits {
	d := c.Agents.Defaults.Subagents
	var o Subagents
	if a, ok := c.Agent(agentID); ok {
		o = a.Subagents
	}
	pick := func(over, def *int, builtin int) int {
		switch {
		case over != nil:
			return *over
		case def != nil:
			return *def
		}
		return builtin
	}
	l := Limits{
		MaxConcurrent:         pick(nil, d.MaxConcurrent, DefaultSubagentConcurrent),
		MaxDepth:              pick(o.MaxDepth, d.MaxDepth, DefaultSubagentMaxDepth),
		MaxChildrenPerSession: pick(o.MaxChildrenPerSession, d.MaxChildrenPerSession, DefaultMaxChildrenPerSession),
		MaxTotalSpawns:        pick(o.MaxTotalSpawns, d.MaxTotalSpawns, DefaultMaxTotalSpawns),
		RunTimeoutSeconds:     pick(o.RunTimeoutSeconds, d.RunTimeoutSeconds, DefaultRunTimeoutSeconds),
		ArchiveAfterMinutes:   pick(o.ArchiveAfterMinutes, d.ArchiveAfterMinutes, DefaultArchiveAfterMinutes),
		MaxIterations:         pick(o.MaxIterations, d.MaxIterations, DefaultSubagentMaxIterations),
		ThreadIdleMinutes:     pick(o.ThreadIdleMinutes, d.ThreadIdleMinutes, DefaultThreadIdleMinutes),
		MaxResumes:            pick(o.MaxResumes, d.MaxResumes, DefaultMaxResumes),
		GroupTimeoutSeconds:   pick(o.GroupTimeoutSeconds, d.GroupTimeoutSeconds, 0),
		Model:                 cmp.Or(o.Model.Primary, d.Model.Primary),
		Thinking:              cmp.Or(o.Thinking, d.Thinking),
	}
	switch {
	case len(o.AllowAgents) > 0:
		l.AllowAgents = append([]string(nil), o.AllowAgents...)
	case len(d.AllowAgents) > 0:
		l.AllowAgents = append([]string(nil), d.AllowAgents...)
	default:
		l.AllowAgents = []string{agentID}
	}
	return l
}

// ParseModelRef splits "provider/model" at the first slash (model ids may
// hold more slashes, e.g. OpenRouter's "anthropic/claude-3.5-sonnet").
func ParseModelRef(ref string) (provider, model string, ok bool) {
	provider, model, ok = strings.Cut(ref, "/")
	if !ok || provider == "" || model == "" {
		return "", "", false
	}
	return provider, model, true
}

// LookupModel finds a configured model by its "provider/model" ref.
func (c *Config) LookupModel(ref string) (providerID string, p Provider, m Model, ok bool) {
	pid, mid, ok := ParseModelRef(ref)
	if !ok {
		return "", Provider{}, Model{}, false
	}
	p, ok = c.Models.Providers[pid]
	if !ok {
		return "", Provider{}, Model{}, false
	}
	for _, mm := range p.Models {
		if mm.ID == mid {
			return pid, p, mm, true
		}
	}
	return "", Provider{}, Model{}, false
}

// WebEnabled reports whether the local web chat is on (default true).
func (c *Config) WebEnabled() bool {
	return c.Channels.Web.Enabled == nil || *c.Channels.Web.Enabled
}

// RequiresMention reports whether the bot answers in this group only when
// mentioned (default true).
func (g Group) RequiresMention() bool {
	return g.RequireMention == nil || *g.RequireMention
}

// ListenerIsLoopback reports whether gateway.http.listen is a loopback
// address that no reverse proxy forwards to (gateway.http.behindProxy
// false): then the web API and /metrics need no token.
func (c *Config) ListenerIsLoopback() bool {
	loop, err := listenIsLoopback(c.Gateway.HTTP.Listen)
	return err == nil && loop && !c.Gateway.HTTP.BehindProxy
}

// ReplicaID is gateway.replicaId, or <hostname>-<pid> when unset.
func (c *Config) ReplicaID() string { return c.ReplicaIDOf(os.Getpid()) }

// ReplicaIDOf is the replica id of the gateway process pid on this host
// run with this config: gateway.replicaId, or <hostname>-<pid>.
func (c *Config) ReplicaIDOf(pid int) string {
	if c.Gateway.ReplicaID != "" {
		return c.Gateway.ReplicaID
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", cmp.Or(host, "herald"), pid)
}
