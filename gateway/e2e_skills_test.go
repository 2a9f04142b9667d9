//go:build linux

package gateway_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/gateway"
)

// writeFile writes content at path, making its folders; mode 0755 for scripts.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

// skillPath finds the SKILL.md path the system prompt lists for name.
func skillPath(system, name string) string {
	for _, line := range strings.Split(system, "\n") {
		if strings.HasPrefix(line, "- "+name+": ") && strings.HasSuffix(line, ")") {
			return line[strings.LastIndex(line, "(")+1 : len(line)-1]
		}
	}
	return ""
}

// skillModel: "use <skill>" runs the skill's scripts/run.sh with exec,
// "read <skill>" reads its SKILL.md with read_file, "run: <cmd>" runs a
// command, "delegate <task>" spawns a sub-agent; the reply after a tool
// quotes its result.
func skillModel(c llmtest.Call) llmtest.Reply {
	last := c.Messages[len(c.Messages)-1]
	if strings.Contains(c.LastUser(), "Announce step") {
		return llmtest.Reply{Text: "Result:\ndone\n\nNotes:\n(none)"}
	}
	if len(last.ToolResults) > 0 {
		return llmtest.Reply{Text: "tool said: " + last.ToolResults[0].Content}
	}
	call := func(name string, args map[string]string) llmtest.Reply {
		b, _ := json.Marshal(args)
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: name, Args: b}}}
	}
	user := c.LastUser()
	switch {
	case strings.HasPrefix(user, "use "):
		p := skillPath(c.System, strings.TrimPrefix(user, "use "))
		return call("exec", map[string]string{"command": "sh " + filepath.Join(filepath.Dir(p), "scripts", "run.sh")})
	case strings.HasPrefix(user, "read "):
		return call("read_file", map[string]string{"path": skillPath(c.System, strings.TrimPrefix(user, "read "))})
	case strings.HasPrefix(user, "run: "):
		return call("exec", map[string]string{"command": strings.TrimPrefix(user, "run: ")})
	case strings.HasPrefix(user, "delegate "):
		return call("sessions_spawn", map[string]string{"task": strings.TrimPrefix(user, "delegate ")})
	}
	return llmtest.Reply{Text: "ok"}
}

// TestE2ESkills: skills of the agent workspace and of skills.paths are
// listed in the prompt (a sub-agent's too), their SKILL.md is read with
// read_file and their scripts run with exec in the sandbox, which cannot
// write them; a skill added while the gateway runs is listed at the next
// turn; a malformed SKILL.md is skipped.
func TestE2ESkills(t *testing.T) {
	t.Parallel()
	mech := workingMechanisms(t)[0]
	stateDir, shared := t.TempDir(), t.TempDir()
	aws := filepath.Join(stateDir, "workspace", "main")
	writeFile(t, filepath.Join(aws, "skills", "klingon", "SKILL.md"), "---\nname: klingon\ndescription: Greets people in Klingon.\n---\nRun scripts/run.sh.\n")
	writeFile(t, filepath.Join(aws, "skills", "klingon", "scripts", "run.sh"), "echo nuqneH\n")
	writeFile(t, filepath.Join(shared, "release-notes", "SKILL.md"), "---\nname: release-notes\ndescription: Writes release notes from the changelog.\n---\nStep 1: read CHANGELOG.\n")
	writeFile(t, filepath.Join(shared, "release-notes", "scripts", "run.sh"), "echo notes from $(basename $(dirname $(dirname $0)))\n")
	writeFile(t, filepath.Join(shared, "broken", "SKILL.md"), "no front matter here\n")
	cfg := strings.NewReplacer("MECH", `"`+mech+`"`, "SHARED", shared).Replace(`{
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [{ id: "main" }] },
  security: { toolPolicy: { default: "allow", tools: { exec: "allow" } } },
  tools: { exec: { sandbox: MECH, timeoutSeconds: 20 } },
  skills: { paths: ["SHARED"] },
  channels: { web: { enabled: true } },
}`)
	tg := newTestGatewayIn(t, stateDir, cfg, skillModel)
	const client = "skills"

	if got := ask(t, tg, client, "use klingon"); !strings.Contains(got, "nuqneH") {
		t.Errorf("the workspace skill's script did not run: %q", got)
	}
	if got := ask(t, tg, client, "use release-notes"); !strings.Contains(got, "notes from release-notes") {
		t.Errorf("the skills.paths skill's script did not run: %q", got)
	}
	if got := ask(t, tg, client, "read release-notes"); !strings.Contains(got, "Step 1: read CHANGELOG.") {
		t.Errorf("read_file of a skills.paths SKILL.md: %q", got)
	}
	victim := filepath.Join(shared, "release-notes", "SKILL.md")
	ask(t, tg, client, "run: echo pwned > "+victim+"; touch "+filepath.Join(shared, "new-file"))
	if b, _ := os.ReadFile(victim); strings.Contains(string(b), "pwned") {
		t.Error("exec wrote a skill's SKILL.md")
	}
	if _, err := os.Stat(filepath.Join(shared, "new-file")); err == nil {
		t.Error("exec created a file in a skills folder")
	}

	var top string
	for _, c := range tg.LLM.Requests() {
		if c.LastUser() == "use klingon" {
			top = c.System
		}
	}
	for _, want := range []string{"# Skills", "- klingon: Greets people in Klingon. (" + filepath.Join(aws, "skills", "klingon", "SKILL.md") + ")",
		"- release-notes: Writes release notes from the changelog."} {
		if !strings.Contains(top, want) {
			t.Errorf("system prompt lacks %q:\n%s", want, top)
		}
	}
	if strings.Contains(top, "broken") {
		t.Errorf("a malformed skill is listed:\n%s", top)
	}

	// Added while running: listed at the next turn, and to a sub-agent.
	writeFile(t, filepath.Join(aws, "skills", "weather", "SKILL.md"), "---\nname: weather\ndescription: Reports the weather.\n---\n")
	seq := webPost(t, tg.URL, client, "delegate check the weather")
	waitWeb(t, tg, client, seq, "announce", func(string) bool { return true })
	var child string
	for _, c := range tg.LLM.Requests() {
		if strings.Contains(c.System, "Sub-agent context") {
			child = c.System
		}
	}
	if !strings.Contains(child, "- weather: Reports the weather.") || !strings.Contains(child, "- klingon: ") {
		t.Errorf("the sub-agent's prompt lacks the skills (the new one included):\n%s", child)
	}
}

// TestDoctorNamesBrokenSkill: doctor names a malformed SKILL.md with its
// path and why; the well-formed one is counted.
func TestDoctorNamesBrokenSkill(t *testing.T) {
	stateDir := t.TempDir()
	aws := filepath.Join(stateDir, "workspace", "main")
	writeFile(t, filepath.Join(aws, "skills", "ok", "SKILL.md"), "---\nname: ok\ndescription: fine\n---\n")
	broken := filepath.Join(aws, "skills", "bad", "SKILL.md")
	writeFile(t, broken, "---\nname: bad\n---\n")
	cfg, err := config.Parse("doctor.json5", []byte(`{
  models: { providers: { demo: { api: "demo", models: [{ id: "demo" }] } } },
  agents: { defaults: { model: "demo/demo" }, list: [{ id: "main" }] },
}`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, c := range gateway.Doctor(context.Background(), cfg, stateDir) {
		if c.Name == "skills" {
			if c.Status != channels.CheckWarn || !strings.Contains(c.Detail, broken+": front matter has no description") {
				t.Errorf("skills check = %+v, want a warning naming %s", c, broken)
			}
			found = true
		}
	}
	if !found {
		t.Error("doctor has no skills check")
	}
	r := gateway.SkillsReport(cfg, stateDir)
	if len(r.Agents) != 1 || len(r.Agents[0].Skills) != 1 || r.Agents[0].Skills[0].Name != "ok" || len(r.Problems) != 1 || r.Problems[0].Path != broken {
		t.Errorf("SkillsReport = %+v", r)
	}
}
