package providers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"

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
	sender     // how requests go out (openai_send.go)
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
		// Requests go through client.Post with a body of ours (openai_body.go),
		// which would send an OPENAI_ADMIN_KEY from the environment where no
		// API key is set; herald calls no admin endpoint.
		option.WithAdminAPIKey(""),
		// Retries are ours (see retrier).
		option.WithMaxRetries(0),
	)
	pr := &openAIProvider{id: id, cfg: p, compatible: compatible, client: client,
		retry: &retrier{provider: id, opts: opts, log: log, keys: newKeyPool(keys)}, log: log}
	pr.sender.init(opts.HTTPClient)
	return pr, nil
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
	body := p.body(req, false)
	return p.retry.do(ctx, func(ctx context.Context, key string) (*agent.Response, error) {
		var raw []byte
		if err := p.post(ctx, body, &raw, key); err != nil {
			return nil, err
		}
		cc, err := decodeCompletion(raw)
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
var reasoningModel = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(o[1-9]|gpt-5)`) })

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
	if !reasoningModel().MatchString(m) || strings.Contains(m, "-chat") {
		p.log.Debug("thinking level ignored: model takes no reasoning_effort", zap.String("model", model), zap.String("thinking", level))
		return ""
	}
	return effort
}

// openAIResponse is the agent's Response of a Chat Completions reply.
func openAIResponse(cc *completionBody) *agent.Response {
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
