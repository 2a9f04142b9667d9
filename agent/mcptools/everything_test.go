package mcptools_test

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/mcptools"
	"github.com/heraldhq/herald/config"
)

// EverythingPackage is the official reference MCP server, pinned; the test
// script (scripts/mcp-everything.sh) fetches it into npx's cache.
const EverythingPackage = "@modelcontextprotocol/server-everything@2026.8.31"

// The official reference server from the npm registry, run with npx as a
// stdio server: listed, and its echo and image tools called through the
// same code the agents use.
func TestReferenceServerEverything(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the npm reference server")
	}
	npx, err := exec.LookPath("npx")
	if err != nil {
		t.Skip("npx not found: install Node.js (scripts/mcp-everything.sh --install-node) to run the reference MCP server test")
	}
	t.Setenv("HERALD_TEST_SECRET_KEY", "leak-me") // Herald's own environment stays out of the server's
	m := newManager(t, mcptools.Options{Backoff: func(int) time.Duration { return time.Hour }}, map[string]config.MCPServer{
		"everything": {Command: npx, Args: []string{"-y", EverythingPackage}, TimeoutSeconds: 120,
			Env: map[string]config.Secret{"HERALD_MCP_VISIBLE": "configured"}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	st, err := m.WaitFor(ctx, "everything", func(s mcptools.ServerStatus) bool {
		return s.State == mcptools.StateUp || s.State == mcptools.StateDown
	})
	if err != nil || st.State != mcptools.StateUp {
		vctx, vcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer vcancel()
		if out, verr := exec.CommandContext(vctx, "npm", "view", EverythingPackage, "version").CombinedOutput(); verr != nil {
			t.Skipf("the npm registry is unreachable (npm view: %v: %s); server state %s: %s", verr, strings.TrimSpace(string(out)), st.State, st.Error)
		}
		t.Fatalf("reference server not up: %v; state %s: %s", err, st.State, st.Error)
	}
	t.Logf("server-everything tools: %v", st.Tools)
	if !slices.Contains(st.Tools, "mcp__everything__echo") {
		t.Fatalf("tools %v lack mcp__everything__echo", st.Tools)
	}
	out, err := call(t, toolOf(t, m, "everything", "mcp__everything__echo"), `{"message":"hello from herald"}`)
	if err != nil || !strings.Contains(out, "hello from herald") {
		t.Errorf("echo = %q, %v", out, err)
	}
	t.Logf("echo: %q", out)
	for _, name := range st.Tools {
		if strings.Contains(name, "tiny") && strings.Contains(name, "image") {
			out, err := call(t, toolOf(t, m, "everything", name), `{}`)
			if err != nil || !strings.Contains(out, "[image: image/png, ") {
				t.Errorf("%s = %q, %v; want the image noted by type and size", name, out, err)
			}
		}
	}
	if out, err := call(t, toolOf(t, m, "everything", "mcp__everything__get-env"), `{}`); err != nil ||
		strings.Contains(out, "leak-me") || !strings.Contains(out, "configured") {
		t.Errorf("get-env = %.300q, %v; want the configured env and not Herald's own", out, err)
	}
	out, err = call(t, toolOf(t, m, "everything", "mcp__everything__get-resource-links"), `{"count":2}`)
	if err != nil || strings.Count(out, "[resource link: ") != 2 {
		t.Errorf("get-resource-links = %q, %v; want 2 links noted", out, err)
	}
	// A call with arguments the server's schema refuses comes back as an
	// error result the model can read, not a failed run.
	if _, err := call(t, toolOf(t, m, "everything", "mcp__everything__echo"), `{"nope":1}`); err == nil {
		t.Errorf("echo without its message: no error")
	} else {
		t.Logf("echo without message: %v", err)
	}
}
