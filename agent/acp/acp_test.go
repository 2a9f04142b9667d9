package acp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/acp/acptest"
	"github.com/heraldhq/herald/agent/sandbox"
	"github.com/heraldhq/herald/store"
)

func TestMain(m *testing.M) {
	if acptest.Main() {
		return
	}
	os.Exit(m.Run())
}

// fakeJob is a Job running this test binary as the fake agent in mode,
// in a fresh workspace, with its transcript in a temp file.
func fakeJob(t testing.TB, mode string) (Job, string) {
	t.Helper()
	if _, err := sandbox.Probe().Pick(sandbox.Auto, "test"); err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "child.jsonl")
	sess, err := agent.LoadSession(context.Background(), "agent:codex:subagent:x", "x", "codex", "agent:main:web:dm:a", path, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return Job{Spec: Spec{Name: "codex", Command: exe, Env: []string{EnvModeKV(mode)}, Workspace: ws}, Session: sess, Task: "write hello.txt"}, path
}

// EnvModeKV is the runtime.env entry that picks the fake's mode.
func EnvModeKV(mode string) string { return acptest.EnvMode + "=" + mode }

func transcript(t testing.TB, path string) []store.TranscriptEntry {
	t.Helper()
	_, entries, err := store.FileTranscripts{}.ReadTranscript(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

// noLeaks waits (up to 20 s: a loaded machine is slow to reap) for the
// goroutines of a run to end.
func noLeaks(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after the run, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// TestRunAllowedWritesFile: a permission the policy allows picks
// allow_once; the agent writes hello.txt in the workspace through
// fs/write_text_file; its updates reach the transcript and the activity
// line; the final message is the text after its last tool call.
func TestRunAllowedWritesFile(t *testing.T) {
	before := runtime.NumGoroutine()
	j, path := fakeJob(t, "work")
	var asked []string
	j.Authorize = func(_ context.Context, cc agent.CallContext, call agent.ToolCall, tool agent.Tool) error {
		asked = append(asked, call.Name+" "+tool.Group()+" "+string(call.Args))
		return nil
	}
	var lines []string
	j.OnActivity = func(l string) { lines = append(lines, l) }
	res := Run(context.Background(), j)
	if res.Err != nil || res.StopReason != "end_turn" {
		t.Fatalf("Run = %+v", res)
	}
	if res.Text != "Wrote hello.txt with a greeting." {
		t.Errorf("final message %q", res.Text)
	}
	if !res.Reported || res.Usage.Input != 1200 || res.Usage.Output != 300 {
		t.Errorf("usage %+v reported %v", res.Usage, res.Reported)
	}
	if res.Info.Name != "acpfake" || res.Info.Version != "0.1.0" || !res.Info.LoadSession {
		t.Errorf("info %+v", res.Info)
	}
	if got, err := os.ReadFile(filepath.Join(j.Workspace, "hello.txt")); err != nil || string(got) != "hello from acpfake" {
		t.Errorf("hello.txt = %q, %v", got, err)
	}
	if len(asked) != 1 || !strings.Contains(asked[0], `acp acp {`) || !strings.Contains(asked[0], `"title":"Write hello.txt"`) || !strings.Contains(asked[0], `"kind":"edit"`) {
		t.Errorf("authorized %q", asked)
	}
	all := strings.Join(lines, "\n")
	for _, want := range []string{"📋 plan: 1 steps", "✏️ wrote hello.txt", "🔧 Write hello.txt (completed)"} {
		if !strings.Contains(all, want) {
			t.Errorf("activity lacks %q:\n%s", want, all)
		}
	}
	var roles []string
	for _, e := range transcript(t, path) {
		roles = append(roles, e.Role+":"+e.Content)
	}
	got := strings.Join(roles, "|")
	want := "user:write hello.txt|system:Plan:\n- [pending] write hello.txt|assistant:I will write hello.txt.|tool:|assistant:Wrote hello.txt with a greeting."
	if got != want {
		t.Errorf("transcript\n%q\nwant\n%q", got, want)
	}
	noLeaks(t, before)
}

// TestRunDeniedRejects: a refused permission picks reject_once; nothing
// is written.
func TestRunDeniedRejects(t *testing.T) {
	j, _ := fakeJob(t, "work")
	j.Authorize = func(context.Context, agent.CallContext, agent.ToolCall, agent.Tool) error {
		return errors.New("denied by policy")
	}
	res := Run(context.Background(), j)
	if res.Err != nil || res.Text != "Permission denied; nothing written." {
		t.Fatalf("Run = %+v", res)
	}
	if _, err := os.Stat(filepath.Join(j.Workspace, "hello.txt")); !os.IsNotExist(err) {
		t.Errorf("hello.txt written after a refusal: %v", err)
	}
}

// TestRunStopSendsCancel: cancelling the run mid-prompt sends
// session/cancel (the agent sees it), the prompt ends cancelled and the
// process ends.
func TestRunStopSendsCancel(t *testing.T) {
	before := runtime.NumGoroutine()
	j, _ := fakeJob(t, "slow")
	ctx, cancel := context.WithCancel(context.Background())
	j.OnActivity = func(l string) {
		if strings.Contains(l, "long job") {
			cancel()
		}
	}
	res := Run(ctx, j)
	if !errors.Is(res.Err, context.Canceled) || res.StopReason != "cancelled" {
		t.Fatalf("Run = %+v", res)
	}
	if _, err := os.Stat(filepath.Join(j.Workspace, "cancelled.txt")); err != nil {
		t.Errorf("the agent did not see session/cancel: %v", err)
	}
	noLeaks(t, before)
}

// TestRunSteerPromptsAgain: a steering message is another prompt after the
// current one, answered with its final message.
func TestRunSteerPromptsAgain(t *testing.T) {
	j, _ := fakeJob(t, "nousage")
	steer := make(chan agent.Steer, 1)
	reply := make(chan agent.SteerReply, 1)
	steer <- agent.Steer{Text: "and a test", Reply: reply}
	j.Steer = steer
	res := Run(context.Background(), j)
	if res.Err != nil || res.Text != "Got: and a test" {
		t.Fatalf("Run = %+v", res)
	}
	if r := <-reply; r.Err != nil || r.Text != "Got: and a test" {
		t.Errorf("steer reply %+v", r)
	}
}

// TestRunReportsCost: the session cost an agent reports (usage_update,
// a running total) is told per prompt as what that prompt added, with the
// prompt's tokens; a cost in another currency is named, not counted; a
// Check that refuses stops the job before the agent starts or before the
// next prompt.
func TestRunReportsCost(t *testing.T) {
	j, _ := fakeJob(t, "costly")
	steer := make(chan agent.Steer, 1)
	reply := make(chan agent.SteerReply, 1)
	steer <- agent.Steer{Text: "and a test", Reply: reply}
	j.Steer = steer
	var got []Usage
	j.OnUsage = func(u Usage) { got = append(got, u) }
	res := Run(context.Background(), j)
	if res.Err != nil || res.Text != "Got: and a test" || !res.Costed || !res.Reported || fmt.Sprintf("%.4f", res.Cost) != "0.0800" ||
		res.Usage.Input != 2400 || res.Usage.Output != 600 || res.Currency != "" {
		t.Fatalf("Run = %+v", res)
	}
	if len(got) != 2 || fmt.Sprintf("%.4f %.4f", got[0].USD, got[1].USD) != "0.0500 0.0300" ||
		!got[0].HasCost || !got[0].HasTokens || got[0].Tokens.Input != 1200 || got[1].Tokens.Output != 300 {
		t.Errorf("OnUsage got %+v", got)
	}
	if r := <-reply; r.Err != nil || r.Text != "Got: and a test" {
		t.Errorf("steer reply %+v", r)
	}

	j, _ = fakeJob(t, "euro")
	got = nil
	j.OnUsage = func(u Usage) { got = append(got, u) }
	res = Run(context.Background(), j)
	if res.Err != nil || res.Costed || res.Cost != 0 || res.Currency != "EUR" || !res.Reported {
		t.Fatalf("Run in EUR = %+v", res)
	}
	if len(got) != 1 || got[0].HasCost || got[0].Currency != "EUR" {
		t.Errorf("OnUsage in EUR got %+v", got)
	}

	over := errors.New("💸 Budget reached")
	j, _ = fakeJob(t, "work")
	j.Check = func() error { return over }
	res = Run(context.Background(), j)
	if !errors.Is(res.Err, over) || res.StopReason != "" || res.Info.Name != "" {
		t.Errorf("Run refused before its start = %+v", res)
	}
	j, _ = fakeJob(t, "costly")
	steer, reply = make(chan agent.Steer, 1), make(chan agent.SteerReply, 1)
	steer <- agent.Steer{Text: "and a test", Reply: reply}
	j.Steer = steer
	checks := 0
	j.Check = func() error {
		if checks++; checks > 1 {
			return over
		}
		return nil
	}
	res = Run(context.Background(), j)
	if !errors.Is(res.Err, over) || res.Text != "Done, and it cost something." || fmt.Sprintf("%.4f", res.Cost) != "0.0500" {
		t.Errorf("Run refused before its second prompt = %+v", res)
	}
	if r := <-reply; !errors.Is(r.Err, over) {
		t.Errorf("the refused steering message was answered %+v", r)
	}
}

// TestRunLoadedCostCountsFromTotal: an agent whose session's running cost
// survives session/load (no usage_update replayed) is counted, in the
// loaded session, only what it added after the total the last job counted
// up to (Job.CostTotal); a total below it (a restarted count) counts whole.
func TestRunLoadedCostCountsFromTotal(t *testing.T) {
	j, _ := fakeJob(t, "kept")
	res := Run(context.Background(), j)
	if res.Err != nil || fmt.Sprintf("%.4f", res.Cost) != "0.0500" {
		t.Fatalf("first job = %+v", res)
	}
	ws := j.Workspace
	resume := func(total float64) (Result, []Usage) {
		t.Helper()
		j, _ := fakeJob(t, "kept")
		j.Workspace, j.LoadSession, j.CostTotal, j.Task = ws, "fake-session-1", total, "go on"
		var got []Usage
		j.OnUsage = func(u Usage) { got = append(got, u) }
		return Run(context.Background(), j), got
	}
	// The agent's total goes from $0.05 to $0.08: $0.03 is what it cost.
	res, got := resume(0.05)
	if res.Err != nil || res.Text != "Running total $0.08." || fmt.Sprintf("%.4f", res.Cost) != "0.0300" {
		t.Fatalf("resumed job = %+v", res)
	}
	if len(got) != 1 || fmt.Sprintf("%.4f %.4f", got[0].USD, got[0].Total) != "0.0300 0.0800" {
		t.Errorf("OnUsage of the resumed job got %+v", got)
	}
	// Counted up to more than it reports now ($0.11): a count that
	// restarted, so all of it is this prompt's.
	res, _ = resume(1)
	if res.Err != nil || fmt.Sprintf("%.4f", res.Cost) != "0.1100" {
		t.Errorf("job resumed above the agent's total = %+v", res)
	}
}

// TestRunCostOverBudgetCancels: a usage_update whose cost passes
// CheckCost cancels the prompt in flight (session/cancel): the job ends
// with CheckCost's error, its cost so far told to OnUsage.
func TestRunCostOverBudgetCancels(t *testing.T) {
	j, _ := fakeJob(t, "spender")
	over := errors.New("💸 Budget reached")
	var asked []string
	j.CheckCost = func(usd float64) error {
		asked = append(asked, fmt.Sprintf("%.2f", usd))
		if usd >= 0.04 {
			return over
		}
		return nil
	}
	var got []Usage
	j.OnUsage = func(u Usage) { got = append(got, u) }
	res := Run(context.Background(), j)
	if !errors.Is(res.Err, over) || res.StopReason != "cancelled" || !strings.HasPrefix(res.Text, "Spending.") || fmt.Sprintf("%.4f", res.Cost) != "0.0500" {
		t.Fatalf("Run = %+v", res)
	}
	if strings.Join(asked, " ") != "0.02 0.05" {
		t.Errorf("CheckCost asked with %q", asked)
	}
	if len(got) != 1 || fmt.Sprintf("%.4f", got[0].USD) != "0.0500" || !got[0].HasTokens {
		t.Errorf("OnUsage got %+v", got)
	}
	if _, err := os.Stat(filepath.Join(j.Workspace, "cancelled.txt")); err != nil {
		t.Errorf("the agent did not see session/cancel: %v", err)
	}
}

// TestRunConfinesFiles: reads outside the workspace get ACP errors, never
// the file.
func TestRunConfinesFiles(t *testing.T) {
	j, _ := fakeJob(t, "outside")
	if err := os.WriteFile(filepath.Join(filepath.Dir(j.Workspace), "secret.txt"), []byte("TOP SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	j.Env = append(j.Env, "OPENAI_API_KEY=sk-test")
	t.Setenv("HERALD_GATEWAY_SECRET", "gw")
	res := Run(context.Background(), j)
	if res.Err != nil || strings.Contains(res.Text, "READ") || strings.Count(res.Text, "refused") != 2 || !strings.Contains(res.Text, "outside the workspace") {
		t.Fatalf("Run = %+v", res)
	}
	// The sandbox: no file next to the workspace, only runtime.env (and
	// HOME, TMPDIR, PWD) in its environment; the gateway's own variables stay out.
	if !strings.Contains(res.Text, "direct read failed") || !strings.Contains(res.Text, "env: HERALD_ACPFAKE,HOME,OPENAI_API_KEY,PWD,TMPDIR") {
		t.Errorf("sandbox: %s", res.Text)
	}
}

// TestRunTerminals: terminals run in the agent's sandbox, in the
// workspace (or a folder inside it), with the agent's HOME, its environment and the
// request's variables; their exit code and output reach the agent; a cwd
// outside the workspace is refused; a killed one reports its signal; one
// left running ends with the job (nothing leaks).
func TestRunTerminals(t *testing.T) {
	before := runtime.NumGoroutine()
	j, _ := fakeJob(t, "terminal")
	j.Home = filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(j.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	res := Run(context.Background(), j)
	if res.Err != nil {
		t.Fatalf("Run = %+v", res)
	}
	sub := filepath.Join(j.Workspace, "sub")
	for _, want := range []string{
		fmt.Sprintf(`exit 3, output "cwd=%s foo=bar\n", truncated false, err <nil>`, sub),
		"released: <nil>; output after: true",
		"outside: ", "is outside the workspace",
		"killed: <nil>, signal ", "left running: <nil>",
	} {
		if !strings.Contains(res.Text, want) {
			t.Errorf("the agent's report lacks %q:\n%s", want, res.Text)
		}
	}
	if got, err := os.ReadFile(filepath.Join(j.Workspace, "made.txt")); err != nil || string(got) != "made\n" {
		t.Errorf("the terminal's file in the workspace: %q, %v", got, err)
	}
	if got, err := os.ReadFile(filepath.Join(j.Home, "kept.txt")); err != nil || string(got) != "kept\n" {
		t.Errorf("the terminal's file in the agent's HOME: %q, %v", got, err)
	}
	noLeaks(t, before)
}

// TestRunBadAgents: what cannot start or does not speak ACP ends with an
// error naming it, within the handshake timeout, leaving nothing behind.
func TestRunBadAgents(t *testing.T) {
	defer func(d time.Duration) { HandshakeTimeout = d }(HandshakeTimeout)
	before := runtime.NumGoroutine()
	// The timeout each case waits at most: what ends by itself gets 30 s,
	// as an agent that is slow to start on a loaded machine must not look
	// silent; garbage must have written its line by its timeout; silent
	// ends at its timeout whenever it started.
	for _, c := range []struct {
		mode, want string
		timeout    time.Duration
	}{
		{"missing", `could not be started: command "/nonexistent/codex-acp" of agent codex`, 30 * time.Second},
		{"exit-init", "exited during initialize: agent codex", 30 * time.Second},
		{"garbage", "did not answer initialize", 10 * time.Second},
		{"silent", "did not answer initialize", 2 * time.Second},
	} {
		t.Run(c.mode, func(t *testing.T) {
			HandshakeTimeout = c.timeout
			j, _ := fakeJob(t, c.mode)
			if c.mode == "missing" {
				j.Command = "/nonexistent/codex-acp"
			}
			start := time.Now()
			res := Run(context.Background(), j)
			if res.Err == nil || !strings.Contains(res.Err.Error(), c.want) {
				t.Fatalf("Run err = %v, want %q", res.Err, c.want)
			}
			if c.mode == "exit-init" && !strings.Contains(res.Err.Error(), "not logged in") {
				t.Errorf("the agent's last output is not in %v", res.Err)
			}
			if c.mode == "garbage" && !strings.Contains(res.Err.Error(), "not JSON-RPC") {
				t.Errorf("the malformed line is not named: %v", res.Err)
			}
			if d := time.Since(start); d > HandshakeTimeout+20*time.Second {
				t.Errorf("took %s", d)
			}
		})
	}
	noLeaks(t, before)
}

// TestRunWithoutSandbox: where no sandbox mechanism works an ACP agent is
// not started — also with tools.exec.sandbox "off", which does not
// unconfine it — and the error says so instead of offering "off".
func TestRunWithoutSandbox(t *testing.T) {
	j, _ := fakeJob(t, "work")
	restore := sandbox.OverrideProbe(sandbox.Report{Bwrap: sandbox.Status{Detail: "bwrap is not installed"},
		Landlock: sandbox.Status{Detail: "the kernel has no Landlock"}})
	defer restore()
	for _, mech := range []string{"", sandbox.Off, sandbox.Auto} {
		j.Sandbox.Mechanism = mech
		res := Run(context.Background(), j)
		if res.Err == nil || !errors.Is(res.Err, ErrCommand) || !errors.Is(res.Err, sandbox.ErrUnavailable) {
			t.Fatalf("%q: Run err = %v, want ErrCommand and sandbox.ErrUnavailable", mech, res.Err)
		}
		for _, want := range []string{"agent codex", `tools.exec.sandbox "off" does not unconfine it`, "bwrap is not installed", "the kernel has no Landlock"} {
			if !strings.Contains(res.Err.Error(), want) {
				t.Errorf("%q: the error lacks %q: %v", mech, want, res.Err)
			}
		}
		if strings.Contains(res.Err.Error(), "runs commands unconfined") {
			t.Errorf("%q: the error offers \"off\", which does not apply to ACP agents: %v", mech, res.Err)
		}
	}
}

// TestProbe: doctor's initialize names the agent and its capabilities;
// an env_var login runtime.env can satisfy is used (authenticate).
func TestProbe(t *testing.T) {
	j, _ := fakeJob(t, "work")
	mech, _ := sandbox.Probe().Pick(sandbox.Auto, "test")
	t.Logf("sandbox: %s", mech)
	info, err := Probe(context.Background(), j.Spec)
	if err != nil || info.String() != "acpfake 0.1.0 · capabilities: loadSession" {
		t.Fatalf("Probe = %q, %v", info, err)
	}
	// An agent that needs a login it offers through an environment
	// variable (Codex: OPENAI_API_KEY) is sent authenticate when
	// runtime.env sets it; without it, it needs a login.
	j, _ = fakeJob(t, "envauth")
	if info, err := Probe(context.Background(), j.Spec); err == nil || !strings.Contains(err.Error(), "it needs a login first") ||
		info.String() != "acpfake 0.1.0 · capabilities: loadSession · auth: Log in, Use FAKE_KEY" {
		t.Errorf("Probe without FAKE_KEY = %q, %v", info, err)
	}
	j.Env = append(j.Env, "FAKE_KEY=k")
	if _, err := Probe(context.Background(), j.Spec); err != nil {
		t.Errorf("Probe with FAKE_KEY: %v", err)
	}
	if res := Run(context.Background(), j); res.Err != nil || res.Text != "Done, counting tokens only." {
		t.Errorf("Run with FAKE_KEY = %+v", res)
	}
}

// TestRunReportsText: OnText is told each agent message as its chunks
// arrive, from its first chunk (a tool call starts the next message), for
// the live view of the run (SPEC §26, §16).
func TestRunReportsText(t *testing.T) {
	j, _ := fakeJob(t, "work")
	var texts []string
	j.OnText = func(s string) { texts = append(texts, s) }
	if res := Run(context.Background(), j); res.Err != nil {
		t.Fatalf("Run = %+v", res)
	}
	want := []string{"I will write hello.txt.", "Wrote hello.txt ", "Wrote hello.txt with a greeting."}
	if strings.Join(texts, "|") != strings.Join(want, "|") {
		t.Errorf("OnText got %q, want %q", texts, want)
	}
}

// TestLastLine: the activity line of a message is its last non-blank line,
// its last 80 characters after "…" when longer.
func TestLastLine(t *testing.T) {
	long := strings.Repeat("é", 100)
	for in, want := range map[string]string{
		"":                            "",
		"  hello  ":                   "hello",
		"first\nsecond\n\n":           "second",
		"first\n   indented":          "indented",
		"\n\n  " + long:               "…" + long[40:],
		"a\n" + long[:160] + " ":      long[:160],
		"a\n" + long[:162]:            "…" + long[2:162],
		strings.Repeat(" ", 90) + "x": "x",
		"héllo wörld\nçava":           "çava",
	} {
		if got := lastLine(in); got != want {
			t.Errorf("lastLine(%q) = %q, want %q", in, got, want)
		}
	}
}
