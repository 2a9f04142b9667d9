package config

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/heraldhq/herald/netguard"
)

var (
	logLevels      = []string{"debug", "info", "warn", "error"}
	logFormats     = []string{"json", "console"}
	thinkingLevels = []string{"off", "low", "medium", "high"}
	policyValues   = []string{"allow", "supervised", "deny"}
	policyGroups   = []string{"sessions", "files", "exec", "web", "mcp", "acp"}
	execSandboxes  = []string{"auto", "bwrap", "landlock", "off"}
	groupPolicies  = []string{"allowlist", "open", "disabled"}
	chatTypes      = []string{"dm", "group"}
	streamingModes = []string{"edit", "off"}

	agentIDRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`) })
)

// validator collects problems with their positions.
type validator struct {
	c     *Config
	probs []Problem
}

func (v *validator) add(path, format string, args ...any) {
	p := v.c.position(path)
	v.probs = append(v.probs, Problem{Path: path, Line: p.Line, Col: p.Col, Msg: fmt.Sprintf(format, args...)})
}

func oneOf(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = strconv.Quote(s)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// enum checks an optional value against its allowed set.
func (v *validator) enum(path, val string, allowed []string) {
	if val != "" && !contains(allowed, val) {
		v.add(path, "%q is not one of %s", val, oneOf(allowed))
	}
}

func (v *validator) nonNegative(path string, n int) {
	if n < 0 {
		v.add(path, "must not be negative (got %d)", n)
	}
}

func (v *validator) atLeast(path string, n, lo int) {
	if n < lo {
		v.add(path, "must be at least %d (got %d)", lo, n)
	}
}

func (v *validator) httpURL(path, val string) {
	if val == "" {
		return
	}
	u, err := url.Parse(val)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.add(path, "%q is not an http(s) URL", val)
	}
}

func (v *validator) urlPath(path, val string) {
	if val != "" && !strings.HasPrefix(val, "/") {
		v.add(path, "%q must start with /", val)
	}
}

// Validate checks the loaded config and reports every problem at once, each
// with its key path and line:column, as a *Problems (nil when all is well).
func (c *Config) Validate() error {
	v := &validator{c: c}
	v.gateway()
	v.models()
	v.agents()
	v.bindings()
	v.tools()
	v.memory()
	v.security()
	v.channels()
	v.mcp()
	v.budgets()
	v.schedules()
	v.telemetry()
	v.attachments()
	file := c.File()
	if file == "" {
		file = "config"
	}
	return (&Problems{File: file, List: v.probs}).errOrNil()
}

var stateDrivers = []string{"sqlite", "postgres"}

func (v *validator) gateway() {
	g := v.c.Gateway
	v.enum("gateway.logLevel", g.LogLevel, logLevels)
	v.enum("gateway.logFormat", g.LogFormat, logFormats)
	v.nonNegative("gateway.shutdownGraceSeconds", g.ShutdownGraceSeconds)
	v.nonNegative("session.idleMinutes", v.c.Session.IdleMinutes)
	v.enum("state.driver", v.c.State.Driver, stateDrivers)
	v.atLeast("state.leaseSeconds", v.c.State.LeaseSeconds, 2)
	switch {
	case v.c.State.Driver == "postgres" && v.c.State.URL == "":
		v.add("state.url", "driver postgres needs a URL, like \"${HERALD_DATABASE_URL}\" with HERALD_DATABASE_URL=postgres://user:pass@host/db")
	case v.c.State.Driver != "postgres" && v.c.State.URL != "":
		v.add("state.url", "is only read with driver \"postgres\" (driver is %q)", v.c.State.Driver)
	}
	v.enum("channels.web.streaming", v.c.Channels.Web.Streaming, streamingModes)
	loop, err := listenIsLoopback(g.HTTP.Listen)
	if err != nil {
		v.add("gateway.http.listen", "%v", err)
	}
	switch tok := strings.TrimSpace(string(g.Admin.Token)); {
	case g.Admin.Token != "" && tok == "":
		v.add("gateway.admin.token", "is only whitespace: set a real token or leave it out")
	case tok == "" && err == nil && !loop:
		v.add("gateway.admin.token", "missing: the operator's console (/admin) needs a token when gateway.http.listen (%s) is not a loopback address", g.HTTP.Listen)
	case tok == "" && g.HTTP.BehindProxy:
		v.add("gateway.admin.token", "missing: the operator's console (/admin) needs a token when gateway.http.behindProxy is true")
	}
	v.atLeast("outbox.maxAttempts", v.c.Outbox.MaxAttempts, 1)
	v.atLeast("outbox.maxAgeHours", v.c.Outbox.MaxAgeHours, 1)
	if m := v.c.Intake.MaxAgeMinutes; m != nil {
		v.nonNegative("intake.maxAgeMinutes", *m)
	}
}

// listenIsLoopback parses a host:port listen address.
func listenIsLoopback(addr string) (bool, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("%q is not a host:port address", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return false, fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	if host == "localhost" {
		return true, nil
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback(), nil
	}
	return false, nil
}

func sortedKeys[T any](m map[string]T) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (v *validator) models() {
	for _, id := range sortedKeys(v.c.Models.Providers) {
		p := v.c.Models.Providers[id]
		path := joinKey("models.providers", id)
		if strings.Contains(id, "/") {
			v.add(path, "provider id %q must not contain /", id)
		}
		switch {
		case p.API == "":
			v.add(path+".api", "missing: set it to %s", oneOf(knownAPIs))
		case !contains(knownAPIs, p.API):
			v.add(path+".api", "unknown api %q (want %s)", p.API, oneOf(knownAPIs))
		}
		if p.APIKey != "" && len(p.APIKeys) > 0 {
			v.add(path+".apiKeys", "set apiKey or apiKeys, not both (apiKeys holds every key, used in turn)")
		}
		for i, k := range p.APIKeys {
			if strings.TrimSpace(k.Value()) == "" {
				v.add(joinIndex(path+".apiKeys", i), "empty key (is its variable set?)")
			}
		}
		if (p.API == "anthropic" || p.API == "openai") && p.APIKey == "" && len(p.APIKeys) == 0 {
			v.add(path+".apiKey", "missing: the %s api needs an apiKey (e.g. \"${%s_API_KEY}\")", p.API, strings.ToUpper(p.API))
		}
		if p.API == "openai-compatible" && p.BaseURL == "" {
			v.add(path+".baseUrl", "missing: the openai-compatible api needs a baseUrl")
		}
		v.httpURL(path+".baseUrl", p.BaseURL)
		v.atLeast(path+".timeoutSeconds", p.TimeoutSeconds, 1)
		v.nonNegative(path+".maxConnections", p.MaxConnections)
		if len(p.Models) == 0 {
			v.add(path+".models", "no models: list at least one {id: \"…\"}")
		}
		seen := map[string]bool{}
		for i, m := range p.Models {
			mp := joinIndex(path+".models", i)
			switch {
			case m.ID == "":
				v.add(mp+".id", "missing model id")
			case seen[m.ID]:
				v.add(mp+".id", "duplicate model id %q", m.ID)
			}
			seen[m.ID] = true
			v.nonNegative(mp+".contextWindow", m.ContextWindow)
			v.nonNegative(mp+".maxTokens", m.MaxTokens)
			if m.Cost != nil {
				v.cost(mp+".cost", *m.Cost)
			}
		}
	}
}

// cost checks a price (path: its key): no negative number.
func (v *validator) cost(path string, c Cost) {
	for _, f := range []struct {
		k string
		x float64
	}{{"input", c.Input}, {"output", c.Output}, {"cacheRead", c.CacheRead}, {"cacheWrite", c.CacheWrite}} {
		if f.x < 0 {
			v.add(path+"."+f.k, "must not be negative (got %g)", f.x)
		}
	}
}

// modelRef checks a provider/model reference against the configured models.
func (v *validator) modelRef(path, ref string) {
	if ref == "" {
		return
	}
	pid, mid, ok := ParseModelRef(ref)
	if !ok {
		v.add(path, "model %q must be \"provider/model\"", ref)
		return
	}
	p, ok := v.c.Models.Providers[pid]
	if !ok {
		v.add(path, "model %q: unknown provider %q (configured: %s)", ref, pid, strings.Join(sortedKeys(v.c.Models.Providers), ", "))
		return
	}
	ids := make([]string, 0, len(p.Models))
	for _, m := range p.Models {
		if m.ID == mid {
			return
		}
		ids = append(ids, m.ID)
	}
	v.add(path, "model %q: provider %q has no model %q (configured: %s)", ref, pid, mid, strings.Join(ids, ", "))
}

func (v *validator) subagents(path string, s Subagents, isDefaults bool, agentIDs map[string]bool) {
	if s.MaxConcurrent != nil {
		if !isDefaults {
			v.add(path+".maxConcurrent", "the subagent lane is shared: set agents.defaults.subagents.maxConcurrent instead")
		} else {
			v.atLeast(path+".maxConcurrent", *s.MaxConcurrent, 1)
		}
	}
	if s.MaxDepth != nil {
		v.atLeast(path+".maxDepth", *s.MaxDepth, 1)
	}
	for _, f := range []struct {
		k string
		n *int
	}{
		{"maxChildrenPerSession", s.MaxChildrenPerSession},
		{"maxTotalSpawns", s.MaxTotalSpawns},
		{"runTimeoutSeconds", s.RunTimeoutSeconds},
		{"archiveAfterMinutes", s.ArchiveAfterMinutes},
		{"maxResumes", s.MaxResumes},
		{"groupTimeoutSeconds", s.GroupTimeoutSeconds},
	} {
		if f.n != nil {
			v.nonNegative(path+"."+f.k, *f.n)
		}
	}
	if s.MaxIterations != nil {
		v.atLeast(path+".maxIterations", *s.MaxIterations, 1)
	}
	if s.ThreadIdleMinutes != nil {
		v.atLeast(path+".threadIdleMinutes", *s.ThreadIdleMinutes, 1)
	}
	v.modelSetting(path+".model", s.Model)
	v.enum(path+".thinking", s.Thinking, thinkingLevels)
	for i, a := range s.AllowAgents {
		if a != "*" && !agentIDs[a] {
			v.add(joinIndex(path+".allowAgents", i), "unknown agent %q (agents: %s)", a, strings.Join(sortedKeys(agentIDs), ", "))
		}
	}
}

func (v *validator) agents() {
	d := v.c.Agents.Defaults
	ids := map[string]bool{}
	for _, a := range v.c.Agents.List {
		if a.ID != "" {
			ids[a.ID] = true
		}
	}
	v.modelSetting("agents.defaults.model", d.Model)
	v.enum("agents.defaults.thinking", d.Thinking, thinkingLevels)
	v.atLeast("agents.defaults.maxConcurrent", d.MaxConcurrent, 1)
	v.nonNegative("agents.defaults.maxQueued", d.MaxQueued)
	v.atLeast("agents.defaults.turnTimeoutSeconds", d.TurnTimeoutSeconds, 1)
	v.nonNegative("channels.web.rateLimit.burst", v.c.Channels.Web.RateLimit.Burst)
	v.nonNegative("channels.web.maxStreams", v.c.Channels.Web.MaxStreams)
	v.atLeast("agents.defaults.maxIterations", d.MaxIterations, 1)
	v.subagents("agents.defaults.subagents", d.Subagents, true, ids)

	seen := map[string]int{}
	defaults := 0
	for i, a := range v.c.Agents.List {
		path := joinIndex("agents.list", i)
		switch {
		case a.ID == "":
			v.add(path+".id", "missing agent id")
		case !agentIDRe().MatchString(a.ID):
			v.add(path+".id", "agent id %q may hold only letters, digits, _ and - (and start with a letter or digit)", a.ID)
		}
		if j, dup := seen[a.ID]; dup && a.ID != "" {
			v.add(path+".id", "duplicate agent id %q (also agents.list[%d])", a.ID, j)
		} else {
			seen[a.ID] = i
		}
		if a.Default {
			defaults++
			if defaults > 1 {
				v.add(path+".default", "more than one agent has default: true")
			}
		}
		if a.Model.Primary == "" && d.Model.Primary == "" && a.Runtime == nil {
			v.add(path+".model", "no model: set agents.defaults.model or this agent's model")
		}
		v.modelSetting(path+".model", a.Model)
		for j, ref := range a.Models {
			v.modelRef(joinIndex(path+".models", j), ref)
		}
		v.enum(path+".thinking", a.Thinking, thinkingLevels)
		v.nonNegative(path+".maxIterations", a.MaxIterations)
		v.subagents(path+".subagents", a.Subagents, false, ids)
		v.runtime(path+".runtime", a, v.c.DefaultAgentID() == a.ID)
	}
}

func (v *validator) bindings() {
	ids := map[string]bool{}
	for _, a := range v.c.Agents.List {
		ids[a.ID] = true
	}
	for i, b := range v.c.Bindings {
		path := joinIndex("bindings", i)
		switch {
		case b.AgentID == "":
			v.add(path+".agentId", "missing agent id")
		case !ids[b.AgentID]:
			v.add(path+".agentId", "unknown agent %q (agents: %s)", b.AgentID, strings.Join(sortedKeys(ids), ", "))
		default:
			if _, acp := v.c.ACP(b.AgentID); acp {
				v.add(path+".agentId", "agent %q is an ACP agent, which runs only as a sub-agent (sessions_spawn, delegate); bind a model agent that may spawn it", b.AgentID)
			}
		}
		v.enum(path+".match.channel", b.Match.Channel, ChannelNames())
		v.enum(path+".match.chatType", b.Match.ChatType, chatTypes)
	}
}

func (v *validator) tools() {
	t := v.c.Tools
	v.atLeast("tools.exec.timeoutSeconds", t.Exec.TimeoutSeconds, 1)
	v.atLeast("tools.exec.maxOutputBytes", t.Exec.MaxOutputBytes, 1)
	v.enum("tools.exec.sandbox", t.Exec.Sandbox, execSandboxes)
	v.atLeast("tools.exec.memoryMB", t.Exec.MemoryMB, 16)
	v.atLeast("tools.exec.maxProcesses", t.Exec.MaxProcesses, 1)
	v.atLeast("tools.exec.fileSizeMB", t.Exec.FileSizeMB, 1)
	v.atLeast("tools.exec.cpuSeconds", t.Exec.CPUSeconds, 1)
	v.atLeast("tools.webFetch.timeoutSeconds", t.WebFetch.TimeoutSeconds, 1)
	v.atLeast("tools.webFetch.maxBytes", t.WebFetch.MaxBytes, 1)
	for i, e := range t.WebFetch.AllowPrivate {
		if netguard.CheckEntry(e) != nil {
			v.add(joinIndex("tools.webFetch.allowPrivate", i), "%q is not a CIDR (10.1.2.0/24), IP address or host name (intranet.example)", e)
		}
	}
	v.webSearch(t.WebSearch)
	for _, l := range []struct {
		k    string
		list []string
	}{{"allow", t.Subagents.Tools.Allow}, {"deny", t.Subagents.Tools.Deny}} {
		for i, name := range l.list {
			if strings.TrimSpace(name) == "" {
				v.add(joinIndex("tools.subagents.tools."+l.k, i), "empty tool name")
			}
		}
	}
}

// WebSearchProviders are the values of tools.webSearch.provider.
var WebSearchProviders = []string{"brave", "tavily", "searxng"}

func (v *validator) webSearch(w WebSearch) {
	v.enum("tools.webSearch.provider", w.Provider, WebSearchProviders)
	v.httpURL("tools.webSearch.baseUrl", w.BaseURL)
	switch w.Provider {
	case "brave", "tavily":
		if w.APIKey == "" {
			v.add("tools.webSearch.apiKey", "provider %q needs an API key", w.Provider)
		}
	case "searxng":
		if w.BaseURL == "" {
			v.add("tools.webSearch.baseUrl", "provider \"searxng\" is self-hosted: set the URL of your instance (https://searx.example/)")
		}
	case "":
		if w.APIKey != "" || w.BaseURL != "" {
			v.add("tools.webSearch.provider", "missing: apiKey or baseUrl is set but no provider (%s)", oneOf(WebSearchProviders))
		}
	}
}

// memory checks memory and skills (SPEC §28).
func (v *validator) memory() {
	m := v.c.Memory
	v.enum("memory.scope", m.Scope, []string{"conversation", "agent"})
	v.atLeast("memory.injectTokens", m.InjectTokens, 0)
	v.atLeast("memory.maxChars", m.MaxChars, 1)
	for i, p := range v.c.Skills.Paths {
		if strings.TrimSpace(p) == "" {
			v.add(joinIndex("skills.paths", i), "empty path")
		}
	}
}

func (v *validator) security() {
	s := v.c.Security
	v.atLeast("security.approvalTimeoutSeconds", s.ApprovalTimeoutSeconds, 1)
	for _, ch := range sortedKeys(s.Approvers) {
		path := joinKey("security.approvers", ch)
		check, ok := channelApprover(ch)
		if !ok {
			v.add(path, "unknown channel %q (approvers can be listed for %s)", ch, oneOf(approverChannels()))
			continue
		}
		for i, id := range s.Approvers[ch] {
			if msg := check(id); msg != "" {
				v.add(joinIndex(path, i), "%q is not %s", id, msg)
			}
		}
	}
	p := s.ToolPolicy
	v.enum("security.toolPolicy.default", p.Default, policyValues)
	for _, g := range sortedKeys(p.Groups) {
		path := joinKey("security.toolPolicy.groups", g)
		if !contains(policyGroups, g) {
			v.add(path, "unknown tool group %q (groups: %s)", g, oneOf(policyGroups))
		}
		v.policyValue(path, p.Groups[g])
	}
	for _, t := range sortedKeys(p.Tools) {
		v.policyValue(joinKey("security.toolPolicy.tools", t), p.Tools[t])
	}
}

func (v *validator) policyValue(path, val string) {
	if !contains(policyValues, val) {
		v.add(path, "%q is not one of %s", val, oneOf(policyValues))
	}
}

func (v *validator) access(path string, a Access) {
	v.enum(path+".groupPolicy", a.GroupPolicy, groupPolicies)
	for _, id := range sortedKeys(a.Groups) {
		if strings.TrimSpace(id) == "" {
			v.add(joinKey(path+".groups", id), "empty chat id")
		}
	}
}

func (v *validator) channels() {
	v.registeredChannels()

	if tok := v.c.Channels.Web.Token; tok != "" && strings.TrimSpace(string(tok)) == "" {
		v.add("channels.web.token", "is only whitespace: set a real token or leave it out")
	}
	if v.c.WebEnabled() && strings.TrimSpace(string(v.c.Channels.Web.Token)) == "" {
		if loop, err := listenIsLoopback(v.c.Gateway.HTTP.Listen); err == nil && !loop {
			v.add("channels.web.token", "missing: the web chat needs a token when gateway.http.listen (%s) is not a loopback address", v.c.Gateway.HTTP.Listen)
		} else if err == nil && v.c.Gateway.HTTP.BehindProxy {
			v.add("channels.web.token", "missing: the web chat needs a token when gateway.http.behindProxy is true (a reverse proxy makes it reachable from off loopback)")
		}
	}
}

func (v *validator) telemetry() {
	t := v.c.Telemetry
	v.httpURL("telemetry.otlp.endpoint", t.OTLP.Endpoint)
	if t.OTLP.Endpoint == "" && len(t.OTLP.Headers) > 0 {
		v.add("telemetry.otlp.headers", "set, but telemetry.otlp.endpoint is empty: headers are sent only to a collector")
	}
	for _, k := range sortedKeys(t.OTLP.Headers) {
		if !headerNameRe().MatchString(k) {
			v.add(joinKey("telemetry.otlp.headers", k), "%q is not an HTTP header name", k)
		}
	}
	if r := t.SampleRatio; r != nil && (*r < 0 || *r > 1 || *r != *r) {
		v.add("telemetry.sampleRatio", "must be between 0 and 1 (got %v)", *r)
	}
	if strings.TrimSpace(t.ServiceName) == "" {
		v.add("telemetry.serviceName", "must not be empty")
	}
	if strings.ContainsRune(t.Traces.File, 0) || strings.HasSuffix(t.Traces.File, "/") {
		v.add("telemetry.traces.file", "%q is not a file path", t.Traces.File)
	}
}
