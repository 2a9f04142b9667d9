package gateway_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/store"
)

const approvalConfig = `{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" } },
  security: { toolPolicy: { default: "allow", tools: { read_file: "supervised", write_file: "deny" } } },
}`

// approvalModel reads secret.txt (supervised) when asked to, tries to write
// (denied), and reports what the tool results said.
func approvalModel(c llmtest.Call) llmtest.Reply {
	last := c.Messages[len(c.Messages)-1]
	if last.Role == agent.RoleTool || len(last.ToolResults) > 0 {
		var parts []string
		for _, r := range last.ToolResults {
			parts = append(parts, r.Name+" => "+r.Content)
		}
		return llmtest.Reply{Text: "tool said: " + strings.Join(parts, " | ")}
	}
	switch {
	case strings.Contains(c.LastUser(), "read the secret"):
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "read_file", Args: json.RawMessage(`{"path":"secret.txt"}`)}}}
	case strings.Contains(c.LastUser(), "write it"):
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "write_file", Args: json.RawMessage(`{"path":"x.txt","content":"x"}`)}}}
	}
	return llmtest.Reply{Text: "hello"}
}

var approvalCode = regexp.MustCompile(`/approve ([A-Z0-9]{6})`)

// waitText waits until a message of client contains want and returns it.
func waitText(t *testing.T, tg *testGW, client, want string) string {
	t.Helper()
	var found string
	if !waitFor(e2eWait, func() bool {
		for _, m := range webMessages(t, tg.URL, client, 0) {
			if strings.Contains(m.Text, want) {
				found = m.Text
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no message of %s contains %q; have %+v", client, want, webMessages(t, tg.URL, client, 0))
	}
	return found
}

// TestE2ESupervisedToolNeedsApproval: a supervised tool call posts an
// approval request with a code in the requester's chat; another
// conversation cannot approve it; /approve lets it run; /deny refuses it;
// a denied tool never runs.
func TestE2ESupervisedToolNeedsApproval(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, approvalConfig, approvalModel)
	ws := filepath.Join(tg.StateDir, "workspace", "main")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "secret.txt"), []byte("the answer is 42"), 0o644)

	webPost(t, tg.URL, "ann", "please read the secret")
	req := waitText(t, tg, "ann", "🔐 Approval needed")
	m := approvalCode.FindStringSubmatch(req)
	if m == nil || !strings.Contains(req, "read_file") {
		t.Fatalf("approval request without a code or tool: %q", req)
	}
	code := m[1]
	// Another conversation's /approve does nothing but say it knows no such code.
	webPost(t, tg.URL, "mallory", "/approve "+code)
	waitText(t, tg, "mallory", `No pending approval "`+code+`"`)
	webPost(t, tg.URL, "ann", "/approve "+code)
	reply := waitText(t, tg, "ann", "tool said:")
	if !strings.Contains(reply, "the answer is 42") {
		t.Errorf("approved read_file did not run: %q", reply)
	}

	webPost(t, tg.URL, "bob", "please read the secret")
	req = waitText(t, tg, "bob", "🔐 Approval needed")
	code = approvalCode.FindStringSubmatch(req)[1]
	webPost(t, tg.URL, "bob", "/deny "+code)
	reply = waitText(t, tg, "bob", "tool said:")
	if strings.Contains(reply, "the answer is 42") || !strings.Contains(reply, "denied") {
		t.Errorf("denied read_file ran or was not reported as denied: %q", reply)
	}

	webPost(t, tg.URL, "bob", "now write it")
	reply = waitText(t, tg, "bob", "write_file =>")
	if !strings.Contains(reply, "denied by the tool policy") {
		t.Errorf("write_file under deny: %q", reply)
	}
	if _, err := os.Stat(filepath.Join(ws, "x.txt")); !os.IsNotExist(err) {
		t.Error("a denied write_file wrote its file")
	}
}

// TestE2EApprovalDecidedAsTheTimerFires: an /approve committed just as the
// approval's timer fires (here: resolved in the store, the waiting call not
// told) wins: the tool runs, instead of the person being told "approved"
// while the agent hears "no one approved".
func TestE2EApprovalDecidedAsTheTimerFires(t *testing.T) {
	cfg := strings.Replace(approvalConfig, `security: {`, `security: { approvalTimeoutSeconds: 1,`, 1)
	tg := newTestGateway(t, cfg, approvalModel)
	ws := filepath.Join(tg.StateDir, "workspace", "main")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "secret.txt"), []byte("the answer is 42"), 0o644)
	webPost(t, tg.URL, "race", "please read the secret")
	req := waitText(t, tg, "race", "🔐 Approval needed")
	code := approvalCode.FindStringSubmatch(req)[1]
	if _, err := tg.G.Store().ResolveApproval(context.Background(), code, store.ApprovalApproved, "race", time.Now()); err != nil {
		t.Fatal(err)
	}
	reply := waitText(t, tg, "race", "tool said:")
	if !strings.Contains(reply, "the answer is 42") {
		t.Errorf("an approval decided as the timer fired did not run the tool: %q", reply)
	}
}
