package llmtest

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/heraldhq/herald/agent"
)

type openAIToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type openAIRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role       string           `json:"role"`
		Content    json.RawMessage  `json:"content"`
		ToolCalls  []openAIToolCall `json:"tool_calls"`
		ToolCallID string           `json:"tool_call_id"`
	} `json:"messages"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	ReasoningEffort     string `json:"reasoning_effort"`
	MaxTokens           *int64 `json:"max_tokens"`
	MaxCompletionTokens *int64 `json:"max_completion_tokens"`
	Stream              bool   `json:"stream"`
}

// decodeOpenAI decodes a Chat Completions request and checks the tool
// message ordering rules the real API enforces.
func decodeOpenAI(body []byte) (c Call, problem string) {
	var req openAIRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return c, "We could not parse the JSON body of your request: " + err.Error()
	}
	c.Model, c.Stream, c.ReasoningEffort = req.Model, req.Stream, req.ReasoningEffort
	switch {
	case req.MaxCompletionTokens != nil:
		c.MaxTokens = *req.MaxCompletionTokens
	case req.MaxTokens != nil:
		c.MaxTokens = *req.MaxTokens
	}
	for _, t := range req.Tools {
		c.Tools = append(c.Tools, t.Function.Name)
	}
	if len(req.Messages) == 0 {
		problem = "[] is too short - 'messages'"
	}
	var pending map[string]string // tool_call id → name, from the last assistant message
	var system []string
	for i, m := range req.Messages {
		if m.Role != "tool" && len(pending) > 0 && problem == "" {
			problem = "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: " + strings.Join(keys(pending), ", ")
		}
		text := textOf(m.Content)
		switch m.Role {
		case "system", "developer":
			system = append(system, text)
		case "user":
			c.Messages = append(c.Messages, agent.Message{Role: agent.RoleUser, Text: text})
		case "assistant":
			msg := agent.Message{Role: agent.RoleAssistant, Text: text}
			pending = map[string]string{}
			for _, tc := range m.ToolCalls {
				args := json.RawMessage(tc.Function.Arguments)
				if !json.Valid(args) && problem == "" {
					problem = fmt.Sprintf("Invalid 'messages[%d].tool_calls': function.arguments must be a JSON string holding an object", i)
				}
				msg.ToolCalls = append(msg.ToolCalls, agent.ToolCall{ID: tc.ID, Name: tc.Function.Name, Args: args})
				pending[tc.ID] = tc.Function.Name
			}
			c.Messages = append(c.Messages, msg)
		case "tool":
			name, ok := pending[m.ToolCallID]
			if !ok && problem == "" {
				problem = fmt.Sprintf("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'. (messages[%d], tool_call_id %q)", i, m.ToolCallID)
			}
			delete(pending, m.ToolCallID)
			res := agent.ToolResult{CallID: m.ToolCallID, Name: name, Content: text}
			c.Messages = appendToolResult(c.Messages, res)
		default:
			if problem == "" {
				problem = fmt.Sprintf("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'tool', 'function' and 'developer'.", m.Role)
			}
		}
	}
	if len(pending) > 0 && problem == "" {
		problem = "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: " + strings.Join(keys(pending), ", ")
	}
	c.System = strings.Join(system, "\n")
	return c, problem
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func encodeOpenAI(c Call, r Reply, id int) map[string]any {
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	if r.Text != "" || len(r.ToolCalls) == 0 {
		msg["content"] = r.Text
	}
	if len(r.ToolCalls) > 0 {
		calls := make([]map[string]any, len(r.ToolCalls))
		for i, tc := range r.ToolCalls {
			calls[i] = map[string]any{
				"id":       tc.ID,
				"type":     "function",
				"function": map[string]any{"name": tc.Name, "arguments": string(tc.Args)},
			}
		}
		msg["tool_calls"] = calls
	}
	finish := r.StopReason
	if finish == "" {
		finish = "stop"
		if len(r.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	}
	model := c.Model
	if model == "" {
		model = "gpt-llmtest"
	}
	prompt := r.Usage.Input + r.Usage.CacheRead + r.Usage.CacheWrite
	return map[string]any{
		"id":                 fmt.Sprintf("chatcmpl-llmtest%d", id),
		"object":             "chat.completion",
		"created":            time.Now().Unix(),
		"model":              model,
		"system_fingerprint": "fp_llmtest",
		"choices": []map[string]any{{
			"index":         0,
			"message":       msg,
			"logprobs":      nil,
			"finish_reason": finish,
		}},
		"usage": map[string]any{
			"prompt_tokens":     prompt,
			"completion_tokens": r.Usage.Output,
			"total_tokens":      prompt + r.Usage.Output,
			"prompt_tokens_details": map[string]any{
				"cached_tokens":      r.Usage.CacheRead,
				"cache_write_tokens": r.Usage.CacheWrite,
				"audio_tokens":       0,
			},
			"completion_tokens_details": map[string]any{"reasoning_tokens": 0, "audio_tokens": 0},
		},
	}
}
