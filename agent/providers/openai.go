package providers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/config"
)

// DefaultOpenAIBaseURL is used for api "openai" without baseUrl.
const DefaultOpenAIBaseURL = "https://api.openai.com/v1/"

// openAIProvider calls a Chat Completions API: OpenAI itself, or an
// OpenAI-compatible server (Ollama, vLLM, llama.cpp server, OpenRouter).
type openAIProvider struct {
	id         string
	cfg        config.Provider
	compatible bool
	client     openai.Client
	retry      *retrier
	log        *zap.Logger
}

var _ agent.Provider = (*openAIProvider)(nil)

func newOpenAI(id string, p config.Provider, opts Options, log *zap.Logger) (*openAIProvider, error) {
	compatible := p.API == APIOpenAICompatible
	if compatible && p.BaseURL == "" {
		return nil, fmt.Errorf("provider %q: api openai-compatible needs baseUrl (e.g. \"http://127.0.0.1:11434/v1\" for Ollama)", id)
	}
	keys := p.Keys()
	if !compatible && len(keys) == 0 && p.BaseURL == "" {
		return nil, fmt.Errorf("provider %q: api openai needs apiKey (e.g. \"${OPENAI_API_KEY}\")", id)
	}
	base := p.BaseURL
	if base == "" {
		base = DefaultOpenAIBaseURL
	}
	client := openai.NewClient(
		option.WithHTTPClient(opts.HTTPClient),
		option.WithBaseURL(base),
		// Set even when empty, so an OPENAI_API_KEY in the environment is
		// never sent to a third-party server; empty sends no Authorization.
		option.WithAPIKey(firstKey(keys)),
		// Retries are ours (see retrier).
		option.WithMaxRetries(0),
	)
	return &openAIProvider{id: id, cfg: p, compatible: compatible, client: client,
		retry: &retrier{provider: id, opts: opts, log: log, keys: newKeyPool(keys)}, log: log}, nil
}

func firstKey(keys []config.Secret) string {
	if len(keys) == 0 {
		return ""
	}
	return keys[0].Value()
}

// openAIKey adds one of the provider's keys to opts ("" = the client's
// own).
func openAIKey(key string, opts ...option.RequestOption) []option.RequestOption {
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	}
	return opts
}

// Complete sends req to the Chat Completions API.
func (p *openAIProvider) Complete(ctx context.Context, req agent.Request) (*agent.Response, error) {
	params := p.params(req)
	return p.retry.do(ctx, func(ctx context.Context, key string) (*agent.Response, error) {
		cc, err := p.client.Chat.Completions.New(ctx, params, openAIKey(key)...)
		if err != nil {
			return nil, err
		}
		if len(cc.Choices) == 0 {
			return nil, &agent.ProviderError{Provider: p.id, StatusCode: http.StatusOK, Message: "the reply had no choices"}
		}
		return openAIResponse(cc), nil
	}, classifyOpenAI)
}

// reasoningModel matches OpenAI model ids that take reasoning_effort.
var reasoningModel = regexp.MustCompile(`^(o[1-9]|gpt-5)`)

// reasoningEffort decides reasoning_effort: for api "openai" only on
// reasoning models (o-series, gpt-5 family except its -chat variants),
// which reject nothing but other models reject the field; for
// openai-compatible servers whenever a level is set, since the user chose
// the model. "off" and "" send nothing (the model's default).
func (p *openAIProvider) reasoningEffort(model, level string) shared.ReasoningEffort {
	var effort shared.ReasoningEffort
	switch level {
	case agent.ThinkingLow:
		effort = shared.ReasoningEffortLow
	case agent.ThinkingMedium:
		effort = shared.ReasoningEffortMedium
	case agent.ThinkingHigh:
		effort = shared.ReasoningEffortHigh
	default:
		return ""
	}
	if p.compatible {
		return effort
	}
	m := strings.ToLower(model)
	if i := strings.LastIndex(m, "/"); i >= 0 {
		m = m[i+1:]
	}
	if !reasoningModel.MatchString(m) || strings.Contains(m, "-chat") {
		p.log.Debug("thinking level ignored: model takes no reasoning_effort", zap.String("model", model), zap.String("thinking", level))
		return ""
	}
	return effort
}

func (p *openAIProvider) params(req agent.Request) openai.ChatCompletionNewParams {
	params := openai.ChatCompletionNewParams{
		Model:    shared.ChatModel(req.Model),
		Messages: openAIMessages(req, !p.compatible),
	}
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = modelConfig(p.cfg, req.Model).MaxTokens
	}
	if maxTokens > 0 {
		if p.compatible {
			// Older local servers know only max_tokens.
			params.MaxTokens = openai.Int(int64(maxTokens))
		} else {
			// OpenAI deprecated max_tokens; reasoning models reject it.
			params.MaxCompletionTokens = openai.Int(int64(maxTokens))
		}
	}
	params.ReasoningEffort = p.reasoningEffort(req.Model, req.Thinking)
	for _, t := range req.Tools {
		fd := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{}}}
		if t.Description != "" {
			fd.Description = openai.String(t.Description)
		}
		if schema := parseSchema(t.Schema); len(schema) > 0 {
			fd.Parameters = schema
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(fd))
	}
	return params
}

// openAIMessages maps the conversation: tool calls ride on the assistant
// message, each tool result is its own role "tool" message. documents: PDFs
// go as file parts (OpenAI's own API; OpenAI-compatible servers rarely take
// them, so they get the reference line only).
func openAIMessages(req agent.Request, documents bool) []openai.ChatCompletionMessageParamUnion {
	var out []openai.ChatCompletionMessageParamUnion
	if req.System != "" {
		out = append(out, openai.SystemMessage(req.System))
	}
	for _, m := range req.Messages {
		switch m.Role {
		case agent.RoleUser:
			out = append(out, openAIUser(req, m, documents))
		case agent.RoleAssistant:
			am := openai.ChatCompletionAssistantMessageParam{}
			if m.Text != "" || len(m.ToolCalls) == 0 {
				am.Content.OfString = openai.String(m.Text)
			}
			for _, tc := range m.ToolCalls {
				am.ToolCalls = append(am.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name:      tc.Name,
							Arguments: string(jsonObject(tc.Args)),
						},
					},
				})
			}
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &am})
		case agent.RoleTool:
			for _, r := range m.ToolResults {
				content := r.Content
				if r.IsError && !strings.Contains(strings.ToLower(content), "error") {
					content = "error: " + content
				}
				out = append(out, openai.ToolMessage(content, r.CallID))
			}
		}
	}
	return out
}

func openAIResponse(cc *openai.ChatCompletion) *agent.Response {
	choice := cc.Choices[0]
	u := cc.Usage
	cached := u.PromptTokensDetails.CachedTokens
	written := u.PromptTokensDetails.CacheWriteTokens
	resp := &agent.Response{
		Text:       choice.Message.Content,
		Model:      cc.Model,
		StopReason: choice.FinishReason,
		Usage: agent.Usage{
			// prompt_tokens includes the cached ones; Input counts the rest,
			// as Anthropic's input_tokens does.
			Input:      max(0, u.PromptTokens-cached-written),
			Output:     u.CompletionTokens,
			CacheRead:  cached,
			CacheWrite: written,
		},
	}
	for _, tc := range choice.Message.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			continue
		}
		resp.ToolCalls = append(resp.ToolCalls, agent.ToolCall{ID: tc.ID, Name: tc.Function.Name, Args: jsonObject([]byte(tc.Function.Arguments))})
	}
	return resp
}

// classifyOpenAI reads the status, Retry-After and the API's own message
// ({"error":{"message":...,"type":...}}).
func classifyOpenAI(err error) failure {
	var pe *agent.ProviderError
	if errors.As(err, &pe) {
		// Not worth retrying: the server answered, just not usefully.
		return failure{status: pe.StatusCode, message: pe.Message}
	}
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		return classifyOpenAIStreamError(se)
	}
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		return notAnswered(err)
	}
	f := failure{status: apiErr.StatusCode, message: apiErr.Message}
	if apiErr.Response != nil {
		f.retryAfter = apiErr.Response.Header.Get("Retry-After")
		f.retryMS = apiErr.Response.Header.Get("Retry-After-Ms")
	}
	if f.message == "" {
		f.message = strings.TrimSpace(apiErr.RawJSON())
	}
	if f.message == "" {
		f.message = http.StatusText(f.status)
	}
	f.contextLength = apiErr.Code == "context_length_exceeded" || contextLengthMessage(f.status, f.message)
	return f
}

// classifyOpenAIStreamError classifies an error event inside a stream
// answered HTTP 200 ({"error":{"message","type","code"}}): its type or code
// says what the status would have been, so an overload or rate limit is
// retried and falls back like the same answer given as a status.
func classifyOpenAIStreamError(se *ssestream.StreamError) failure {
	var body struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(se.Event.Data, &body)
	f := failure{message: strings.TrimSpace(body.Error.Message)}
	if f.message == "" {
		f.message = se.Message
	}
	code, _ := body.Error.Code.(string)
	f.status = streamErrorStatus(code)
	if f.status == 0 {
		f.status = streamErrorStatus(body.Error.Type)
	}
	if f.status == 0 {
		f.status = http.StatusInternalServerError // an unnamed failure of the server mid-answer
	}
	if code == "context_length_exceeded" {
		f.status = http.StatusBadRequest
		f.contextLength = true
	} else {
		f.contextLength = contextLengthMessage(f.status, f.message)
	}
	return f
}

// openAIUser is a user message: its text, and its images (image_url with
// a data: URL) when the model takes images, and with documents its PDFs as
// file parts (file_data as a data: URL).
func openAIUser(req agent.Request, m agent.Message, documents bool) openai.ChatCompletionMessageParamUnion {
	var parts []openai.ChatCompletionContentPartUnionParam
	for _, f := range m.Files {
		kind := asContent(req, f, documents, 0)
		if kind == "" {
			continue
		}
		data, err := fileBase64(req, f)
		if err != nil {
			continue
		}
		url := "data:" + f.MIME + ";base64," + data
		if kind == "image" {
			parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: url}))
		} else {
			parts = append(parts, openai.FileContentPart(openai.ChatCompletionContentPartFileFileParam{
				Filename: openai.String(f.Name), FileData: openai.String(url)}))
		}
	}
	if len(parts) == 0 {
		return openai.UserMessage(m.Text)
	}
	parts = append(parts, openai.TextContentPart(m.Text))
	return openai.UserMessage(parts)
}
