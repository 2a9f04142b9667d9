package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent/llmtest"
)

const reloadTestConfig = `{
  // a comment, as operators write them
  gateway: { http: { listen: %q } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: %q, apiKey: "k",
    models: [{ id: "first" }, { id: "second" }] } } },
  agents: { defaults: { model: "anthropic/%s" }, list: [{ id: "main" }] },
}`

// TestReloadCommand runs a real gateway process and changes its config with
// `herald reload`: a good config is applied and what changed is printed; a
// bad one is refused before the gateway is signalled and the gateway keeps
// serving; without a running gateway the command says so.
func TestReloadCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the herald binary")
	}
	llm := llmtest.NewAnthropic(t, func(c llmtest.Call) llmtest.Reply { return llmtest.Reply{Text: "from " + c.Model} })
	bin := buildHerald(t)
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	cfgPath := filepath.Join(dir, "herald.json5")
	addr := freeAddr(t)
	write := func(model string) {
		t.Helper()
		if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(reloadTestConfig, addr, llm.URL, model)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	reload := func() (int, string, string) {
		var out, errOut bytes.Buffer
		code := run([]string{"reload", "--config", cfgPath, "--state-dir", stateDir}, &out, &errOut)
		return code, out.String(), errOut.String()
	}

	write("first")
	if code, _, stderr := reload(); code != 1 || !strings.Contains(stderr, "no running gateway for state dir") {
		t.Fatalf("reload without a gateway: exit %d, stderr %q", code, stderr)
	}

	p := startGateway(t, bin, cfgPath, stateDir, filepath.Join(dir, "gateway.log"))
	defer p.dumpLog(t)
	base := "http://" + addr
	waitReady(t, p, base)

	write("second")
	code, stdout, stderr := reload()
	if code != 0 || stdout != "reloaded "+cfgPath+" (changed: agents)\n" {
		t.Fatalf("reload: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, _ := reload(); code != 0 || !strings.Contains(stdout, "(nothing changed)") {
		t.Errorf("second reload of the same file: exit %d, stdout %q", code, stdout)
	}

	// A broken file is refused here; the gateway is not signalled.
	if err := os.WriteFile(cfgPath, []byte(`{ agents: { defaults: { model: 7 } } }`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = reload()
	if code != 1 || stdout != "" || !strings.Contains(stderr, "1:") || !strings.Contains(stderr, "agents.defaults.model") ||
		!strings.Contains(stderr, "the running gateway keeps its config") {
		t.Errorf("reload of a broken config: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// The gateway runs on with the last good config (model second).
	waitReady(t, p, base)
	crashPost(t, base, "which model?")
	waitFor(t, p, "the answer from model second", func() (bool, string) {
		msgs, err := webMessages(t, base)
		if err != nil {
			return false, err.Error()
		}
		for _, m := range msgs {
			if m.Role == "assistant" {
				return m.Text == "from second", m.Text
			}
		}
		return false, "no answer yet"
	})

	// A variable this shell has but the running gateway does not: the
	// refusal says it is the gateway's environment (and its pid) that lacks it.
	t.Setenv("HERALD_TEST_RELOAD_KEY", "set-here-only")
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(fmt.Sprintf(reloadTestConfig, addr, llm.URL, "second"), `apiKey: "k"`, `apiKey: "${HERALD_TEST_RELOAD_KEY}"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = reload()
	want := fmt.Sprintf("environment variable HERALD_TEST_RELOAD_KEY is not set in the gateway's environment (pid %d)", p.cmd.Process.Pid)
	if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "restart the gateway") {
		t.Errorf("reload with a variable only this shell has: exit %d, stderr:\n%s\nwant %q", code, stderr, want)
	}
}
