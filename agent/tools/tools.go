package tools

import (
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/config"
)

// Options configures the built-in tools; zero fields take the defaults.
type Options struct {
	ExecTimeout    time.Duration // default 60s; a call may only lower it
	ExecMaxOutput  int           // bytes of combined output kept, default 64 KiB
	ExecEnv        []string      // extra KEY=value for exec, added to a minimal environment
	FetchTimeout   time.Duration // default 20s
	FetchMaxBytes  int           // default 1 MiB; a call may only lower it
	HTTPClient     *http.Client  // default: a plain client (redirects followed)
	ReadMaxBytes   int           // read_file cap, default 256 KiB
	ListMaxEntries int           // list_files cap, default 1000
	Logger         *zap.Logger   // nil = no logging
}

// OptionsFromConfig maps the tools section of the config to Options.
func OptionsFromConfig(c config.Tools) Options {
	return Options{
		ExecTimeout:   time.Duration(c.Exec.TimeoutSeconds) * time.Second,
		ExecMaxOutput: c.Exec.MaxOutputBytes,
		FetchTimeout:  time.Duration(c.WebFetch.TimeoutSeconds) * time.Second,
		FetchMaxBytes: c.WebFetch.MaxBytes,
	}
}

func (o Options) withDefaults() Options {
	if o.ExecTimeout <= 0 {
		o.ExecTimeout = DefaultExecTimeout
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
		o.HTTPClient = &http.Client{}
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
// list_files, exec and web_fetch.
func New(opts Options) []agent.Tool {
	return []agent.Tool{
		NewReadFile(opts),
		NewWriteFile(opts),
		NewListFiles(opts),
		NewExec(opts),
		NewWebFetch(opts),
	}
}
