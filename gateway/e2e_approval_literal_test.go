package gateway_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels/slack/slackfake"
)

// disguisedArgs: a read_file call whose arguments try to hide in Slack
// markup (a link showing only its label, a @channel notification) and in
// a right-to-left override that reverses the text after it.
const disguisedArgs = `{"path":"<https://evil.example/x|echo ls> <!channel> ` + "\u202e" + `txt.exe"}`

// TestE2EApprovalShowsArgumentsLiterally: the approval request shows the
// tool's arguments as literal text: on Slack escaped (&lt; &gt;, so no link
// and no @channel) in a code block, on the web chat as text; on both the
// right-to-left override is written as \u202e instead of reordering the text.
func TestE2EApprovalShowsArgumentsLiterally(t *testing.T) {
	t.Parallel()
	sf := slackfake.New(t)
	cfg := fmt.Sprintf(`{
  gateway: { http: { listen: "127.0.0.1:0" }, shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [{ id: "main" }] },
  security: { toolPolicy: { default: "allow", tools: { read_file: "supervised" } } },
  channels: { slack: { enabled: true, botToken: %q, appToken: %q, apiUrl: %q, groups: { C1: {} } } },
}`, slackfake.BotToken, slackfake.AppToken, sf.URL())
	tg := newTestGateway(t, cfg, func(c llmtest.Call) llmtest.Reply {
		if last := c.Messages[len(c.Messages)-1]; last.Role == agent.RoleTool || len(last.ToolResults) > 0 {
			return llmtest.Reply{Text: "done"}
		}
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "read_file", Args: json.RawMessage(disguisedArgs)}}}
	})
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("the gateway's Slack channel did not connect over Socket Mode")
	}

	sf.SendMention("C1", slackfake.UserID, "read it", slackT1)
	var req string
	if !waitFor(e2eWait, func() bool {
		for _, p := range sf.Posted() {
			if strings.Contains(p.Text, "Approval needed") {
				req = p.Text
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no approval request posted to Slack; posts %+v", sf.Posted())
	}
	wantSlack := "```" + `{"path":"&lt;https://evil.example/x|echo ls&gt; &lt;!channel&gt; \u202etxt.exe"}` + "```"
	if !strings.Contains(req, wantSlack) {
		t.Errorf("Slack approval request %q\ndoes not show the arguments literally: want %q in it", req, wantSlack)
	}
	for _, raw := range []string{"<https://", "<!channel>", "\u202e"} {
		if strings.Contains(req, raw) {
			t.Errorf("Slack approval request %q contains %q raw (Slack would render or reorder it)", req, raw)
		}
	}

	webPost(t, tg.URL, "ann", "read it")
	got := waitText(t, tg, "ann", "Approval needed")
	wantWeb := `read_file {"path":"<https://evil.example/x|echo ls> <!channel> \u202etxt.exe"}`
	if !strings.Contains(got, wantWeb) || strings.Contains(got, "\u202e") {
		t.Errorf("web approval request %q\nwant %q in it, and no raw U+202E", got, wantWeb)
	}
}
