package tools

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
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

// A kept read is returned only while nothing it read changed: a file
// rewritten (also to the same size), added or removed is read again.
func TestLoadBootstrapSeesChanges(t *testing.T) {
	ws := t.TempDir()
	agents := filepath.Join(ws, "AGENTS.md")
	mustWrite(t, agents, "first")
	steps := []struct {
		change func()
		want   string
	}{
		{func() {}, "## AGENTS.md\nfirst"},
		{func() {}, "## AGENTS.md\nfirst"},
		{func() { mustWrite(t, agents, "other") }, "## AGENTS.md\nother"},
		{func() { mustWrite(t, agents, "a longer text") }, "## AGENTS.md\na longer text"},
		{func() { mustWrite(t, filepath.Join(ws, "SOUL.md"), "soul") }, "## AGENTS.md\na longer text\n\n## SOUL.md\nsoul"},
		{func() { os.Remove(agents) }, "## SOUL.md\nsoul"},
		{func() { os.Rename(filepath.Join(ws, "SOUL.md"), filepath.Join(ws, "USER.md")) }, "## USER.md\nsoul"},
	}
	for i, st := range steps {
		st.change()
		got, err := LoadBootstrap(ws, false)
		if err != nil || got != st.want {
			t.Fatalf("step %d: LoadBootstrap = %q, %v; want %q", i, got, err, st.want)
		}
	}
}

// Files last changed a while ago are read once and kept while they stat
// the same; a rewrite (also one that puts the mtime back), a new file
// and a link whose target appears are seen at the next call.
func TestLoadBootstrapKeepsSettledFiles(t *testing.T) {
	settle := bootSettle
	bootSettle = -time.Hour // everything counts as settled
	t.Cleanup(func() { bootSettle = settle })
	ws := t.TempDir()
	agents := filepath.Join(ws, "AGENTS.md")
	mustWrite(t, agents, "first")
	load := func(want string) int64 {
		t.Helper()
		before := bootLoads.Load()
		if got, err := LoadBootstrap(ws, false); err != nil || got != want {
			t.Fatalf("LoadBootstrap = %q, %v; want %q", got, err, want)
		}
		return bootLoads.Load() - before
	}
	load("## AGENTS.md\nfirst")
	if n := load("## AGENTS.md\nfirst"); n != 0 {
		t.Errorf("unchanged files read again (%d reads)", n)
	}
	fi, err := os.Stat(agents)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, agents, "other") // same size
	if err := os.Chtimes(agents, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" { // the change time: elsewhere mtime and size only
		load("## AGENTS.md\nother")
	}
	mustWrite(t, filepath.Join(ws, "USER.md"), "user")
	load("## AGENTS.md\nother\n\n## USER.md\nuser")
	// A link to a file not there yet: never kept, so the file shows once
	// it is written (the workspace directory does not change then).
	sub := filepath.Join(ws, "notes")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("notes", "soul.md"), filepath.Join(ws, "SOUL.md")); err != nil {
		t.Fatal(err)
	}
	load("## AGENTS.md\nother\n\n## USER.md\nuser")
	mustWrite(t, filepath.Join(sub, "soul.md"), "soul")
	load("## AGENTS.md\nother\n\n## SOUL.md\nsoul\n\n## USER.md\nuser")
}
