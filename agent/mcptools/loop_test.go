package mcptools_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/agent/mcptools"
	"github.com/heraldhq/herald/agent/mcptools/mcptest"
	"github.com/heraldhq/herald/agent/providers"
	"github.com/heraldhq/herald/config"
)

// Through the agent loop and the real Anthropic and OpenAI SDKs: the MCP
// tool's schema reaches the provider as the server gave it, and the tool's
// results (a success and an isError) reach the model.
func TestMCPToolsThroughAgentLoop(t *testing.T) {
	m := newManager(t, mcptools.Options{}, map[string]config.MCPServer{"t": mcptest.StdioConfig()})
	waitUp(t, m, "t")
	for _, api := range []string{llmtest.APIAnthropic, llmtest.APIOpenAI} {
		t.Run(api, func(t *testing.T) {
			h := func(c llmtest.Call) llmtest.Reply {
				last := c.Messages[len(c.Messages)-1]
				if len(last.ToolResults) > 0 {
					var parts []string
					for _, r := range last.ToolResults {
						parts = append(parts, r.Name+"="+r.Content)
					}
					return llmtest.Reply{Text: strings.Join(parts, " | ")}
				}
				return llmtest.Reply{ToolCalls: []agent.ToolCall{
					{Name: "mcp__t__echo", Args: json.RawMessage(`{"text":"via ` + api + `"}`)},
					{Name: "mcp__t__fail", Args: json.RawMessage(`{}`)},
				}}
			}
			var srv *llmtest.Server
			if api == llmtest.APIAnthropic {
				srv = llmtest.NewAnthropic(t, h)
			} else {
				srv = llmtest.NewOpenAI(t, h)
			}
			p, err := providers.New(api, config.Provider{API: api, BaseURL: srv.URL, APIKey: "k", Models: []config.Model{{ID: "m"}}}, providers.Options{})
			if err != nil {
				t.Fatal(err)
			}
			model := &agent.Model{Ref: api + "/m", ProviderID: api, ID: "m", API: api, Provider: p}
			s, err := agent.LoadSession(context.Background(), "k", "id", "main", "", filepath.Join(t.TempDir(), "s.jsonl"), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			res, err := s.Run(context.Background(), agent.Turn{Model: model, Tools: agent.NewRegistry(m.Tools([]string{"t"})...)}, "go")
			if err != nil {
				t.Fatal(err)
			}
			if want := `mcp__t__echo=echo: via ` + api + ` | mcp__t__fail={"error":"bad input: nope","status":"error"}`; res.Text != want {
				t.Errorf("model saw %q, want %q", res.Text, want)
			}
			first := srv.Requests()[0]
			if !strings.Contains(string(first.Body), `"description":"what to echo"`) {
				t.Errorf("the echo tool's schema did not reach the %s request:\n%s", api, first.Body)
			}
		})
	}
}
