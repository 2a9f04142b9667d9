package providers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/config"
)

// anthropicProvider calls the Anthropic Messages API.
type anthropicProvider struct {
	id     string
	cfg    config.Provider
	client anthropic.Client
	retry  *retrier
	log    *zap.Logger
	// thinking keeps the signed thinking blocks of replies that called
	// tools, keyed by their first tool call id: with extended thinking on,
	// the API wants them back in front of those tool calls.
	thinking *blockCache
}

var _ agent.Provider = (*anthropicProvider)(nil)

func newAnthropic(id string, p config.Provider, opts Options, log *zap.Logger) (*anthropicProvider, error) {
	keys := p.Keys()
	if len(keys) == 0 && p.BaseURL == "" {
		return nil, fmt.Errorf("provider %q: api anthropic needs apiKey (e.g. \"${ANTHROPIC_API_KEY}\")", id)
	}
	ro := []option.RequestOption{
		// Credentials come from the config only, never from the environment.
		option.WithoutEnvironmentDefaults(),
		option.WithHTTPClient(opts.HTTPClient),
		// Retries are ours: the SDK's also retry 408/409 and cannot be
		// tested without waiting.
		option.WithMaxRetries(0),
	}
	if len(keys) > 0 {
		ro = append(ro, option.WithAPIKey(keys[0].Value()))
	}
	if p.BaseURL != "" {
		ro = append(ro, option.WithBaseURL(p.BaseURL))
	}
	return &anthropicProvider{
		id:       id,
		cfg:      p,
		client:   anthropic.NewClient(ro...),
		retry:    &retrier{provider: id, opts: opts, log: log, keys: newKeyPool(keys)},
		log:      log,
		thinking: newBlockCache(512),
	}, nil
}

// Complete sends req to the Messages API. As with OpenAI's, the params
// live on the heap and the frames held while the call waits are small.
func (p *anthropicProvider) Complete(ctx context.Context, req agent.Request) (*agent.Response, error) {
	params := p.params(req)
	return p.retry.do(ctx, func(ctx context.Context, key string) (*agent.Response, error) {
		msg, err := anthropicNew(ctx, &p.client, params, key)
		if err != nil {
			return nil, err
		}
		return p.response(msg), nil
	}, classifyAnthropic)
}

// anthropicNew is Messages.New with params by pointer: the SDK takes them
// by value, a copy only this frame holds.
//
//go:noinline
func anthropicNew(ctx context.Context, c *anthropic.Client, params *anthropic.MessageNewParams, key string) (*anthropic.Message, error) {
	opts := anthropicKey(key, option.WithRequestTimeout(requestTimeout(params.MaxTokens)))
	return c.Messages.New(ctx, *params, opts...)
}

// anthropicKey adds one of the provider's keys to opts ("" = the
// client's own).
func anthropicKey(key string, opts ...option.RequestOption) []option.RequestOption {
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	}
	return opts
}

// requestTimeout bounds one non-streaming attempt: 10 minutes, more for a
// large max_tokens (an hour per 128k tokens). Setting it also keeps the SDK
// from refusing large max_tokens without streaming.
func requestTimeout(maxTokens int64) time.Duration {
	return max(10*time.Minute, time.Duration(float64(time.Hour)*float64(maxTokens)/128000))
}

// params maps the neutral request to the wire format, on the heap.
func (p *anthropicProvider) params(req agent.Request) *anthropic.MessageNewParams {
	model := modelConfig(p.cfg, req.Model)
	maxTokens := int64(DefaultAnthropicMaxTokens)
	if req.MaxTokens > 0 {
		maxTokens = int64(req.MaxTokens)
	} else if model.MaxTokens > 0 {
		maxTokens = int64(model.MaxTokens)
	}

	budget := thinkingBudget(req.Thinking)
	if budget > 0 && lastAssistantLacksThinking(req.Messages, p.thinking) {
		// The signed thinking blocks of the turn being continued are gone
		// (e.g. after a restart); the API rejects thinking without them.
		p.log.Debug("thinking off for this call: thinking blocks of the previous tool call are not known")
		budget = 0
	}
	if budget > 0 {
		// max_tokens counts thinking too: keep the answer's room on top.
		maxTokens += budget
		if model.MaxTokens > 0 && maxTokens > int64(model.MaxTokens) {
			maxTokens = int64(model.MaxTokens)
			if budget >= maxTokens {
				budget = maxTokens / 2
			}
		}
		if budget < 1024 {
			budget = 0
		}
	}

	params := &anthropic.MessageNewParams{
		Model:     anthropic.Model(req.Model),
		MaxTokens: maxTokens,
		Messages:  p.messages(req, budget > 0),
	}
	if budget > 0 {
		params.Thinking = anthropic.ThinkingConfigParamOfEnabled(budget)
	}
	if req.System != "" {
		params.System = []anthropic.TextBlockParam{{Text: req.System, CacheControl: anthropic.NewCacheControlEphemeralParam()}}
	}
	for _, t := range req.Tools {
		params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: anthropicTool(t)})
	}
	return params
}

func anthropicTool(t agent.ToolSpec) *anthropic.ToolParam {
	schema := anthropic.ToolInputSchemaParam{}
	if m := parseSchema(t.Schema); m != nil {
		schema.Properties = m["properties"]
		if req, ok := m["required"].([]any); ok {
			for _, r := range req {
				if s, ok := r.(string); ok {
					schema.Required = append(schema.Required, s)
				}
			}
		}
		for k, v := range m {
			switch k {
			case "type", "properties", "required":
			default:
				if schema.ExtraFields == nil {
					schema.ExtraFields = map[string]any{}
				}
				schema.ExtraFields[k] = v
			}
		}
	}
	if schema.Properties == nil {
		schema.Properties = map[string]any{}
	}
	tp := &anthropic.ToolParam{Name: t.Name, InputSchema: schema}
	if t.Description != "" {
		tp.Description = anthropic.String(t.Description)
	}
	return tp
}

// messages maps the conversation. Tool results go in a user message as
// tool_result blocks; consecutive messages of one role are merged, as the
// API wants roles to alternate.
func (p *anthropicProvider) messages(req agent.Request, thinking bool) []anthropic.MessageParam {
	msgs := req.Messages
	var out []anthropic.MessageParam
	add := func(role anthropic.MessageParamRole, blocks []anthropic.ContentBlockParamUnion) {
		if len(blocks) == 0 {
			return
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			out[n-1].Content = append(out[n-1].Content, blocks...)
			return
		}
		out = append(out, anthropic.MessageParam{Role: role, Content: blocks})
	}
	for _, m := range msgs {
		switch m.Role {
		case agent.RoleUser:
			// Images and PDFs first, then the text naming them.
			var blocks []anthropic.ContentBlockParamUnion
			for _, f := range m.Files {
				kind := asContent(req, f, true, anthropicMaxImage)
				if kind == "" {
					continue
				}
				data, err := fileBase64(req, f)
				if err != nil {
					p.log.Warn("a file is sent as its reference only", zap.String("file", f.Name), zap.Error(err))
					continue
				}
				if kind == "image" {
					blocks = append(blocks, anthropic.NewImageBlockBase64(f.MIME, data))
				} else {
					blocks = append(blocks, anthropic.NewDocumentBlock(anthropic.Base64PDFSourceParam{Data: data}))
				}
			}
			if strings.TrimSpace(m.Text) != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Text))
			}
			add(anthropic.MessageParamRoleUser, blocks)
		case agent.RoleAssistant:
			var blocks []anthropic.ContentBlockParamUnion
			if thinking && len(m.ToolCalls) > 0 {
				blocks = append(blocks, p.thinking.get(m.ToolCalls[0].ID)...)
			}
			if strings.TrimSpace(m.Text) != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Text))
			}
			for _, tc := range m.ToolCalls {
				blocks = append(blocks, anthropic.NewToolUseBlock(tc.ID, jsonObject(tc.Args), tc.Name))
			}
			add(anthropic.MessageParamRoleAssistant, blocks)
		case agent.RoleTool:
			var blocks []anthropic.ContentBlockParamUnion
			for _, r := range m.ToolResults {
				tr := anthropic.ToolResultBlockParam{ToolUseID: r.CallID}
				if r.Content != "" {
					tr.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: r.Content}}}
				}
				if r.IsError {
					tr.IsError = anthropic.Bool(true)
				}
				blocks = append(blocks, anthropic.ContentBlockParamUnion{OfToolResult: &tr})
			}
			add(anthropic.MessageParamRoleUser, blocks)
		}
	}
	// Cache the conversation prefix up to the newest block.
	if n := len(out); n > 0 {
		if c := out[n-1].Content; len(c) > 0 {
			if cc := c[len(c)-1].GetCacheControl(); cc != nil {
				*cc = anthropic.NewCacheControlEphemeralParam()
			}
		}
	}
	return out
}

// lastAssistantLacksThinking reports whether the newest assistant message
// called tools and its thinking blocks are unknown.
func lastAssistantLacksThinking(msgs []agent.Message, cache *blockCache) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == agent.RoleAssistant {
			return len(msgs[i].ToolCalls) > 0 && cache.get(msgs[i].ToolCalls[0].ID) == nil
		}
	}
	return false
}

func (p *anthropicProvider) response(msg *anthropic.Message) *agent.Response {
	resp := &agent.Response{
		Model:      string(msg.Model),
		StopReason: string(msg.StopReason),
		Usage: agent.Usage{
			Input:      msg.Usage.InputTokens,
			Output:     msg.Usage.OutputTokens,
			CacheRead:  msg.Usage.CacheReadInputTokens,
			CacheWrite: msg.Usage.CacheCreationInputTokens,
		},
	}
	var texts []string
	var thinking []anthropic.ContentBlockParamUnion
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			texts = append(texts, b.Text)
		case "tool_use":
			resp.ToolCalls = append(resp.ToolCalls, agent.ToolCall{ID: b.ID, Name: b.Name, Args: jsonObject(b.Input)})
		case "thinking":
			thinking = append(thinking, anthropic.NewThinkingBlock(b.Signature, b.Thinking))
		case "redacted_thinking":
			thinking = append(thinking, anthropic.NewRedactedThinkingBlock(b.Data))
		}
	}
	resp.Text = strings.Join(texts, "\n")
	if len(thinking) > 0 && len(resp.ToolCalls) > 0 {
		p.thinking.put(resp.ToolCalls[0].ID, thinking)
	}
	return resp
}

// classifyAnthropic reads the status, Retry-After and the API's own
// message ({"type":"error","error":{"type":...,"message":...}}).
func classifyAnthropic(err error) failure {
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		return notAnswered(err)
	}
	f := failure{status: apiErr.StatusCode}
	if apiErr.Response != nil {
		f.retryAfter = apiErr.Response.Header.Get("Retry-After")
		f.retryMS = apiErr.Response.Header.Get("Retry-After-Ms")
	}
	var body struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	raw := apiErr.RawJSON()
	if json.Unmarshal([]byte(raw), &body) == nil && body.Error.Message != "" {
		f.message = body.Error.Message
	} else if strings.TrimSpace(raw) != "" {
		f.message = strings.TrimSpace(raw)
	} else {
		f.message = http.StatusText(f.status)
	}
	if f.status < 400 {
		// An error event inside a stream answered HTTP 200: the SDK keeps
		// the stream's status, so the error's type says what happened.
		if st := streamErrorStatus(body.Error.Type); st != 0 {
			f.status = st
		} else {
			f.status = http.StatusInternalServerError
		}
	}
	f.contextLength = contextLengthMessage(f.status, f.message)
	return f
}

// jsonObject returns raw if it is valid JSON, "{}" if it is empty, and the
// text as a JSON string otherwise (so it can still be stored and shown).
func jsonObject(raw []byte) json.RawMessage {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return json.RawMessage("{}")
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

// blockCache is a small bounded map from tool call id to thinking blocks,
// evicting the oldest entry when full.
type blockCache struct {
	mu    sync.Mutex
	max   int
	order []string
	m     map[string][]anthropic.ContentBlockParamUnion
}

func newBlockCache(max int) *blockCache {
	return &blockCache{max: max, m: make(map[string][]anthropic.ContentBlockParamUnion)}
}

func (c *blockCache) get(id string) []anthropic.ContentBlockParamUnion {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id]
}

func (c *blockCache) put(id string, blocks []anthropic.ContentBlockParamUnion) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[id]; !ok {
		c.order = append(c.order, id)
	}
	c.m[id] = blocks
	for len(c.order) > c.max {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
}
