package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
)

// TestInitWritesAValidStarterConfig: for every provider and with every
// channel, `herald init` writes a commented config that loads and validates
// once its secrets are in the environment, names each secret as ${VAR}
// (never its value, even when the variable is set), and prints next steps.
func TestInitWritesAValidStarterConfig(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-real-secret")
	env := func(name string) (string, bool) { return "value-of-" + name, true }
	for _, provider := range initProviders {
		t.Run(provider, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "conf", "herald.json5")
			var out, errOut bytes.Buffer
			// Every channel init offers (the web chat and each module with
			// init questions), the first two comma-separated.
			args := []string{"init", "--config", path, "--channel", strings.Join(initChannels()[:2], ",")}
			for _, c := range initChannels()[2:] {
				args = append(args, "--channel", c)
			}
			code := run(append(args, "--provider", provider), &out, &errOut)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			text := string(b)
			if strings.Contains(text, "sk-ant-real-secret") {
				t.Error("the config contains the value of ANTHROPIC_API_KEY")
			}
			vars := []string{"${SLACK_BOT_TOKEN}", "${SLACK_APP_TOKEN}", "${TELEGRAM_BOT_TOKEN}", "${MATRIX_ACCESS_TOKEN}"}
			for _, m := range channels.Modules() {
				if m.Init == nil {
					continue
				}
				for _, sv := range m.Init.Secrets {
					vars = append(vars, "${"+sv.Var+"}")
				}
			}
			for _, v := range vars {
				if !strings.Contains(text, v) {
					t.Errorf("config lacks %s", v)
				}
			}
			if !strings.HasPrefix(text, "// Herald config") || strings.Count(text, "//") < 10 {
				t.Errorf("config is not commented:\n%s", text)
			}
			cfg, err := config.Load(path, env)
			if err == nil {
				err = cfg.Validate()
			}
			if err != nil {
				t.Fatalf("written config does not validate: %v\n%s", err, text)
			}
			for _, c := range initChannels() {
				if !cfg.ChannelEnabled(c) {
					t.Errorf("channel %s chosen but not enabled (enabled: %v)", c, cfg.EnabledChannels())
				}
			}
			if len(initChannels()) < 4 || !cfg.WebEnabled() {
				t.Errorf("init offers %v; web on: %v", initChannels(), cfg.WebEnabled())
			}
			if got := cfg.AgentModel("main"); !strings.HasPrefix(got, map[string]string{"anthropic": "anthropic/", "openai": "openai/", "openai-compatible": "local/", "demo": "demo/"}[provider]) {
				t.Errorf("main agent model %q for provider %s", got, provider)
			}
			if !strings.Contains(out.String(), "wrote "+path) || !strings.Contains(out.String(), "herald doctor --config "+path) ||
				!strings.Contains(out.String(), "export SLACK_BOT_TOKEN=…") {
				t.Errorf("next steps:\n%s", out.String())
			}
		})
	}
}

func TestInitRefusesToOverwriteWithoutForce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "herald.json5")
	if err := os.WriteFile(path, []byte("{ /* mine */ }"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"init", "--config", path, "--provider", "demo"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "already exists; use --force") {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	if b, _ := os.ReadFile(path); string(b) != "{ /* mine */ }" {
		t.Fatalf("existing file changed: %q", b)
	}
	if code := run([]string{"init", "--config", path, "--provider", "demo", "--force"}, &out, &errOut); code != 0 {
		t.Fatalf("--force: exit %d, stderr %q", code, errOut.String())
	}
	if code := run([]string{"init", "--config", path + ".2", "--channel", "irc"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `--channel "irc": want one of `+strings.Join(initChannels(), ", ")) {
		t.Errorf("unknown channel: exit %d, stderr %q", code, errOut.String())
	}
}

// On a terminal, init asks (channels, provider, coding agents); a wrong
// answer is asked again.
func TestInitAsksOnATerminal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "herald.json5")
	in := strings.NewReader("Slack, telegram\nbogus\nopenai\naider\ncodex\n")
	var out, errOut bytes.Buffer
	if code := initCmd(&flags{config: path}, in, true, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), `"bogus" is not one of anthropic`) || strings.Count(out.String(), "Model provider") != 2 ||
		!strings.Contains(out.String(), `"aider" is not one of codex, claude`) || strings.Count(out.String(), "Coding agents main may hand tasks to, over ACP (codex, claude; comma-separated, or none) [none]: ") != 2 {
		t.Errorf("dialogue:\n%s", out.String())
	}
	cfg, err := config.Load(path, func(string) (string, bool) { return "x", true })
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.ChannelEnabled("slack") || !cfg.ChannelEnabled("telegram") || cfg.ChannelEnabled("matrix") || cfg.AgentModel("main") != "openai/gpt-4o" ||
		!slices.Equal(cfg.ACPAgents(), []string{"codex"}) {
		t.Errorf("answers not applied: channels %v model %s coding agents %v", cfg.EnabledChannels(), cfg.AgentModel("main"), cfg.ACPAgents())
	}
	// The default is none.
	path = filepath.Join(t.TempDir(), "herald.json5")
	if code := initCmd(&flags{config: path}, strings.NewReader("\n\n\n"), true, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if cfg, err = config.Load(path, func(string) (string, bool) { return "x", true }); err != nil || len(cfg.ACPAgents()) != 0 {
		t.Errorf("default answers: coding agents %v, %v", cfg.ACPAgents(), err)
	}
}

// TestInitNextStepsMatchItsConfig: init sends you to the web chat only when
// the config it wrote has the web chat on, and says that `herald gateway`
// (and make run) now read the file it wrote to the default place.
func TestInitNextStepsMatchItsConfig(t *testing.T) {
	for _, c := range []struct {
		chans    string
		web      bool
		whereNot string
	}{{"web", true, "message the bot"}, {"slack,telegram", false, "http://"}, {"matrix,web", true, "message the bot"}} {
		t.Run(c.chans, func(t *testing.T) {
			home := t.TempDir()
			t.Setenv("HOME", home)
			var out, errOut bytes.Buffer
			if code := run([]string{"init", "--channel", c.chans, "--provider", "demo"}, &out, &errOut); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			path := filepath.Join(home, ".herald", "herald.json5")
			cfg, err := config.Load(path, func(string) (string, bool) { return "x", true })
			if err != nil {
				t.Fatal(err)
			}
			if cfg.WebEnabled() != c.web {
				t.Fatalf("web chat enabled = %v, want %v", cfg.WebEnabled(), c.web)
			}
			steps := out.String()
			if c.web != strings.Contains(steps, "open http://"+config.DefaultListen+"/") || strings.Contains(steps, c.whereNot) {
				t.Errorf("web chat %v, next steps:\n%s", cfg.WebEnabled(), steps)
			}
			if !strings.Contains(steps, "From now on `herald gateway` and `make run` read\n  "+path+"\n") {
				t.Errorf("next steps do not say that make run now reads %s:\n%s", path, steps)
			}
		})
	}
}

// TestGatewayHintsAtTheDefaultFile: after `herald init`, `make run` (a bare
// `herald gateway`) reads ~/.herald/herald.json5; when that fails, the
// error says which file it is and why it is read.
func TestGatewayHintsAtTheDefaultFile(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	var out, errOut bytes.Buffer
	if code := run([]string{"init", "--channel", "web", "--provider", "anthropic"}, &out, &errOut); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut.String())
	}
	t.Setenv("ANTHROPIC_API_KEY", "")
	os.Unsetenv("ANTHROPIC_API_KEY")
	errOut.Reset()
	if code := run([]string{"gateway", "--state-dir", t.TempDir()}, &out, &errOut); code != 1 {
		t.Fatalf("gateway: exit %d, want 1: %s", code, errOut.String())
	}
	for _, want := range []string{"ANTHROPIC_API_KEY is not set", filepath.Join(home, ".herald", "herald.json5") + " is the default config file", "`make run` read it whenever it exists"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
		}
	}
	// With --config, the file is the one asked for: no hint.
	errOut.Reset()
	run([]string{"gateway", "--config", filepath.Join(home, ".herald", "herald.json5"), "--state-dir", t.TempDir()}, &out, &errOut)
	if strings.Contains(errOut.String(), "default config file") {
		t.Errorf("hint with an explicit --config:\n%s", errOut.String())
	}
}

// TestStartedLineSaysWhatIsOn: the gateway's first line names the web chat
// only when it is on, and where the console is.
func TestStartedLineSaysWhatIsOn(t *testing.T) {
	off, on := false, true
	cfg := config.Default(func(string) (string, bool) { return "", false })
	cfg.Channels.Web.Enabled = &off
	cfg.Channels.Options("telegram").Common().Enabled = true
	if got := startedLine(cfg, "127.0.0.1:8790"); strings.Contains(got, "web chat on") || !strings.Contains(got, "telegram") || !strings.Contains(got, "web chat is off") || !strings.Contains(got, "console at /admin") {
		t.Errorf("web off: %q", got)
	}
	cfg.Channels.Web.Enabled = &on
	if got := startedLine(cfg, "127.0.0.1:8790"); !strings.HasPrefix(got, "herald: web chat on http://127.0.0.1:8790/") || !strings.HasSuffix(got, ", console on http://127.0.0.1:8790/admin") {
		t.Errorf("web on: %q", got)
	}
}

// Without a terminal and without flags, init writes nothing and says which
// flags to pass.
func TestInitWithoutTerminalNamesTheFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "herald.json5")
	var out, errOut bytes.Buffer
	if code := initCmd(&flags{config: path}, strings.NewReader(""), false, &out, &errOut); code != 2 {
		t.Fatalf("exit %d, want 2; stderr: %s", code, errOut.String())
	}
	for _, want := range []string{"no terminal to ask on", "herald init --channel web --provider anthropic", "--channel: " + strings.Join(initChannels(), ", "), "--provider: anthropic, openai"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, errOut.String())
		}
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("init wrote a config without being told what to configure")
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if isTerminal(null) {
		t.Error("isTerminal(/dev/null) = true; nobody answers there")
	}
}

// TestInitCodingAgents: --coding-agent adds Codex and Claude Code as ACP
// sub-agents main may spawn, with their keys from the environment; an
// unknown one is refused.
func TestInitCodingAgents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "herald.json5")
	var out, errOut bytes.Buffer
	if code := run([]string{"init", "--config", path, "--provider", "anthropic", "--coding-agent", "codex,claude"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	cfg, err := config.Load(path, func(name string) (string, bool) { return "value-of-" + name, true })
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.ACPAgents(); !slices.Equal(got, []string{"codex", "claude"}) {
		t.Errorf("ACP agents %v", got)
	}
	if rt, _ := cfg.ACP("claude"); rt.Command != "claude-agent-acp" || rt.Env["ANTHROPIC_API_KEY"].Value() != "value-of-ANTHROPIC_API_KEY" || !rt.Network || len(rt.Args) != 0 {
		t.Errorf("claude runtime %+v", rt)
	}
	// Codex's own sandbox cannot nest in Herald's; its commands ask.
	if rt, _ := cfg.ACP("codex"); !slices.Equal(rt.Args, []string{"-c", `sandbox_mode="danger-full-access"`, "-c", `approval_policy="untrusted"`}) {
		t.Errorf("codex args %q", rt.Args)
	}
	if lim := cfg.SubagentLimits("main"); !lim.AllowsAgent("codex") || !lim.AllowsAgent("claude") {
		t.Errorf("main may not spawn them: %+v", lim.AllowAgents)
	}
	if strings.Count(out.String(), "export ANTHROPIC_API_KEY") != 1 || !strings.Contains(out.String(), "export OPENAI_API_KEY") {
		t.Errorf("next steps:\n%s", out.String())
	}
	errOut.Reset()
	if code := run([]string{"init", "--config", path, "--force", "--provider", "demo", "--coding-agent", "aider"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `--coding-agent "aider": want one of codex, claude`) {
		t.Errorf("unknown coding agent: exit %d, %s", code, errOut.String())
	}
}
