package llmtest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent"
)

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", b, err)
	}
	return resp.StatusCode, m
}

// The fakes refuse requests the real APIs refuse, with the real error shape.
func TestFakesRejectLikeTheRealAPIs(t *testing.T) {
	tests := []struct {
		name, api, path, body string
		status                int
		msgContains           string
	}{
		{"anthropic needs max_tokens", APIAnthropic, "/v1/messages",
			`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 400, "max_tokens"},
		{"anthropic budget below max_tokens", APIAnthropic, "/v1/messages",
			`{"model":"m","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":4096},"messages":[{"role":"user","content":"hi"}]}`, 400, "budget_tokens"},
		{"anthropic tool_use without result", APIAnthropic, "/v1/messages",
			`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"x","input":{}}]},{"role":"user","content":"next"}]}`, 400, "tool_result"},
		{"anthropic unknown path", APIAnthropic, "/v1/complete", `{}`, 404, "no route"},
		{"openai tool without tool_calls", APIOpenAI, "/v1/chat/completions",
			`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"c1","content":"x"}]}`, 400, "role 'tool'"},
		{"openai unanswered tool call", APIOpenAI, "/v1/chat/completions",
			`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"x","arguments":"{}"}}]}]}`, 400, "c1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s *Server
			if tt.api == APIAnthropic {
				s = NewAnthropic(t, Text("unreachable"))
			} else {
				s = NewOpenAI(t, Text("unreachable"))
			}
			status, body := post(t, s.URL+tt.path, tt.body)
			if status != tt.status {
				t.Errorf("status %d, want %d", status, tt.status)
			}
			errObj, _ := body["error"].(map[string]any)
			msg, _ := errObj["message"].(string)
			if !strings.Contains(msg, tt.msgContains) {
				t.Errorf("error message %q, want it to mention %q", msg, tt.msgContains)
			}
			if tt.api == APIAnthropic && (body["type"] != "error" || errObj["type"] == nil) {
				t.Errorf("anthropic error body %v, want {type:error, error:{type,message}}", body)
			}
			if tt.api == APIOpenAI && errObj["type"] == nil {
				t.Errorf("openai error body %v, want {error:{message,type,param,code}}", body)
			}
		})
	}
}

func TestScriptRepeatsLast(t *testing.T) {
	h := Script(Reply{Text: "one"}, Reply{Text: "two"})
	var got []string
	for range 4 {
		got = append(got, h(Call{}).Text)
	}
	if strings.Join(got, ",") != "one,two,two,two" {
		t.Errorf("Script gave %v", got)
	}
}

func TestAnthropicReplyShape(t *testing.T) {
	s := NewAnthropic(t, func(c Call) Reply {
		return Reply{Text: "hi " + c.LastUser(), ToolCalls: nil}
	})
	status, body := post(t, s.URL+"/v1/messages", `{"model":"claude-x","max_tokens":10,"system":[{"type":"text","text":"sys"}],"messages":[{"role":"user","content":[{"type":"text","text":"bob"}]}]}`)
	if status != 200 || body["type"] != "message" || body["role"] != "assistant" || body["stop_reason"] != "end_turn" || body["model"] != "claude-x" {
		t.Fatalf("reply %d %v", status, body)
	}
	content := body["content"].([]any)[0].(map[string]any)
	if content["type"] != "text" || content["text"] != "hi bob" {
		t.Errorf("content %v", content)
	}
	c, _ := s.Last()
	if c.System != "sys" || s.Count() != 1 {
		t.Errorf("call %+v", c)
	}
}

// TestResponsesFake: the Responses fake decodes instructions, messages,
// function calls and their outputs into a Call, lists function tools
// (those of a namespace too), streams a text reply as deltas and a tool
// call as an output item, then response.completed with usage; an output
// without its call is refused like the real API.
func TestResponsesFake(t *testing.T) {
	var got Call
	s := NewResponses(t, func(c Call) Reply {
		got = c
		if c.Messages[len(c.Messages)-1].Role == "tool" {
			return Reply{Text: "all done", Usage: agent.Usage{Input: 10, Output: 3}}
		}
		return Reply{ToolCalls: []agent.ToolCall{{Name: "exec_command", Args: json.RawMessage(`{"cmd":"ls"}`)}}}
	})
	resp, err := http.Post(s.URL+"/v1/responses", "application/json", strings.NewReader(`{"model":"gpt-x","stream":true,
		"instructions":"be brief","tools":[{"type":"function","name":"exec_command"},{"type":"namespace","name":"ns","tools":[{"name":"spawn"}]},{"type":"web_search"}],
		"input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"dev note"}]},
		         {"type":"message","role":"user","content":[{"type":"input_text","text":"list files"}]},
		         {"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"pwd\"}","call_id":"c1"},
		         {"type":"function_call_output","call_id":"c1","output":"/work"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got.System != "be brief\ndev note" || got.LastUser() != "list files" || strings.Join(got.Tools, ",") != "exec_command,spawn" || len(got.Messages) != 3 ||
		got.Messages[1].ToolCalls[0].Name != "exec_command" || got.Messages[2].ToolResults[0].Content != "/work" || got.Messages[2].ToolResults[0].Name != "exec_command" {
		t.Errorf("decoded %+v", got)
	}
	var events, text []string
	for _, line := range strings.Split(string(b), "\n") {
		if ev, ok := strings.CutPrefix(line, "event: "); ok {
			events = append(events, ev)
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(d, `"response.output_text.delta"`) {
			var e struct{ Delta string }
			_ = json.Unmarshal([]byte(d), &e)
			text = append(text, e.Delta)
		}
	}
	if strings.Join(text, "") != "all done" || events[0] != "response.created" || events[len(events)-1] != "response.completed" ||
		!strings.Contains(string(b), `"usage":{"input_tokens":10,`) {
		t.Errorf("stream events %v, text %q:\n%s", events, text, b)
	}
	status, m := post(t, s.URL+"/v1/responses", `{"model":"gpt-x","input":[{"type":"function_call_output","call_id":"nope","output":"x"}]}`)
	if e, _ := m["error"].(map[string]any); status != 400 || !strings.Contains(e["message"].(string), "No tool call found") {
		t.Errorf("orphan output: %d %v", status, m)
	}
	status, m = post(t, s.URL+"/v1/responses", `{"model":"gpt-x","input":"list files"}`)
	if out, _ := m["output"].([]any); status != 200 || len(out) != 1 || out[0].(map[string]any)["type"] != "function_call" {
		t.Errorf("plain request: %d %v", status, m)
	}
}
