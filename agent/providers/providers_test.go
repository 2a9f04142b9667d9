package providers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/config"
)

// backend is one SDK provider wired to its fake.
type backend struct {
	name  string
	api   string
	model string
	fake  func(testing.TB, llmtest.Handler) *llmtest.Server
	base  func(url string) string
}

var backends = []backend{
	{name: "anthropic", api: APIAnthropic, model: "claude-sonnet-4-20250514", fake: llmtest.NewAnthropic, base: func(u string) string { return u }},
	{name: "openai", api: APIOpenAI, model: "gpt-4o", fake: llmtest.NewOpenAI, base: func(u string) string { return u + "/v1" }},
	{name: "openai-compatible", api: APIOpenAICompatible, model: "llama3.2", fake: llmtest.NewOpenAI, base: func(u string) string { return u + "/v1" }},
}

// sleeps records the backoff delays asked for, without waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

func newProvider(t *testing.T, b backend, srv *llmtest.Server, opts Options, models ...config.Model) agent.Provider {
	t.Helper()
	p, err := New("test-"+b.name, config.Provider{API: b.api, BaseURL: b.base(srv.URL), APIKey: "sk-test-key", Models: models}, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

func userReq(model, text string) agent.Request {
	return agent.Request{Model: model, System: "You are a test.", Messages: []agent.Message{{Role: agent.RoleUser, Text: text}}}
}

var readFileSpec = agent.ToolSpec{
	Name:        "read_file",
	Description: "Read a file in the workspace.",
	Schema:      json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`),
}

func TestTextReply(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			srv := b.fake(t, llmtest.Text("Hello from the fake."))
			p := newProvider(t, b, srv, Options{})
			resp, err := p.Complete(context.Background(), userReq(b.model, "hi there"))
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if resp.Text != "Hello from the fake." || len(resp.ToolCalls) != 0 {
				t.Errorf("reply = %q with %d tool calls, want the fake's text and none", resp.Text, len(resp.ToolCalls))
			}
			if resp.Model != b.model {
				t.Errorf("Model = %q, want %q", resp.Model, b.model)
			}
			wantStop := map[string]string{APIAnthropic: "end_turn", APIOpenAI: "stop", APIOpenAICompatible: "stop"}[b.api]
			if resp.StopReason != wantStop {
				t.Errorf("StopReason = %q, want %q", resp.StopReason, wantStop)
			}
			c, _ := srv.Last()
			if c.Model != b.model || c.System != "You are a test." || c.LastUser() != "hi there" {
				t.Errorf("server saw model %q system %q user %q", c.Model, c.System, c.LastUser())
			}
			if b.api == APIAnthropic {
				if got := c.Header.Get("X-Api-Key"); got != "sk-test-key" {
					t.Errorf("x-api-key = %q, want the configured key", got)
				}
				if c.MaxTokens != DefaultAnthropicMaxTokens {
					t.Errorf("max_tokens = %d, want the default %d", c.MaxTokens, DefaultAnthropicMaxTokens)
				}
			} else if got := c.Header.Get("Authorization"); got != "Bearer sk-test-key" {
				t.Errorf("Authorization = %q, want the configured key", got)
			}
		})
	}
}

func TestToolRoundTrip(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			srv := b.fake(t, llmtest.Script(
				llmtest.Reply{Text: "Let me look.", ToolCalls: []agent.ToolCall{{Name: "read_file", Args: json.RawMessage(`{"path":"notes.txt"}`)}}},
				llmtest.Reply{Text: "The file says hello."},
			))
			p := newProvider(t, b, srv, Options{})
			req := userReq(b.model, "what is in notes.txt?")
			req.Tools = []agent.ToolSpec{readFileSpec}
			first, err := p.Complete(context.Background(), req)
			if err != nil {
				t.Fatalf("first Complete: %v", err)
			}
			if len(first.ToolCalls) != 1 {
				t.Fatalf("got %d tool calls, want 1", len(first.ToolCalls))
			}
			tc := first.ToolCalls[0]
			if tc.ID == "" || tc.Name != "read_file" || string(tc.Args) != `{"path":"notes.txt"}` {
				t.Fatalf("tool call = %+v", tc)
			}
			if first.Text != "Let me look." {
				t.Errorf("text with the tool call = %q", first.Text)
			}

			req.Messages = append(req.Messages,
				agent.Message{Role: agent.RoleAssistant, Text: first.Text, ToolCalls: first.ToolCalls},
				agent.Message{Role: agent.RoleTool, ToolResults: []agent.ToolResult{{CallID: tc.ID, Name: "read_file", Content: `{"content":"hello"}`}}},
			)
			second, err := p.Complete(context.Background(), req)
			if err != nil {
				t.Fatalf("second Complete: %v", err)
			}
			if second.Text != "The file says hello." {
				t.Errorf("final text = %q", second.Text)
			}

			calls := srv.Requests()
			if len(calls) != 2 {
				t.Fatalf("server got %d calls, want 2", len(calls))
			}
			if !reflect.DeepEqual(calls[0].Tools, []string{"read_file"}) {
				t.Errorf("tools offered = %v", calls[0].Tools)
			}
			got := calls[1].Messages
			want := []agent.Message{
				{Role: agent.RoleUser, Text: "what is in notes.txt?"},
				{Role: agent.RoleAssistant, Text: "Let me look.", ToolCalls: []agent.ToolCall{{ID: tc.ID, Name: "read_file", Args: json.RawMessage(`{"path":"notes.txt"}`)}}},
				{Role: agent.RoleTool, ToolResults: []agent.ToolResult{{CallID: tc.ID, Name: "read_file", Content: `{"content":"hello"}`}}},
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("second request decoded as\n%+v\nwant\n%+v", got, want)
			}

			// The wire shape itself.
			raw := calls[1].Raw()
			msgs := raw["messages"].([]any)
			switch b.api {
			case APIAnthropic:
				last := msgs[len(msgs)-1].(map[string]any)
				block := last["content"].([]any)[0].(map[string]any)
				if last["role"] != "user" || block["type"] != "tool_result" || block["tool_use_id"] != tc.ID {
					t.Errorf("tool result sent as %v, want a user message with a tool_result block", last)
				}
				schema := raw["tools"].([]any)[0].(map[string]any)["input_schema"].(map[string]any)
				if schema["type"] != "object" || schema["properties"].(map[string]any)["path"] == nil {
					t.Errorf("input_schema = %v", schema)
				}
			default:
				asst := msgs[len(msgs)-2].(map[string]any)
				call := asst["tool_calls"].([]any)[0].(map[string]any)
				if call["type"] != "function" || call["function"].(map[string]any)["arguments"] != `{"path":"notes.txt"}` {
					t.Errorf("assistant tool call sent as %v, want type function with arguments as a JSON string", call)
				}
				last := msgs[len(msgs)-1].(map[string]any)
				if last["role"] != "tool" || last["tool_call_id"] != tc.ID {
					t.Errorf("tool result sent as %v, want role tool with tool_call_id", last)
				}
				fn := raw["tools"].([]any)[0].(map[string]any)["function"].(map[string]any)
				if fn["name"] != "read_file" || fn["parameters"].(map[string]any)["required"] == nil {
					t.Errorf("tool sent as %v", fn)
				}
			}
		})
	}
}

func TestUsageMapping(t *testing.T) {
	want := agent.Usage{Input: 120, Output: 34, CacheRead: 1000, CacheWrite: 56}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			srv := b.fake(t, llmtest.Script(llmtest.Reply{Text: "ok", Usage: want}))
			p := newProvider(t, b, srv, Options{})
			resp, err := p.Complete(context.Background(), userReq(b.model, "count me"))
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if resp.Usage != want {
				t.Errorf("Usage = %+v, want %+v", resp.Usage, want)
			}
		})
	}
}

func TestAnthropicThinkingLevels(t *testing.T) {
	b := backends[0]
	tests := []struct {
		level      string
		modelMax   int
		wantBudget int64
		wantMax    int64
	}{
		{"", 0, 0, 4096},
		{"off", 0, 0, 4096},
		{"low", 0, 1024, 4096 + 1024},
		{"medium", 0, 4096, 4096 + 4096},
		{"high", 0, 16384, 4096 + 16384},
		{"off", 8000, 0, 8000},
		{"high", 8000, 4000, 8000}, // capped by the model's maxTokens
		{"high", 32000, 16384, 32000},
		{"off", 64000, 0, 64000}, // large max_tokens without streaming still goes out
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/max%d", tt.level, tt.modelMax), func(t *testing.T) {
			srv := b.fake(t, llmtest.Text("ok"))
			p := newProvider(t, b, srv, Options{}, config.Model{ID: b.model, MaxTokens: tt.modelMax})
			req := userReq(b.model, "think")
			req.Thinking = tt.level
			if _, err := p.Complete(context.Background(), req); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			c, _ := srv.Last()
			if c.ThinkingBudget != tt.wantBudget || c.MaxTokens != tt.wantMax {
				t.Errorf("budget_tokens %d max_tokens %d, want %d and %d", c.ThinkingBudget, c.MaxTokens, tt.wantBudget, tt.wantMax)
			}
		})
	}
}

func TestOpenAIReasoningEffort(t *testing.T) {
	tests := []struct {
		api, model, level, want string
	}{
		{APIOpenAI, "o3-mini", "high", "high"},
		{APIOpenAI, "gpt-5", "low", "low"},
		{APIOpenAI, "gpt-5", "off", ""},
		{APIOpenAI, "gpt-5", "", ""},
		{APIOpenAI, "gpt-4o", "high", ""}, // not a reasoning model: the field would be rejected
		{APIOpenAI, "gpt-5-chat-latest", "medium", ""},
		{APIOpenAICompatible, "qwen3:8b", "medium", "medium"},
		{APIOpenAICompatible, "qwen3:8b", "off", ""},
	}
	for _, tt := range tests {
		t.Run(tt.api+"/"+tt.model+"/"+tt.level, func(t *testing.T) {
			srv := llmtest.NewOpenAI(t, llmtest.Text("ok"))
			p, err := New("x", config.Provider{API: tt.api, BaseURL: srv.URL, APIKey: "k"}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			req := userReq(tt.model, "think")
			req.Thinking = tt.level
			if _, err := p.Complete(context.Background(), req); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			c, _ := srv.Last()
			if c.ReasoningEffort != tt.want {
				t.Errorf("reasoning_effort = %q, want %q", c.ReasoningEffort, tt.want)
			}
		})
	}
}

func TestOpenAIMaxTokensField(t *testing.T) {
	for _, api := range []string{APIOpenAI, APIOpenAICompatible} {
		t.Run(api, func(t *testing.T) {
			srv := llmtest.NewOpenAI(t, llmtest.Text("ok"))
			p, err := New("x", config.Provider{API: api, BaseURL: srv.URL, APIKey: "k", Models: []config.Model{{ID: "m", MaxTokens: 777}}}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Complete(context.Background(), userReq("m", "hi")); err != nil {
				t.Fatal(err)
			}
			c, _ := srv.Last()
			raw := c.Raw()
			field := map[string]string{APIOpenAI: "max_completion_tokens", APIOpenAICompatible: "max_tokens"}[api]
			if raw[field] != float64(777) {
				t.Errorf("request %v: want %s 777 from the model config", raw, field)
			}
		})
	}
}

// With extended thinking on, the thinking block of a reply that called a
// tool must go back in front of that tool call; the fake rejects the
// continuation otherwise, as the real API does.
func TestAnthropicThinkingWithTools(t *testing.T) {
	b := backends[0]
	srv := b.fake(t, llmtest.Script(
		llmtest.Reply{Thinking: "I should read the file.", ToolCalls: []agent.ToolCall{{Name: "read_file", Args: json.RawMessage(`{"path":"a"}`)}}},
		llmtest.Reply{Text: "done"},
	))
	p := newProvider(t, b, srv, Options{})
	req := userReq(b.model, "read a")
	req.Tools = []agent.ToolSpec{readFileSpec}
	req.Thinking = agent.ThinkingMedium
	first, err := p.Complete(context.Background(), req)
	if err != nil {
		t.Fatalf("first Complete: %v", err)
	}
	req.Messages = append(req.Messages,
		agent.Message{Role: agent.RoleAssistant, ToolCalls: first.ToolCalls},
		agent.Message{Role: agent.RoleTool, ToolResults: []agent.ToolResult{{CallID: first.ToolCalls[0].ID, Name: "read_file", Content: "x"}}})
	if _, err := p.Complete(context.Background(), req); err != nil {
		t.Fatalf("continuing with thinking: %v", err)
	}
	c, _ := srv.Last()
	if c.ThinkingBudget != 4096 {
		t.Errorf("thinking budget on the continuation = %d, want 4096", c.ThinkingBudget)
	}

	// A provider that never saw the thinking block (e.g. after a restart)
	// continues without thinking instead of failing.
	fresh := newProvider(t, b, srv, Options{})
	if _, err := fresh.Complete(context.Background(), req); err != nil {
		t.Fatalf("continuing without the thinking block: %v", err)
	}
	c, _ = srv.Last()
	if c.ThinkingBudget != 0 {
		t.Errorf("thinking budget without the block = %d, want thinking off", c.ThinkingBudget)
	}
}

func TestRetryAfter429(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			srv := b.fake(t, llmtest.Script(
				llmtest.Reply{Status: 429, RetryAfter: "1", Message: "slow down"},
				llmtest.Reply{Text: "finally"},
			))
			var s sleeps
			p := newProvider(t, b, srv, Options{Sleep: s.sleep})
			resp, err := p.Complete(context.Background(), userReq(b.model, "hi"))
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if resp.Text != "finally" {
				t.Errorf("text = %q", resp.Text)
			}
			if srv.Count() != 2 {
				t.Errorf("server got %d calls, want 2 (one retry)", srv.Count())
			}
			if got := s.all(); !reflect.DeepEqual(got, []time.Duration{time.Second}) {
				t.Errorf("waited %v, want exactly the 1s the server asked for", got)
			}
		})
	}
}

func TestRetry5xxWithBackoff(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			srv := b.fake(t, llmtest.Script(
				llmtest.Reply{Status: 500, Message: "boom"},
				llmtest.Reply{Status: 503, Message: "overloaded"},
				llmtest.Reply{Text: "recovered"},
			))
			var s sleeps
			p := newProvider(t, b, srv, Options{Sleep: s.sleep, BackoffBase: 100 * time.Millisecond})
			resp, err := p.Complete(context.Background(), userReq(b.model, "hi"))
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if resp.Text != "recovered" || srv.Count() != 3 {
				t.Errorf("text %q after %d calls, want recovered after 3", resp.Text, srv.Count())
			}
			got := s.all()
			if len(got) != 2 {
				t.Fatalf("waited %d times, want 2", len(got))
			}
			// Exponential with jitter: retry n waits within [base·2ⁿ/2, base·2ⁿ].
			for n, d := range got {
				hi := 100 * time.Millisecond << n
				if d < hi/2 || d > hi {
					t.Errorf("wait %d = %v, want within [%v, %v]", n, d, hi/2, hi)
				}
			}
		})
	}
}

func TestRetriesRunOut(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			srv := b.fake(t, func(llmtest.Call) llmtest.Reply { return llmtest.Reply{Status: 529, Message: "Overloaded"} })
			var s sleeps
			p := newProvider(t, b, srv, Options{Sleep: s.sleep, MaxRetries: 2})
			_, err := p.Complete(context.Background(), userReq(b.model, "hi"))
			var pe *agent.ProviderError
			if !errors.As(err, &pe) || pe.StatusCode != 529 || pe.Message != "Overloaded" {
				t.Fatalf("err = %v, want a ProviderError 529 Overloaded", err)
			}
			if srv.Count() != 3 {
				t.Errorf("server got %d calls, want 3 (1 + MaxRetries 2)", srv.Count())
			}
		})
	}
}

func TestClientErrorNotRetried(t *testing.T) {
	tests := []struct {
		status int
		msg    string
	}{
		{400, "max_tokens: 999999 > 64000, which is the maximum allowed"},
		{401, "invalid x-api-key"},
		{404, "model: claude-nope"},
	}
	for _, b := range backends {
		for _, tt := range tests {
			t.Run(b.name+"/"+http.StatusText(tt.status), func(t *testing.T) {
				srv := b.fake(t, llmtest.Script(llmtest.Reply{Status: tt.status, Message: tt.msg}, llmtest.Reply{Text: "should not be reached"}))
				var s sleeps
				p := newProvider(t, b, srv, Options{Sleep: s.sleep})
				_, err := p.Complete(context.Background(), userReq(b.model, "hi"))
				var pe *agent.ProviderError
				if !errors.As(err, &pe) {
					t.Fatalf("err = %v (%T), want *agent.ProviderError", err, err)
				}
				if pe.StatusCode != tt.status || pe.Message != tt.msg || pe.Provider != "test-"+b.name {
					t.Errorf("ProviderError = %+v, want status %d and the provider's message %q", pe, tt.status, tt.msg)
				}
				if srv.Count() != 1 || len(s.all()) != 0 {
					t.Errorf("%d calls and %d waits, want 1 call and no retry", srv.Count(), len(s.all()))
				}
			})
		}
	}
}

func TestRetryAfterBeyondLimitGivesUp(t *testing.T) {
	b := backends[0]
	srv := b.fake(t, llmtest.Script(llmtest.Reply{Status: 429, RetryAfter: "3600", Message: "daily limit"}, llmtest.Reply{Text: "no"}))
	var s sleeps
	p := newProvider(t, b, srv, Options{Sleep: s.sleep})
	_, err := p.Complete(context.Background(), userReq(b.model, "hi"))
	var pe *agent.ProviderError
	if !errors.As(err, &pe) || pe.StatusCode != 429 || !strings.Contains(pe.Message, "daily limit") {
		t.Fatalf("err = %v, want the 429 with its message", err)
	}
	if srv.Count() != 1 || len(s.all()) != 0 {
		t.Errorf("%d calls, waits %v: want no retry when Retry-After exceeds MaxRetryAfter", srv.Count(), s.all())
	}
}

func TestCancelDuringSlowReply(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			srv := b.fake(t, llmtest.Script(llmtest.Reply{Text: "too late", Delay: time.Hour}))
			p := newProvider(t, b, srv, Options{})
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				for srv.Count() == 0 {
					time.Sleep(5 * time.Millisecond)
				}
				cancel()
			}()
			_, err := p.Complete(ctx, userReq(b.model, "hi"))
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			if srv.Count() != 1 {
				t.Errorf("server got %d calls, want 1 (no retry after cancel)", srv.Count())
			}
		})
	}
}

func TestCancelDuringBackoff(t *testing.T) {
	b := backends[1]
	srv := b.fake(t, llmtest.Script(llmtest.Reply{Status: 429, RetryAfter: "60"}, llmtest.Reply{Text: "no"}))
	ctx, cancel := context.WithCancel(context.Background())
	p := newProvider(t, b, srv, Options{Sleep: func(ctx context.Context, d time.Duration) error {
		cancel() // the user gives up while Herald waits
		return sleepCtx(ctx, d)
	}})
	_, err := p.Complete(ctx, userReq(b.model, "hi"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if srv.Count() != 1 {
		t.Errorf("server got %d calls, want 1", srv.Count())
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		ms, header string
		want       time.Duration
		ok         bool
	}{
		{"", "1", time.Second, true},
		{"", "2.5", 2500 * time.Millisecond, true},
		{"", "Fri, 02 Jan 2026 03:04:35 GMT", 30 * time.Second, true},
		{"", "Fri, 02 Jan 2026 03:00:00 GMT", 0, true}, // in the past: retry now
		{"250", "5", 250 * time.Millisecond, true},     // retry-after-ms is more precise
		{"", "", 0, false},
		{"", "soon", 0, false},
		{"", "-3", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseRetryAfter(tt.ms, tt.header, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseRetryAfter(%q, %q) = %v, %v; want %v, %v", tt.ms, tt.header, got, ok, tt.want, tt.ok)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		p    config.Provider
		want string
	}{
		{"unknown api", config.Provider{API: "gemini"}, `unknown provider api "gemini"`},
		{"anthropic without key", config.Provider{API: APIAnthropic}, "needs apiKey"},
		{"openai without key", config.Provider{API: APIOpenAI}, "needs apiKey"},
		{"compatible without baseUrl", config.Provider{API: APIOpenAICompatible}, "needs baseUrl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New("p1", tt.p, Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `"p1"`) {
				t.Errorf("err = %v, want one naming provider p1 and saying %q", err, tt.want)
			}
		})
	}
}

// An openai-compatible server without apiKey gets no Authorization header,
// even when OPENAI_API_KEY is set for a real OpenAI provider.
func TestCompatibleWithoutKeySendsNoAuth(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-real-openai-key")
	srv := llmtest.NewOpenAI(t, llmtest.Text("hi from ollama"))
	p, err := New("ollama", config.Provider{API: APIOpenAICompatible, BaseURL: srv.URL + "/v1"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.Complete(context.Background(), userReq("llama3.2", "hi"))
	if err != nil || resp.Text != "hi from ollama" {
		t.Fatalf("Complete = %v, %v", resp, err)
	}
	c, _ := srv.Last()
	if got := c.Header.Get("Authorization"); got != "" {
		t.Errorf("Authorization = %q, want none", got)
	}
}

// The fakes and providers are safe for concurrent calls.
func TestConcurrentCalls(t *testing.T) {
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			srv := b.fake(t, llmtest.ByLastUser(func(text string) llmtest.Reply { return llmtest.Reply{Text: "echo " + text} }))
			p := newProvider(t, b, srv, Options{})
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					msg := strings.Repeat("x", i+1)
					resp, err := p.Complete(context.Background(), userReq(b.model, msg))
					if err == nil && resp.Text != "echo "+msg {
						err = errors.New("crossed reply: " + resp.Text)
					}
					if err != nil {
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if srv.Count() != 8 {
				t.Errorf("server got %d calls, want 8", srv.Count())
			}
		})
	}
}

// A connection that fails outright is retried like a 5xx.
func TestConnectionFailureRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			var s sleeps
			p, err := New("down", config.Provider{API: b.api, BaseURL: b.base(addr), APIKey: "k"}, Options{Sleep: s.sleep, MaxRetries: 2})
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Complete(context.Background(), userReq(b.model, "hi"))
			var pe *agent.ProviderError
			if !errors.As(err, &pe) || pe.StatusCode != 0 || !strings.Contains(pe.Message, "refused") {
				t.Fatalf("err = %v, want a ProviderError saying the connection was refused", err)
			}
			if n := len(s.all()); n != 2 {
				t.Errorf("waited %d times, want 2 (MaxRetries)", n)
			}
		})
	}
}
