package chaos

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/devtools/harness"
)

// resumeModel is the scripted model of TestRunsResumeAfterKill9. The main
// agent answers "RESUME <label>…" with one sessions_spawn per label. A
// sub-agent whose label starts with "w" or "k" calls write_file, then makes
// a slow call that hangs (until the gateway is killed) as many times as
// hangs[label] says and is answered after; one whose label starts with "x"
// calls exec (a 5 s sleep) and answers what the call gave it.
type resumeModel struct {
	mu          sync.Mutex
	hangs       map[string]int
	writeAsked  map[string]int         // label → write_file calls the model made
	writeSeen   map[string][]string    // label → write_file results of the last call
	slow        map[string][]time.Time // label → when each slow call arrived
	execResults map[string][]string    // label → exec results the model saw
}

var (
	resumeRe      = regexp.MustCompile(`^RESUME ((?:\S+ ?)+)$`)
	resumeLabelRe = regexp.MustCompile(`(?m)^- Label: (\S+)$`)
)

func (m *resumeModel) handle(c llmtest.Call) llmtest.Reply {
	m.mu.Lock()
	defer m.mu.Unlock()
	var last agent.Message
	if len(c.Messages) > 0 {
		last = c.Messages[len(c.Messages)-1]
	}
	mm := resumeLabelRe.FindStringSubmatch(c.System)
	if mm == nil || !strings.Contains(c.System, "Sub-agent context") {
		if last.Role == agent.RoleTool {
			return llmtest.Reply{Text: "spawned"}
		}
		spawn := resumeRe.FindStringSubmatch(strings.TrimSpace(c.LastUser()))
		if spawn == nil {
			return llmtest.Reply{Text: "ack"}
		}
		var calls []agent.ToolCall
		for _, l := range strings.Fields(spawn[1]) {
			args, _ := json.Marshal(map[string]string{"task": "resume work " + l, "label": l})
			calls = append(calls, agent.ToolCall{Name: "sessions_spawn", Args: args})
		}
		return llmtest.Reply{ToolCalls: calls}
	}
	label := mm[1]
	if strings.Contains(c.LastUser(), "Announce step") {
		return llmtest.Reply{Text: "Result:\n" + label + " done\n\nNotes:\n(none)"}
	}
	results := map[string][]string{}
	for _, msg := range c.Messages {
		for _, r := range msg.ToolResults {
			results[r.Name] = append(results[r.Name], r.Content)
		}
	}
	if last.Role != agent.RoleTool {
		if strings.HasPrefix(label, "x") {
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "exec", Args: json.RawMessage(`{"command":"sleep 5; echo slept"}`)}}}
		}
		m.writeAsked[label]++
		args, _ := json.Marshal(map[string]string{"path": label + ".txt", "content": "written once"})
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "write_file", Args: args}}}
	}
	if strings.HasPrefix(label, "x") {
		m.execResults[label] = results["exec"]
		return llmtest.Reply{Text: label + " read its exec result"}
	}
	m.writeSeen[label] = results["write_file"]
	m.slow[label] = append(m.slow[label], time.Now())
	if m.hangs[label] > 0 {
		m.hangs[label]--
		return llmtest.Reply{Text: "never delivered", Delay: 10 * time.Minute}
	}
	return llmtest.Reply{Text: label + " finished"}
}

func (m *resumeModel) slowCalls(label string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.slow[label])
}

// TestRunsResumeAfterKill9 (SPEC §25): a real gateway is killed with
// SIGKILL while three sub-agent runs are in flight, and started again on
// the same state, three times.
//   - w1 wrote a file (write_file: not repeatable) and waits in a slow
//     model call at the first kill: after the restart it resumes, makes
//     that call again, ends success once and says "Resumed … (1×)"; its
//     write happened exactly once (one call, one result, the file not
//     written again).
//   - x1 is in a 5 s exec (not repeatable) at the first kill: after the
//     restart its model is given the interrupted result, and it ends
//     success, resumed once.
//   - k1 waits in its slow call at every kill: after the third it ends
//     unknown ("Resumed 2×; the gateway stopped again…"), announced once.
func TestRunsResumeAfterKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: runs real gateway processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin, err := harness.BuildHerald(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	model := &resumeModel{hangs: map[string]int{"w1": 1, "k1": 3}, writeAsked: map[string]int{}, writeSeen: map[string][]string{},
		slow: map[string][]time.Time{}, execResults: map[string][]string{}}
	llm := llmtest.NewOpenAI(t, model.handle)
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, ctx: ctx, bin: bin, addr: addr, cfgPath: filepath.Join(dir, "herald.json5"),
		stateDir: filepath.Join(dir, "state"), logPath: filepath.Join(dir, "gateway.log")}
	cfg := harness.Config{Listen: addr, ModelURL: llm.URL, MainConcurrent: 2, Subagents: 4, Children: 5, GraceSeconds: 1,
		Extra: `tools: { exec: { sandbox: "off" } }, security: { toolPolicy: { tools: { exec: "allow" } } },`}
	if err := cfg.Write(r.cfgPath); err != nil {
		t.Fatal(err)
	}

	gw := r.start()
	web := harness.NewWeb(gw.Base, 2)
	if _, err := web.Post(ctx, "resume", "RESUME w1 x1 k1"); err != nil {
		t.Fatal(err)
	}
	r.waitUntil("w1 and k1 in their slow calls, x1 in its exec", func() bool {
		return model.slowCalls("w1") == 1 && model.slowCalls("k1") == 1 && execRunning(r.stateDir, "resume work x1")
	})
	wrote := writtenFile(t, r.stateDir, "w1.txt")
	if err := gw.Kill(); err != nil {
		t.Fatal(err)
	}

	// Second life: w1 and x1 resume and end; k1 hangs again.
	restart := time.Now()
	gw = r.start()
	r.waitUntil("w1 and x1 announced, k1 in its slow call again", func() bool {
		return len(announces(t, web, "resume")) == 2 && model.slowCalls("k1") == 2
	})
	model.mu.Lock()
	resumedCall := model.slow["w1"][1]
	model.mu.Unlock()
	t.Logf("restart to the resumed run's next model call: %s (process start, store open, adopt, lane)", resumedCall.Sub(restart).Round(time.Millisecond))
	if err := gw.Kill(); err != nil {
		t.Fatal(err)
	}
	gw = r.start() // third life: k1 resumes a second time and hangs
	r.waitUntil("k1 in its slow call a third time", func() bool { return model.slowCalls("k1") == 3 })
	if err := gw.Kill(); err != nil {
		t.Fatal(err)
	}
	gw = r.start() // fourth life: k1 is past maxResumes (2)
	r.waitUntil("k1 announced", func() bool { return len(announces(t, web, "resume")) == 3 })

	got := announces(t, web, "resume")
	for label, want := range map[string][]string{
		"w1": {"Status: success\n", "w1 done", "Resumed after the gateway stopped (1×)."},
		"x1": {"Status: success\n", "x1 done", "Resumed after the gateway stopped (1×)."},
		"k1": {"Status: unknown\n", "Resumed 2×; the gateway stopped again, its outcome is unknown."},
	} {
		if len(got[label]) != 1 {
			t.Errorf("%s announced %d times, want once: %q", label, len(got[label]), got[label])
			continue
		}
		for _, w := range want {
			if !strings.Contains(got[label][0], w) {
				t.Errorf("%s's announce lacks %q:\n%s", label, w, got[label][0])
			}
		}
	}
	model.mu.Lock()
	defer model.mu.Unlock()
	if model.writeAsked["w1"] != 1 || len(model.writeSeen["w1"]) != 1 || strings.Contains(model.writeSeen["w1"][0], "interrupted") {
		t.Errorf("w1's write_file: asked %d times, results the resumed call saw %q; want one call and its one real result",
			model.writeAsked["w1"], model.writeSeen["w1"])
	}
	if again := writtenFile(t, r.stateDir, "w1.txt"); !again.Equal(wrote) {
		t.Errorf("w1.txt was written again after the restart (modified %s, then %s)", wrote, again)
	}
	if res := model.execResults["x1"]; len(res) != 1 || res[0] != agent.InterruptedResult {
		t.Errorf("x1's model saw exec results %q; want exactly %s", res, agent.InterruptedResult)
	}
	if n := len(model.slow["k1"]); n != 3 {
		t.Errorf("k1 made its slow call %d times, want 3 (the first run and two resumes)", n)
	}
}

// announces are the announce texts of a web conversation, by task label.
func announces(t *testing.T, web *harness.Web, client string) map[string][]string {
	t.Helper()
	msgs, err := web.Messages(context.Background(), client, 0)
	if err != nil {
		return nil
	}
	out := map[string][]string{}
	for _, m := range msgs {
		if m.Role == "announce" {
			l := harness.AnnouncedLabel(m.Text)
			out[l] = append(out[l], m.Text)
		}
	}
	return out
}

// execRunning reports whether a transcript naming task (the run's, or its
// requester's) ends with an exec call that has no result yet.
func execRunning(stateDir, task string) bool {
	paths, _ := filepath.Glob(filepath.Join(stateDir, "transcripts", "*", "*.jsonl"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), task) {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		lastLine := lines[len(lines)-1]
		if strings.Contains(lastLine, `"role":"assistant"`) && strings.Contains(lastLine, `"name":"exec"`) {
			return true
		}
	}
	return false
}

// writtenFile is the modification time of the file name in a workspace
// under stateDir.
func writtenFile(t *testing.T, stateDir, name string) time.Time {
	t.Helper()
	var found []time.Time
	filepath.WalkDir(stateDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == name {
			if fi, err := d.Info(); err == nil {
				found = append(found, fi.ModTime())
			}
		}
		return nil
	})
	if len(found) != 1 {
		t.Fatalf("%d files named %s under %s, want 1", len(found), name, stateDir)
	}
	return found[0]
}
