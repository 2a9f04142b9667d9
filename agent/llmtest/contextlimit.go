package llmtest

import (
	"fmt"
	"net/http"
)

// RequestTokens is how ContextLimit measures a request: a quarter of its
// JSON body's bytes, plus the output tokens it asks for (max_tokens), as
// providers count the window.
func RequestTokens(c Call) int { return len(c.Body)/4 + int(c.MaxTokens) }

// ContextLimit enforces a context window of limit tokens in front of h: a
// request over it gets the provider's real context-length error (Anthropic:
// 400 invalid_request_error "prompt is too long: N tokens > M maximum";
// OpenAI: 400 context_length_exceeded "This model's maximum context length
// is M tokens…"), as the real APIs answer.
func ContextLimit(limit int, h Handler) Handler {
	return func(c Call) Reply {
		n := RequestTokens(c)
		if n <= limit {
			return h(c)
		}
		if c.API == APIOpenAI {
			return Reply{Status: http.StatusBadRequest, Code: "context_length_exceeded",
				Message: fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", limit, n)}
		}
		return Reply{Status: http.StatusBadRequest, Message: fmt.Sprintf("prompt is too long: %d tokens > %d maximum", n, limit)}
	}
}
