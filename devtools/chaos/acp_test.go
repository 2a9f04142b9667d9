package chaos

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/acp/acptest"
	"github.com/heraldhq/herald/agent/sandbox"
	"github.com/heraldhq/herald/agent/tools"
	"github.com/heraldhq/herald/devtools/harness"
)

// TestACPAgentsAfterKill9 (SPEC §26, §25; issue 39): a real gateway runs
// two ACP agents (this test binary as the fake agent), both mid-prompt,
// and is SIGKILLed. Their processes die with it (nothing is left running:
// bwrap --die-with-parent, or the Landlock helper's death signal). After
// the restart the agent that advertises loadSession is started again and
// resumed with session/load, and announced once, success, "Resumed … (1×)";
// the one that does not ends unknown with the note saying why, announced
// once. Run under each sandbox mechanism that works here (ACP agents are
// never run unconfined: tools.exec.sandbox "off" still confines them).
func TestACPAgentsAfterKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: runs real gateway processes")
	}
	probe := sandbox.Probe()
	for _, mech := range []string{sandbox.Bwrap, sandbox.Landlock, sandbox.Off} {
		t.Run(mech, func(t *testing.T) {
			if _, err := probe.Pick(mech, "test"); err != nil && mech != sandbox.Off {
				t.Skipf("%s does not work here: %v", mech, err)
			}
			if _, err := probe.Pick(sandbox.Auto, "test"); err != nil {
				t.Skipf("no sandbox here, so no ACP agent runs (its runs end error naming tools.exec.sandbox): %v", err)
			}
			acpKill9(t, mech)
		})
	}
}

func acpKill9(t *testing.T, mech string) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	model := newOrchModel(nil)
	r := orchRig(t, model, 2)
	ws := filepath.Join(filepath.Dir(r.stateDir), "main-ws")
	// mark is in the environment of every process the sandbox starts
	// for these agents (bwrap, the Landlock helper, the agent): the
	// processes of this test, not of others running at once.
	mark := filepath.Base(filepath.Dir(r.stateDir))
	rt := func(mode string) string {
		return fmt.Sprintf(`runtime: { type: "acp", command: %q, env: { %s: %q, %s: %q } }`, exe, acptest.EnvMode, mode, markEnv, mark)
	}
	agents := func() []int { return sandboxed(markEnv + "=" + mark) }
	cfg := harness.Config{Listen: r.addr, ModelURL: model.url, MainConcurrent: 2, Subagents: 4, Children: 5, GraceSeconds: 1,
		SubagentsExtra: `allowAgents: ["*"]`,
		Agents: fmt.Sprintf(`list: [{ id: "main", default: true, workspace: %q }, { id: "loader", %s }, { id: "noload", %s }],`,
			ws, rt("slow"), rt("slow-noload")),
		Extra: fmt.Sprintf(`tools: { exec: { sandbox: %q } },`, mech)}
	if err := cfg.Write(r.cfgPath); err != nil {
		t.Fatal(err)
	}
	const client = "acp"
	conv := tools.ConversationWorkspace(ws, webKey(client))

	gw := r.start()
	web := harness.NewWeb(gw.Base, 2)
	for _, id := range []string{"loader", "noload"} {
		if _, err := web.Post(r.ctx, client, "code: "+id); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		if t.Failed() {
			msgs, _ := web.Messages(r.ctx, client, 0)
			var files []string
			filepath.WalkDir(r.stateDir, func(p string, d fs.DirEntry, err error) error {
				files = append(files, p)
				return nil
			})
			t.Logf("conversation: %+v\nagent processes: %v\nstate: %v", msgs, agents(), files)
		}
	}()
	r.waitUntil("both ACP agents mid-prompt", func() bool {
		return exists(filepath.Join(conv, "prompted-slow.txt")) && exists(filepath.Join(conv, "prompted-slow-noload.txt")) && len(agents()) >= 2
	})
	if err := gw.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	r.waitUntil("the ACP agents' processes to end with the gateway", func() bool { return len(agents()) == 0 })
	t.Logf("%s: the agents' processes ended %s after the gateway was SIGKILLed", mech, time.Since(killed).Round(time.Millisecond))

	gw = r.start()
	r.waitUntil("both runs announced", func() bool {
		a := announces(t, web, client)
		return len(a["loader"]) > 0 && len(a["noload"]) > 0
	})
	got := announces(t, web, client)
	for label, want := range map[string][]string{
		"loader": {"Status: success\n", "Resumed and finished.", "Resumed after the gateway stopped (1×)."},
		"noload": {"Status: unknown\n", "Its ACP agent cannot load sessions (no loadSession), so it was not resumed."},
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
	if b, err := os.ReadFile(filepath.Join(conv, "loaded.txt")); err != nil || string(b) != "fake-session-1" {
		t.Errorf("the agent was not asked to load its session (loaded.txt: %q, %v)", b, err)
	}
	r.waitUntil("no ACP agent process left after the runs ended", func() bool { return len(agents()) == 0 })
}

// exists reports whether a file is there.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// markEnv marks the processes a test's gateway starts for its ACP agents.
const markEnv = "HERALD_CHAOS_MARK"

// sandboxed are the pids of the processes with kv in their environment,
// wherever they are confined.
func sandboxed(kv string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, v := range bytes.Split(env, []byte{0}) {
			if string(v) == kv {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}
