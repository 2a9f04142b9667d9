//go:build linux

package mcptools_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent/mcptools"
	"github.com/heraldhq/herald/agent/mcptools/mcptest"
	"github.com/heraldhq/herald/agent/sandbox"
	"github.com/heraldhq/herald/config"
)

// A stdio server with sandbox: true reads its cwd but nothing else of the
// host (a secret beside it, the gateway's environment); the same server
// unconfined reads the secret, so the check can fail.
func TestSandboxedStdioServer(t *testing.T) {
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "herald.json5")
	if err := os.WriteFile(secret, []byte("apiKey: sk-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	cwd := t.TempDir()
	if err := os.WriteFile(filepath.Join(cwd, "notes.txt"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := sandbox.Probe()
	for _, tc := range []struct {
		mech string
		ok   bool
	}{{sandbox.Off, true}, {sandbox.Bwrap, r.Bwrap.OK}, {sandbox.Landlock, r.Landlock.OK}} {
		t.Run(tc.mech, func(t *testing.T) {
			if !tc.ok {
				t.Skipf("%s does not work here: %+v", tc.mech, r)
			}
			c := mcptest.StdioConfig()
			c.Cwd = cwd
			c.Sandbox = tc.mech != sandbox.Off
			m := newManager(t, mcptools.Options{Sandbox: sandbox.Policy{Mechanism: tc.mech}}, map[string]config.MCPServer{"t": c})
			waitUp(t, m, "t")
			cat := toolOf(t, m, "t", "mcp__t__cat")
			if out, err := call(t, cat, `{"text":"notes.txt"}`); err != nil || out != "mine" {
				t.Errorf("reading its cwd: %q, %v", out, err)
			}
			out, err := call(t, cat, `{"text":"`+secret+`"}`)
			leaked := err == nil && strings.Contains(out, "sk-SECRET")
			if tc.mech == sandbox.Off {
				if !leaked {
					t.Fatalf("unconfined server could not read %s (%q, %v): the check below proves nothing", secret, out, err)
				}
				return
			}
			if leaked || err == nil {
				t.Errorf("sandboxed server read %s: %q, %v", secret, out, err)
			}
			if out, err := call(t, cat, `{"text":"/proc/1/environ"}`); err == nil && tc.mech == sandbox.Landlock {
				t.Errorf("sandboxed server read /proc/1/environ: %q", out)
			}
		})
	}
}
