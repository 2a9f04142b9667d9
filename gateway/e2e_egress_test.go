package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
)

const egressConfig = `{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" } },
  security: { toolPolicy: { default: "allow" } },
  tools: { webFetch: { allowPrivate: [ALLOW] } },
}`

// egressModel: "fetch <url>" makes the main agent spawn a sub-agent that
// web_fetches the URL and reports the tool result verbatim in its announce.
func egressModel(c llmtest.Call) llmtest.Reply {
	last := c.Messages[len(c.Messages)-1]
	if strings.Contains(c.System, "Sub-agent context") {
		if len(last.ToolResults) > 0 {
			return llmtest.Reply{Text: "fetch said: " + last.ToolResults[0].Content}
		}
		if strings.Contains(last.Text, "Announce step") {
			said := "(nothing)"
			for _, m := range c.Messages {
				if m.Role == agent.RoleAssistant && strings.HasPrefix(m.Text, "fetch said: ") {
					said = m.Text
				}
			}
			return llmtest.Reply{Text: "Result:\n" + said + "\n\nNotes:\n(none)"}
		}
		url := strings.TrimSpace(strings.TrimPrefix(c.LastUser()[strings.Index(c.LastUser(), "fetch "):], "fetch "))
		url = strings.Fields(url)[0]
		args, _ := json.Marshal(map[string]string{"url": url})
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "web_fetch", Args: args}}}
	}
	if len(last.ToolResults) > 0 {
		return llmtest.Reply{Text: "spawned the fetcher"}
	}
	if strings.HasPrefix(c.LastUser(), "fetch ") {
		args, _ := json.Marshal(map[string]string{"task": c.LastUser(), "label": "fetcher"})
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn", Args: args}}}
	}
	return llmtest.Reply{Text: "noted"}
}

// TestE2EWebFetchCannotReachOtherConversations: a sub-agent told to fetch
// the gateway's own web API for another conversation (the leak of issue
// 16) is refused at dial time; nothing of the other conversation reaches
// any model call; an operator-allowed private range still works.
func TestE2EWebFetchCannotReachOtherConversations(t *testing.T) {
	t.Parallel()
	const victim, attacker, secret = "victim", "attacker", "XYZZY-7431"
	tg := newTestGateway(t, strings.Replace(egressConfig, "ALLOW", "", 1), egressModel)
	webPost(t, tg.URL, victim, "my secret is "+secret)
	waitText(t, tg, victim, "noted")

	for _, target := range []string{
		tg.URL + "/api/messages?client=" + victim + "&after=0",
		strings.Replace(tg.URL, "127.0.0.1", "localhost", 1) + "/api/messages?client=" + victim,
		"http://169.254.169.254/latest/meta-data/",
	} {
		seq := webPost(t, tg.URL, attacker, "fetch "+target)
		ann := waitWeb(t, tg, attacker, seq, "announce", func(string) bool { return true })
		if !strings.Contains(ann.Text, "refused to fetch") || !strings.Contains(ann.Text, "tools.webFetch.allowPrivate") {
			t.Errorf("fetch %s: announce does not carry the refusal:\n%s", target, ann.Text)
		}
	}
	for _, c := range tg.LLM.Requests() {
		if strings.Contains(c.System, "Sub-agent context") && strings.Contains(string(c.Body), secret) {
			t.Fatalf("the other conversation's secret reached a sub-agent's model call:\n%s", c.Body)
		}
	}

	// Allowed by the operator: a private site the agent may read.
	intranet := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("intranet handbook"))
	}))
	defer intranet.Close()
	tg2 := newTestGateway(t, strings.Replace(egressConfig, "ALLOW", `"127.0.0.1/32"`, 1), egressModel)
	seq := webPost(t, tg2.URL, attacker, "fetch "+intranet.URL+"/handbook")
	ann := waitWeb(t, tg2, attacker, seq, "announce", func(string) bool { return true })
	if !strings.Contains(ann.Text, "intranet handbook") {
		t.Errorf("an allowed private address was not fetched:\n%s", ann.Text)
	}
}
