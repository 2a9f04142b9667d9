//go:build linux

package gateway_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/store"
)

// mcpSandboxConfig: one stdio MCP server, the test binary, confined when
// SANDBOX is true; exec's mechanism is MECH.
const mcpSandboxConfig = `{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" } },
  security: { toolPolicy: { default: "allow" } },
  tools: { exec: { sandbox: MECH } },
  mcp: { servers: {
    local: { command: "{{self}}", env: { HERALD_MCPTEST_SERVE: "1" }, sandbox: SANDBOX, timeoutSeconds: 20 },
  } },
}`

// mcpDirectModel: "mcp: <tool> <text>" makes the model call
// mcp__local__<tool> with {"text": <text>}; it then answers
// "result: " and the tool result as JSON {"isError", "content"}.
func mcpDirectModel(c llmtest.Call) llmtest.Reply {
	last := c.Messages[len(c.Messages)-1]
	if len(last.ToolResults) > 0 {
		b, _ := json.Marshal(mcpResult{IsError: last.ToolResults[0].IsError, Content: last.ToolResults[0].Content})
		return llmtest.Reply{Text: "result: " + string(b)}
	}
	if rest, ok := strings.CutPrefix(c.LastUser(), "mcp: "); ok {
		tool, arg, _ := strings.Cut(rest, " ")
		args, _ := json.Marshal(map[string]string{"text": arg})
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "mcp__local__" + tool, Args: args}}}
	}
	return llmtest.Reply{Text: "noted"}
}

// mcpResult is one MCP tool result as the model received it.
type mcpResult struct {
	IsError bool   `json:"isError"`
	Content string `json:"content"`
}

// mcpViaChat posts "mcp: <tool> <text>" as a new web client and returns the
// tool result the model relayed and every text the person got.
func mcpViaChat(t *testing.T, tg *testGW, tool, text string) (mcpResult, string) {
	t.Helper()
	client := fmt.Sprintf("ms%d", rand.IntN(1<<30))
	webPost(t, tg.URL, client, "mcp: "+tool+" "+text)
	reply := waitText(t, tg, client, "result: ")
	var res mcpResult
	if err := json.Unmarshal([]byte(strings.TrimPrefix(reply, "result: ")), &res); err != nil {
		t.Fatalf("result %q: %v", reply, err)
	}
	var got strings.Builder
	for _, m := range webMessages(t, tg.URL, client, 0) {
		got.WriteString(m.Text + "\n")
	}
	return res, got.String()
}

// TestE2EMCPSandboxContainsServer: a stdio MCP server with sandbox: true,
// asked by the model to read the gateway's config file, its herald.db and
// the gateway's (and its own parent's) /proc/<pid>/environ, gets an error
// for each, and the gateway's secret reaches neither the model nor the
// person; a plain call still works. With sandbox: false the same calls read
// them (the contrast: the checks can fail).
func TestE2EMCPSandboxContainsServer(t *testing.T) {
	t.Parallel() // its gateway runs in a child process
	storeIndependent(t)
	if !inChildWithSecret(t) {
		return
	}
	if env, err := os.ReadFile("/proc/self/environ"); err != nil || !strings.Contains(string(env), e2eSecret) {
		t.Fatalf("the secret is not in this process's initial environment (%v)", err)
	}
	type variant struct{ name, mech, sandboxed string }
	var variants []variant
	for _, mech := range workingMechanisms(t) {
		variants = append(variants, variant{mech, mech, "true"})
	}
	// exec's mechanism does not matter to an unsandboxed server.
	variants = append(variants, variant{"unsandboxed", variants[0].mech, "false"})
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			confined := v.sandboxed == "true"
			stateDir := t.TempDir()
			cfgText := strings.NewReplacer("{{self}}", jsonEscape(osArgs0()), "MECH", strconv.Quote(v.mech), "SANDBOX", v.sandboxed).Replace(mcpSandboxConfig)
			// The operator's config file, holding a secret, beside the state.
			cfgPath := filepath.Join(t.TempDir(), "herald.json5")
			if err := os.WriteFile(cfgPath, []byte("// apiKey: "+e2eSecret+"\n"+cfgText), 0o600); err != nil {
				t.Fatal(err)
			}
			tg := newTestGatewayIn(t, stateDir, cfgText, mcpDirectModel)
			waitMCPUp(t, tg, "local")

			if res, _ := mcpViaChat(t, tg, "echo", "hello"); res.IsError || res.Content != "echo: hello" {
				t.Fatalf("plain call of echo: %+v", res)
			}
			ppid, _ := mcpViaChat(t, tg, "ppid", "")
			if _, err := strconv.Atoi(ppid.Content); ppid.IsError || err != nil {
				t.Fatalf("ppid: %+v", ppid)
			}

			// shows: what a successful read shows; may: a confined server
			// may read it (its parent under bwrap is the sandbox's own
			// init, with the server's scrubbed environment), as long as
			// no secret is in it.
			type target struct {
				path, shows string
				may         bool
			}
			targets := []target{
				{cfgPath, e2eSecret, false},
				{fmt.Sprintf("/proc/%d/environ", os.Getpid()), e2eSecret, false},
			}
			if ppid.Content != strconv.Itoa(os.Getpid()) {
				targets = append(targets, target{"/proc/" + ppid.Content + "/environ", "", true})
			}
			db := filepath.Join(stateDir, "herald.db")
			if tg.G.Store().Driver() == store.DriverSQLite {
				if _, err := os.Stat(db); err != nil {
					t.Fatalf("no herald.db in the state dir: the check proves nothing: %v", err)
				}
				targets = append(targets, target{db, "SQLite format 3", false})
			}
			for _, tc := range targets {
				res, person := mcpViaChat(t, tg, "cat", tc.path)
				leaked := strings.Contains(res.Content, e2eSecret) || strings.Contains(person, e2eSecret) ||
					(tc.shows != "" && strings.Contains(res.Content, tc.shows))
				switch {
				case confined && (leaked || !res.IsError && !tc.may):
					t.Errorf("the sandboxed server read %s: %+v\nthe person got: %.300q", tc.path, res, person)
				case !confined && tc.shows != "" && (res.IsError || !leaked):
					t.Errorf("the unsandboxed server could not read %s (%+v): the check proves nothing", tc.path, res)
				default:
					t.Logf("%s: isError %v, %.120q", tc.path, res.IsError, res.Content)
				}
			}
			if confined {
				for _, c := range tg.LLM.Requests() {
					if b, _ := json.Marshal(c); strings.Contains(string(b), e2eSecret) {
						t.Fatalf("the model received the secret: %.500s", b)
					}
				}
			}
		})
	}
}
