package config

import (
	"strings"
	"testing"
)

// TestACPRuntimeConfig: an ACP agent's runtime is read with its env
// expanded, and every mistake is reported with its key path.
func TestACPRuntimeConfig(t *testing.T) {
	good := `{
  agents: { defaults: { model: "demo/demo" }, list: [{ id: "main" },
    { id: "codex", runtime: { type: "acp", command: "codex-acp", args: ["--x"], env: { OPENAI_API_KEY: "${K}" },
      network: true, readPaths: ["/opt/codex"], cost: { input: 1.25, output: 10 } } }] },
}`
	cfg, err := Parse("a.json5", []byte(good), mapEnv(map[string]string{"K": "sk-1"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	rt, ok := cfg.ACP("codex")
	if !ok || rt.Command != "codex-acp" || rt.Env["OPENAI_API_KEY"].Value() != "sk-1" || !rt.Network || rt.ReadPaths[0] != "/opt/codex" ||
		rt.Cost == nil || rt.Cost.Input != 1.25 || rt.Cost.Output != 10 {
		t.Errorf("ACP(codex) = %+v, %v", rt, ok)
	}
	if _, ok := cfg.ACP("main"); ok {
		t.Error("main is not an ACP agent")
	}
	if got := cfg.ACPAgents(); len(got) != 1 || got[0] != "codex" {
		t.Errorf("ACPAgents = %v", got)
	}

	bad := `{
  agents: { defaults: { model: "demo/demo" }, list: [
    { id: "main", default: true },
    { id: "a", runtime: { command: " " } },
    { id: "b", runtime: { type: "mcp", command: "x", env: { "BAD-NAME": "v" }, readPaths: ["rel/dir"] } },
    { id: "c", default: false, runtime: { type: "acp", command: "c", cost: { input: -1, perMinute: 0.1 } } }] },
  bindings: [{ agentId: "c", match: { channel: "web" } }],
}`
	cfg, err = Parse("b.json5", []byte(bad), mapEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	err = cfg.Validate()
	if err == nil {
		t.Fatal("Validate accepted broken runtimes")
	}
	for _, want := range []string{
		"agents.list[1].runtime.type: missing",
		"agents.list[1].runtime.command: missing",
		`agents.list[2].runtime.type: must be "acp" (got "mcp")`,
		`agents.list[2].runtime.env.BAD-NAME: "BAD-NAME" is not an environment variable name`,
		`agents.list[2].runtime.readPaths[0]: "rel/dir" must be an absolute path`,
		`bindings[0].agentId: agent "c" is an ACP agent`,
		"agents.list[3].runtime.cost.input: must not be negative (got -1)",
		"agents.list[3].runtime.cost.perMinute: does not apply to an ACP agent",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}

	first := `{ agents: { defaults: { model: "demo/demo" }, list: [{ id: "codex", runtime: { type: "acp", command: "c" } }, { id: "main" }] } }`
	cfg, _ = Parse("c.json5", []byte(first), mapEnv(nil))
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "agents.list[0].runtime: an ACP agent runs only as a sub-agent") {
		t.Errorf("an ACP agent as the default agent: %v", err)
	}
}
