package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/acp/acptest"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/agent/mcptools/mcptest"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/devtools/pgtest"
	"github.com/heraldhq/herald/store"
)

// TestMain serves MCP when the binary is started as the stdio test server;
// else the suite runs on SQLite and again on PostgreSQL (pgtest.RunBoth).
func TestMain(m *testing.M) {
	if os.Getenv(mcptest.EnvServe) != "" {
		mcptest.Main(m) // serves, then exits
	}
	if acptest.Main() { // the fake ACP agent of e2e_acp_test.go; exits
		return
	}
	os.Exit(pgtest.RunBoth(m, "gateway"))
}

const mcpConfig = `{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" } },
  security: { toolPolicy: { default: "allow", POLICY } },
  tools: { subagents: { tools: { deny: ["mcp__local__pid"] } } },
  mcp: { servers: {
    local: { command: "{{self}}", env: { HERALD_MCPTEST_SERVE: "1" }, timeoutSeconds: 10 },
    remote: { url: "{{mcpurl}}", headers: { Authorization: "Bearer t0ken" } },
    gone: { url: "http://127.0.0.1:1/mcp", timeoutSeconds: 2 },
  } },
}`

// mcpModel: "call <tool> <text>" makes the main agent spawn a sub-agent
// that calls the tool with {"text": <text>} (or with <text> itself when it
// is a JSON object) and reports the tool result in its announce.
func mcpModel(c llmtest.Call) llmtest.Reply {
	last := c.Messages[len(c.Messages)-1]
	if strings.Contains(c.System, "Sub-agent context") {
		if len(last.ToolResults) > 0 {
			return llmtest.Reply{Text: "tool said: " + last.ToolResults[0].Content}
		}
		if strings.Contains(last.Text, "Announce step") {
			said := "(nothing)"
			for _, m := range c.Messages {
				if m.Role == agent.RoleAssistant && strings.HasPrefix(m.Text, "tool said: ") {
					said = m.Text
				}
			}
			return llmtest.Reply{Text: "Result:\n" + said + "\n\nNotes:\n(none)"}
		}
		f := strings.Fields(c.LastUser()[strings.Index(c.LastUser(), "call "):])
		if !slices.Contains(c.Tools, f[1]) {
			return llmtest.Reply{Text: "tool said: I have no tool " + f[1] + "; tools: " + strings.Join(c.Tools, ",")}
		}
		args, _ := json.Marshal(map[string]string{"text": f[2]})
		if strings.HasPrefix(f[2], "{") {
			args = json.RawMessage(f[2])
		}
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: f[1], Args: args}}}
	}
	if len(last.ToolResults) > 0 {
		return llmtest.Reply{Text: "spawned the caller"}
	}
	if strings.HasPrefix(c.LastUser(), "call ") {
		spawn := map[string]any{"task": c.LastUser(), "label": "caller"}
		if f := strings.Fields(c.LastUser()); f[len(f)-1] == "only" {
			spawn["allowedTools"] = []string{f[1]}
		}
		args, _ := json.Marshal(spawn)
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn", Args: args}}}
	}
	return llmtest.Reply{Text: "noted"}
}

func mcpGateway(t *testing.T, policy string) *testGW {
	remote := mcptest.NewHTTP(t, nil)
	cfg := strings.NewReplacer("{{self}}", jsonEscape(osArgs0()), "{{mcpurl}}", remote.URL, "POLICY", policy).Replace(mcpConfig)
	return newTestGateway(t, cfg, mcpModel)
}

// TestE2EMCPToolThroughSubagent: a person asks, the main agent spawns a
// sub-agent, the sub-agent calls mcp__<server>__echo on a stdio server and
// on a streamable HTTP server, and the tool's result appears in the
// announce in the asking thread. A server that cannot be reached degrades
// /readyz and is listed as down on GET /mcp. sessions_spawn's allowedTools
// may name an MCP tool.
func TestE2EMCPToolThroughSubagent(t *testing.T) {
	t.Parallel()
	tg := mcpGateway(t, "")
	for _, server := range []string{"local", "remote"} {
		waitMCPUp(t, tg, server)
		seq := webPost(t, tg.URL, "ann", "call mcp__"+server+"__echo hello-"+server)
		ann := waitWeb(t, tg, "ann", seq, "announce", func(string) bool { return true })
		if !strings.Contains(ann.Text, "tool said: echo: hello-"+server) {
			t.Errorf("announce does not carry the %s tool's result:\n%s", server, ann.Text)
		}
	}

	// sessions_spawn's allowedTools may name an MCP tool: the child gets
	// exactly that tool.
	seq := webPost(t, tg.URL, "ann", "call mcp__remote__echo narrow only")
	ann := waitWeb(t, tg, "ann", seq, "announce", func(string) bool { return true })
	if !strings.Contains(ann.Text, "tool said: echo: narrow") {
		t.Errorf("announce of the narrowed child:\n%s", ann.Text)
	}
	childCalls := 0
	for _, c := range tg.LLM.Requests() {
		if strings.Contains(c.System, "- Task: call mcp__remote__echo narrow only") && !strings.Contains(c.LastUser(), "Announce step") {
			childCalls++
			if !slices.Equal(c.Tools, []string{"mcp__remote__echo"}) {
				t.Errorf("child spawned with allowedTools [mcp__remote__echo] had tools %v", c.Tools)
			}
		}
	}
	if childCalls == 0 {
		t.Error("no model call of the narrowed child seen")
	}

	resp, err := http.Get(tg.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var rz struct {
		Ready    bool
		Degraded bool
		Checks   map[string]string
	}
	json.NewDecoder(resp.Body).Decode(&rz)
	resp.Body.Close()
	if !rz.Ready || !rz.Degraded || rz.Checks["mcp:local"] != "ok" || !strings.HasPrefix(rz.Checks["mcp:gone"], "down: connect") {
		t.Errorf("/readyz = %+v; want ready, degraded, mcp:local ok, mcp:gone down", rz)
	}
}

// TestE2EMCPPolicy: group mcp supervised needs /approve; a per-tool entry
// wins over the group; tools.subagents.tools.deny removes an MCP tool from
// sub-agents.
func TestE2EMCPPolicy(t *testing.T) {
	t.Parallel()
	tg := mcpGateway(t, `groups: { mcp: "supervised" }, tools: { mcp__remote__echo: "allow", mcp__local__fail: "deny" }`)
	waitMCPUp(t, tg, "local")
	waitMCPUp(t, tg, "remote")

	seq := webPost(t, tg.URL, "bob", "call mcp__remote__echo free")
	ann := waitWeb(t, tg, "bob", seq, "announce", func(string) bool { return true })
	if !strings.Contains(ann.Text, "tool said: echo: free") {
		t.Errorf("allowed tool: announce\n%s", ann.Text)
	}

	seq = webPost(t, tg.URL, "bob", "call mcp__local__fail x")
	ann = waitWeb(t, tg, "bob", seq, "announce", func(string) bool { return true })
	if strings.Contains(ann.Text, "bad input") || !strings.Contains(ann.Text, "denied") {
		t.Errorf("denied tool ran or was not reported denied:\n%s", ann.Text)
	}

	seq = webPost(t, tg.URL, "bob", "call mcp__local__pid x")
	ann = waitWeb(t, tg, "bob", seq, "announce", func(string) bool { return true })
	if !strings.Contains(ann.Text, "I have no tool mcp__local__pid") || !strings.Contains(ann.Text, "mcp__local__echo") {
		t.Errorf("tools.subagents.tools.deny did not remove the MCP tool:\n%s", ann.Text)
	}

	seq = webPost(t, tg.URL, "bob", "call mcp__local__echo guarded")
	req := waitText(t, tg, "bob", "🔐 Approval needed")
	m := approvalCode.FindStringSubmatch(req)
	if m == nil || !strings.Contains(req, "mcp__local__echo") {
		t.Fatalf("approval request without code or tool: %q", req)
	}
	webPost(t, tg.URL, "bob", "/approve "+m[1])
	ann = waitWeb(t, tg, "bob", seq, "announce", func(s string) bool { return strings.Contains(s, "guarded") })
	if !strings.Contains(ann.Text, "tool said: echo: guarded") {
		t.Errorf("approved tool: announce\n%s", ann.Text)
	}
}

// TestE2EMCPReferenceServer: the official reference server from npm, run
// with npx by the gateway, called by a sub-agent; the result reaches the
// announce.
func TestE2EMCPReferenceServer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: skipping the npm reference server")
	}
	npx, err := exec.LookPath("npx")
	if err != nil {
		t.Skip("npx not found: install Node.js (scripts/mcp-everything.sh --install-node) to run the reference MCP server test")
	}
	cfg := strings.NewReplacer("NPX", jsonEscape(npx), "PKG", mcpEverything).Replace(`{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" } },
  mcp: { servers: { everything: { command: "NPX", args: ["-y", "PKG"], timeoutSeconds: 120 } } },
}`)
	tg := newTestGateway(t, cfg, mcpModel)
	var last string
	if !waitFor(150*time.Second, func() bool {
		resp, err := http.Get(tg.URL + "/mcp")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = string(b)
		return strings.Contains(last, `"state":"up"`) || strings.Contains(last, `"state":"down"`)
	}) || !strings.Contains(last, `"state":"up"`) {
		if out, err := exec.Command("npm", "view", mcpEverything, "version").CombinedOutput(); err != nil {
			t.Skipf("the npm registry is unreachable (npm view: %v: %s); GET /mcp: %s", err, strings.TrimSpace(string(out)), last)
		}
		t.Fatalf("reference server not up; GET /mcp: %s", last)
	}
	seq := webPost(t, tg.URL, "ann", `call mcp__everything__echo {"message":"hi-everything"}`)
	ann := waitWeb(t, tg, "ann", seq, "announce", func(string) bool { return true })
	if !strings.Contains(ann.Text, "tool said: Echo: hi-everything") {
		t.Errorf("announce does not carry the reference server's echo:\n%s", ann.Text)
	}
}

// mcpEverything is the reference server's package, as pinned in
// agent/mcptools/everything_test.go (scripts/mcp-everything.sh warms it).
const mcpEverything = "@modelcontextprotocol/server-everything@2026.8.31"

func waitMCPUp(t *testing.T, tg *testGW, server string) {
	t.Helper()
	var last string
	if !waitFor(e2eWait, func() bool {
		resp, err := http.Get(tg.URL + "/mcp")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = string(b)
		var list struct {
			Servers []struct{ Name, State string }
		}
		json.Unmarshal(b, &list)
		for _, s := range list.Servers {
			if s.Name == server && s.State == "up" {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("MCP server %s not up within %s; GET /mcp: %s", server, e2eWait, last)
	}
}

func osArgs0() string { return os.Args[0] }

func jsonEscape(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// TestE2EMCPToolsBeforeOwedTurns: after a restart, an owed turn whose
// sub-agent needs an MCP tool waits for the server's first connection
// attempt — here a stdio server that takes 3 s to answer — and the
// sub-agent is offered the tool and calls it.
func TestE2EMCPToolsBeforeOwedTurns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := openTestStore(t, dir)
	origin := channels.Origin{Channel: "web", ChatID: "ann", ChatType: channels.ChatDM, SenderID: "ann", MessageID: "1"}
	it := &store.Intake{SessionKey: "agent:main:web:dm:ann", AgentID: "main", PlatformID: "ann/1", Origin: origin, SenderName: "ann",
		Text: "call mcp__slow__echo after-restart", Mentioned: true, CreatedAt: time.Now(), ClaimedBy: "before-the-restart"}
	if _, err := db.AddIntake(context.Background(), it); err != nil {
		t.Fatal(err)
	}
	db.Close()
	cfg := strings.ReplaceAll(`{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" } },
  mcp: { servers: { slow: { command: "{{self}}", env: { HERALD_MCPTEST_SERVE: "1", HERALD_MCPTEST_DELAY: "3s" }, timeoutSeconds: 10 } } },
}`, "{{self}}", jsonEscape(osArgs0()))
	tg := newTestGatewayIn(t, dir, cfg, mcpModel)
	ann := waitWeb(t, tg, "ann", 0, "announce", func(string) bool { return true })
	if !strings.Contains(ann.Text, "tool said: echo: after-restart") {
		t.Errorf("the owed turn's sub-agent did not get the MCP tool; announce:\n%s", ann.Text)
	}
}

// TestE2EStartingUntilMCPFirstAttempt: while an MCP server's first
// connection attempt is under way, /readyz answers 503 "starting" and the
// web API refuses a message with 503 and Retry-After; once the attempt
// ended the gateway is ready and the message is answered.
func TestE2EStartingUntilMCPFirstAttempt(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	held := mcptest.NewHTTP(t, func(*http.Request) { <-release })
	t.Cleanup(open) // before the server's Close waits for its handlers
	cfg := strings.ReplaceAll(`{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" } },
  mcp: { servers: { held: { url: "{{mcpurl}}", timeoutSeconds: 30 } } },
}`, "{{mcpurl}}", held.URL)
	testNoWaitReady = true
	tg := newTestGateway(t, cfg, mcpModel)
	testNoWaitReady = false

	waitReadyzStatus(t, tg.URL, "starting", "first connection attempt of MCP servers held")
	resp, err := http.Post(tg.URL+"/api/messages", "application/json", strings.NewReader(`{"client":"ann","text":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "starting") {
		t.Errorf("POST while starting: %s Retry-After %q %s; want 503 with Retry-After saying starting", resp.Status, resp.Header.Get("Retry-After"), b)
	}
	open()
	tg.waitReady(t)
	waitMCPUp(t, tg, "held")
	seq := webPost(t, tg.URL, "ann", "call mcp__held__echo ready")
	ann := waitWeb(t, tg, "ann", seq, "announce", func(string) bool { return true })
	if !strings.Contains(ann.Text, "tool said: echo: ready") {
		t.Errorf("announce:\n%s", ann.Text)
	}
}
