package providers

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/config"
)

// Both SDK providers stream: onText sees the text grow piece by piece to the
// whole reply, and the Response (text, tool calls, usage, thinking) is what
// Complete would return.
func TestStreamBothProviders(t *testing.T) {
	for _, api := range []string{llmtest.APIAnthropic, llmtest.APIOpenAI} {
		t.Run(api, func(t *testing.T) {
			reply := llmtest.Reply{Text: "Streaming makes the wait visible to people.", Thinking: "let me think",
				ToolCalls: []agent.ToolCall{{ID: "call_1", Name: "echo", Args: json.RawMessage(`{"text":"hi"}`)}},
				Usage:     agent.Usage{Input: 40, Output: 12}}
			var srv *llmtest.Server
			if api == llmtest.APIAnthropic {
				srv = llmtest.NewAnthropic(t, llmtest.Script(reply))
			} else {
				srv = llmtest.NewOpenAI(t, llmtest.Script(reply))
			}
			p, err := New(api, config.Provider{API: api, BaseURL: srv.URL, APIKey: "k", Models: []config.Model{{ID: "m"}}}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var seen []string
			resp, err := p.(agent.Streamer).Stream(context.Background(), agent.Request{Model: "m", Thinking: "low",
				Messages: []agent.Message{{Role: agent.RoleUser, Text: "go"}}}, func(s string) { seen = append(seen, s) })
			if err != nil {
				t.Fatal(err)
			}
			if len(seen) < 2 || seen[len(seen)-1] != reply.Text {
				t.Fatalf("onText saw %q; want several growing texts ending in the reply", seen)
			}
			for i := 1; i < len(seen); i++ {
				if !strings.HasPrefix(seen[i], seen[i-1]) || len(seen[i]) <= len(seen[i-1]) {
					t.Errorf("text did not grow: %q then %q", seen[i-1], seen[i])
				}
			}
			if resp.Text != reply.Text || len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "echo" ||
				string(resp.ToolCalls[0].Args) != `{"text":"hi"}` || resp.Usage.Input != 40 || resp.Usage.Output != 12 {
				t.Errorf("streamed response = %+v", resp)
			}
			if c := srv.Requests()[0]; !c.Stream {
				t.Error("the request was not a streaming one")
			}
		})
	}
}
