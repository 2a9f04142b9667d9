package config

import (
	"path/filepath"
	"strings"
)

// RuntimeACP is the runtime.type of an agent that is an external coding
// agent spoken to over the Agent Client Protocol (SPEC §26).
const RuntimeACP = "acp"

// Runtime runs an agent outside Herald's model loop (SPEC §26): an
// external coding agent, started in the sandbox of SPEC §17.
type Runtime struct {
	Type    string            `json:"type"`    // "acp"
	Command string            `json:"command"` // the agent's program, looked up in PATH
	Args    []string          `json:"args"`
	Env     map[string]Secret `json:"env"`     // its whole environment (plus HOME inside the sandbox)
	Network bool              `json:"network"` // default false: no network in its sandbox
	// ReadPaths are further folders it may read (an npm package's folder).
	ReadPaths []string `json:"readPaths"`
	// Cost prices the tokens it reports when it reports no cost of its
	// own (SPEC §20's token × cost accounting); perMinute does not apply.
	Cost *Cost `json:"cost"`
}

// ACP returns the runtime of agent id when it is an ACP agent.
func (c *Config) ACP(id string) (Runtime, bool) {
	a, ok := c.Agent(id)
	if !ok || a.Runtime == nil || a.Runtime.Type != RuntimeACP {
		return Runtime{}, false
	}
	return *a.Runtime, true
}

// ACPAgents lists the ids of the ACP agents, in config order.
func (c *Config) ACPAgents() []string {
	var out []string
	for _, a := range c.Agents.List {
		if _, ok := c.ACP(a.ID); ok {
			out = append(out, a.ID)
		}
	}
	return out
}

// runtime validates agents.list[i].runtime (path) of agent a; isDefault
// says a is the agent unbound messages go to.
func (v *validator) runtime(path string, a Agent, isDefault bool) {
	rt := a.Runtime
	if rt == nil {
		return
	}
	switch {
	case rt.Type == "":
		v.add(path+".type", `missing: set "acp" (an external coding agent over the Agent Client Protocol)`)
	case rt.Type != RuntimeACP:
		v.add(path+".type", `must be "acp" (got %q)`, rt.Type)
	}
	// A command that is not installed is not a config error (SPEC §26):
	// its runs end "error" naming it, and herald doctor says so.
	if strings.TrimSpace(rt.Command) == "" {
		v.add(path+".command", "missing: the agent's program, e.g. \"codex-acp\" or an absolute path")
	}
	for _, k := range sortedKeys(rt.Env) {
		if !isEnvName(k) {
			v.add(joinKey(path+".env", k), "%q is not an environment variable name (letters, digits and _)", k)
		}
	}
	for i, p := range rt.ReadPaths {
		if p = ExpandHome(p); !filepath.IsAbs(p) {
			v.add(joinIndex(path+".readPaths", i), "%q must be an absolute path (or start with ~/)", rt.ReadPaths[i])
		}
	}
	if c := rt.Cost; c != nil {
		v.cost(path+".cost", *c)
		if c.PerMinute != 0 {
			v.add(path+".cost.perMinute", "does not apply to an ACP agent (it prices audio of a transcription model); price its tokens with input, output, cacheRead, cacheWrite")
		}
	}
	if isDefault {
		v.add(path, "an ACP agent runs only as a sub-agent (sessions_spawn, delegate): it cannot be the default agent; mark another agent default: true")
	}
}
