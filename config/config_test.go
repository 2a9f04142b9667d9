package config

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/bad/*.golden")

// mapEnv is an env lookup over a fixed map.
func mapEnv(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

var noEnv = mapEnv(nil)

// TestBadConfigs opens each testdata/bad/<name>.json5 as the commands do
// (load and validate: every problem at once) and compares the full error
// output with <name>.golden.
func TestBadConfigs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "bad", "*.json5"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 12 {
		t.Fatalf("only %d bad configs", len(files))
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json5")
		t.Run(name, func(t *testing.T) {
			_, _, err := Open(file, noEnv)
			if err == nil {
				t.Fatal("no error for a bad config")
			}
			var probs *Problems
			if !errors.As(err, &probs) {
				t.Fatalf("error is %T, want *Problems: %v", err, err)
			}
			got := err.Error() + "\n"
			golden := strings.TrimSuffix(file, ".json5") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./config -update)", err)
			}
			if got != string(want) {
				t.Errorf("output differs from %s\n--- got\n%s--- want\n%s", golden, got, want)
			}
		})
	}
}

var fullEnv = map[string]string{
	"ANTHROPIC_API_KEY":   "sk-ant-SECRET-1",
	"OPENAI_API_KEY":      "sk-openai-SECRET-2",
	"SLACK_BOT_TOKEN":     "xoxb-SECRET-3",
	"SLACK_APP_TOKEN":     "xapp-SECRET-4",
	"TELEGRAM_BOT_TOKEN":  "123:SECRET-5",
	"MATRIX_ACCESS_TOKEN": "syt_SECRET-6",
	"HERALD_WEB_TOKEN":    "web-SECRET-7",
}

func loadFull(t *testing.T) *Config {
	t.Helper()
	cfg, err := Load(filepath.Join("testdata", "good", "full.json5"), mapEnv(fullEnv))
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("validate:\n%v", err)
	}
	return cfg
}

func TestFullConfigLoads(t *testing.T) {
	cfg := loadFull(t)

	if got := cfg.Gateway.HTTP.Listen; got != "127.0.0.1:8790" {
		t.Errorf("listen = %q", got)
	}
	if got := cfg.Gateway.LogFormat; got != "json" {
		t.Errorf("logFormat default = %q", got)
	}
	if got := cfg.Models.Providers["anthropic"].APIKey.Value(); got != fullEnv["ANTHROPIC_API_KEY"] {
		t.Errorf("anthropic apiKey not substituted: %q", got)
	}
	if got := chOpt(t, cfg, "slack", "AppToken").(Secret).Value(); got != fullEnv["SLACK_APP_TOKEN"] {
		t.Errorf("slack appToken = %q", got)
	}
	if got := chOpt(t, cfg, "slack", "Mode"); got != "socket" {
		t.Errorf("slack mode default = %q", got)
	}
	if !cfg.WebEnabled() {
		t.Error("web chat disabled")
	}
	if got := cfg.DefaultAgentID(); got != "main" {
		t.Errorf("default agent = %q", got)
	}
	if got := cfg.AgentModel("researcher"); got != "openai/gpt-4o" {
		t.Errorf("researcher model = %q", got)
	}
	if got := cfg.AgentModel("main"); got != "anthropic/claude-sonnet-4-20250514" {
		t.Errorf("main model = %q", got)
	}
	if got := cfg.AgentMaxIterations("researcher"); got != 10 {
		t.Errorf("researcher maxIterations = %d", got)
	}
	pid, p, m, ok := cfg.LookupModel("anthropic/claude-sonnet-4-20250514")
	if !ok || pid != "anthropic" || p.API != "anthropic" || m.Cost == nil || m.Cost.Output != 15 {
		t.Errorf("LookupModel = %q %+v %+v %v", pid, p, m, ok)
	}
	if len(cfg.Bindings) != 1 || cfg.Bindings[0].Match.Channel != "slack" {
		t.Errorf("bindings = %+v", cfg.Bindings)
	}
	if got := cfg.Tools.Subagents.Tools.Deny; !reflect.DeepEqual(got, []string{"exec"}) {
		t.Errorf("subagent deny = %v", got)
	}
	if got := cfg.Security.ToolPolicy.Tools["delegate"]; got != "supervised" {
		t.Errorf("delegate policy = %q", got)
	}
	if got := cfg.Security.ToolPolicy.Tools["exec"]; got != "supervised" {
		t.Errorf("exec policy default = %q, want supervised", got)
	}
	l := cfg.SubagentLimits("main")
	want := Limits{MaxConcurrent: 8, MaxDepth: 1, MaxChildrenPerSession: 5, MaxTotalSpawns: 20,
		RunTimeoutSeconds: 300, ArchiveAfterMinutes: 60, MaxIterations: 30, ThreadIdleMinutes: 1440, MaxResumes: 2,
		Model: "anthropic/claude-3-5-haiku-latest", AllowAgents: []string{"researcher"}}
	if !reflect.DeepEqual(l, want) {
		t.Errorf("SubagentLimits(main) =\n%+v\nwant\n%+v", l, want)
	}
	if got := cfg.SubagentLimits("researcher").AllowAgents; !reflect.DeepEqual(got, []string{"researcher"}) {
		t.Errorf("researcher allowAgents = %v, want its own id", got)
	}
}

// TestSpecExampleLoads loads SPEC §11's example verbatim: it decodes, and
// Validate points at the two model refs the example leaves open.
func TestSpecExampleLoads(t *testing.T) {
	cfg, err := Load(filepath.Join("testdata", "good", "spec_example.json5"), mapEnv(fullEnv))
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	err = cfg.Validate()
	var probs *Problems
	if !errors.As(err, &probs) {
		t.Fatalf("validate = %v, want problems for the placeholder models", err)
	}
	var paths []string
	for _, p := range probs.List {
		paths = append(paths, p.Path)
	}
	want := []string{"agents.defaults.subagents.model", "agents.list[1].model"}
	if !reflect.DeepEqual(paths, want) {
		t.Errorf("problem paths = %v, want %v\n%v", paths, want, err)
	}
}

func TestSecretsNeverPrinted(t *testing.T) {
	cfg := loadFull(t)
	// Fill every secret, including those the file leaves empty.
	setChOpt(t, cfg, "slack", "SigningSecret", "signing-SECRET-8")
	setChOpt(t, cfg, "telegram", "WebhookSecret", "hook-SECRET-9")
	setChOpt(t, cfg, "matrix", "Password", "pw-SECRET-10")
	cfg.Channels.Web.Token = "web-SECRET-11"

	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out := fmt.Sprintf("%v %+v %#v %v %+v %#v %s", cfg, cfg, cfg, *cfg, *cfg, *cfg, js)
	out += fmt.Sprintf("%v %+v %#v", cfg.Models, cfg.Channels, cfg.Models.Providers)
	if !strings.Contains(out, "***") {
		t.Fatal("no redaction marker in output; test is not looking at the secrets")
	}
	if strings.Contains(out, "SECRET") {
		i := strings.Index(out, "SECRET")
		t.Errorf("a secret leaked: …%s…", out[max(0, i-40):min(len(out), i+20)])
	}
}

func TestMissingEnvInDisabledChannelIsNotAnError(t *testing.T) {
	src := `{ channels: { telegram: { botToken: "${NOPE}" }, matrix: { enabled: false, accessToken: "${NOPE2}" } } }`
	cfg, err := Parse("x.json5", []byte(src), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// Enabling it makes the same variable an error naming it.
	src = `{ channels: { telegram: { enabled: true, botToken: "${NOPE}" } } }`
	_, err = Parse("x.json5", []byte(src), noEnv)
	if err == nil || !strings.Contains(err.Error(), "x.json5:1:42: channels.telegram.botToken: environment variable NOPE is not set") {
		t.Fatalf("err = %v", err)
	}
}

func TestExpandEnv(t *testing.T) {
	env := mapEnv(map[string]string{"A": "alpha", "EMPTY": ""})
	tests := []struct {
		in, want string
		missing  []string
		err      bool
	}{
		{"plain", "plain", nil, false},
		{"${A}", "alpha", nil, false},
		{"x-${A}-${A}", "x-alpha-alpha", nil, false},
		{"${EMPTY}", "", nil, false},
		{"${B}", "", []string{"B"}, false},
		{"${B:-fallback}", "fallback", nil, false},
		{"${A:-fallback}", "alpha", nil, false},
		{"$${A}", "${A}", nil, false},
		{"cost $5", "cost $5", nil, false},
		{"${A", "", nil, true},
		{"${1X}", "", nil, true},
		{"${}", "", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, missing, err := expandEnv(tt.in, env)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v", err)
			}
			if err == nil && (got != tt.want || !reflect.DeepEqual(missing, tt.missing)) {
				t.Errorf("got %q %v, want %q %v", got, missing, tt.want, tt.missing)
			}
		})
	}
}

func TestPositions(t *testing.T) {
	src := "{\n" +
		"  // comment: {not a key}\n" +
		"  /* block\n     comment */ 'single': 'it\\'s',\n" +
		"  unquoted: [1, 0x10, +2, .5, 'a',],\n" +
		"  \"déjà\": { $x_1: null, },\n" +
		"  \"-100\": { \"a.b\": true },\n" +
		"}\n"
	root, err := parseJSON5([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Pos{}
	indexPositions(root, "", newLineIndex([]byte(src)), got)
	want := map[string]Pos{
		"single":           {4, 17},
		"unquoted":         {5, 3},
		"unquoted[0]":      {5, 14},
		"unquoted[1]":      {5, 17},
		"unquoted[4]":      {5, 31},
		`["déjà"]`:         {6, 3},
		`["déjà"]["$x_1"]`: {6, 13},
		`["-100"]`:         {7, 3},
		`["-100"]["a.b"]`:  {7, 13},
	}
	for path, w := range want {
		if got[path] != w {
			t.Errorf("%s at %v, want %v", path, got[path], w)
		}
	}
	if len(got) != 11 {
		t.Errorf("indexed %d paths: %v", len(got), got)
	}
}

func TestParentPath(t *testing.T) {
	for in, want := range map[string]string{
		"a.b.c":             "a.b",
		"a[3]":              "a",
		`a["x.y"]`:          "a",
		`a["x"].b`:          `a["x"]`,
		"agents.list[1].id": "agents.list[1]",
		"a":                 "",
	} {
		if got := parentPath(in); got != want {
			t.Errorf("parentPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDefault(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		model    string
		api      string
		baseURL  string
		withCost bool
	}{
		{"no keys", nil, "demo/demo", "demo", "", false},
		{"anthropic", map[string]string{"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "o"}, "anthropic/claude-sonnet-4-20250514", "anthropic", "", true},
		{"openai", map[string]string{"OPENAI_API_KEY": "o"}, "openai/gpt-4o", "openai", "", true},
		{"openai compatible", map[string]string{"OPENAI_API_KEY": "o", "OPENAI_BASE_URL": "http://127.0.0.1:11434/v1", "OPENAI_MODEL": "llama3"}, "openai/llama3", "openai-compatible", "http://127.0.0.1:11434/v1", false},
		{"empty key is unset", map[string]string{"ANTHROPIC_API_KEY": ""}, "demo/demo", "demo", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Default(mapEnv(tt.env))
			if err := cfg.Validate(); err != nil {
				t.Fatalf("default config invalid: %v", err)
			}
			if got := cfg.AgentModel(cfg.DefaultAgentID()); got != tt.model {
				t.Errorf("model = %q, want %q", got, tt.model)
			}
			_, p, m, ok := cfg.LookupModel(tt.model)
			if !ok || p.API != tt.api || p.BaseURL != tt.baseURL || (m.Cost != nil) != tt.withCost {
				t.Errorf("provider = %+v model %+v ok=%v", p, m, ok)
			}
			if cfg.DefaultAgentID() != "main" || len(cfg.Agents.List) != 1 || !cfg.WebEnabled() {
				t.Errorf("agents %+v web %v", cfg.Agents.List, cfg.WebEnabled())
			}
		})
	}
}

func TestDefaultsApplied(t *testing.T) {
	cfg, err := Parse("min.json5", []byte(`{ channels: { telegram: { groups: { "-1": {} } } } }`), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"listen", cfg.Gateway.HTTP.Listen, "127.0.0.1:8790"},
		{"logLevel", cfg.Gateway.LogLevel, "info"},
		{"grace", cfg.Gateway.ShutdownGraceSeconds, 10},
		{"main lane", cfg.Agents.Defaults.MaxConcurrent, 4},
		{"maxIterations", cfg.Agents.Defaults.MaxIterations, 30},
		{"approval", cfg.Security.ApprovalTimeoutSeconds, 300},
		{"policy default", cfg.Security.ToolPolicy.Default, "allow"},
		{"exec policy", cfg.Security.ToolPolicy.Tools["exec"], "supervised"},
		{"exec timeout", cfg.Tools.Exec.TimeoutSeconds, 60},
		{"exec output", cfg.Tools.Exec.MaxOutputBytes, 65536},
		{"exec sandbox", cfg.Tools.Exec.Sandbox, "auto"},
		{"exec network", cfg.Tools.Exec.Network, false},
		{"exec memory", cfg.Tools.Exec.MemoryMB, 1024},
		{"exec processes", cfg.Tools.Exec.MaxProcesses, 256},
		{"exec file size", cfg.Tools.Exec.FileSizeMB, 1024},
		{"exec cpu", cfg.Tools.Exec.CPUSeconds, 300},
		{"fetch timeout", cfg.Tools.WebFetch.TimeoutSeconds, 20},
		{"fetch bytes", cfg.Tools.WebFetch.MaxBytes, 1 << 20},
		{"slack api", chOpt(t, cfg, "slack", "APIURL"), "https://slack.com/api/"},
		{"slack path", chOpt(t, cfg, "slack", "WebhookPath"), "/slack/events"},
		{"slack reply", chOpt(t, cfg, "slack", "ReplyToMode"), "all"},
		{"telegram api", chOpt(t, cfg, "telegram", "APIURL"), "https://api.telegram.org"},
		{"telegram path", chOpt(t, cfg, "telegram", "WebhookPath"), "/telegram/webhook"},
		{"telegram uncertain", chOpt(t, cfg, "telegram", "UncertainDelivery"), "resend"},
		{"group policy", cfg.Channels.Options("telegram").Common().GroupPolicy, "allowlist"},
		{"require mention", cfg.Channels.Options("telegram").Common().Groups["-1"].RequiresMention(), true},
		{"matrix autojoin", *chOpt(t, cfg, "matrix", "AutoJoin").(*bool), true},
		{"matrix threads", chOpt(t, cfg, "matrix", "ThreadReplies"), "inbound"},
		{"agent", cfg.DefaultAgentID(), "main"},
		{"model", cfg.AgentModel("main"), "demo/demo"},
		{"limits", cfg.SubagentLimits("main"), Limits{8, 1, 5, 20, 300, 60, 30, 1440, 2, 0, "", "", []string{"main"}}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestExecPolicyDefaultRespectsConfig(t *testing.T) {
	tests := []struct{ src, want string }{
		{`{security: {toolPolicy: {groups: {exec: "allow"}}}}`, ""},
		{`{security: {toolPolicy: {tools: {exec: "deny"}}}}`, "deny"},
		{`{security: {toolPolicy: {default: "deny"}}}`, ""},
	}
	for _, tt := range tests {
		cfg, err := Parse("p.json5", []byte(tt.src), noEnv)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Security.ToolPolicy.Tools["exec"]; got != tt.want {
			t.Errorf("%s: tools.exec = %q, want %q", tt.src, got, tt.want)
		}
	}
}

func TestSubagentLimitsOverrides(t *testing.T) {
	src := `{
	  models: { providers: { demo: { api: "demo" } } },
	  agents: {
	    defaults: { subagents: { maxDepth: 3, runTimeoutSeconds: 0, thinking: "low", allowAgents: ["*"] } },
	    list: [
	      { id: "a", subagents: { maxDepth: 2, archiveAfterMinutes: 0, model: "demo/demo" } },
	      { id: "b", subagents: { allowAgents: ["a"] } },
	    ],
	  },
	}`
	cfg, err := Parse("l.json5", []byte(src), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a := cfg.SubagentLimits("a")
	if a.MaxDepth != 2 || a.ArchiveAfterMinutes != 0 || a.RunTimeoutSeconds != 0 || a.Model != "demo/demo" || a.Thinking != "low" || !a.AllowsAgent("b") {
		t.Errorf("a = %+v", a)
	}
	b := cfg.SubagentLimits("b")
	if b.MaxDepth != 3 || b.ArchiveAfterMinutes != 60 || b.AllowsAgent("b") || !b.AllowsAgent("a") {
		t.Errorf("b = %+v", b)
	}
}

func TestResolvePath(t *testing.T) {
	tests := []struct {
		name, flag   string
		env          map[string]string
		wantPath     string
		wantExplicit bool
		wantState    string
	}{
		{"flag wins", "/etc/h.json5", map[string]string{"HERALD_CONFIG": "/x.json5", "HOME": "/home/u"}, "/etc/h.json5", true, "/home/u/.herald"},
		{"env", "", map[string]string{"HERALD_CONFIG": "~/c.json5", "HOME": "/home/u", "HERALD_STATE_DIR": "/var/h"}, "/home/u/c.json5", true, "/var/h"},
		{"default", "", map[string]string{"HOME": "/home/u"}, "/home/u/.herald/herald.json5", false, "/home/u/.herald"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, explicit := ResolvePath(tt.flag, mapEnv(tt.env))
			if p != tt.wantPath || explicit != tt.wantExplicit {
				t.Errorf("ResolvePath = %q %v", p, explicit)
			}
			if s := ResolveStateDir("", mapEnv(tt.env)); s != tt.wantState {
				t.Errorf("ResolveStateDir = %q", s)
			}
		})
	}
	if s := ResolveStateDir("/flag", mapEnv(map[string]string{"HERALD_STATE_DIR": "/env"})); s != "/flag" {
		t.Errorf("state flag = %q", s)
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	env := mapEnv(map[string]string{"HOME": dir})

	cfg, path, err := Open("", env)
	if err != nil || path != "" || cfg.AgentModel("main") != "demo/demo" {
		t.Fatalf("implicit missing file: %v %q", err, path)
	}
	if _, _, err := Open(filepath.Join(dir, "nope.json5"), env); !errors.Is(err, ErrNotFound) {
		t.Fatalf("explicit missing file: err = %v", err)
	}

	file := filepath.Join(dir, ".herald", "herald.json5")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(`{gateway: {logLevel: "loud"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, path, err = Open("", env)
	if path != file || err == nil || !strings.Contains(err.Error(), file+":1:12: gateway.logLevel: \"loud\" is not one of") {
		t.Fatalf("Open(%q) = %v", path, err)
	}
}

func TestExpandHome(t *testing.T) {
	h, err := os.UserHomeDir()
	if err != nil {
		t.Skip("no home dir")
	}
	for in, want := range map[string]string{
		"~":        h,
		"~/x/y":    filepath.Join(h, "x/y"),
		"/abs":     "/abs",
		"rel/~/a":  "rel/~/a",
		"~other/x": "~other/x",
	} {
		if got := ExpandHome(in); got != want {
			t.Errorf("ExpandHome(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDocsExampleIsValid keeps docs/configuration.md's example loadable.
func TestDocsExampleIsValid(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "configuration.md"))
	if err != nil {
		t.Skip("docs not present:", err)
	}
	_, rest, ok := strings.Cut(string(doc), "## Example")
	_, rest, ok2 := strings.Cut(rest, "```json5\n")
	example, _, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("no json5 block under ## Example")
	}
	cfg, err := Parse("docs example", []byte(example), mapEnv(fullEnv))
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// chOpt is a field of the section channels.<name> by its Go name: the
// sections' types live in the channel packages, registered through the
// import of channels/all in registry_test.go (package config_test).
func chOpt(t testing.TB, cfg *Config, name, field string) any {
	t.Helper()
	o := cfg.Channels.Options(name)
	if o == nil {
		t.Fatalf("channel %s is not registered", name)
	}
	f := reflect.ValueOf(o).Elem().FieldByName(field)
	if !f.IsValid() {
		t.Fatalf("channels.%s has no field %s", name, field)
	}
	return f.Interface()
}

// setChOpt sets a string field of channels.<name>.
func setChOpt(t testing.TB, cfg *Config, name, field, value string) {
	t.Helper()
	chOpt(t, cfg, name, field)
	reflect.ValueOf(cfg.Channels.Options(name)).Elem().FieldByName(field).SetString(value)
}
