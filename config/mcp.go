package config

import (
	"regexp"
	"sort"
	"strings"
	"sync"
)

// DefaultMCPTimeoutSeconds bounds one MCP tool call (SPEC §15).
const DefaultMCPTimeoutSeconds = 60

// MCPMaxServerName keeps "mcp__<server>__" short enough that every tool
// name still fits the providers' 64-character limit with room for the tool.
const MCPMaxServerName = 40

// MCP configures Model Context Protocol tool servers (SPEC §15).
type MCP struct {
	Servers map[string]MCPServer `json:"servers"`
}

// MCPServer is one MCP server: a command speaking stdio, or a streamable
// HTTP endpoint.
type MCPServer struct {
	Command        string            `json:"command"` // stdio: the program to start
	Args           []string          `json:"args"`
	Env            map[string]Secret `json:"env"` // added to a minimal environment (PATH, HOME, locale)
	Cwd            string            `json:"cwd"`
	URL            string            `json:"url"` // streamable HTTP endpoint
	Headers        map[string]Secret `json:"headers"`
	TimeoutSeconds int               `json:"timeoutSeconds"` // per call; default 60
	Enabled        *bool             `json:"enabled"`        // default true
	// Sandbox confines a stdio server like exec (SPEC §17), with its own
	// Network (default false).
	Sandbox bool `json:"sandbox"`
	Network bool `json:"network"`
}

// On reports whether the server is enabled.
func (s MCPServer) On() bool { return s.Enabled == nil || *s.Enabled }

// AgentMCPServers returns the enabled MCP servers an agent uses, sorted: its
// mcpServers list, or every server when the list is not set.
func (c *Config) AgentMCPServers(agentID string) []string {
	var names []string
	a, _ := c.Agent(agentID)
	if a.MCPServers != nil {
		for _, n := range a.MCPServers {
			if s, ok := c.MCP.Servers[n]; ok && s.On() && !contains(names, n) {
				names = append(names, n)
			}
		}
	} else {
		for n, s := range c.MCP.Servers {
			if s.On() {
				names = append(names, n)
			}
		}
	}
	sort.Strings(names)
	return names
}

func (c *Config) applyMCPDefaults() {
	for name, s := range c.MCP.Servers {
		setInt(&s.TimeoutSeconds, DefaultMCPTimeoutSeconds)
		c.MCP.Servers[name] = s
	}
}

// mcpServerNameRe: letters, digits, - and single _ (never "__", never at
// either end), so "mcp__<server>__<tool>" names one server unambiguously.
var mcpServerNameRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]|_[A-Za-z0-9-])*$`) })

var headerNameRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$") })

func (v *validator) mcp() {
	servers := v.c.MCP.Servers
	for _, name := range sortedKeys(servers) {
		s := servers[name]
		path := joinKey("mcp.servers", name)
		switch {
		case !mcpServerNameRe().MatchString(name):
			v.add(path, "server name %q may hold only letters, digits, - and single _ (not at either end), since tools are named mcp__<server>__<tool>", name)
		case len(name) > MCPMaxServerName:
			v.add(path, "server name %q is longer than %d characters (tool names mcp__<server>__<tool> must fit 64)", name, MCPMaxServerName)
		}
		v.atLeast(path+".timeoutSeconds", s.TimeoutSeconds, 1)
		hasCmd, hasURL := strings.TrimSpace(s.Command) != "", s.URL != ""
		switch {
		case hasCmd && hasURL:
			v.add(path, "set either command (stdio) or url (streamable HTTP), not both")
		case !hasCmd && !hasURL:
			v.add(path, "missing: set command (a stdio server) or url (a streamable HTTP server)")
		}
		if hasURL {
			v.httpURL(path+".url", s.URL)
			for i, k := range []string{"args", "env", "cwd"} {
				if set := []bool{len(s.Args) > 0, len(s.Env) > 0, s.Cwd != ""}[i]; set {
					v.add(path+"."+k, "only for stdio servers (command); this server has a url")
				}
			}
		}
		if hasURL && s.Sandbox {
			v.add(path+".sandbox", "only for stdio servers (command); this server has a url")
		}
		if s.Network && !s.Sandbox {
			v.add(path+".network", "only with sandbox: true (an unconfined server has the gateway's network anyway)")
		}
		if hasCmd && len(s.Headers) > 0 {
			v.add(path+".headers", "only for HTTP servers (url); this server has a command")
		}
		for _, k := range sortedKeys(s.Env) {
			if !isEnvName(k) {
				v.add(joinKey(path+".env", k), "%q is not an environment variable name (letters, digits and _)", k)
			}
		}
		for _, k := range sortedKeys(s.Headers) {
			if !headerNameRe().MatchString(k) {
				v.add(joinKey(path+".headers", k), "%q is not an HTTP header name", k)
			}
		}
	}
	// Tool names of the form mcp__<server>__<tool> must name a configured
	// server (the tools themselves are known only once it runs).
	checkTool := func(path, name string) {
		rest, ok := strings.CutPrefix(name, "mcp__")
		if !ok {
			return
		}
		server, _, _ := strings.Cut(rest, "__")
		if _, ok := servers[server]; !ok {
			configured := strings.Join(sortedKeys(servers), ", ")
			if configured == "" {
				configured = "none"
			}
			v.add(path, "%q names MCP server %q, which is not configured (mcp.servers: %s)", name, server, configured)
		}
	}
	for _, name := range sortedKeys(v.c.Security.ToolPolicy.Tools) {
		checkTool(joinKey("security.toolPolicy.tools", name), name)
	}
	for i, name := range v.c.Tools.Subagents.Tools.Allow {
		checkTool(joinIndex("tools.subagents.tools.allow", i), name)
	}
	for i, name := range v.c.Tools.Subagents.Tools.Deny {
		checkTool(joinIndex("tools.subagents.tools.deny", i), name)
	}
	for i, a := range v.c.Agents.List {
		for j, name := range a.AllowedTools {
			checkTool(joinIndex(joinIndex("agents.list", i)+".allowedTools", j), name)
		}
	}
	for i, a := range v.c.Agents.List {
		for j, n := range a.MCPServers {
			if _, ok := servers[n]; !ok {
				v.add(joinIndex(joinIndex("agents.list", i)+".mcpServers", j), "unknown MCP server %q (configured: %s)", n, strings.Join(sortedKeys(servers), ", "))
			}
		}
	}
}
