package main

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
)

// initProviders are the providers `herald init` offers.
var initProviders = []string{"anthropic", "openai", "openai-compatible", "demo"}

// initChannels are the channels `herald init` offers: the web chat and
// every registered module with init questions.
func initChannels() []string {
	out := []string{"web"}
	for _, m := range channels.Modules() {
		if m.Init != nil {
			out = append(out, string(m.Name))
		}
	}
	return out
}

// initCmd is `herald init`: ask (on a terminal) or read from flags which
// channels and provider to use, write a commented starter config with
// ${ENV} placeholders for every secret, validate it, print the next steps.
func initCmd(f *flags, stdin io.Reader, interactive bool, stdout, stderr io.Writer) int {
	path, _ := config.ResolvePath(f.config, nil)
	if _, err := os.Stat(path); err == nil && !f.force {
		fmt.Fprintf(stderr, "herald: %s already exists; use --force to overwrite it (or --config FILE to write elsewhere)\n", path)
		return 1
	}
	chans, provider := f.channels, f.provider
	if !interactive && len(chans) == 0 && provider == "" {
		fmt.Fprintf(stderr, "herald: init: no terminal to ask on; say what to configure with flags, for example\n"+
			"  herald init --channel web --provider anthropic\n"+
			"--channel: %s (repeat or comma-separate); --provider: %s\n",
			strings.Join(initChannels(), ", "), strings.Join(initProviders, ", "))
		return 2
	}
	if interactive && len(chans) == 0 && provider == "" {
		var err error
		var coding []string
		if chans, provider, coding, err = askInit(stdin, stdout, len(f.coding) == 0); err != nil {
			fmt.Fprintf(stderr, "herald: %v\n", err)
			return 1
		}
		f.coding = append(f.coding, coding...)
	}
	if len(chans) == 0 {
		chans = []string{"web"}
	}
	provider = strings.TrimSpace(provider)
	if provider == "" {
		provider = "anthropic"
	}
	for _, c := range chans {
		if !slices.Contains(initChannels(), c) {
			fmt.Fprintf(stderr, "herald: --channel %q: want one of %s\n", c, strings.Join(initChannels(), ", "))
			return 2
		}
	}
	if !slices.Contains(initProviders, provider) {
		fmt.Fprintf(stderr, "herald: --provider %q: want one of %s\n", provider, strings.Join(initProviders, ", "))
		return 2
	}
	for _, c := range f.coding {
		if !slices.Contains(initCodingAgents, c) {
			fmt.Fprintf(stderr, "herald: --coding-agent %q: want one of %s\n", c, strings.Join(initCodingAgents, ", "))
			return 2
		}
	}
	text, secrets := starterConfig(chans, provider, f.coding)
	// Validate what we write: with the secrets' variables standing in for
	// themselves, the file must load and validate.
	cfg, err := config.Parse(path, []byte(text), func(name string) (string, bool) { return "placeholder-" + name, true })
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "herald: the starter config does not validate (a bug, please report it):\n%v\n", err)
		return 1
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		fmt.Fprintf(stderr, "herald: %v\n", err)
		return 1
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		fmt.Fprintf(stderr, "herald: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s (channels: %s; provider: %s)\n\nNext steps:\n", path, strings.Join(chans, ", "), provider)
	step := 1
	if len(secrets) > 0 {
		fmt.Fprintf(stdout, "  %d. Put the secrets in the environment (or an EnvironmentFile for systemd):\n", step)
		width := 0
		for _, s := range secrets {
			width = max(width, len(s.name))
		}
		for _, s := range secrets {
			fmt.Fprintf(stdout, "       export %-*s   # %s\n", width+2, s.name+"=…", s.what)
		}
		step++
	}
	cfgFlag := ""
	if f.config != "" {
		cfgFlag = " --config " + path
	}
	fmt.Fprintf(stdout, "  %d. herald doctor%s      # checks the config, the state dir, every channel and provider\n", step, cfgFlag)
	fmt.Fprintf(stdout, "  %d. herald gateway%s     # then %s\n", step+1, cfgFlag, whereToTalk(chans))
	if f.config == "" {
		fmt.Fprintf(stdout, "\nFrom now on `herald gateway` and `make run` read\n  %s\n(the built-in demo default applies only while that file does not exist).\n", path)
	}
	return 0
}

// whereToTalk says where to talk to the gateway with these channels: the
// web chat only when it is on.
func whereToTalk(chans []string) string {
	if slices.Contains(chans, "web") {
		return fmt.Sprintf("open http://%s/", config.DefaultListen)
	}
	var on []string
	for _, c := range chans {
		if m, ok := channels.Lookup(channels.Name(c)); ok && m.Init != nil {
			on = append(on, m.Init.Title)
		}
	}
	return "message the bot on " + strings.Join(on, ", ") + " (the web chat is off)"
}

// askInit asks which channels and provider to use and, when askCoding,
// which coding agents to add as ACP sub-agents (none by default).
func askInit(stdin io.Reader, stdout io.Writer, askCoding bool) (chans []string, provider string, coding []string, err error) {
	in := bufio.NewScanner(stdin)
	ask := func(q, def string) (string, error) {
		fmt.Fprintf(stdout, "%s [%s]: ", q, def)
		if !in.Scan() {
			if err := in.Err(); err != nil {
				return "", err
			}
			return "", errors.New("no answer (end of input)")
		}
		return cmp.Or(strings.TrimSpace(in.Text()), def), nil
	}
	// list asks until every word of the answer is one of valid.
	list := func(q, def string, valid []string, none bool) ([]string, error) {
		for {
			a, err := ask(q, def)
			if err != nil {
				return nil, err
			}
			words := splitList(a)
			if none && len(words) == 1 && words[0] == "none" {
				return nil, nil
			}
			if bad := slices.IndexFunc(words, func(c string) bool { return !slices.Contains(valid, c) }); bad >= 0 {
				fmt.Fprintf(stdout, "  %q is not one of %s\n", words[bad], strings.Join(valid, ", "))
				continue
			}
			return words, nil
		}
	}
	if chans, err = list("Channels ("+strings.Join(initChannels(), ", ")+"; comma-separated)", "web", initChannels(), false); err != nil {
		return nil, "", nil, err
	}
	for {
		if provider, err = ask("Model provider ("+strings.Join(initProviders, ", ")+")", "anthropic"); err != nil {
			return nil, "", nil, err
		}
		if slices.Contains(initProviders, provider) {
			break
		}
		fmt.Fprintf(stdout, "  %q is not one of %s\n", provider, strings.Join(initProviders, ", "))
	}
	if askCoding {
		q := "Coding agents main may hand tasks to, over ACP (" + strings.Join(initCodingAgents, ", ") + "; comma-separated, or none)"
		if coding, err = list(q, "none", initCodingAgents, true); err != nil {
			return nil, "", nil, err
		}
	}
	return chans, provider, coding, nil
}

// splitList splits "slack, telegram" into its words, without duplicates.
func splitList(s string) []string {
	var out []string
	for _, w := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		if w = strings.ToLower(w); !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

// isTerminal reports whether r is an interactive terminal (a character
// device other than the null device: `herald init </dev/null` has no one
// to ask).
func isTerminal(r io.Reader) bool {
	file, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := file.Stat()
	if err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(fi, null)
}

type secretVar struct{ name, what string }

// starterConfig is the commented JSON5 for the chosen channels and
// provider, and the environment variables its secrets come from.
func starterConfig(chans []string, provider string, coding []string) (string, []secretVar) {
	var b strings.Builder
	var secrets []secretVar
	on := func(c string) bool { return slices.Contains(chans, c) }
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }

	w(`// Herald config (JSON5: comments and trailing commas are fine).
// Written by "herald init". Reference: docs/configuration.md.
// Secrets are never written here: each ${VAR} is read from the environment
// when Herald starts, and a missing variable is an error that names it.
{
  gateway: {
    // The web chat, /healthz, /readyz, /metrics and webhooks listen here.
    // Off loopback, set channels.web.token (and it protects /metrics too).
    http: { listen: %q },
    logLevel: "info", // debug | info | warn | error
  },

  models: {
    providers: {
`, config.DefaultListen)
	model := ""
	switch provider {
	case "anthropic":
		secrets = append(secrets, secretVar{"ANTHROPIC_API_KEY", "console.anthropic.com → API keys"})
		model = "anthropic/claude-sonnet-4-20250514"
		w(`      anthropic: {
        api: "anthropic",
        apiKey: "${ANTHROPIC_API_KEY}",
        timeoutSeconds: 120, // one model call; a hung provider is cut off after this
        // cost: USD per million tokens, for the announce's cost line.
        models: [{ id: "claude-sonnet-4-20250514", cost: { input: 3, output: 15 } }],
      },
`)
	case "openai":
		secrets = append(secrets, secretVar{"OPENAI_API_KEY", "platform.openai.com → API keys"})
		model = "openai/gpt-4o"
		w(`      openai: {
        api: "openai",
        apiKey: "${OPENAI_API_KEY}",
        timeoutSeconds: 120,
        models: [{ id: "gpt-4o", cost: { input: 2.5, output: 10 } }],
      },
`)
	case "openai-compatible":
		model = "local/llama3.1"
		w(`      // Any OpenAI-compatible server: Ollama, vLLM, llama.cpp, OpenRouter.
      local: {
        api: "openai-compatible",
        baseUrl: "http://127.0.0.1:11434/v1", // Ollama's default
        // apiKey: "${LOCAL_LLM_API_KEY}",    // if your server wants one
        timeoutSeconds: 300,
        models: [{ id: "llama3.1" }],
      },
`)
	case "demo":
		model = "demo/demo"
		w(`      // The offline demo model: no API key, no real answers. Replace it with
      // anthropic or openai (see docs/providers.md) when you are ready.
      demo: { api: "demo" },
`)
	}
	w(`    },
  },

  agents: {
    defaults: {
      model: %q,
      maxConcurrent: 4, // top-level turns at once
      subagents: { maxConcurrent: 8, maxDepth: 1, archiveAfterMinutes: 60%s },
    },
    list: [
      { id: "main" }, // workspace: <state dir>/workspace/main unless you set one
%s    ],
  },

  // Tools the model may use: allow, deny, or supervised (a person approves
  // each call with /approve CODE in the chat).
  security: { toolPolicy: { default: "allow", tools: { exec: "supervised" }%s } },

  channels: {
`, model, codingAllow(coding), codingEntries(coding, &secrets), codingPolicy(coding))
	w(`    web: { enabled: %t }, // the local web chat at http://%s/
`, on("web"), config.DefaultListen)
	for _, m := range channels.Modules() {
		if m.Init != nil && on(string(m.Name)) {
			for _, sv := range m.Init.Secrets {
				secrets = append(secrets, secretVar{sv.Var, sv.Hint})
			}
			w("%s", m.Init.Section)
		}
	}
	w(`  },
}
`)
	return b.String(), secrets
}

// initCodingAgents are the coding agents `herald init --coding-agent` adds
// as ACP sub-agents (SPEC §26, docs/acp.md).
var initCodingAgents = []string{"codex", "claude"}

// codingAgent is one coding agent init can add.
type codingAgent struct {
	id, name, command, pkg string
	key                    secretVar
	args                   string // its runtime.args line ("" = none)
}

var codingAgents = map[string]codingAgent{
	// Codex sandboxes its commands with bubblewrap, which cannot nest in
	// Herald's sandbox ("setting up uid map: Operation not permitted"):
	// Herald's sandbox confines it instead, and "untrusted" has it ask
	// before its commands — a request Herald decides (policy group acp).
	"codex": {"codex", "Codex", "codex-acp", "@zed-industries/codex-acp",
		secretVar{"OPENAI_API_KEY", "platform.openai.com → API keys (for Codex)"},
		`args: ["-c", "sandbox_mode=\"danger-full-access\"", "-c", "approval_policy=\"untrusted\""],`},
	"claude": {"claude", "Claude Code", "claude-agent-acp", "@zed-industries/claude-agent-acp",
		secretVar{"ANTHROPIC_API_KEY", "console.anthropic.com → API keys (for Claude Code)"}, ""},
}

// codingEntries are the agents.list entries of the coding agents; their
// keys join secrets once.
func codingEntries(coding []string, secrets *[]secretVar) string {
	var b strings.Builder
	for _, id := range coding {
		a := codingAgents[id]
		if !slices.ContainsFunc(*secrets, func(s secretVar) bool { return s.name == a.key.name }) {
			*secrets = append(*secrets, a.key)
		}
		args := ""
		if a.args != "" {
			args = "\n          " + a.args
		}
		fmt.Fprintf(&b, `      // %s over ACP, a sub-agent main may spawn: npm install -g %s
      // (herald doctor checks it). It runs in the exec sandbox, in the
      // conversation's workspace, with only this env (docs/acp.md).
      { id: %q, name: %q, runtime: { type: "acp", command: %q, network: true,%s
          env: { %s: "${%s}", PATH: "/usr/local/bin:/usr/bin:/bin" } } },
`, a.name, a.pkg, a.id, a.name, a.command, args, a.key.name, a.key.name)
	}
	return b.String()
}

// codingAllow lets main spawn the coding agents.
func codingAllow(coding []string) string {
	if len(coding) == 0 {
		return ""
	}
	return fmt.Sprintf(`, allowAgents: ["%s"]`, strings.Join(coding, `", "`))
}

// codingPolicy makes the coding agents' permission requests supervised.
func codingPolicy(coding []string) string {
	if len(coding) == 0 {
		return ""
	}
	return `, groups: { acp: "supervised" }`
}
