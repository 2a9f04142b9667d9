package llmtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// NewHandler returns a fake that is not tied to a test, for dev tools that
// run a fake model for minutes (the load and chaos commands): the caller
// serves it on a listener of its own and closes that. With record false it
// keeps no calls, so memory stays flat however many calls it answers;
// Requests, Count and Last then report nothing.
func NewHandler(api string, h Handler, record bool) *Server {
	if h == nil {
		h = Text("ok")
	}
	return &Server{api: api, handler: h, noRecord: !record}
}

// ServeHTTP answers one request like the test servers do.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.serveHTTP(w, r) }

// writeOpenAIStream answers a "stream": true Chat Completions request the
// way the API does: server-sent chat.completion.chunk events (the role, the
// text in a few pieces, each tool call's name then arguments, the finish
// reason), a usage chunk when stream_options.include_usage asks for it, and
// "data: [DONE]".
func writeOpenAIStream(w http.ResponseWriter, hr *http.Request, c Call, r Reply, id int) {
	var req struct {
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.Unmarshal(c.Body, &req)
	model := c.Model
	if model == "" {
		model = "gpt-llmtest"
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("request-id", fmt.Sprintf("req_llmtest_%d", id))
	flusher, _ := w.(http.Flusher)
	created := time.Now().Unix()
	chunk := func(delta map[string]any, finish any, usage any) {
		ch := map[string]any{
			"id": fmt.Sprintf("chatcmpl-llmtest%d", id), "object": "chat.completion.chunk",
			"created": created, "model": model, "system_fingerprint": "fp_llmtest",
			"choices": []map[string]any{{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}},
		}
		if usage != nil {
			ch["choices"] = []map[string]any{}
			ch["usage"] = usage
		}
		b, _ := json.Marshal(ch)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil, nil)
	if r.StreamError != 0 {
		b, _ := json.Marshal(streamErrorBody(APIOpenAI, r.StreamError, r.Message))
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
		return
	}
	for n, piece := range splitText(r.Text, 3) {
		if r.BeforePiece != nil && !waitPiece(hr, r.BeforePiece, n) {
			return
		}
		if r.StreamDelay > 0 {
			time.Sleep(r.StreamDelay) // test pacing of the fake's output, not a synchronisation
		}
		chunk(map[string]any{"content": piece}, nil, nil)
		if r.CutAfter > 0 && n+1 >= r.CutAfter {
			cut()
		}
	}
	for i, tc := range r.ToolCalls {
		chunk(map[string]any{"tool_calls": []map[string]any{{
			"index": i, "id": tc.ID, "type": "function",
			"function": map[string]any{"name": tc.Name, "arguments": ""},
		}}}, nil, nil)
		chunk(map[string]any{"tool_calls": []map[string]any{{
			"index": i, "function": map[string]any{"arguments": string(tc.Args)},
		}}}, nil, nil)
	}
	finish := r.StopReason
	if finish == "" {
		finish = "stop"
		if len(r.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	}
	chunk(map[string]any{}, finish, nil)
	if req.StreamOptions.IncludeUsage {
		prompt := r.Usage.Input + r.Usage.CacheRead + r.Usage.CacheWrite
		chunk(nil, nil, map[string]any{
			"prompt_tokens": prompt, "completion_tokens": r.Usage.Output, "total_tokens": prompt + r.Usage.Output,
			"prompt_tokens_details": map[string]any{"cached_tokens": r.Usage.CacheRead},
		})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

// splitText cuts s into at most n pieces on rune boundaries.
func splitText(s string, n int) []string {
	if s == "" {
		return nil
	}
	runes := []rune(s)
	size := max(1, (len(runes)+n-1)/n)
	var out []string
	for i := 0; i < len(runes); i += size {
		out = append(out, string(runes[i:min(i+size, len(runes))]))
	}
	return out
}
