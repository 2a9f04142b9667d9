package tools

import (
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/sandbox"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/netguard"
)

// Options configures the built-in tools; zero fields take the defaults.
type Options struct {
	ExecTimeout   time.Duration // default 60s; a call may only lower it
	ExecMaxOutput int           // bytes of combined output kept, default 64 KiB
	ExecEnv       []string      // extra KEY=value for exec, added to a minimal environment
	// Sandbox confines exec (tools.exec.sandbox, network and limits); the
	// zero value is "auto" with the default limits.
	Sandbox       sandbox.Policy
	FetchTimeout  time.Duration // default 20s
	FetchMaxBytes int           // default 1 MiB; a call may only lower it
	// HTTPClient is web_fetch's client. Default: one that refuses loopback,
	// private and link-local addresses at dial time (package netguard),
	// except what Egress allows, and follows at most 5 redirects.
	HTTPClient *http.Client
	// Egress is the address policy of the default HTTPClient; nil refuses
	// every internal range (tools.webFetch.allowPrivate adds exceptions).
	Egress         *netguard.Policy
	ReadMaxBytes   int         // read_file cap, default 256 KiB
	ListMaxEntries int         // list_files cap, default 1000
	Logger         *zap.Logger // nil = no logging
	// Files, when set, adds send_file (SPEC §18): it attaches workspace
	// files to the reply.
	Files FileSink
	// Search, when set, adds web_search (SPEC §28); it holds the result
	// cache, so the Options of one config share it.
	Search *WebSearch
	// Extra are tools of other packages given with these (the memory
	// tools, SPEC §28), built once per config.
	Extra []agent.Tool
}

// OptionsFromConfig maps the tools section of the config to Options.
func OptionsFromConfig(c config.Tools) Options {
	o := Options{
		ExecTimeout:   time.Duration(c.Exec.TimeoutSeconds) * time.Second,
		ExecMaxOutput: c.Exec.MaxOutputBytes,
		Sandbox:       ExecSandbox(c.Exec),
		FetchTimeout:  time.Duration(c.WebFetch.TimeoutSeconds) * time.Second,
		FetchMaxBytes: c.WebFetch.MaxBytes,
	}
	// One guarded client for every registry built from these options, so
	// connections are pooled across calls.
	o.Egress = EgressPolicy(c.WebFetch)
	o.HTTPClient = o.Egress.Client(0)
	// The search service is the operator's choice, reached by the gateway
	// itself: not through the agent egress guard. Config validation has
	// checked the provider and its settings.
	o.Search, _ = NewWebSearch(c.WebSearch, nil, 0) // nil, 0: its own client and DefaultSearchTimeout
	return o
}

// ExecSandbox maps tools.exec to the sandbox policy of exec.
func ExecSandbox(c config.Exec) sandbox.Policy {
	return sandbox.Policy{Mechanism: c.Sandbox, Network: c.Network, MemoryMB: c.MemoryMB, MaxProcesses: c.MaxProcesses,
		FileSizeMB: c.FileSizeMB, CPUSeconds: c.CPUSeconds, Setting: "tools.exec.sandbox"}
}

// EgressPolicy builds the address policy of agent tools from
// tools.webFetch.allowPrivate. Config validation has checked the entries;
// should one still be malformed, the strict default is used.
func EgressPolicy(c config.WebFetch) *netguard.Policy {
	p, err := netguard.NewPolicy(c.AllowPrivate)
	if err != nil {
		p, _ = netguard.NewPolicy(nil)
	}
	return p
}

func (o Options) withDefaults() Options {
	if o.ExecTimeout <= 0 {
		o.ExecTimeout = DefaultExecTimeout
	}
	if o.Sandbox.Mechanism == "" {
		o.Sandbox.Mechanism = sandbox.Auto
	}
	if o.ExecMaxOutput <= 0 {
		o.ExecMaxOutput = DefaultExecMaxOutput
	}
	if o.FetchTimeout <= 0 {
		o.FetchTimeout = DefaultFetchTimeout
	}
	if o.FetchMaxBytes <= 0 {
		o.FetchMaxBytes = DefaultFetchMaxBytes
	}
	if o.HTTPClient == nil {
		o.HTTPClient = o.Egress.Client(0) // each call is bounded by its context
	}
	if o.ReadMaxBytes <= 0 {
		o.ReadMaxBytes = DefaultReadMaxBytes
	}
	if o.ListMaxEntries <= 0 {
		o.ListMaxEntries = DefaultListMaxEntries
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o
}

// New returns all built-in non-session tools: read_file, write_file,
// list_files, exec and web_fetch; send_file and web_search when
// configured.
func New(opts Options) []agent.Tool {
	list := []agent.Tool{
		NewReadFile(opts),
		NewWriteFile(opts),
		NewListFiles(opts),
		NewExec(opts),
		NewWebFetch(opts),
	}
	if opts.Files != nil {
		list = append(list, NewSendFile(opts.Files))
	}
	if opts.Search != nil {
		list = append(list, opts.Search.Tool())
	}
	list = append(list, opts.Extra...)
	return list
}
