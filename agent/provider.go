package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Role of a message in a conversation.
type Role string

const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool" // results of the previous assistant message's tool calls
)

// Thinking levels accepted by sessions_spawn and config.
const (
	ThinkingOff    = "off"
	ThinkingLow    = "low"
	ThinkingMedium = "medium"
	ThinkingHigh   = "high"
)

// ValidThinking reports whether s is a known thinking level ("" counts as unset).
func ValidThinking(s string) bool {
	switch s {
	case "", ThinkingOff, ThinkingLow, ThinkingMedium, ThinkingHigh:
		return true
	}
	return false
}

// ToolCall is one tool invocation requested by the model.
type ToolCall struct {
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// ToolResult answers one ToolCall.
type ToolResult struct {
	CallID  string `json:"callId"`
	Name    string `json:"name"`
	Content string `json:"content"` // usually a JSON object
	IsError bool   `json:"isError,omitempty"`
}

// Message is one provider-neutral conversation message.
type Message struct {
	Role        Role         `json:"role"`
	Text        string       `json:"text,omitempty"`
	ToolCalls   []ToolCall   `json:"toolCalls,omitempty"`   // assistant only
	ToolResults []ToolResult `json:"toolResults,omitempty"` // tool only
	// Files are the files on a user message (SPEC §18): references only;
	// a provider reads the bytes of an image or a PDF it sends as content
	// through Request.OpenFile.
	Files []File `json:"files,omitempty"`
}

// File is a stored file a message holds: its id (SHA-256 of the bytes),
// the name in the workspace (Path, "attachments/<name>"), its sniffed
// type and size.
type File struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	MIME string `json:"mime"`
	Size int64  `json:"size"`
	Path string `json:"path,omitempty"`
}

// ToolSpec is what a provider is told about a tool.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"` // a JSON Schema object
}

// Usage counts tokens of one or more model calls.
type Usage struct {
	Input      int64 `json:"input"`
	Output     int64 `json:"output"`
	CacheRead  int64 `json:"cacheRead,omitempty"`
	CacheWrite int64 `json:"cacheWrite,omitempty"`
}

// Add sums u and o.
func (u Usage) Add(o Usage) Usage {
	return Usage{u.Input + o.Input, u.Output + o.Output, u.CacheRead + o.CacheRead, u.CacheWrite + o.CacheWrite}
}

// Total is input + output tokens.
func (u Usage) Total() int64 { return u.Input + u.Output }

// Request is one model call.
type Request struct {
	Model     string // the model id within its provider (no "provider/" prefix)
	System    string
	Messages  []Message
	Tools     []ToolSpec
	Thinking  string // off|low|medium|high; "" = provider default
	MaxTokens int    // 0 = provider default
	// Images: the model takes image content (models[].input); without it
	// a message's files are only their reference lines in the text.
	Images bool
	// OpenFile reads a stored file's bytes (nil: files are not sent as
	// content).
	OpenFile func(ctx context.Context, id string) (io.ReadCloser, error)
}

// Response is the model's answer to one Request.
type Response struct {
	Text       string
	ToolCalls  []ToolCall
	Usage      Usage
	Model      string
	StopReason string
}

// Provider is one model API. Implementations retry 429 and 5xx themselves
// (honouring Retry-After) and return an error wrapping *ProviderError
// otherwise.
type Provider interface {
	Complete(ctx context.Context, req Request) (*Response, error)
}

// Streamer is a Provider that can stream: onText gets the reply's text
// written so far (cumulative) as it arrives; the Response is as Complete's.
type Streamer interface {
	Stream(ctx context.Context, req Request, onText func(text string)) (*Response, error)
}

// ProviderError is a provider failure that is not worth retrying (or that
// stayed after every retry). Message is the provider's own message.
type ProviderError struct {
	Provider   string
	StatusCode int
	Message    string
	// ContextLength marks the provider's "the request is longer than the
	// model's context window" error (errors.Is(err, ErrContextLength)).
	ContextLength bool
	// Retryable: a 429, a 5xx (529 overloaded included) or a failed
	// connection, still failing after the provider's retries — a fallback
	// model may answer instead (SPEC §20).
	Retryable bool
	// Auth: the key was refused (401/403) — with several keys, every key.
	Auth bool
	// ConnectionFailed: no answer at all (refused, reset, DNS).
	ConnectionFailed bool
}

// ErrContextLength is a provider's refusal of a request longer than the
// model's context window; a turn answers it with one compaction and one
// retry.
var ErrContextLength = errors.New("the conversation is longer than the model's context window")

// Is makes errors.Is(err, ErrContextLength) find a context-length error.
func (e *ProviderError) Is(target error) bool { return target == ErrContextLength && e.ContextLength }

func (e *ProviderError) Error() string {
	if e.StatusCode != 0 {
		return fmt.Sprintf("%s: HTTP %d: %s", e.Provider, e.StatusCode, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Provider, e.Message)
}

// ErrNoProvider is returned when a model reference names no configured provider.
var ErrNoProvider = errors.New("no such provider")

// Clock is the time source where time drives behaviour.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

func (SystemClock) Now() time.Time { return time.Now() }
