package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadBootstrap(t *testing.T) {
	cc, outside := newWorkspace(t)
	ws := cc.Workspace
	for _, n := range []string{"AGENTS.md", "SOUL.md", "TOOLS.md", "IDENTITY.md", "USER.md", "HEARTBEAT.md", "BOOTSTRAP.md"} {
		mustWrite(t, filepath.Join(ws, n), "content of "+n+"\n")
	}
	tests := []struct {
		subagent bool
		golden   string
	}{
		{false, "bootstrap_main.golden"},
		{true, "bootstrap_subagent.golden"},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			got, err := LoadBootstrap(ws, tt.subagent)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join("testdata", tt.golden))
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Fatalf("got\n%s\nwant\n%s", got, want)
			}
		})
	}

	// Missing files are skipped; a link out of the workspace is an error
	// naming the file, and the rest is still returned.
	os.Remove(filepath.Join(ws, "AGENTS.md"))
	os.Remove(filepath.Join(ws, "TOOLS.md"))
	mustWrite(t, filepath.Join(outside, "TOOLS.md"), "outside tools")
	if err := os.Symlink(filepath.Join(outside, "TOOLS.md"), filepath.Join(ws, "TOOLS.md")); err != nil {
		t.Fatal(err)
	}
	got, err := LoadBootstrap(ws, false)
	if err == nil || !strings.Contains(err.Error(), "TOOLS.md") {
		t.Fatalf("want an error naming TOOLS.md, got %v", err)
	}
	if strings.Contains(got, "outside tools") || strings.Contains(got, "AGENTS.md") || !strings.HasPrefix(got, "## SOUL.md\n") {
		t.Fatalf("got %q", got)
	}
}

func TestLoadBootstrapCapAndMissingWorkspace(t *testing.T) {
	ws := t.TempDir()
	mustWrite(t, filepath.Join(ws, "AGENTS.md"), strings.Repeat("a", DefaultBootstrapMaxBytes+10))
	got, err := LoadBootstrap(ws, true)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(got, "[AGENTS.md cut at 65536 of 65546 bytes]") || len(got) > DefaultBootstrapMaxBytes+100 {
		t.Fatalf("cap not applied: %d bytes, ends %q", len(got), got[len(got)-50:])
	}
	if got, err := LoadBootstrap(filepath.Join(ws, "nope"), false); got != "" || err != nil {
		t.Fatalf("missing workspace: %q, %v", got, err)
	}
}
