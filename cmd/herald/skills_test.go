package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// herald skills list [--json] lists each agent's skills and names the
// malformed SKILL.md with its path.
func TestSkillsList(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "herald.json5")
	os.WriteFile(cfgPath, []byte(`{ models: { providers: { demo: { api: "demo", models: [{ id: "demo" }] } } },
  agents: { defaults: { model: "demo/demo" }, list: [{ id: "main" }, { id: "ops" }] }, skills: { paths: ["team"] } }`), 0o600)
	for p, c := range map[string]string{
		"workspace/main/skills/pdf/SKILL.md": "---\nname: pdf\ndescription: Reads PDFs.\n---\n",
		"team/deploy/SKILL.md":               "---\nname: deploy\ndescription: Ships it.\n---\n",
		"team/bad/SKILL.md":                  "---\nname: bad\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
		os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644)
	}
	var out, errb strings.Builder
	if code := run([]string{"skills", "list", "--json", "--config", cfgPath, "--state-dir", dir}, &out, &errb); code != 0 {
		t.Fatalf("skills list --json: %d %s", code, errb.String())
	}
	var r struct {
		Agents []struct {
			ID     string
			Skills []struct{ Name, Description, Path string }
			Dirs   []string
		}
		Problems []struct{ Path, Error string }
	}
	if err := json.Unmarshal([]byte(out.String()), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(r.Agents) != 2 || r.Agents[0].ID != "main" || len(r.Agents[0].Skills) != 2 || len(r.Agents[1].Skills) != 1 ||
		r.Agents[1].Skills[0].Path != filepath.Join(dir, "team/deploy/SKILL.md") {
		t.Errorf("agents = %+v", r.Agents)
	}
	if len(r.Problems) != 1 || r.Problems[0].Path != filepath.Join(dir, "team/bad/SKILL.md") || !strings.Contains(r.Problems[0].Error, "not closed") {
		t.Errorf("problems = %+v", r.Problems)
	}
	out.Reset()
	if code := run([]string{"skills", "list", "--config", cfgPath, "--state-dir", dir}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "pdf — Reads PDFs.") || !strings.Contains(out.String(), "skipped "+filepath.Join(dir, "team/bad/SKILL.md")) {
		t.Errorf("skills list: %d\n%s", code, out.String())
	}
	if len(r.Agents) == 2 && (len(r.Agents[1].Dirs) != 2 || r.Agents[1].Dirs[0] != filepath.Join(dir, "workspace/ops/skills")) {
		t.Errorf("ops dirs = %v", r.Agents[1].Dirs)
	}
	if !strings.Contains(out.String(), "agent ops: 1 skill\n") {
		t.Errorf("one skill is not counted as '1 skill':\n%s", out.String())
	}

	// An agent with no skills is told where a skill would be found.
	os.RemoveAll(filepath.Join(dir, "team"))
	out.Reset()
	want := "agent ops: no skills (a skill is a folder with a SKILL.md in " + filepath.Join(dir, "workspace/ops/skills") + " or " + filepath.Join(dir, "team") + ")"
	if code := run([]string{"skills", "list", "--config", cfgPath, "--state-dir", dir}, &out, &errb); code != 0 || !strings.Contains(out.String(), want) {
		t.Errorf("skills list with none: %d\n%s\nwant %q", code, out.String(), want)
	}
}
