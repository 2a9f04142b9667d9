package config

// AgentSettings are one agent's settings resolved against agents.defaults,
// as one turn or one sub-agent run uses them. A turn resolves them once, at
// its start, from the config it took then (Resolve), so a reload in the
// middle of the turn never mixes old and new settings.
type AgentSettings struct {
	ID            string
	Known         bool         // the agent is in agents.list (else: the defaults)
	Model         ModelSetting // its own model setting, else agents.defaults.model
	Thinking      string       // AgentThinking
	MaxIterations int          // AgentMaxIterations
	SystemPrompt  string       // its own; "" = none
	AllowedTools  []string     // empty = every tool
	MCPServers    []string     // AgentMCPServers (nil for an unknown agent)
	Subagents     Limits       // SubagentLimits
}

// Resolve resolves the settings of agent id. An unknown id gets the
// defaults.
func (c *Config) Resolve(id string) AgentSettings {
	s := AgentSettings{ID: id, Model: c.AgentModelSetting(id), Thinking: c.AgentThinking(id),
		MaxIterations: c.AgentMaxIterations(id), Subagents: c.SubagentLimits(id)}
	if a, ok := c.Agent(id); ok {
		s.Known, s.SystemPrompt, s.AllowedTools = true, a.SystemPrompt, a.AllowedTools
		s.MCPServers = c.AgentMCPServers(id)
	}
	return s
}
