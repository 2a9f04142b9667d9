// Package llmtest runs fake LLM servers for tests: httptest servers that
// speak the real Anthropic Messages, OpenAI Chat Completions and OpenAI
// Responses wire formats, so code under test (and a real coding agent)
// talks to them through the real SDKs. Each received
// request is decoded into a provider-neutral Call; a Handler decides the
// Reply (text, tool calls, usage, or an HTTP error in the API's own error
// JSON, with an optional Retry-After and delay).
//
// It is for tests only: it must not be imported by production code, and it
// never reaches the network beyond its own loopback listener.
package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
)

// API names the wire format a Server speaks.
const (
	APIAnthropic = "anthropic"
	APIOpenAI    = "openai"
)

// Call is one request the fake received, decoded into neutral form.
type Call struct {
	API      string // APIAnthropic, APIOpenAI or APIResponses
	Path     string
	Header   http.Header
	Body     []byte // the raw JSON request body
	Model    string
	System   string
	Messages []agent.Message
	Tools    []string // tool names in request order
	// ThinkingBudget is Anthropic's thinking.budget_tokens (0 = thinking not enabled).
	ThinkingBudget int64
	// ReasoningEffort is OpenAI's reasoning_effort ("" = not sent).
	ReasoningEffort string
	// MaxTokens is max_tokens (Anthropic, OpenAI) or max_completion_tokens (OpenAI).
	MaxTokens int64
	Stream    bool
}

// LastUser returns the text of the last user message ("" if none).
func (c Call) LastUser() string {
	for i := len(c.Messages) - 1; i >= 0; i-- {
		if c.Messages[i].Role == agent.RoleUser {
			return c.Messages[i].Text
		}
	}
	return ""
}

// Raw decodes the request body into a generic map, for asserting wire shape.
func (c Call) Raw() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(c.Body, &m)
	return m
}

// Reply is what the fake answers to one Call.
type Reply struct {
	Text      string
	ToolCalls []agent.ToolCall // an empty ID gets a generated one
	// Thinking, when set and the request enabled Anthropic thinking, is
	// returned as a signed thinking block before the text.
	Thinking string
	// Usage is reported as given; all zero means a rough estimate.
	Usage agent.Usage
	// Status other than 0 and 200 answers with the API's error JSON.
	Status     int
	RetryAfter string // the Retry-After header, if set
	Message    string // the error message for a non-200 Status
	Code       string // OpenAI's error code for a non-200 Status ("" = by status)
	// Delay holds the reply back; a request whose context ends first gets
	// no answer.
	Delay time.Duration
	// StopReason overrides the stop/finish reason.
	StopReason string
	// StreamDelay is waited before each piece of a streamed text (a
	// "stream": true request), so a test sees the text arrive over time.
	StreamDelay time.Duration
	// BeforePiece, if set, is called before each piece i (from 0) of a
	// streamed text is written, so a test can hold the stream until it has
	// seen the previous piece arrive.
	BeforePiece func(i int)
	// CutAfter > 0 cuts the connection of a streamed reply after that many
	// text pieces were sent: a stream failing after its first delta.
	CutAfter int
	// StreamError, for a streamed reply, answers HTTP 200 and then, after
	// the stream's first event (message_start / the role chunk), an error
	// event of the type the API uses for that status (529 →
	// overloaded_error, 429 → rate_limit_error, 500 → api_error /
	// server_error), with Message, and ends the stream.
	StreamError int
}

// cut ends a streamed reply abruptly (no final chunk): the client sees
// an unexpected EOF, as when a provider's connection breaks mid-stream.
func cut() { panic(http.ErrAbortHandler) }

// Handler decides the reply to one call. It is called concurrently.
type Handler func(c Call) Reply

// Script answers the replies in order, then repeats the last one.
func Script(replies ...Reply) Handler {
	var mu sync.Mutex
	i := 0
	return func(Call) Reply {
		mu.Lock()
		defer mu.Unlock()
		if len(replies) == 0 {
			return Reply{Text: "ok"}
		}
		r := replies[min(i, len(replies)-1)]
		i++
		return r
	}
}

// ByLastUser answers with f applied to the text of the last user message.
func ByLastUser(f func(text string) Reply) Handler {
	return func(c Call) Reply { return f(c.LastUser()) }
}

// Text is a handler that always answers s.
func Text(s string) Handler { return func(Call) Reply { return Reply{Text: s} } }

// Server is a running fake LLM API.
type Server struct {
	URL string // base URL to configure as baseUrl

	api     string
	handler Handler
	srv     *httptest.Server

	mu       sync.Mutex
	calls    []Call
	seq      int
	noRecord bool     // set by NewHandler(…, false): keep no calls (long load runs)
	models   []string // listed by GET …/models (SetModels)
	key      string   // required API key, "" = any (RequireKey)
}

// NewAnthropic starts a fake Anthropic Messages API (POST /v1/messages).
// Configure the Anthropic SDK with option.WithBaseURL(s.URL).
func NewAnthropic(t testing.TB, h Handler) *Server { return start(t, APIAnthropic, h) }

// NewOpenAI starts a fake OpenAI Chat Completions API (POST
// <any prefix>/chat/completions). Configure the OpenAI SDK with
// option.WithBaseURL(s.URL) or s.URL+"/v1".
func NewOpenAI(t testing.TB, h Handler) *Server { return start(t, APIOpenAI, h) }

func start(t testing.TB, api string, h Handler) *Server {
	t.Helper()
	if h == nil {
		h = Text("ok")
	}
	s := &Server{api: api, handler: h}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	return s
}

// Requests returns a copy of the calls received so far, in arrival order.
func (s *Server) Requests() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Count returns how many calls were received.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// Last returns the most recent call; ok is false when there was none.
func (s *Server) Last() (c Call, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.calls) == 0 {
		return Call{}, false
	}
	return s.calls[len(s.calls)-1], true
}

func (s *Server) nextID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return s.seq
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if s.intercept(w, r) {
		return
	}
	var wantPath bool
	switch s.api {
	case APIAnthropic:
		wantPath = strings.HasSuffix(r.URL.Path, "/v1/messages")
	case APIOpenAI:
		wantPath = strings.HasSuffix(r.URL.Path, "/chat/completions")
	case APIResponses:
		wantPath = strings.HasSuffix(r.URL.Path, "/responses")
	}
	if r.Method != http.MethodPost || !wantPath {
		s.writeError(w, http.StatusNotFound, "", fmt.Sprintf("llmtest: no route for %s %s", r.Method, r.URL.Path))
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s.writeError(w, http.StatusBadRequest, "", "llmtest: reading body: "+err.Error())
		return
	}
	var c Call
	var problem string
	switch s.api {
	case APIAnthropic:
		c, problem = decodeAnthropic(body)
	case APIResponses:
		c, problem = decodeResponses(body)
	default:
		c, problem = decodeOpenAI(body)
	}
	c.API, c.Path, c.Header, c.Body = s.api, r.URL.Path, r.Header.Clone(), body
	if !s.noRecord {
		s.mu.Lock()
		s.calls = append(s.calls, c)
		s.mu.Unlock()
	}
	if problem != "" {
		s.writeError(w, http.StatusBadRequest, "", problem)
		return
	}
	rep := s.handler(c)
	if rep.Delay > 0 {
		t := time.NewTimer(rep.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if rep.RetryAfter != "" {
		w.Header().Set("Retry-After", rep.RetryAfter)
	}
	if rep.StreamError != 0 && !c.Stream {
		rep.Status = rep.StreamError // not a stream: the plain error answer
	}
	if rep.Status != 0 && rep.Status != http.StatusOK {
		s.writeErrorCode(w, rep.Status, rep.RetryAfter, rep.Message, rep.Code)
		return
	}
	id := s.nextID()
	for i := range rep.ToolCalls {
		if rep.ToolCalls[i].ID == "" {
			prefix := "call_"
			if s.api == APIAnthropic {
				prefix = "toolu_"
			}
			rep.ToolCalls[i].ID = fmt.Sprintf("%s%d_%d", prefix, id, i)
		}
		if len(rep.ToolCalls[i].Args) == 0 {
			rep.ToolCalls[i].Args = json.RawMessage("{}")
		}
	}
	if rep.Usage == (agent.Usage{}) {
		rep.Usage = agent.Usage{Input: int64(len(body)/4 + 1), Output: int64(len(rep.Text)/4 + 1)}
	}
	var out any
	switch {
	case s.api == APIAnthropic && c.Stream:
		writeAnthropicStream(w, r, c, rep, id)
		return
	case s.api == APIAnthropic:
		out = encodeAnthropic(c, rep, id)
	case s.api == APIResponses && c.Stream:
		writeResponsesStream(w, r, c, rep, id)
		return
	case s.api == APIResponses:
		out = encodeResponses(c, rep, id)
	case c.Stream:
		writeOpenAIStream(w, r, c, rep, id)
		return
	default:
		out = encodeOpenAI(c, rep, id)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("request-id", fmt.Sprintf("req_llmtest_%d", id))
	_ = json.NewEncoder(w).Encode(out)
}

func (s *Server) writeError(w http.ResponseWriter, status int, retryAfter, msg string) {
	s.writeErrorCode(w, status, retryAfter, msg, "")
}

func (s *Server) writeErrorCode(w http.ResponseWriter, status int, retryAfter, msg, errCode string) {
	if msg == "" {
		msg = http.StatusText(status)
	}
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if s.api == APIAnthropic {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"type":       "error",
			"error":      map[string]any{"type": anthropicErrorType(status), "message": msg},
			"request_id": fmt.Sprintf("req_llmtest_err_%d", s.nextID()),
		})
		return
	}
	typ, code := openAIErrorType(status)
	if errCode != "" {
		code = errCode
	}
	_ = json.NewEncoder(w).Encode(map[string]any{
		"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code},
	})
}

// streamErrorBody is the JSON of an in-stream error event for status.
func streamErrorBody(api string, status int, msg string) map[string]any {
	if msg == "" {
		msg = http.StatusText(status)
	}
	if api == APIAnthropic {
		return map[string]any{"type": "error", "error": map[string]any{"type": anthropicErrorType(status), "message": msg}}
	}
	typ, code := openAIErrorType(status)
	return map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}}
}

func anthropicErrorType(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 402:
		return "billing_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 504:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	return "api_error"
}

func openAIErrorType(status int) (typ string, code any) {
	switch {
	case status == 401:
		return "invalid_request_error", "invalid_api_key"
	case status == 404:
		return "invalid_request_error", "model_not_found"
	case status == 429:
		return "requests", "rate_limit_exceeded"
	case status >= 500:
		return "server_error", nil
	}
	return "invalid_request_error", nil
}

// Key returns the API key the call carried: x-api-key for Anthropic, the
// Authorization bearer token for OpenAI.
func (c Call) Key() string {
	if c.API == APIAnthropic {
		return c.Header.Get("X-Api-Key")
	}
	return strings.TrimPrefix(c.Header.Get("Authorization"), "Bearer ")
}
