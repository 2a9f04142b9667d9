package llmtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent"
)

// APIResponses is the OpenAI Responses API (POST <any prefix>/responses),
// the wire format Codex speaks to a custom provider.
const APIResponses = "openai-responses"

// NewResponses starts a fake OpenAI Responses API (POST
// <any prefix>/responses): input items become the Call's Messages
// (instructions and developer/system messages its System), function
// tools its Tools; a streamed request is answered with the Responses
// server-sent events (response.created, output items with text deltas,
// response.completed with usage), else with the response object.
func NewResponses(t testing.TB, h Handler) *Server { return start(t, APIResponses, h) }

type responsesRequest struct {
	Model        string          `json:"model"`
	Instructions string          `json:"instructions"`
	Input        json.RawMessage `json:"input"`
	Tools        []struct {
		Type  string `json:"type"`
		Name  string `json:"name"`
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	} `json:"tools"`
	Stream          bool  `json:"stream"`
	MaxOutputTokens int64 `json:"max_output_tokens"`
	Reasoning       *struct {
		Effort string `json:"effort"`
	} `json:"reasoning"`
}

type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Input     string          `json:"input"` // a custom tool call's
	CallID    string          `json:"call_id"`
	Output    json.RawMessage `json:"output"`
}

// decodeResponses decodes a Responses request; a function call output
// without its call is the problem the real API reports.
func decodeResponses(body []byte) (c Call, problem string) {
	var req responsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return c, "We could not parse the JSON body of your request: " + err.Error()
	}
	c.Model, c.Stream, c.MaxTokens = req.Model, req.Stream, req.MaxOutputTokens
	if req.Reasoning != nil {
		c.ReasoningEffort = req.Reasoning.Effort
	}
	for _, t := range req.Tools {
		if t.Name != "" && t.Type != "namespace" {
			c.Tools = append(c.Tools, t.Name)
		}
		for _, n := range t.Tools {
			c.Tools = append(c.Tools, n.Name)
		}
	}
	system := []string{}
	if req.Instructions != "" {
		system = append(system, req.Instructions)
	}
	var items []responsesItem
	if s := ""; json.Unmarshal(req.Input, &s) == nil {
		items = []responsesItem{{Type: "message", Role: "user", Content: req.Input}}
	} else if err := json.Unmarshal(req.Input, &items); err != nil {
		return c, "Invalid 'input': " + err.Error()
	}
	calls := map[string]string{} // call_id → name
	for i, it := range items {
		switch it.Type {
		case "message", "":
			text := responsesText(it.Content)
			switch it.Role {
			case "system", "developer":
				system = append(system, text)
			case "user":
				c.Messages = append(c.Messages, agent.Message{Role: agent.RoleUser, Text: text})
			case "assistant":
				c.Messages = append(c.Messages, agent.Message{Role: agent.RoleAssistant, Text: text})
			}
		case "function_call", "custom_tool_call":
			args := it.Arguments
			if it.Type == "custom_tool_call" {
				b, _ := json.Marshal(map[string]string{"input": it.Input})
				args = string(b)
			}
			calls[it.CallID] = it.Name
			tc := agent.ToolCall{ID: it.CallID, Name: it.Name, Args: json.RawMessage(args)}
			if n := len(c.Messages); n > 0 && c.Messages[n-1].Role == agent.RoleAssistant {
				c.Messages[n-1].ToolCalls = append(c.Messages[n-1].ToolCalls, tc)
			} else {
				c.Messages = append(c.Messages, agent.Message{Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{tc}})
			}
		case "function_call_output", "custom_tool_call_output":
			name, ok := calls[it.CallID]
			if !ok && problem == "" {
				problem = fmt.Sprintf("No tool call found for function call output with call_id %s (input[%d]).", it.CallID, i)
			}
			res := agent.ToolResult{CallID: it.CallID, Name: name, Content: responsesText(it.Output)}
			c.Messages = appendToolResult(c.Messages, res)
		}
	}
	c.System = strings.Join(system, "\n")
	return c, problem
}

// responsesText is the text of a content value: a string, or the text of
// its input_text/output_text parts.
func responsesText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type, Text string
	}
	_ = json.Unmarshal(raw, &parts)
	var out []string
	for _, p := range parts {
		if p.Text != "" {
			out = append(out, p.Text)
		}
	}
	return strings.Join(out, "\n")
}

// responsesOutput is the output items of r (a message, then its function
// calls) and its usage.
func responsesOutput(r Reply, id int) (items []map[string]any, usage map[string]any) {
	if r.Text != "" {
		items = append(items, map[string]any{"type": "message", "id": fmt.Sprintf("msg_llmtest%d", id), "role": "assistant", "status": "completed",
			"content": []map[string]any{{"type": "output_text", "text": r.Text, "annotations": []any{}}}})
	}
	for i, tc := range r.ToolCalls {
		items = append(items, map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_llmtest%d_%d", id, i), "call_id": tc.ID,
			"name": tc.Name, "arguments": string(tc.Args), "status": "completed"})
	}
	usage = map[string]any{"input_tokens": r.Usage.Input, "input_tokens_details": map[string]any{"cached_tokens": r.Usage.CacheRead},
		"output_tokens": r.Usage.Output, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": r.Usage.Input + r.Usage.Output}
	return items, usage
}

func encodeResponses(c Call, r Reply, id int) map[string]any {
	items, usage := responsesOutput(r, id)
	return map[string]any{"id": fmt.Sprintf("resp_llmtest%d", id), "object": "response", "status": "completed", "model": c.Model,
		"output": items, "usage": usage}
}

// writeResponsesStream answers a streamed Responses request with its
// events: the message's text in deltas, each item added and done, then
// response.completed.
func writeResponsesStream(w http.ResponseWriter, hr *http.Request, c Call, r Reply, id int) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("x-request-id", fmt.Sprintf("req_llmtest_%d", id))
	flusher, _ := w.(http.Flusher)
	seq := 0
	event := func(typ string, fields map[string]any) {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		b, _ := json.Marshal(fields)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	respID := fmt.Sprintf("resp_llmtest%d", id)
	event("response.created", map[string]any{"response": map[string]any{"id": respID, "object": "response", "status": "in_progress", "output": []any{}}})
	if r.StreamError != 0 {
		event("response.failed", map[string]any{"response": map[string]any{"id": respID, "status": "failed",
			"error": streamErrorBody(APIOpenAI, r.StreamError, r.Message)["error"]}})
		return
	}
	items, usage := responsesOutput(r, id)
	for i, it := range items {
		if it["type"] == "message" {
			added := map[string]any{"type": "message", "id": it["id"], "role": "assistant", "status": "in_progress", "content": []any{}}
			event("response.output_item.added", map[string]any{"output_index": i, "item": added})
			for n, piece := range splitText(r.Text, 3) {
				if r.BeforePiece != nil && !waitPiece(hr, r.BeforePiece, n) {
					return
				}
				event("response.output_text.delta", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "delta": piece})
			}
		} else {
			event("response.output_item.added", map[string]any{"output_index": i, "item": it})
		}
		event("response.output_item.done", map[string]any{"output_index": i, "item": it})
	}
	event("response.completed", map[string]any{"response": map[string]any{"id": respID, "object": "response", "status": "completed",
		"model": c.Model, "output": items, "usage": usage}})
}

// appendToolResult adds res to the tool message that ends msgs, or as a
// new one: the results of one batch of calls are one message.
func appendToolResult(msgs []agent.Message, res agent.ToolResult) []agent.Message {
	if n := len(msgs); n > 0 && msgs[n-1].Role == agent.RoleTool {
		msgs[n-1].ToolResults = append(msgs[n-1].ToolResults, res)
		return msgs
	}
	return append(msgs, agent.Message{Role: agent.RoleTool, ToolResults: []agent.ToolResult{res}})
}
