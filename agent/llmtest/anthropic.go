package llmtest

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/heraldhq/herald/agent"
)

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"` // tool_result: string or text blocks
	IsError   bool            `json:"is_error"`
	Thinking  string          `json:"thinking"`
	Signature string          `json:"signature"`
}

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anthropicRequest struct {
	Model     string             `json:"model"`
	MaxTokens *int64             `json:"max_tokens"`
	System    json.RawMessage    `json:"system"`
	Messages  []anthropicMessage `json:"messages"`
	Tools     []struct {
		Name string `json:"name"`
	} `json:"tools"`
	Thinking *struct {
		Type         string `json:"type"`
		BudgetTokens int64  `json:"budget_tokens"`
	} `json:"thinking"`
	Stream bool `json:"stream"`
}

// textOf reads a string or an array of text blocks.
func textOf(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []anthropicBlock
	if json.Unmarshal(raw, &blocks) != nil {
		return ""
	}
	var parts []string
	for _, b := range blocks {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// decodeAnthropic decodes a Messages request and checks the rules the real
// API enforces that a client is most likely to break; problem is the 400
// message the real API would give.
func decodeAnthropic(body []byte) (c Call, problem string) {
	var req anthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return c, "invalid JSON body: " + err.Error()
	}
	c.Model, c.Stream, c.System = req.Model, req.Stream, textOf(req.System)
	for _, t := range req.Tools {
		c.Tools = append(c.Tools, t.Name)
	}
	if req.MaxTokens == nil {
		problem = "max_tokens: Field required"
	} else {
		c.MaxTokens = *req.MaxTokens
	}
	if req.Thinking != nil && req.Thinking.Type == "enabled" {
		c.ThinkingBudget = req.Thinking.BudgetTokens
		switch {
		case c.ThinkingBudget < 1024:
			problem = "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
		case req.MaxTokens != nil && *req.MaxTokens <= c.ThinkingBudget:
			problem = "`max_tokens` must be greater than `thinking.budget_tokens`"
		}
	}
	if len(req.Messages) == 0 && problem == "" {
		problem = "messages: at least one message is required"
	}

	var pending map[string]string // tool_use id → name, from the previous assistant turn
	for i, m := range req.Messages {
		var blocks []anthropicBlock
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			blocks = []anthropicBlock{{Type: "text", Text: s}}
		} else if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return c, fmt.Sprintf("messages.%d.content: invalid content", i)
		}
		switch m.Role {
		case "assistant":
			if len(pending) > 0 && problem == "" {
				problem = fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after", i-1)
			}
			msg := agent.Message{Role: agent.RoleAssistant}
			pending = map[string]string{}
			var texts []string
			for _, b := range blocks {
				switch b.Type {
				case "text":
					texts = append(texts, b.Text)
				case "tool_use":
					msg.ToolCalls = append(msg.ToolCalls, agent.ToolCall{ID: b.ID, Name: b.Name, Args: b.Input})
					pending[b.ID] = b.Name
				}
			}
			msg.Text = strings.Join(texts, "\n")
			// With thinking on, the last assistant turn that used tools must
			// start with its thinking block.
			if c.ThinkingBudget > 0 && i == lastAssistant(req.Messages) && len(msg.ToolCalls) > 0 &&
				blocks[0].Type != "thinking" && blocks[0].Type != "redacted_thinking" && problem == "" {
				problem = fmt.Sprintf("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. When `thinking` is enabled, a final `assistant` message must start with a thinking block.", i, blocks[0].Type)
			}
			c.Messages = append(c.Messages, msg)
		case "user":
			var results []agent.ToolResult
			var texts []string
			for _, b := range blocks {
				switch b.Type {
				case "tool_result":
					name, ok := pending[b.ToolUseID]
					if !ok && problem == "" {
						problem = fmt.Sprintf("messages.%d.content: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, b.ToolUseID)
					}
					delete(pending, b.ToolUseID)
					results = append(results, agent.ToolResult{CallID: b.ToolUseID, Name: name, Content: textOf(b.Content), IsError: b.IsError})
				case "text":
					texts = append(texts, b.Text)
				}
			}
			if len(pending) > 0 && problem == "" {
				problem = fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after", i-1)
			}
			pending = nil
			if len(results) > 0 {
				c.Messages = append(c.Messages, agent.Message{Role: agent.RoleTool, ToolResults: results})
			}
			// Each text block is a message of its own, as in the history the
			// provider merged into one user turn (sub-agent results before
			// the person's message, SPEC §23).
			for _, text := range texts {
				c.Messages = append(c.Messages, agent.Message{Role: agent.RoleUser, Text: text})
			}
		default:
			if problem == "" {
				problem = fmt.Sprintf("messages.%d.role: Input should be 'user' or 'assistant'", i)
			}
		}
	}
	return c, problem
}

func lastAssistant(ms []anthropicMessage) int {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Role == "assistant" {
			return i
		}
	}
	return -1
}

func encodeAnthropic(c Call, r Reply, id int) map[string]any {
	content := []map[string]any{}
	if r.Thinking != "" && c.ThinkingBudget > 0 {
		content = append(content, map[string]any{"type": "thinking", "thinking": r.Thinking, "signature": fmt.Sprintf("sig_llmtest_%d", id)})
	}
	if r.Text != "" {
		content = append(content, map[string]any{"type": "text", "text": r.Text})
	}
	for _, tc := range r.ToolCalls {
		content = append(content, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": tc.Args})
	}
	stop := r.StopReason
	if stop == "" {
		stop = "end_turn"
		if len(r.ToolCalls) > 0 {
			stop = "tool_use"
		}
	}
	model := c.Model
	if model == "" {
		model = "claude-llmtest"
	}
	return map[string]any{
		"id":            fmt.Sprintf("msg_llmtest_%d", id),
		"type":          "message",
		"role":          "assistant",
		"model":         model,
		"content":       content,
		"stop_reason":   stop,
		"stop_sequence": nil,
		"usage": map[string]any{
			"input_tokens":                r.Usage.Input,
			"output_tokens":               r.Usage.Output,
			"cache_read_input_tokens":     r.Usage.CacheRead,
			"cache_creation_input_tokens": r.Usage.CacheWrite,
			"service_tier":                "standard",
		},
	}
}
