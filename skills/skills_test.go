package skills

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeSkill(t *testing.T, dir, folder, content string) string {
	t.Helper()
	p := filepath.Join(dir, folder, FileName)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoad(t *testing.T) {
	ws, shared := t.TempDir(), t.TempDir()
	good := writeSkill(t, ws, "pdf", "---\nname: pdf-tools\ndescription: >\n  Extract text and tables\n  from PDF files.\nlicense: MIT\n---\n# PDF\nRun scripts/extract.sh.\n")
	writeSkill(t, shared, "deploy", "---\r\nname: deploy\r\ndescription: \"Deploy the app: build, test, ship.\"\r\n---\r\n")
	bad := map[string]string{
		"nofm":   "# just markdown\n",
		"yaml":   "---\nname: [oops\ndescription: x\n---\n",
		"nodesc": "---\nname: nodesc\n---\n",
		"name":   "---\nname: Bad Name\ndescription: x\n---\n",
		"open":   "---\nname: open\ndescription: never closed\n",
	}
	paths := map[string]string{}
	for folder, c := range bad {
		paths[folder] = writeSkill(t, shared, folder, c)
	}
	dup := writeSkill(t, shared, "pdf2", "---\nname: pdf-tools\ndescription: another\n---\n")
	os.MkdirAll(filepath.Join(shared, "not-a-skill"), 0o755)

	list, probs := Load([]string{filepath.Join(ws), shared, filepath.Join(t.TempDir(), "missing")})
	if len(list) != 2 || list[0].Name != "deploy" || list[1].Name != "pdf-tools" {
		t.Fatalf("skills = %+v", list)
	}
	if list[1].Description != "Extract text and tables from PDF files." || list[1].Path != good {
		t.Errorf("pdf-tools = %+v", list[1])
	}
	if list[0].Description != "Deploy the app: build, test, ship." {
		t.Errorf("deploy = %+v", list[0])
	}
	named := map[string]string{}
	for _, p := range probs {
		named[p.Path] = p.Error
	}
	for folder, want := range map[string]string{"nofm": "no front matter", "yaml": "not valid YAML", "nodesc": "no description",
		"name": "must be lower-case", "open": "not closed"} {
		if !strings.Contains(named[paths[folder]], want) {
			t.Errorf("%s: problem %q, want one saying %q", paths[folder], named[paths[folder]], want)
		}
	}
	if !strings.Contains(named[dup], "also defined by "+good) {
		t.Errorf("duplicate: %q", named[dup])
	}
	if len(probs) != 6 {
		t.Errorf("%d problems, want 6: %+v", len(probs), probs)
	}
	p := Prompt(list)
	if !strings.Contains(p, "- pdf-tools: Extract text and tables from PDF files. ("+good+")") || !strings.Contains(p, "read_file") {
		t.Errorf("prompt:\n%s", p)
	}
	if Prompt(nil) != "" {
		t.Error("a prompt block without skills")
	}
}

func TestDirs(t *testing.T) {
	got := Dirs("/ws/main", []string{"team-skills", "/opt/skills/"}, "/state")
	want := []string{"/ws/main/skills", "/state/team-skills", "/opt/skills"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Dirs = %v, want %v", got, want)
	}
}

// TestLoadParsesOnlyChangedFiles: a SKILL.md whose modification time and
// size are unchanged is not read again (Load runs every turn); a changed
// time or size is read at the next Load.
func TestLoadParsesOnlyChangedFiles(t *testing.T) {
	dir := t.TempDir()
	p := writeSkill(t, dir, "s", "---\nname: s\ndescription: one\n---\n")
	at := time.Now().Add(-time.Hour).Truncate(time.Second)
	setTime := func(when time.Time) {
		if err := os.Chtimes(p, when, when); err != nil {
			t.Fatal(err)
		}
	}
	setTime(at)
	desc := func() string {
		t.Helper()
		list, probs := Load([]string{dir})
		if len(list) != 1 || len(probs) != 0 {
			t.Fatalf("skills %+v, problems %+v", list, probs)
		}
		return list[0].Description
	}
	if d := desc(); d != "one" {
		t.Fatalf("description %q, want one", d)
	}
	// Same size, same time: the parse is kept.
	writeSkill(t, dir, "s", "---\nname: s\ndescription: two\n---\n")
	setTime(at)
	if d := desc(); d != "one" {
		t.Errorf("unchanged time and size: description %q, want the kept parse (one)", d)
	}
	setTime(at.Add(time.Second))
	if d := desc(); d != "two" {
		t.Errorf("after a new modification time: description %q, want two", d)
	}
	writeSkill(t, dir, "s", "---\nname: s\ndescription: three!\n---\n")
	setTime(at.Add(time.Second))
	if d := desc(); d != "three!" {
		t.Errorf("after a new size: description %q, want three!", d)
	}
}

// BenchmarkLoad: one agent's prompt listing of 20 unchanged skills.
func BenchmarkLoad(b *testing.B) {
	dir := b.TempDir()
	for i := range 20 {
		p := filepath.Join(dir, fmt.Sprintf("s%d", i), FileName)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(fmt.Sprintf("---\nname: s%d\ndescription: skill number %d does things\n---\n# body\n", i, i)), 0o644)
	}
	for b.Loop() {
		if list, _ := Load([]string{dir}); len(list) != 20 {
			b.Fatal(len(list))
		}
	}
}
