package config

// Default values (SPEC §4, §5, §9, §11).
const (
	DefaultListen               = "127.0.0.1:8790"
	DefaultLogLevel             = "info"
	DefaultLogFormat            = "json"
	DefaultShutdownGraceSeconds = 10
	DefaultSessionIdleMinutes   = 30
	DefaultStateDriver          = "sqlite"
	DefaultLeaseSeconds         = 15
	DefaultMainConcurrent       = 4
	DefaultMaxIterations        = 30
	DefaultApprovalTimeout      = 300
	DefaultAgentID              = "main"

	DefaultSubagentConcurrent     = 8
	DefaultSubagentMaxDepth       = 1
	DefaultMaxChildrenPerSession  = 5
	DefaultMaxTotalSpawns         = 20
	DefaultRunTimeoutSeconds      = 300
	DefaultArchiveAfterMinutes    = 60
	DefaultSubagentMaxIterations  = 30
	DefaultThreadIdleMinutes      = 1440
	DefaultMaxResumes             = 2
	DefaultExecTimeoutSeconds     = 60
	DefaultExecMaxOutputBytes     = 64 << 10
	DefaultExecMemoryMB           = 1024
	DefaultExecMaxProcesses       = 256
	DefaultExecFileSizeMB         = 1024
	DefaultExecCPUSeconds         = 300
	DefaultWebFetchTimeoutSeconds = 20
	DefaultWebFetchMaxBytes       = 1 << 20
	DefaultMemoryScope            = "conversation"
	DefaultMemoryInjectTokens     = 500
	DefaultMemoryMaxChars         = 2000
	DefaultWebRatePerMinute       = 60
	DefaultProviderTimeoutSeconds = 120
	DefaultTurnTimeoutSeconds     = 600
	DefaultWebRateBurst           = 20
	DefaultWebMaxStreams          = 64 // channels.web.maxStreams
	DefaultServiceName            = "herald"
	DefaultSampleRatio            = 1.0
	DefaultOutboxMaxAttempts      = 20  // outbox.maxAttempts
	DefaultOutboxMaxAgeHours      = 24  // outbox.maxAgeHours
	DefaultIntakeMaxAgeMinutes    = 720 // intake.maxAgeMinutes

	// DefaultThreadContext is channels.<name>.threadContext: the earlier
	// thread messages read when the bot is first addressed mid-thread;
	// MaxThreadContext bounds it.
	DefaultThreadContext = 20
	MaxThreadContext     = 200
)

func intp(v int) *int    { return &v }
func boolp(v bool) *bool { return &v }

func setInt(p *int, v int) {
	if *p == 0 {
		*p = v
	}
}

func setIntPtr(p **int, v int) {
	if *p == nil {
		*p = intp(v)
	}
}

func setStr(p *string, v string) {
	if *p == "" {
		*p = v
	}
}

// autoProviders is the model set used when a config names no provider: the
// Anthropic API when ANTHROPIC_API_KEY is set, else OpenAI (or an
// OpenAI-compatible server at OPENAI_BASE_URL) when OPENAI_API_KEY is set,
// else the offline demo model. It returns the providers and the model ref.
func autoProviders(env func(string) (string, bool)) (map[string]Provider, string) {
	if key, ok := env("ANTHROPIC_API_KEY"); ok && key != "" {
		const model = "claude-sonnet-4-20250514"
		return map[string]Provider{"anthropic": {
			API:    "anthropic",
			APIKey: Secret(key),
			Models: []Model{{ID: model, Cost: &Cost{Input: 3, Output: 15}}},
		}}, "anthropic/" + model
	}
	if key, ok := env("OPENAI_API_KEY"); ok && key != "" {
		p := Provider{API: "openai", APIKey: Secret(key)}
		model := "gpt-4o"
		if m, ok := env("OPENAI_MODEL"); ok && m != "" {
			model = m
		}
		if u, ok := env("OPENAI_BASE_URL"); ok && u != "" {
			p.API = "openai-compatible"
			p.BaseURL = u
		}
		m := Model{ID: model}
		if model == "gpt-4o" && p.API == "openai" {
			m.Cost = &Cost{Input: 2.5, Output: 10}
		}
		p.Models = []Model{m}
		return map[string]Provider{"openai": p}, "openai/" + model
	}
	return map[string]Provider{"demo": {API: "demo", Models: []Model{{ID: "demo"}}}}, "demo/demo"
}

// Default is the configuration used when no config file exists: the web chat
// on 127.0.0.1:8790 and one agent "main" on the model autoProviders picks.
func Default(env func(string) (string, bool)) *Config {
	if env == nil {
		env = osLookupEnv
	}
	cfg := &Config{}
	var ref string
	cfg.Models.Providers, ref = autoProviders(env)
	cfg.Agents.Defaults.Model = Ref(ref)
	cfg.ApplyDefaults(env)
	cfg.src = &source{file: "(built-in default config)"}
	return cfg
}

var knownAPIs = []string{"anthropic", "openai", "openai-compatible", "demo"}

// ApplyDefaults fills every unset value; Load and Default call it, and tests
// that build a Config by hand may too. Plain numbers that are 0 take their
// default; pointer fields take it when nil. env (nil = the process
// environment) picks the model when no provider is configured.
func (c *Config) ApplyDefaults(env func(string) (string, bool)) {
	if env == nil {
		env = osLookupEnv
	}
	g := &c.Gateway
	setStr(&g.HTTP.Listen, DefaultListen)
	setStr(&g.LogLevel, DefaultLogLevel)
	setStr(&g.LogFormat, DefaultLogFormat)
	setInt(&g.ShutdownGraceSeconds, DefaultShutdownGraceSeconds)
	setInt(&c.Session.IdleMinutes, DefaultSessionIdleMinutes)
	setStr(&c.State.Driver, DefaultStateDriver)
	setInt(&c.State.LeaseSeconds, DefaultLeaseSeconds)
	setStr(&c.Telemetry.ServiceName, DefaultServiceName)
	setInt(&c.Outbox.MaxAttempts, DefaultOutboxMaxAttempts)
	setInt(&c.Outbox.MaxAgeHours, DefaultOutboxMaxAgeHours)
	c.Attachments.applyDefaults()

	if len(c.Models.Providers) == 0 {
		var ref string
		c.Models.Providers, ref = autoProviders(env)
		setStr(&c.Agents.Defaults.Model.Primary, ref)
	}
	for id, p := range c.Models.Providers {
		if p.API == "" && contains(knownAPIs, id) {
			p.API = id
		}
		if p.API == "demo" && len(p.Models) == 0 {
			p.Models = []Model{{ID: "demo"}}
		}
		setInt(&p.TimeoutSeconds, DefaultProviderTimeoutSeconds)
		c.Models.Providers[id] = p
	}
	if c.Agents.Defaults.Model.Primary == "" && len(c.Agents.Defaults.Model.Fallbacks) == 0 {
		// The only configured model needs no naming.
		var refs []string
		for id, p := range c.Models.Providers {
			for _, m := range p.Models {
				refs = append(refs, id+"/"+m.ID)
			}
		}
		if len(refs) == 1 {
			c.Agents.Defaults.Model = Ref(refs[0])
		}
	}

	d := &c.Agents.Defaults
	setInt(&d.MaxConcurrent, DefaultMainConcurrent)
	setInt(&d.MaxIterations, DefaultMaxIterations)
	s := &d.Subagents
	setIntPtr(&s.MaxConcurrent, DefaultSubagentConcurrent)
	setIntPtr(&s.MaxDepth, DefaultSubagentMaxDepth)
	setIntPtr(&s.MaxChildrenPerSession, DefaultMaxChildrenPerSession)
	setIntPtr(&s.MaxTotalSpawns, DefaultMaxTotalSpawns)
	setIntPtr(&s.RunTimeoutSeconds, DefaultRunTimeoutSeconds)
	setIntPtr(&s.ArchiveAfterMinutes, DefaultArchiveAfterMinutes)
	setIntPtr(&s.MaxIterations, DefaultSubagentMaxIterations)
	setIntPtr(&s.ThreadIdleMinutes, DefaultThreadIdleMinutes)
	setIntPtr(&s.MaxResumes, DefaultMaxResumes)
	if len(c.Agents.List) == 0 {
		c.Agents.List = []Agent{{ID: DefaultAgentID}}
	}

	setInt(&c.Tools.Exec.TimeoutSeconds, DefaultExecTimeoutSeconds)
	setInt(&c.Tools.Exec.MaxOutputBytes, DefaultExecMaxOutputBytes)
	if c.Tools.Exec.Sandbox == "" {
		c.Tools.Exec.Sandbox = "auto"
	}
	setInt(&c.Tools.Exec.MemoryMB, DefaultExecMemoryMB)
	setInt(&c.Tools.Exec.MaxProcesses, DefaultExecMaxProcesses)
	setInt(&c.Tools.Exec.FileSizeMB, DefaultExecFileSizeMB)
	setInt(&c.Tools.Exec.CPUSeconds, DefaultExecCPUSeconds)
	setInt(&c.Tools.WebFetch.TimeoutSeconds, DefaultWebFetchTimeoutSeconds)
	setInt(&c.Tools.WebFetch.MaxBytes, DefaultWebFetchMaxBytes)
	setStr(&c.Memory.Scope, DefaultMemoryScope)
	setInt(&c.Memory.InjectTokens, DefaultMemoryInjectTokens)
	setInt(&c.Memory.MaxChars, DefaultMemoryMaxChars)
	setInt(&c.Channels.Web.RateLimit.PerMinute, DefaultWebRatePerMinute)
	setInt(&c.Agents.Defaults.TurnTimeoutSeconds, DefaultTurnTimeoutSeconds)
	setInt(&c.Channels.Web.RateLimit.Burst, DefaultWebRateBurst)
	setInt(&c.Channels.Web.MaxStreams, DefaultWebMaxStreams)

	sec := &c.Security
	setInt(&sec.ApprovalTimeoutSeconds, DefaultApprovalTimeout)
	tp := &sec.ToolPolicy
	setStr(&tp.Default, "allow")
	// SPEC §5: exec is supervised unless configured, and never looser than
	// the default policy.
	_, toolSet := tp.Tools["exec"]
	_, groupSet := tp.Groups["exec"]
	if !toolSet && !groupSet && tp.Default == "allow" {
		if tp.Tools == nil {
			tp.Tools = map[string]string{}
		}
		tp.Tools["exec"] = "supervised"
	}

	c.applyChannelDefaults()
	c.applyMCPDefaults()
	c.applyScheduleDefaults()
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
