package gateway_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/agent/tools/searchfake"
)

// toolResultText returns the content of the newest tool result of c whose
// call was named name ("" when none).
func toolResultText(c llmtest.Call, name string) string {
	calls := map[string]string{}
	out := ""
	for _, m := range c.Messages {
		for _, tc := range m.ToolCalls {
			calls[tc.ID] = tc.Name
		}
		for _, r := range m.ToolResults {
			if calls[r.CallID] == name {
				out = r.Content
			}
		}
	}
	return out
}

// TestE2EWebSearchSubagent: a sub-agent searches the web through the
// configured provider (Brave's API on a fake; the gateway reaches it on
// loopback, which the agent egress guard would refuse to web_fetch) and
// its announce cites a result's URL.
func TestE2EWebSearchSubagent(t *testing.T) {
	search := searchfake.New(t)
	search.SetResults(
		searchfake.Result{Title: "WAL mode, the guide", URL: "https://docs.example.org/wal-guide", Snippet: "Readers do not block writers."},
		searchfake.Result{Title: "Other", URL: "https://other.example.org/", Snippet: "…"},
	)
	cfg := strings.ReplaceAll(`{
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [{ id: "main" }] },
  tools: { webSearch: { provider: "brave", apiKey: "`+searchfake.Key+`", baseUrl: "{{search}}" } },
  channels: { web: { enabled: true } },
}`, "{{search}}", search.URL)
	tg := newTestGateway(t, cfg, func(c llmtest.Call) llmtest.Reply {
		last := c.Messages[len(c.Messages)-1]
		if strings.Contains(c.System, "Sub-agent context") {
			var found struct {
				Results []struct{ URL string } `json:"results"`
			}
			_ = json.Unmarshal([]byte(toolResultText(c, "web_search")), &found)
			switch {
			case strings.Contains(c.LastUser(), "Announce step") && len(found.Results) > 0:
				return llmtest.Reply{Text: "Result:\nSee " + found.Results[0].URL + "\n\nNotes:\n(none)"}
			case len(last.ToolResults) > 0:
				return llmtest.Reply{Text: "searched"}
			case slices.Contains(c.Tools, "web_search"):
				return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "web_search", Args: json.RawMessage(`{"query":"sqlite wal mode","count":2}`)}}}
			}
			return llmtest.Reply{Text: "Result:\nno web_search tool\n\nNotes:\n(none)"}
		}
		if len(last.ToolResults) > 0 {
			return llmtest.Reply{Text: "A searcher is on it."}
		}
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn", Args: json.RawMessage(`{"task":"find the WAL docs","label":"searcher"}`)}}}
	})
	seq := webPost(t, tg.URL, "ws1", "find the sqlite WAL docs")
	got := waitWeb(t, tg, "ws1", seq, "announce", func(s string) bool { return strings.Contains(s, "Result:") })
	if !strings.Contains(got.Text, "https://docs.example.org/wal-guide") {
		t.Errorf("announce does not cite the search result:\n%s", got.Text)
	}
	if reqs := search.Requests(); len(reqs) != 1 || reqs[0].API != "brave" || reqs[0].Query != "sqlite wal mode" || reqs[0].Count != 2 {
		t.Errorf("search requests = %+v, want one Brave search for \"sqlite wal mode\" (count 2)", reqs)
	}
}
