// Package config loads Herald's JSON5 configuration: strict decoding (unknown
// keys are errors), ${ENV} substitution, defaults, and validation that reports
// every problem with its key path and line:column.
//
// It must not import any other Herald package. It knows no chat channel by
// name but the web chat: each channel module registers its own section
// (RegisterChannel, through channels.Register).
package config

import (
	"slices"
	"time"
)

// Secret is a credential. It never prints its value: use Value() where the
// real value is needed.
type Secret string

// String redacts the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "***"
}

// GoString redacts the secret in %#v.
func (s Secret) GoString() string { return s.String() }

// MarshalText redacts the secret when encoded (logs, JSON dumps).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Value returns the real secret.
func (s Secret) Value() string { return string(s) }

// Config is the whole configuration file (SPEC §11).
type Config struct {
	Gateway  Gateway   `json:"gateway"`
	Models   Models    `json:"models"`
	Agents   Agents    `json:"agents"`
	Bindings []Binding `json:"bindings"`
	Tools    Tools     `json:"tools"`
	Security Security  `json:"security"`
	Channels Channels  `json:"channels"`
	MCP      MCP       `json:"mcp"`
	Session  Session   `json:"session"`
	State    State     `json:"state"`
	Budgets  Budgets   `json:"budgets"`
	// Schedules are recurring and one-off runs (SPEC §19, schedules.go).
	Schedules Schedules `json:"schedules"`
	// Telemetry configures OpenTelemetry traces (SPEC §22).
	Telemetry Telemetry `json:"telemetry"`
	// Attachments configures files, images and voice (SPEC §18).
	Attachments Attachments `json:"attachments"`
	// Memory configures the memory tools (SPEC §28).
	Memory Memory `json:"memory"`
	// Skills configures where skills are found (SPEC §28).
	Skills Skills `json:"skills"`
	// Outbox and Intake bound how long a message waits (SPEC §27).
	Outbox Outbox `json:"outbox"`
	Intake Intake `json:"intake"`

	src *source // where the config came from and where each key path is; never secrets
}

// Session configures requester sessions in memory.
type Session struct {
	// IdleMinutes: a conversation idle this long leaves memory (its
	// transcript file is closed) and is loaded again on its next message;
	// default 30.
	IdleMinutes int `json:"idleMinutes"`
}

// Telemetry configures traces (SPEC §22). Tracing is off (a no-op
// tracer) unless otlp.endpoint or traces.file is set.
type Telemetry struct {
	OTLP   OTLP   `json:"otlp"`
	Traces Traces `json:"traces"`
	// ServiceName is the service.name of every span; default "herald".
	ServiceName string `json:"serviceName"`
	// SampleRatio is the share of inbound messages traced, 0..1; default
	// 1. A message's spans follow its first span's decision (parent-based).
	SampleRatio *float64 `json:"sampleRatio"`
	// RecordContent puts message text, tool arguments and results and
	// model output in span attributes; off by default.
	RecordContent bool `json:"recordContent"`
}

// OTLP is an OpenTelemetry collector reached by OTLP over HTTP (protobuf).
type OTLP struct {
	// Endpoint is the collector's base URL (http://127.0.0.1:4318); spans
	// are posted to <endpoint>/v1/traces. "" = no OTLP export.
	Endpoint string `json:"endpoint"`
	// Headers are sent with every export (an API key); never logged.
	Headers map[string]Secret `json:"headers"`
}

// Traces is the file form of the traces.
type Traces struct {
	// File receives every span as one JSON line ("" = none); a relative
	// path is relative to the state dir.
	File string `json:"file"`
}

// TracingEnabled reports whether traces are exported anywhere.
func (t Telemetry) TracingEnabled() bool { return t.OTLP.Endpoint != "" || t.Traces.File != "" }

// Ratio is SampleRatio with its default applied.
func (t Telemetry) Ratio() float64 {
	if t.SampleRatio == nil {
		return DefaultSampleRatio
	}
	return *t.SampleRatio
}

// State chooses where Herald's state lives (SPEC §14).
type State struct {
	// Driver: "sqlite" (default: herald.db in the state dir, one process)
	// or "postgres" (URL; any number of replicas may share it).
	Driver string `json:"driver"`
	// URL: the PostgreSQL connection URL (postgres://user:pass@host/db or
	// a key=value string); a secret, usually "${HERALD_DATABASE_URL}".
	URL Secret `json:"url"`
	// LeaseSeconds: how long a replica's leases last without a heartbeat;
	// a replica that dies loses them after this long. Default 15.
	LeaseSeconds int `json:"leaseSeconds"`
}

// Gateway configures the daemon itself.
type Gateway struct {
	HTTP                 HTTP   `json:"http"`
	LogLevel             string `json:"logLevel"`             // debug|info|warn|error; default info
	LogFormat            string `json:"logFormat"`            // json|console; default json
	ShutdownGraceSeconds int    `json:"shutdownGraceSeconds"` // default 10
	// ReplicaID names this process among the replicas sharing a PostgreSQL
	// state (leases, logs); default <hostname>-<pid>.
	ReplicaID string `json:"replicaId"`
	// Admin guards the operator's console (SPEC §27).
	Admin Admin `json:"admin"`
}

// Admin configures the operator's console at /admin (SPEC §27).
type Admin struct {
	// Token is required off loopback (a non-loopback listener, or
	// behindProxy); once set, every console request needs it, loopback
	// included.
	Token Secret `json:"token"`
}

// Outbox bounds the retries of an outbound message (SPEC §27): past
// either limit it is a dead letter.
type Outbox struct {
	MaxAttempts int `json:"maxAttempts"` // failed attempts; default 20
	MaxAgeHours int `json:"maxAgeHours"` // since it was queued (or retried); default 24
}

// Intake bounds how old an owed message may be when its turn could start
// (SPEC §27).
type Intake struct {
	// MaxAgeMinutes: an owed message older than this is not run, its
	// conversation is told. 0 = never skip; unset = 720.
	MaxAgeMinutes *int `json:"maxAgeMinutes"`
}

// MaxAge is intake.maxAgeMinutes as a duration (0 = never skip).
func (i Intake) MaxAge() time.Duration {
	if i.MaxAgeMinutes == nil {
		return DefaultIntakeMaxAgeMinutes * time.Minute
	}
	return time.Duration(*i.MaxAgeMinutes) * time.Minute
}

// HTTP configures the gateway's HTTP listener.
type HTTP struct {
	Listen string `json:"listen"` // default 127.0.0.1:8790
	// BehindProxy: a reverse proxy forwards the world to the listener, so
	// it counts as not loopback even on 127.0.0.1 (SPEC §17 off-loopback
	// rules: web token, client secrets, no token in URLs).
	BehindProxy bool `json:"behindProxy"`
}

// Models lists the model providers.
type Models struct {
	Providers map[string]Provider `json:"providers"`
}

// Provider is one model API.
type Provider struct {
	API     string `json:"api"` // anthropic|openai|openai-compatible|demo
	BaseURL string `json:"baseUrl"`
	APIKey  Secret `json:"apiKey"`
	// APIKeys are several keys used in turn (SPEC §20); set apiKey or
	// apiKeys, not both.
	APIKeys []Secret `json:"apiKeys"`
	Models  []Model  `json:"models"`
	// TimeoutSeconds bounds each model call to this provider (default 120).
	TimeoutSeconds int `json:"timeoutSeconds"`
	// MaxConnections bounds the open connections to this provider; further
	// calls wait for a free one. 0: a quarter of the process's open-file
	// limit.
	MaxConnections int `json:"maxConnections"`
}

// Model is one model of a provider.
type Model struct {
	ID            string `json:"id"`
	ContextWindow int    `json:"contextWindow"`
	MaxTokens     int    `json:"maxTokens"`
	Cost          *Cost  `json:"cost"`
	// Input lists what the model takes: "text", "image" (SPEC §18). Unset:
	// the known vision families take images.
	Input []string `json:"input"`
}

// Cost is USD per 1M tokens.
type Cost struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheRead  float64 `json:"cacheRead"`
	CacheWrite float64 `json:"cacheWrite"`
	// PerMinute prices audio a transcription model hears (USD a minute).
	PerMinute float64 `json:"perMinute"`
}

// Agents holds the defaults and the list of agents.
type Agents struct {
	Defaults AgentDefaults `json:"defaults"`
	List     []Agent       `json:"list"`
}

// AgentDefaults apply to every agent unless it overrides them.
type AgentDefaults struct {
	Model         ModelSetting `json:"model"`         // provider/model, or {primary, fallbacks}
	Thinking      string       `json:"thinking"`      // off|low|medium|high
	Workspace     string       `json:"workspace"`     // default <stateDir>/workspace/<agentId>
	MaxConcurrent int          `json:"maxConcurrent"` // the main lane; default 4
	MaxQueued     int          `json:"maxQueued"`     // turns waiting for the main lane; past it "busy"; default 512
	MaxIterations int          `json:"maxIterations"` // model turns per top-level turn; default 30
	// TurnTimeoutSeconds bounds a top-level turn (default 600).
	TurnTimeoutSeconds int       `json:"turnTimeoutSeconds"`
	Subagents          Subagents `json:"subagents"`
}

// Subagents are the sub-agent limits (SPEC §4). Pointers tell "unset" from 0
// where 0 means something (no timeout, never archive). After Load, the
// defaults' fields are all set; an agent's are set only where it overrides.
type Subagents struct {
	MaxConcurrent         *int         `json:"maxConcurrent"`         // default 8 (defaults only: the lane is shared)
	MaxDepth              *int         `json:"maxDepth"`              // default 1
	MaxChildrenPerSession *int         `json:"maxChildrenPerSession"` // default 5
	MaxTotalSpawns        *int         `json:"maxTotalSpawns"`        // default 20
	RunTimeoutSeconds     *int         `json:"runTimeoutSeconds"`     // default 300; 0 = none
	ArchiveAfterMinutes   *int         `json:"archiveAfterMinutes"`   // default 60; 0 = never
	MaxIterations         *int         `json:"maxIterations"`         // default 30
	ThreadIdleMinutes     *int         `json:"threadIdleMinutes"`     // default 1440: a thread binding ends this long after its last message
	MaxResumes            *int         `json:"maxResumes"`            // default 2 (SPEC §25)
	GroupTimeoutSeconds   *int         `json:"groupTimeoutSeconds"`   // unset or 0: the longest child's runTimeoutSeconds (SPEC §23)
	Model                 ModelSetting `json:"model"`
	Thinking              string       `json:"thinking"`
	AllowAgents           []string     `json:"allowAgents"` // ["*"] = any; default: own id only
}

// Agent is one configured persona.
type Agent struct {
	ID       string       `json:"id"`
	Name     string       `json:"name"`
	Default  bool         `json:"default"` // the agent unbound messages go to; default: the first
	Model    ModelSetting `json:"model"`
	Thinking string       `json:"thinking"`
	// Models are the models /model may set for its conversations (nil =
	// its chain); AllowUnpriced lets it set one without cost.
	Models        []string  `json:"models"`
	AllowUnpriced bool      `json:"allowUnpriced"`
	Workspace     string    `json:"workspace"`
	SystemPrompt  string    `json:"systemPrompt"`
	AllowedTools  []string  `json:"allowedTools"` // empty = all
	MaxIterations int       `json:"maxIterations"`
	Subagents     Subagents `json:"subagents"`
	MCPServers    []string  `json:"mcpServers"` // MCP servers whose tools it gets; nil = every server
	// Runtime, if set, makes the agent an external coding agent (SPEC §26).
	Runtime *Runtime `json:"runtime"`
}

// Binding routes inbound messages matching Match to an agent.
type Binding struct {
	AgentID string `json:"agentId"`
	Match   Match  `json:"match"`
}

// Match selects inbound messages; empty fields match anything.
type Match struct {
	Channel   string `json:"channel"`
	AccountID string `json:"accountId"`
	ChatID    string `json:"chatId"`
	ChatType  string `json:"chatType"` // dm|group
}

// Tools configures tool behaviour.
type Tools struct {
	Subagents SubagentTools `json:"subagents"`
	Exec      Exec          `json:"exec"`
	WebFetch  WebFetch      `json:"webFetch"`
	WebSearch WebSearch     `json:"webSearch"`
}

// WebSearch configures the web_search tool (SPEC §28); no provider = no tool.
type WebSearch struct {
	// Provider: brave | tavily | searxng; "" = no web_search tool.
	Provider string `json:"provider"`
	// APIKey: Brave's X-Subscription-Token or Tavily's key; searxng needs none.
	APIKey Secret `json:"apiKey"`
	// BaseURL: the provider's API root (required for searxng); Brave's and
	// Tavily's public APIs by default.
	BaseURL string `json:"baseUrl"`
}

// Memory configures the memory tools (SPEC §28).
type Memory struct {
	// Scope: "conversation" (default: a memory is seen by the conversation
	// that wrote it and its sub-agents) or "agent" (every conversation of
	// the agent). Never across agents.
	Scope string `json:"scope"`
	// InjectTokens bounds the pinned memories put in the system prompt
	// (default 500; estimated at 4 characters a token).
	InjectTokens int `json:"injectTokens"`
	// MaxChars is the longest memory memory_write accepts (default 2000).
	MaxChars int `json:"maxChars"`
}

// Skills configures where skills (folders with a SKILL.md) are found
// besides <agent workspace>/skills/.
type Skills struct {
	Paths []string `json:"paths"`
}

// SubagentTools filters the tools sub-agents get.
type SubagentTools struct {
	Tools AllowDeny `json:"tools"`
}

// AllowDeny is a tool filter: deny always wins; a non-empty Allow makes the
// set allow-only.
type AllowDeny struct {
	Allow []string `json:"allow"`
	Deny  []string `json:"deny"`
}

// Exec configures the exec tool.
type Exec struct {
	TimeoutSeconds int `json:"timeoutSeconds"` // default 60
	MaxOutputBytes int `json:"maxOutputBytes"` // default 65536
	// Sandbox confines commands (SPEC §17): auto (default: bwrap, else
	// Landlock, else exec is refused) | bwrap | landlock | off.
	Sandbox      string `json:"sandbox"`
	Network      bool   `json:"network"`      // default false: no network inside the sandbox
	MemoryMB     int    `json:"memoryMB"`     // default 1024, per process (data segment)
	MaxProcesses int    `json:"maxProcesses"` // default 256
	FileSizeMB   int    `json:"fileSizeMB"`   // default 1024, largest file written
	CPUSeconds   int    `json:"cpuSeconds"`   // default 300, CPU time per process
}

// WebFetch configures the web_fetch tool.
type WebFetch struct {
	TimeoutSeconds int `json:"timeoutSeconds"` // default 20
	MaxBytes       int `json:"maxBytes"`       // default 1 MiB
	// AllowPrivate lists hosts or CIDRs agents may reach although they are
	// loopback, private or link-local (refused by default).
	AllowPrivate []string `json:"allowPrivate"`
}

// Security holds the tool policy and approvals.
type Security struct {
	ToolPolicy             ToolPolicy `json:"toolPolicy"`
	ApprovalTimeoutSeconds int        `json:"approvalTimeoutSeconds"` // default 300
	// Approvers lists, per channel (slack, telegram, matrix), the user ids
	// that may answer any approval request of that channel, besides the
	// person whose message led to it (SPEC §17).
	Approvers map[string][]string `json:"approvers"`
}

// IsApprover reports whether userID is a listed approver of channel.
func (s Security) IsApprover(channel, userID string) bool {
	return userID != "" && slices.Contains(s.Approvers[channel], userID)
}

// ToolPolicy maps tools to allow|supervised|deny; the most specific entry wins
// (tools > groups > default).
type ToolPolicy struct {
	Default string            `json:"default"` // default "allow"
	Groups  map[string]string `json:"groups"`  // sessions|files|exec|web|mcp
	Tools   map[string]string `json:"tools"`
}

// Group configures one group chat.
type Group struct {
	RequireMention *bool    `json:"requireMention"` // default true
	AllowFrom      []string `json:"allowFrom"`
}

// Access is the allowlist part every chat channel shares.
type Access struct {
	AllowFrom   []string         `json:"allowFrom"`   // user ids; empty = anyone in DMs
	GroupPolicy string           `json:"groupPolicy"` // allowlist (default) | open | disabled
	Groups      map[string]Group `json:"groups"`
}

// Web configures the local web chat.
type Web struct {
	Enabled   *bool  `json:"enabled"`   // default true
	Streaming string `json:"streaming"` // edit (default) | off: SSE delta events while the reply is written (SPEC §16)
	Token     Secret `json:"token"`     // required when gateway.http.listen is not loopback
	// RateLimit bounds each web client's posts (default 60 a minute, 20 at
	// once); off loopback each remote address's too.
	RateLimit WebRateLimit `json:"rateLimit"`
	// MaxStreams caps the open /api/events streams (default 64; 8 per client).
	MaxStreams int `json:"maxStreams"`
}

// WebRateLimit is channels.web.rateLimit.
type WebRateLimit struct {
	PerMinute int `json:"perMinute"` // default 60; negative = no limit
	Burst     int `json:"burst"`     // default 20
}

// ChannelStreaming is channels.<name>.streaming: "edit" (the default) or "off".
func (c *Config) ChannelStreaming(name string) string {
	var v string
	if name == "web" {
		v = c.Channels.Web.Streaming
	} else if o := c.Channels.Options(name); o != nil {
		v = o.Common().Streaming
	}
	if v == "" {
		return "edit"
	}
	return v
}
