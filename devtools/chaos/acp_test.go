package chaos

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"

	"github.com/heraldhq/herald/agent/acp/acptest"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/agent/sandbox"
	"github.com/heraldhq/herald/agent/tools"
	"github.com/heraldhq/herald/devtools/harness"
	"github.com/heraldhq/herald/devtools/pgtest"
)

// TestACPAgentsAfterKill9 (SPEC §26, §25; issue 39): a real gateway runs
// four ACP agents (this test binary as the fake agent), three mid-prompt
// and one in session/new, and is SIGKILLed. Their processes die with it
// (nothing is left running: bwrap --die-with-parent, or the Landlock
// helper's death signal). After the restart:
//   - the agent that advertises loadSession is started again, resumed
//     with session/load, and ends success, "Resumed … (1×)";
//   - the one that does not advertise it ends unknown, saying why;
//   - the one that advertises it but has lost the session ends unknown
//     too (not error), with the agent's refusal in the note;
//   - the one killed before it had a session starts over with its task.
//
// Each is announced once. Run under each sandbox mechanism that works here
// (ACP agents are never run unconfined: tools.exec.sandbox "off" still
// confines them).
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
	agents := func() []int { return sandboxed(markEnv + "=" + mark) }
	cfg := harness.Config{Listen: r.addr, ModelURL: model.url, MainConcurrent: 2, Subagents: 4, Children: 5, GraceSeconds: 1,
		SubagentsExtra: `allowAgents: ["*"]`, Agents: acpAgents(exe, ws, mark),
		Extra: fmt.Sprintf(`tools: { exec: { sandbox: %q } },`, mech)}
	if err := cfg.Write(r.cfgPath); err != nil {
		t.Fatal(err)
	}
	const client = "acp"
	conv := tools.ConversationWorkspace(ws, webKey(client))

	gw := r.start()
	web := harness.NewWeb(gw.Base, 2)
	for _, id := range []string{"loader", "noload", "lost", "fresh"} {
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
	r.waitUntil("three ACP agents mid-prompt, one in session/new", func() bool {
		return exists(filepath.Join(conv, "prompted-slow.txt")) && exists(filepath.Join(conv, "prompted-slow-noload.txt")) &&
			exists(filepath.Join(conv, "prompted-slow-lost.txt")) && exists(filepath.Join(conv, "held-new.txt")) && len(agents()) >= 4
	})
	if err := gw.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	r.waitUntil("the ACP agents' processes to end with the gateway", func() bool { return len(agents()) == 0 })
	t.Logf("%s: the agents' processes ended %s after the gateway was SIGKILLed", mech, time.Since(killed).Round(time.Millisecond))

	gw = r.start()
	r.waitUntil("the four runs announced", func() bool {
		a := announces(t, web, client)
		return len(a["loader"]) > 0 && len(a["noload"]) > 0 && len(a["lost"]) > 0 && len(a["fresh"]) > 0
	})
	got := announces(t, web, client)
	for label, want := range map[string][]string{
		"loader": {"Status: success\n", "Resumed and finished.", "Resumed after the gateway stopped (1×)."},
		"noload": {"Status: unknown\n", "Its ACP agent cannot load sessions (no loadSession), so it was not resumed."},
		"lost":   {"Status: unknown\n", "Its ACP agent could not load its session when started again (", "Resource not found"},
		"fresh":  {"Status: success\n", "Started over: work on the code", "Resumed after the gateway stopped (1×)."},
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

// acpAgents is the agents.list of these tests: main working in ws, and
// the fake ACP agent (the test binary exe) as loader (mode slow), noload
// (slow-noload), lost (slow-lost) and fresh (hold-new), its processes
// marked with mark.
func acpAgents(exe, ws, mark string) string {
	rt := func(mode string) string {
		return fmt.Sprintf(`runtime: { type: "acp", command: %q, env: { %s: %q, %s: %q } }`, exe, acptest.EnvMode, mode, markEnv, mark)
	}
	return fmt.Sprintf(`list: [{ id: "main", default: true, workspace: %q }, { id: "loader", %s }, { id: "noload", %s }, { id: "lost", %s }, { id: "fresh", %s }],`,
		ws, rt("slow"), rt("slow-noload"), rt("slow-lost"), rt("hold-new"))
}

// TestACPAgentAdoptedByReplica (SPEC §26 with §14, §25): two gateway
// processes on one PostgreSQL state sharing the main agent's workspace.
// The one running an ACP agent mid-prompt is SIGKILLed: the agent's
// processes end with it, and the other replica, once the lease lapses,
// starts the agent again with session/load; the run is announced once,
// success, resumed once.
func TestACPAgentAdoptedByReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: runs real gateway processes")
	}
	if _, err := sandbox.Probe().Pick(sandbox.Auto, "test"); err != nil {
		t.Skipf("no sandbox here, so no ACP agent runs: %v", err)
	}
	dbURL := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := harness.BuildOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	model := newOrchModel(nil)
	llm := llmtest.NewOpenAI(t, model.handle)
	dir := t.TempDir()
	ws := filepath.Join(dir, "main-ws")
	mark := filepath.Base(dir)
	set := &replicaSet{t: t, ctx: ctx, bin: bin, db: dbURL, model: llm.URL, dir: dir, mainConcurrent: 2,
		agents: acpAgents(exe, ws, mark), subagents: `allowAgents: ["*"]`}
	p := postgresProbe(t, dbURL)
	agents := func() []int { return sandboxed(markEnv + "=" + mark) }
	wait := func(what string, cond func() bool) { t.Helper(); waitFor(t, what, cond) }
	const client = "acp-replicas"
	conv := tools.ConversationWorkspace(ws, webKey(client))

	a, b := set.start("gw-a"), set.start("gw-b")
	if _, err := a.web.Post(ctx, client, "code: loader"); err != nil {
		t.Fatal(err)
	}
	wait("the agent mid-prompt on gw-a", func() bool {
		return exists(filepath.Join(conv, "prompted-slow.txt")) && len(agents()) > 0 &&
			p.s(`SELECT owner FROM runs WHERE label = 'loader'`) == "gw-a"
	})
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	wait("the agent's processes to end with gw-a", func() bool { return len(agents()) == 0 })
	wait("the run announced", func() bool { return len(announces(t, b.web, client)["loader"]) > 0 })
	t.Logf("gw-a SIGKILLed → the ACP run resumed and announced by gw-b after %s (leaseSeconds 2)", time.Since(killed).Round(time.Millisecond))
	got := announces(t, b.web, client)["loader"]
	if len(got) != 1 {
		t.Fatalf("announced %d times, want once: %q", len(got), got)
	}
	for _, w := range []string{"Status: success\n", "Resumed and finished.", "Resumed after the gateway stopped (1×)."} {
		if !strings.Contains(got[0], w) {
			t.Errorf("the announce lacks %q:\n%s", w, got[0])
		}
	}
	if owner := p.s(`SELECT owner FROM runs WHERE label = 'loader'`); owner != "gw-b" {
		t.Errorf("the run ended owned by %q, want gw-b", owner)
	}
	if b, err := os.ReadFile(filepath.Join(conv, "loaded.txt")); err != nil || string(b) != "fake-session-1" {
		t.Errorf("gw-b did not load the agent's session (loaded.txt: %q, %v)", b, err)
	}
	wait("no ACP agent process left after the run ended", func() bool { return len(agents()) == 0 })
}

// fileHas reports whether the file at path holds text.
func fileHas(path, text string) bool {
	b, err := os.ReadFile(path)
	return err == nil && bytes.Contains(b, []byte(text))
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

// TestRealClaudeAgentAfterKill9 (SPEC §26, issue 39): the real
// @zed-industries/claude-agent-acp (scripts/acp-agents.sh) as a sub-agent
// of the real binary, its model the fake Anthropic API. SIGKILL while its
// first model call is in flight; after the restart it is started again
// and loads its session: its next model call holds the task it was given
// before the kill (the session's history), and the run is announced once,
// success, resumed once.
func TestRealClaudeAgentAfterKill9(t *testing.T) {
	prefix := os.Getenv("HERALD_ACP_NPM")
	if prefix == "" {
		t.Skip("HERALD_ACP_NPM is not set: scripts/acp-agents.sh (run by make test when npm is present) installs the real agent")
	}
	claude := filepath.Join(prefix, "node_modules", ".bin", "claude-agent-acp")
	if _, err := os.Stat(claude); err != nil {
		t.Skipf("claude-agent-acp is not installed under %s: %v", prefix, err)
	}
	if _, err := sandbox.Probe().Pick(sandbox.Auto, "test"); err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	var mu sync.Mutex
	var calls []llmtest.Call
	anthropic := llmtest.NewAnthropic(t, func(c llmtest.Call) llmtest.Reply {
		if !slices.Contains(c.Tools, "Write") { // not the agent's turn (a title, a summary)
			return llmtest.Reply{Text: "ok"}
		}
		mu.Lock()
		calls = append(calls, c)
		n := len(calls)
		mu.Unlock()
		if n == 1 {
			return llmtest.Reply{Text: "never delivered", Delay: 10 * time.Minute}
		}
		return llmtest.Reply{Text: "Finished the task after the restart."}
	})
	agentCalls := func() []llmtest.Call {
		mu.Lock()
		defer mu.Unlock()
		return append([]llmtest.Call(nil), calls...)
	}
	model := newOrchModel(nil)
	r := orchRig(t, model, 2)
	ws := filepath.Join(filepath.Dir(r.stateDir), "main-ws")
	cfg := harness.Config{Listen: r.addr, ModelURL: model.url, MainConcurrent: 2, Subagents: 4, Children: 5, GraceSeconds: 1,
		SubagentsExtra: `allowAgents: ["*"]`,
		Agents: fmt.Sprintf(`list: [{ id: "main", default: true, workspace: %q },
    { id: "claude", runtime: { type: "acp", command: %q, network: true, readPaths: [%q],
        env: { PATH: "/usr/local/bin:/usr/bin:/bin", ANTHROPIC_BASE_URL: %q, ANTHROPIC_API_KEY: "sk-test",
               DISABLE_TELEMETRY: "1", DISABLE_ERROR_REPORTING: "1", DISABLE_AUTOUPDATER: "1" } } }],`,
			ws, claude, filepath.Join(prefix, "node_modules"), anthropic.URL),
		Extra: `security: { toolPolicy: { groups: { acp: "allow" } } },`}
	if err := cfg.Write(r.cfgPath); err != nil {
		t.Fatal(err)
	}
	const client = "real-claude"

	gw := r.start()
	web := harness.NewWeb(gw.Base, 2)
	if _, err := web.Post(r.ctx, client, "code: claude"); err != nil {
		t.Fatal(err)
	}
	// Claude Code writes its session to $HOME/.claude/projects/<cwd>/ — a
	// kill before that leaves nothing to load (the run ends unknown).
	sessions := filepath.Join(r.stateDir, "workspace", "claude", "conversations", "*", ".claude", "projects", "*", "*.jsonl")
	r.waitUntil("Claude Code in its first model call, its session in its HOME", func() bool {
		paths, _ := filepath.Glob(sessions)
		return len(agentCalls()) == 1 && len(paths) == 1 && fileHas(paths[0], "work on the code")
	})
	if err := gw.Kill(); err != nil {
		t.Fatal(err)
	}
	gw = r.start()
	r.waitUntil("the run announced", func() bool { return len(announces(t, web, client)["claude"]) > 0 })
	got := announces(t, web, client)["claude"]
	if len(got) != 1 {
		t.Fatalf("announced %d times, want once: %q", len(got), got)
	}
	for _, w := range []string{"Status: success\n", "Finished the task after the restart.", "Resumed after the gateway stopped (1×)."} {
		if !strings.Contains(got[0], w) {
			t.Errorf("the announce lacks %q:\n%s", w, got[0])
		}
	}
	cs := agentCalls()
	if len(cs) < 2 {
		t.Fatalf("Claude Code made %d model calls, want one more after the restart", len(cs))
	}
	var history []string
	for _, m := range cs[len(cs)-1].Messages {
		if m.Role == agent.RoleUser {
			history = append(history, m.Text)
		}
	}
	if !strings.Contains(strings.Join(history, "\n"), "work on the code") {
		t.Errorf("Claude Code's call after the restart does not hold the task it was given before the kill (its session was not loaded); its user messages: %q", history)
	}
}
