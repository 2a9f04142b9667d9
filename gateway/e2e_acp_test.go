package gateway_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/acp/acptest"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/agent/sandbox"
	"github.com/heraldhq/herald/agent/tools"
	"github.com/heraldhq/herald/channels/slack/slackfake"
	"github.com/heraldhq/herald/devtools/pgtest"
	"github.com/heraldhq/herald/store"
)

// acpConfig: a main agent on the fake model that may spawn three ACP
// agents, all this test binary as the fake ACP agent in different modes;
// permission requests of ACP agents are supervised.
func acpConfig(t *testing.T, ws string) string {
	exe := fakeACPCommand(t)
	rt := func(mode string) string {
		return fmt.Sprintf(`runtime: { type: "acp", command: %q, env: { %s: %q } }`, exe, acptest.EnvMode, mode)
	}
	return `{
  gateway: { http: { listen: "127.0.0.1:0" }, shutdownGraceSeconds: 2 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m", subagents: { allowAgents: ["*"] } }, list: [
    { id: "main", default: true, workspace: ` + fmt.Sprintf("%q", ws) + ` },
    { id: "codex", ` + rt("work") + ` },
    { id: "slowpoke", ` + rt("slow") + ` },
    { id: "ghost", runtime: { type: "acp", command: "/nonexistent/ghost-acp" } }] },
  security: { toolPolicy: { groups: { acp: "supervised" } } },
  channels: { web: { enabled: true } },
}`
}

// acpModel spawns the ACP agent a message names ("code: <agent>"), then
// says it did.
func acpModel(c llmtest.Call) llmtest.Reply {
	if last := c.Messages[len(c.Messages)-1]; last.Role == agent.RoleTool || len(last.ToolResults) > 0 {
		return llmtest.Reply{Text: "Started it; its result will follow here."}
	}
	if id, ok := strings.CutPrefix(c.LastUser(), "code: "); ok {
		args, _ := json.Marshal(map[string]string{"agentId": id, "task": "write hello.txt", "label": id})
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn", Args: args}}}
	}
	return llmtest.Reply{Text: "hello"}
}

// TestE2EACPAgent drives ACP agents through the web API: spawned by the
// model, the fake agent's permission request is posted for approval and
// its live activity reaches the panel; /approve lets it write hello.txt
// into the conversation workspace; its announce is success with its final
// message and the tokens it reported. A slow agent stopped with
// /subagents stop sees session/cancel and ends stopped, unannounced. An
// agent whose command is missing ends error with a Note naming it.
func TestE2EACPAgent(t *testing.T) {
	t.Parallel()
	ws := filepath.Join(t.TempDir(), "main-ws")
	tg := newTestGateway(t, acpConfig(t, ws), acpModel)
	const client = "acp"
	conv := tools.ConversationWorkspace(ws, "agent:main:web:dm:"+client)
	sawActivity, panel := panelActivity(openEvents(t, tg.URL, client))
	start := time.Now()
	webPost(t, tg.URL, client, "code: codex")
	req := waitText(t, tg, client, "🔐 Approval needed")
	for _, want := range []string{"wants to run acp", `"title":"Write hello.txt"`, `"kind":"edit"`, `"rawInput":{"path":"` + filepath.Join(conv, "hello.txt")} {
		if !strings.Contains(req, want) {
			t.Errorf("approval request lacks %s:\n%s", want, req)
		}
	}
	if !waitFor(e2eWait, func() bool { return sawActivity("awaiting approval") }) {
		t.Errorf("the panel never showed the run awaiting approval; it showed %q", *panel)
	}
	t.Logf("spawn → approval request (the agent's first permission request) in %s", time.Since(start).Round(time.Millisecond))
	if _, err := os.Stat(filepath.Join(conv, "hello.txt")); !os.IsNotExist(err) {
		t.Fatalf("hello.txt exists before the approval: %v", err)
	}
	ann := approveFor(t, tg, client, req, "Task: codex")
	if !strings.HasPrefix(ann, "Status: success\nTask: codex\n\nResult:\nWrote hello.txt with a greeting.\n\nNotes:\n"+noCost+"\n\nStats: runtime ") ||
		!strings.Contains(ann, "tokens 1.5k (in 1.2k / out 300)") || strings.Contains(ann, "est $") {
		t.Errorf("announce:\n%s", ann)
	}
	if got, err := os.ReadFile(filepath.Join(conv, "hello.txt")); err != nil || string(got) != "hello from acpfake" {
		t.Errorf("hello.txt in the conversation workspace = %q, %v", got, err)
	}
	runs := tg.runsOf(t, "agent:main:web:dm:"+client)
	if len(runs) != 1 || runs[0].Outcome != store.OutcomeSuccess || runs[0].AgentID != "codex" {
		t.Fatalf("runs %+v", runs)
	}
	// The transcript has what the agent did, as /subagents log shows it.
	seq := webPost(t, tg.URL, client, "/subagents log 1")
	log := waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.Contains(s, "write hello.txt") })
	if !strings.Contains(log.Text, "I will write hello.txt.") || !strings.Contains(log.Text, "Wrote hello.txt with a greeting.") {
		t.Errorf("/subagents log 1:\n%s", log.Text)
	}

	// Stop mid-prompt: session/cancel reaches the agent; no announce.
	webPost(t, tg.URL, client, "code: slowpoke")
	if !waitFor(e2eWait, func() bool { return sawActivity("💬 Starting a long job.") }) {
		t.Fatalf("the panel never showed the slow agent's message; it showed %q", *panel)
	}
	seq = webPost(t, tg.URL, client, "/subagents stop slowpoke")
	waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.Contains(s, "top") })
	if !waitFor(e2eWait, func() bool {
		_, err := os.Stat(filepath.Join(conv, "cancelled.txt"))
		return err == nil
	}) {
		t.Error("the slow agent never saw session/cancel")
	}
	if !waitFor(e2eWait, func() bool {
		rs := tg.runsOf(t, "agent:main:web:dm:"+client)
		return len(rs) == 2 && rs[0].Outcome == store.OutcomeStopped
	}) {
		t.Errorf("runs after the stop: %+v", tg.runsOf(t, "agent:main:web:dm:"+client))
	}

	// A missing command: the run ends error naming it.
	webPost(t, tg.URL, client, "code: ghost")
	ann = waitText(t, tg, client, "Task: ghost")
	if !strings.HasPrefix(ann, "Status: error\n") || !strings.Contains(ann, `command "/nonexistent/ghost-acp" of agent ghost`) {
		t.Errorf("announce of the missing command:\n%s", ann)
	}
	for _, m := range webMessages(t, tg.URL, client, 0) {
		if m.Role == "announce" && strings.Contains(m.Text, "Task: slowpoke") {
			t.Errorf("the stopped run was announced:\n%s", m.Text)
		}
	}
}

// TestE2EACPAgentResumesAfterRestart: a gateway that stops while an ACP
// agent works leaves the run running; the next gateway on the same state
// starts the agent again, which loads its session (session/load) and
// finishes; the announce says it was resumed.
func TestE2EACPAgentResumesAfterRestart(t *testing.T) {
	dir := t.TempDir()
	ws, state := filepath.Join(dir, "main-ws"), filepath.Join(dir, "state")
	const client = "acp-restart"
	conv := tools.ConversationWorkspace(ws, "agent:main:web:dm:"+client)
	tg := newTestGatewayIn(t, state, acpConfig(t, ws), acpModel)
	sawActivity, panel := panelActivity(openEvents(t, tg.URL, client))
	webPost(t, tg.URL, client, "code: slowpoke")
	if !waitFor(e2eWait, func() bool { return sawActivity("Starting a long job") }) {
		t.Fatalf("the slow agent did not start; the panel showed %q", *panel)
	}
	tg.Stop()

	tg = newTestGatewayIn(t, state, acpConfig(t, ws), acpModel)
	ann := waitText(t, tg, client, "Task: slowpoke")
	if !strings.HasPrefix(ann, "Status: success\nTask: slowpoke\n\nResult:\nResumed and finished.\n\nNotes:\n"+noCost+"\nResumed after the gateway stopped (1×).\n") {
		t.Errorf("announce after the restart:\n%s", ann)
	}
	if got, err := os.ReadFile(filepath.Join(conv, "loaded.txt")); err != nil || string(got) != "fake-session-1" {
		t.Errorf("the agent was not asked to load its session: %q, %v", got, err)
	}
}

// panelActivity reads the panel's events as they come: saw reports
// whether a run's activity line contained want; shown is every line seen.
func panelActivity(events <-chan sseEvent) (saw func(want string) bool, shown *[]string) {
	var lines []string
	saw = func(want string) bool {
		for {
			select {
			case ev := <-events:
				if ev.Name != "subagents" {
					continue
				}
				var p struct{ Runs []struct{ Activity string } }
				_ = json.Unmarshal([]byte(ev.Data), &p)
				for _, r := range p.Runs {
					if r.Activity != "" {
						lines = append(lines, r.Activity)
					}
				}
			default:
				for _, a := range lines {
					if strings.Contains(a, want) {
						return true
					}
				}
				return false
			}
		}
	}
	return saw, &lines
}

// TestE2ERealClaudeAgent: the real @zed-industries/claude-agent-acp
// (Claude Code over ACP, installed by scripts/acp-agents.sh) as a
// sub-agent of the whole gateway, both it and the main agent answered by
// the fake Anthropic API: spawned by the model, its Write permission is
// approved with /approve, the file lands in the conversation workspace and
// the announce is success with its final message.
func TestE2ERealClaudeAgent(t *testing.T) {
	prefix, bin := realACPAgent(t, "claude-agent-acp")
	ws := filepath.Join(t.TempDir(), "main-ws")
	const client = "real-claude"
	conv := tools.ConversationWorkspace(ws, "agent:main:web:dm:"+client)
	model := func(c llmtest.Call) llmtest.Reply {
		last := c.Messages[len(c.Messages)-1]
		answered := last.Role == agent.RoleTool || len(last.ToolResults) > 0
		switch {
		case slices.Contains(c.Tools, "Write"): // Claude Code
			if answered {
				return llmtest.Reply{Text: "I wrote hello.txt."}
			}
			args, _ := json.Marshal(map[string]string{"file_path": filepath.Join(conv, "hello.txt"), "content": "hello from claude"})
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "Write", Args: args}}}
		case answered:
			return llmtest.Reply{Text: "Started Claude Code; its result will follow here."}
		case strings.Contains(c.LastUser(), "code: claude"):
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn",
				Args: json.RawMessage(`{"agentId":"claude","task":"write hello.txt","label":"claude"}`)}}}
		}
		return llmtest.Reply{Text: "hello"}
	}
	cfg := fmt.Sprintf(`{
  gateway: { http: { listen: "127.0.0.1:0" }, shutdownGraceSeconds: 2 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m", subagents: { allowAgents: ["*"] } }, list: [
    { id: "main", default: true, workspace: %q },
    { id: "claude", runtime: { type: "acp", command: %q, network: true, readPaths: [%q],
        env: { PATH: "/usr/local/bin:/usr/bin:/bin", ANTHROPIC_BASE_URL: "{{llm}}", ANTHROPIC_API_KEY: "sk-test",
               DISABLE_TELEMETRY: "1", DISABLE_ERROR_REPORTING: "1", DISABLE_AUTOUPDATER: "1" } } }] },
  security: { toolPolicy: { groups: { acp: "supervised" } } },
  channels: { web: { enabled: true } },
}`, ws, bin, filepath.Join(prefix, "node_modules"))
	tg := newTestGateway(t, cfg, model)
	webPost(t, tg.URL, client, "code: claude")
	req := waitText(t, tg, client, "🔐 Approval needed")
	if !strings.Contains(req, "wants to run acp") || !strings.Contains(req, "hello.txt") {
		t.Errorf("approval request:\n%s", req)
	}
	ann := approveFor(t, tg, client, req, "Task: claude")
	if !strings.HasPrefix(ann, "Status: success\nTask: claude\n\nResult:\nI wrote hello.txt.\n") {
		t.Errorf("announce:\n%s", ann)
	}
	// Claude Code reports its session's cost (usage_update): counted as
	// reported, so the Notes have nothing to say of it.
	if !strings.Contains(ann, "\n\nNotes:\n(none)\n") || !strings.Contains(ann, " • est $") {
		t.Errorf("the cost Claude Code reported is not in the announce:\n%s", ann)
	}
	if got, err := os.ReadFile(filepath.Join(conv, "hello.txt")); err != nil || string(got) != "hello from claude" {
		t.Errorf("hello.txt in the conversation workspace = %q, %v", got, err)
	}
}

// TestE2ERealCodex: the real @zed-industries/codex-acp (Codex over ACP,
// installed from npm by scripts/acp-agents.sh: a node launcher and its
// native binary) as a sub-agent of the whole gateway, its model a fake
// OpenAI Responses API reached through a custom provider base_url set by
// -c flags in runtime.args (its HOME, and so its ~/.codex, is the
// sandbox's own). Spawned by the model, its command's permission request
// (approval_policy "untrusted") is approved with /approve, the command
// writes hello.txt in the conversation workspace, and the announce is
// success with its final message; Codex reports no token usage, and the
// Notes say so. /subagents send to the finished run starts Codex again,
// which loads its session (its first task is in what it sends its model).
func TestE2ERealCodex(t *testing.T) {
	prefix, bin := realACPAgent(t, "codex-acp")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("codex-acp's launcher needs node: %v", err)
	}
	ws := filepath.Join(t.TempDir(), "main-ws")
	const client = "real-codex"
	conv := tools.ConversationWorkspace(ws, "agent:main:web:dm:"+client)
	codex := llmtest.NewResponses(t, func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.LastUser(), "say bye") {
			// One more prompt after the run ended: Codex loaded its
			// session, so the first task is in what it sends.
			for _, m := range c.Messages {
				if m.Role == agent.RoleUser && strings.Contains(m.Text, "write hello.txt") {
					return llmtest.Reply{Text: "bye, and hello.txt is written"}
				}
			}
			return llmtest.Reply{Text: "bye, but what task?"}
		}
		if last := c.Messages[len(c.Messages)-1]; last.Role == agent.RoleTool {
			return llmtest.Reply{Text: "I wrote hello.txt."}
		}
		if !slices.Contains(c.Tools, "exec_command") || !strings.Contains(c.LastUser(), "write hello.txt") {
			return llmtest.Reply{Status: 400, Message: fmt.Sprintf("llmtest: unexpected call: tools %v, last user %q", c.Tools, c.LastUser())}
		}
		args, _ := json.Marshal(map[string]string{"cmd": "printf 'hello from codex' > hello.txt", "workdir": conv})
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "exec_command", Args: args}}}
	})
	cfg := fmt.Sprintf(`{
  gateway: { http: { listen: "127.0.0.1:0" }, shutdownGraceSeconds: 2 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m", subagents: { allowAgents: ["*"] } }, list: [
    { id: "main", default: true, workspace: %q },
    { id: "codex", runtime: { type: "acp", command: %q, network: true, readPaths: [%q],
        args: ["-c", "model_provider=\"fake\"", "-c", "model=\"gpt-5-codex\"",
               "-c", "model_providers.fake={ name = \"fake\", base_url = \"%s/v1\", wire_api = \"responses\", env_key = \"OPENAI_API_KEY\" }",
               "-c", "sandbox_mode=\"danger-full-access\"", "-c", "approval_policy=\"untrusted\""],
        env: { PATH: %q, OPENAI_API_KEY: "sk-test" } } }] },
  security: { toolPolicy: { groups: { acp: "supervised" } } },
  channels: { web: { enabled: true } },
}`, ws, bin, filepath.Join(prefix, "node_modules"), codex.URL, filepath.Dir(node)+":/usr/bin:/bin")
	tg := newTestGateway(t, cfg, func(c llmtest.Call) llmtest.Reply {
		switch {
		case c.Messages[len(c.Messages)-1].Role == agent.RoleTool:
			return llmtest.Reply{Text: "Started Codex; its result will follow here."}
		case strings.Contains(c.LastUser(), "code: codex"):
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn",
				Args: json.RawMessage(`{"agentId":"codex","task":"write hello.txt","label":"codex"}`)}}}
		}
		return llmtest.Reply{Text: "hello"}
	})
	webPost(t, tg.URL, client, "code: codex")
	req := waitText(t, tg, client, "🔐 Approval needed")
	if !strings.Contains(req, "wants to run acp") || !strings.Contains(req, `"kind":"execute"`) || !strings.Contains(req, "printf 'hello from codex'") {
		t.Errorf("approval request:\n%s", req)
	}
	if _, err := os.Stat(filepath.Join(conv, "hello.txt")); !os.IsNotExist(err) {
		t.Fatalf("hello.txt exists before the approval: %v", err)
	}
	ann := approveFor(t, tg, client, req, "Task: codex")
	if !strings.HasPrefix(ann, "Status: success\nTask: codex\n\nResult:\nI wrote hello.txt.\n\nNotes:\nThe agent reported no token usage.\n") {
		t.Errorf("announce:\n%s", ann)
	}
	if got, err := os.ReadFile(filepath.Join(conv, "hello.txt")); err != nil || string(got) != "hello from codex" {
		t.Errorf("hello.txt in the conversation workspace = %q, %v", got, err)
	}
	if n := codex.Count(); n != 2 {
		t.Errorf("Codex made %d model calls, want 2 (the command, then its answer)", n)
	}
	// /subagents send to the finished run starts Codex again, which loads
	// its session (session/load; its ~/.codex outlived the first process).
	seq := webPost(t, tg.URL, client, "/subagents send 1 now say bye")
	bye := waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.Contains(s, "bye") })
	if !strings.Contains(bye.Text, "bye, and hello.txt is written") {
		t.Errorf("/subagents send to the finished Codex run: %q", bye.Text)
	}
}

// fakeACPCommand is the command of the fake ACP agent (this test binary,
// its mode in runtime.env); it skips the test where no sandbox runs it.
func fakeACPCommand(t *testing.T) string {
	t.Helper()
	if _, err := sandbox.Probe().Pick(sandbox.Auto, "test"); err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// slackACPConfig: main (workspace ws) on the fake model may spawn agent
// id, the fake ACP agent in mode, on the Slack fake at sfURL (group C1);
// permission requests of ACP agents are decided by policy.
func slackACPConfig(t *testing.T, ws, sfURL, id, mode, policy string) string {
	return fmt.Sprintf(`{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m", subagents: { allowAgents: ["*"] } }, list: [
    { id: "main", default: true, workspace: %q },
    { id: %q, runtime: { type: "acp", command: %q, env: { %s: %q } } }] },
  security: { toolPolicy: { groups: { acp: %q } } },
  channels: {
    slack: { enabled: true, botToken: %q, appToken: %q, apiUrl: %q, groups: { C1: {} } },
    web: { enabled: false },
  },
}`, ws, id, fakeACPCommand(t), acptest.EnvMode, mode, policy, slackfake.BotToken, slackfake.AppToken, sfURL)
}

// realACPAgent is the npm bin link of a real ACP agent installed by
// scripts/acp-agents.sh under HERALD_ACP_NPM (prefix); it skips the test
// where the agent or a sandbox is missing, and on PostgreSQL (a real
// agent meets the store only through the runner: it runs once).
func realACPAgent(t *testing.T, name string) (prefix, bin string) {
	t.Helper()
	if pgtest.OnPostgres() {
		t.Skip("the real agent meets the store only through the runner: it runs once, on SQLite")
	}
	prefix = os.Getenv("HERALD_ACP_NPM")
	if prefix == "" {
		t.Skip("HERALD_ACP_NPM is not set: scripts/acp-agents.sh (run by make test when npm is present) installs the real agents")
	}
	bin = filepath.Join(prefix, "node_modules", ".bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s is not installed under %s: %v", name, prefix, err)
	}
	if _, err := sandbox.Probe().Pick(sandbox.Auto, "test"); err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	return prefix, bin
}

// noCost is the Note of an ACP agent that reports tokens but no cost,
// without a runtime.cost.
const noCost = "The agent reported tokens but no cost, and its runtime.cost is not set: its spend counts $0 against the budgets."

// approveFor answers the approval request req with /approve and waits for
// the client's message containing announced.
func approveFor(t *testing.T, tg *testGW, client, req, announced string) string {
	t.Helper()
	m := approvalCode.FindStringSubmatch(req)
	if m == nil {
		t.Fatalf("no code in %q", req)
	}
	webPost(t, tg.URL, client, "/approve "+m[1])
	return waitText(t, tg, client, announced)
}

// TestE2EACPSpend: what ACP agents report is spend like a model's (SPEC
// §20, §26): a cost the agent reports (usage_update) is counted as
// reported, tokens without a cost at the agent's runtime.cost, tokens
// without either count $0 and the Notes say so; /usage shows the
// conversation's spend; an agent over its budget is not started (its run
// ends error with the 💸 line); ACP spend that exhausts the conversation's
// budget refuses the next turn.
func TestE2EACPSpend(t *testing.T) {
	t.Parallel()
	cfg := webACPConfig(t, filepath.Join(t.TempDir(), "main-ws"), "agent: { dailyUSD: 0.04 }, conversation: { dailyUSD: 0.08 }",
		"pricey=costly", "metered=tokens cost: { input: 10, output: 20 }", "free=tokens")
	tg := newTestGateway(t, cfg, acpModel)
	const client = "acp-spend"
	announce := func(agentID string) string {
		t.Helper()
		seq := webPost(t, tg.URL, client, "code: "+agentID)
		return waitWeb(t, tg, client, seq, "announce", func(s string) bool { return strings.Contains(s, "Task: "+agentID) }).Text
	}
	// Tokens at runtime.cost: 1200 × $10/M + 300 × $20/M = $0.018 (est $0.02).
	if ann := announce("metered"); !strings.HasPrefix(ann, "Status: success\nTask: metered\n\nResult:\nDone, counting tokens only.\n\nNotes:\n(none)\n") ||
		!strings.Contains(ann, "tokens 1.5k (in 1.2k / out 300) • est $0.02 •") {
		t.Errorf("announce of the priced agent:\n%s", ann)
	}
	if ann := announce("free"); !strings.Contains(ann, "Notes:\n"+noCost+"\n") ||
		strings.Contains(ann, "est $") {
		t.Errorf("announce of the unpriced agent:\n%s", ann)
	}
	// The cost it reported: $0.05 over two usage_updates, the second past
	// its agent budget ($0.04): its prompt is cancelled then (it had
	// ended already), its spend counted, its run ends with the 💸 line.
	tomorrow := time.Now().UTC().AddDate(0, 0, 1).Format("2006-01-02")
	if ann := announce("pricey"); !strings.HasPrefix(ann, "Status: error\nTask: pricey\n\nResult:\nDone, and it cost something.\n\nNotes:\n"+
		"💸 Budget reached: agent pricey $0.05 of $0.04 today (resets "+tomorrow+" 00:00 UTC).\n") ||
		!strings.Contains(ann, "tokens 1.5k (in 1.2k / out 300) • est $0.05 •") {
		t.Errorf("announce of the agent reporting its cost:\n%s", ann)
	}
	seq := webPost(t, tg.URL, client, "/usage")
	usage := waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.HasPrefix(s, "💸 Usage") }).Text
	if !strings.Contains(usage, "This conversation: today $0.07 ·") || !regexp.MustCompile(`\n1\) \$0\.05 · run \w+ · pricey\n2\) \$0\.02 · run \w+ · metered`).MatchString(usage) {
		t.Errorf("/usage:\n%s", usage)
	}

	// pricey spent $0.05 of its $0.04: its next run never starts.
	if ann := announce("pricey"); !strings.HasPrefix(ann, "Status: error\nTask: pricey\n\nResult:\n(not available)\n\nNotes:\n💸 Budget reached: agent pricey $0.05 of $0.04 today (resets "+tomorrow+" 00:00 UTC).\n") {
		t.Errorf("announce of the agent over its budget:\n%s", ann)
	}
	runs := tg.runsOf(t, "agent:main:web:dm:"+client)
	if _, entries, err := tg.G.Store().ReadTranscript(t.Context(), tg.G.Store().TranscriptPath("pricey", runs[0].ChildSessionID)); err == nil && len(entries) > 0 {
		t.Errorf("the agent over its budget was started: its transcript has %d lines", len(entries))
	}
	// metered's second run brings the conversation to $0.086 of $0.08:
	// the next turn is refused.
	announce("metered")
	seq = webPost(t, tg.URL, client, "hello")
	reply := waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.HasPrefix(s, "💸") }).Text
	if reply != "💸 Budget reached: conversation $0.09 of $0.08 today (resets "+tomorrow+" 00:00 UTC)." {
		t.Errorf("the turn after ACP spend used the conversation's budget: %q", reply)
	}
}

// TestE2EACPResumedCost: an agent whose session's running cost survives
// session/load (Claude Code restores its own) is not billed again for
// what it cost before: /subagents send to its finished run loads the
// session and counts only what the total grew by since the last prompt
// counted (the total recorded with the run's cost, SPEC §20, §26).
func TestE2EACPResumedCost(t *testing.T) {
	t.Parallel()
	cfg := webACPConfig(t, filepath.Join(t.TempDir(), "main-ws"), "", "keeper=kept")
	tg := newTestGateway(t, cfg, acpModel)
	const client = "acp-resumed-cost"
	seq := webPost(t, tg.URL, client, "code: keeper")
	if ann := waitWeb(t, tg, client, seq, "announce", func(s string) bool { return strings.Contains(s, "Task: keeper") }).Text; !strings.Contains(ann, "• est $0.05 •") {
		t.Fatalf("announce:\n%s", ann)
	}
	for _, total := range []string{"$0.08", "$0.11"} {
		seq = webPost(t, tg.URL, client, "/subagents send 1 go on")
		waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.Contains(s, "Running total "+total+".") })
	}
	seq = webPost(t, tg.URL, client, "/usage")
	usage := waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.HasPrefix(s, "💸 Usage") }).Text
	if !strings.Contains(usage, "This conversation: today $0.11 ·") {
		t.Errorf("/usage after two resumed prompts (the agent's total went $0.05 → $0.08 → $0.11):\n%s", usage)
	}
}

// TestE2EACPBudgetCutsPrompt: an ACP agent whose reported cost passes a
// budget during its prompt is cancelled then (session/cancel), not at the
// prompt's end, and its run ends error with the 💸 line as a model run's
// does (SPEC §20, §26); what it spent is counted.
func TestE2EACPBudgetCutsPrompt(t *testing.T) {
	t.Parallel()
	ws := filepath.Join(t.TempDir(), "main-ws")
	cfg := webACPConfig(t, ws, "agent: { dailyUSD: 0.04 }", "spender=spender")
	tg := newTestGateway(t, cfg, acpModel)
	const client = "acp-budget-cut"
	seq := webPost(t, tg.URL, client, "code: spender")
	ann := waitWeb(t, tg, client, seq, "announce", func(s string) bool { return strings.Contains(s, "Task: spender") }).Text
	tomorrow := time.Now().UTC().AddDate(0, 0, 1).Format("2006-01-02")
	if !strings.HasPrefix(ann, "Status: error\nTask: spender\n\nResult:\nSpending.") ||
		!strings.Contains(ann, "\n\nNotes:\n💸 Budget reached: agent spender $0.05 of $0.04 today (resets "+tomorrow+" 00:00 UTC).\n") ||
		!strings.Contains(ann, "• est $0.05 •") {
		t.Errorf("announce of the agent that passed its budget mid-prompt:\n%s", ann)
	}
	// Without session/cancel the agent would have gone on for 30 s more
	// and said so.
	if strings.Contains(ann, "Spent it all.") {
		t.Errorf("the agent's prompt was not cut:\n%s", ann)
	}
	if _, err := os.Stat(filepath.Join(tools.ConversationWorkspace(ws, "agent:main:web:dm:"+client), "cancelled.txt")); err != nil {
		t.Errorf("the agent did not see session/cancel: %v", err)
	}
}

// webACPConfig: main (workspace ws) on the fake model, on the web
// channel, may spawn fake ACP agents, each "id=mode" (then, after a space,
// more runtime keys: "id=mode cost: {…}"); budgets, if set, are the
// budgets' limits (warnAtPercent off).
func webACPConfig(t *testing.T, ws, budgets string, agents ...string) string {
	t.Helper()
	exe := fakeACPCommand(t)
	var list strings.Builder
	for _, a := range agents {
		id, mode, _ := strings.Cut(a, "=")
		mode, extra, _ := strings.Cut(mode, " ")
		if extra != "" {
			extra = ", " + extra
		}
		fmt.Fprintf(&list, ",\n    { id: %q, runtime: { type: \"acp\", command: %q, env: { %s: %q }%s } }", id, exe, acptest.EnvMode, mode, extra)
	}
	if budgets != "" {
		budgets = "\n  budgets: { " + budgets + ", warnAtPercent: 0 },"
	}
	return fmt.Sprintf(`{
  gateway: { http: { listen: "127.0.0.1:0" }, shutdownGraceSeconds: 2 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m", subagents: { allowAgents: ["*"] } }, list: [
    { id: "main", default: true, workspace: %q }%s] },%s
  channels: { web: { enabled: true } },
}`, ws, list.String(), budgets)
}

// TestE2ESlackACPThread: an ACP child spawned with thread: true (SPEC §24,
// §26) gets its own Slack thread — the starter in C1, one link line in the
// requester's thread T1; its permission request is posted in its thread
// and answered there with /approve by the person who asked; it writes
// hello.txt in T1's conversation workspace; its announce goes to its
// thread; its result reaches the parent's history as a [sub-agent result]
// message (SPEC §23), which the parent's next turn in T1 sees; a message in
// its thread after it ended runs one more prompt of the agent there.
func TestE2ESlackACPThread(t *testing.T) {
	t.Parallel()
	ws := filepath.Join(t.TempDir(), "main-ws")
	sf := slackfake.New(t)
	cfg := slackACPConfig(t, ws, sf.URL(), "coder", "work", "supervised")
	tg := newTestGateway(t, cfg, func(c llmtest.Call) llmtest.Reply {
		for _, m := range c.Messages {
			if m.Role == agent.RoleUser && strings.HasPrefix(m.Text, "[sub-agent result]") && strings.Contains(c.LastUser(), "what did coder say") {
				return llmtest.Reply{Text: "parent heard: " + m.Text}
			}
		}
		if n := len(c.Messages); n > 0 && c.Messages[n-1].Role == agent.RoleTool {
			return llmtest.Reply{Text: "spawned: " + c.Messages[n-1].ToolResults[0].Content}
		}
		if strings.Contains(c.LastUser(), "code it in its own thread") {
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn",
				Args: json.RawMessage(`{"agentId":"coder","task":"write hello.txt","label":"coder","thread":true}`)}}}
		}
		return llmtest.Reply{Text: "plain answer"}
	})
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("Slack did not connect")
	}
	sf.SendMention("C1", slackfake.UserID, "code it in its own thread", slackT1)
	post := func(what string, ok func(slackfake.Post) bool) slackfake.Post {
		t.Helper()
		var hit slackfake.Post
		if !waitFor(e2eWait, func() bool {
			for _, p := range sf.Posted() {
				if ok(p) {
					hit = p
					return true
				}
			}
			return false
		}) {
			t.Fatalf("no %s; posts %+v", what, sf.Posted())
		}
		return hit
	}
	starter := post("starter of coder's thread", func(p slackfake.Post) bool { return strings.HasPrefix(p.Text, "🧵 coder\n") })
	if starter.Channel != "C1" || starter.ThreadTS != "" || !strings.Contains(starter.Text, "write hello.txt") {
		t.Fatalf("starter = %+v, want it top level in C1 naming the task", starter)
	}
	request := post("approval request", func(p slackfake.Post) bool { return strings.HasPrefix(p.Text, "🔐 Approval needed") })
	if request.ThreadTS != starter.TS || !strings.Contains(request.Text, "wants to run acp") || !strings.Contains(request.Text, `"title":"Write hello.txt"`) {
		t.Fatalf("approval request = %+v, want it in coder's thread %s", request, starter.TS)
	}
	m := approvalCode.FindStringSubmatch(request.Text)
	if m == nil {
		t.Fatalf("approval request without a code: %q", request.Text)
	}
	sf.SendMessage("C1", slackfake.UserID, "/approve "+m[1], starter.TS)
	ann := post("announce", func(p slackfake.Post) bool { return strings.HasPrefix(p.Text, "Status: ") })
	if ann.ThreadTS != starter.TS || !strings.HasPrefix(ann.Text, "Status: success\nTask: coder\n\nResult:\nWrote hello.txt with a greeting.\n") {
		t.Errorf("announce = %+v, want success in coder's thread", ann)
	}
	conv := tools.ConversationWorkspace(ws, slackK1)
	if got, err := os.ReadFile(filepath.Join(conv, "hello.txt")); err != nil || string(got) != "hello from acpfake" {
		t.Errorf("hello.txt in T1's conversation workspace = %q, %v", got, err)
	}
	link := "🧵 coder works in its own thread: https://" + slackfake.Workspace + ".slack.com/archives/C1/p" + strings.ReplaceAll(starter.TS, ".", "")
	for _, p := range sf.Posted() {
		switch {
		case p.ThreadTS == slackT1 && !(p.Text == link || strings.HasPrefix(p.Text, `spawned: {"status":"accepted"`)):
			t.Errorf("T1 got more than the link line and the reply: %+v", p)
		case p.ThreadTS != slackT1 && p.ThreadTS != starter.TS && p.TS != starter.TS:
			t.Errorf("post outside T1 and coder's thread: %+v", p)
		}
	}

	// The parent's next turn in T1 has the result in its history.
	sf.SendMention("C1", slackfake.UserID, "what did coder say?", slackT1)
	heard := post("the parent's answer", func(p slackfake.Post) bool { return strings.HasPrefix(p.Text, "parent heard: ") })
	runs := tg.runsOf(t, slackK1)
	if len(runs) != 1 {
		t.Fatalf("runs of T1 %+v", runs)
	}
	want := "parent heard: [sub-agent result] coder · run " + runs[0].ID[:8] + " · Status: success\nResult: Wrote hello.txt with a greeting.\nNotes: " + noCost
	if heard.ThreadTS != slackT1 || heard.Text != want {
		t.Errorf("parent's answer = %+v\nwant %q", heard, want)
	}

	// A message in coder's thread (no mention: the thread is bound) runs
	// one more prompt of the finished agent, in its own session, answered
	// there and not announced again.
	sf.SendMessage("C1", slackfake.UserID, "and add a test", starter.TS)
	post("the agent's answer in its thread", func(p slackfake.Post) bool { return p.ThreadTS == starter.TS && p.Text == "Resumed and finished." })
	n := 0
	for _, p := range sf.Posted() {
		if strings.HasPrefix(p.Text, "Status: ") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d announces, want 1: a follow-up in the thread is not announced", n)
	}
}

// TestE2EACPDelegate: delegate to an ACP agent (SPEC §26) runs the agent,
// not a model loop under its id: its permission request is approved with
// /approve, it writes hello.txt in the conversation workspace, and the
// caller's next model call has its final message as delegate's result.
func TestE2EACPDelegate(t *testing.T) {
	t.Parallel()
	ws := filepath.Join(t.TempDir(), "main-ws")
	tg := newTestGateway(t, acpConfig(t, ws), func(c llmtest.Call) llmtest.Reply {
		if last := c.Messages[len(c.Messages)-1]; last.Role == agent.RoleTool {
			return llmtest.Reply{Text: "delegated: " + last.ToolResults[0].Content}
		}
		if strings.Contains(c.LastUser(), "delegate to codex") {
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "delegate", Args: json.RawMessage(`{"agent":"codex","task":"write hello.txt"}`)}}}
		}
		return llmtest.Reply{Text: "hello"}
	})
	const client = "acp-delegate"
	conv := tools.ConversationWorkspace(ws, "agent:main:web:dm:"+client)
	webPost(t, tg.URL, client, "delegate to codex")
	req := waitText(t, tg, client, "🔐 Approval needed")
	if !strings.Contains(req, "wants to run acp") || !strings.Contains(req, `"title":"Write hello.txt"`) {
		t.Errorf("approval request:\n%s", req)
	}
	reply := approveFor(t, tg, client, req, "delegated: ")
	var res struct {
		Status, Result string
		Tokens         struct{ Total int64 }
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(reply, "delegated: ")), &res); err != nil || res.Status != "ok" ||
		res.Result != "Wrote hello.txt with a greeting.\n\n("+noCost+")" || res.Tokens.Total != 1500 {
		t.Errorf("delegate's result %q: %+v, %v", reply, res, err)
	}
	if got, err := os.ReadFile(filepath.Join(conv, "hello.txt")); err != nil || string(got) != "hello from acpfake" {
		t.Errorf("hello.txt in the conversation workspace = %q, %v", got, err)
	}
	if runs := tg.runsOf(t, "agent:main:web:dm:"+client); len(runs) != 0 {
		t.Errorf("delegate made runs: %+v", runs)
	}
}
