package llmtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// writeAnthropicStream answers a "stream": true Messages request the way
// the API does: server-sent events message_start, then per content block
// content_block_start, its deltas (thinking_delta and signature_delta,
// text_delta in a few pieces, input_json_delta) and content_block_stop,
// then message_delta with the stop reason and usage, and message_stop.
// Reply.StreamDelay is waited between text pieces.
func writeAnthropicStream(w http.ResponseWriter, r *http.Request, c Call, rep Reply, id int) {
	msg := encodeAnthropic(c, rep, id)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("request-id", fmt.Sprintf("req_llmtest_%d", id))
	flusher, _ := w.(http.Flusher)
	event := func(typ string, data map[string]any) bool {
		data["type"] = typ
		b, _ := json.Marshal(data)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	usage := msg["usage"].(map[string]any)
	start := map[string]any{}
	for k, v := range msg {
		start[k] = v
	}
	start["content"], start["stop_reason"] = []any{}, nil
	start["usage"] = map[string]any{"input_tokens": usage["input_tokens"], "output_tokens": 1,
		"cache_read_input_tokens": usage["cache_read_input_tokens"], "cache_creation_input_tokens": usage["cache_creation_input_tokens"]}
	if !event("message_start", map[string]any{"message": start}) {
		return
	}
	if rep.StreamError != 0 {
		event("error", streamErrorBody(APIAnthropic, rep.StreamError, rep.Message))
		return
	}
	for i, block := range msg["content"].([]map[string]any) {
		switch block["type"] {
		case "thinking":
			event("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "thinking", "thinking": "", "signature": ""}})
			event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "thinking_delta", "thinking": block["thinking"]}})
			event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "signature_delta", "signature": block["signature"]}})
		case "text":
			event("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for n, piece := range splitText(block["text"].(string), 3) {
				if rep.BeforePiece != nil && !waitPiece(r, rep.BeforePiece, n) {
					return
				}
				if rep.StreamDelay > 0 {
					select {
					case <-time.After(rep.StreamDelay):
					case <-r.Context().Done():
						return
					}
				}
				if !event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "text_delta", "text": piece}}) {
					return
				}
				if rep.CutAfter > 0 && n+1 >= rep.CutAfter {
					cut()
				}
			}
		case "tool_use":
			event("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "tool_use", "id": block["id"], "name": block["name"], "input": map[string]any{}}})
			event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(block["input"].(json.RawMessage))}})
		}
		event("content_block_stop", map[string]any{"index": i})
	}
	event("message_delta", map[string]any{"delta": map[string]any{"stop_reason": msg["stop_reason"], "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": usage["output_tokens"]}})
	event("message_stop", map[string]any{})
}

// waitPiece runs a test's BeforePiece hook for piece n and reports whether
// to go on: false when the request ended first (the caller hung up, e.g. a
// gateway shutting down), so a hook that waits for the test never holds
// the fake server's handler.
func waitPiece(r *http.Request, before func(int), n int) bool {
	done := make(chan struct{})
	go func() { defer close(done); before(n) }()
	select {
	case <-done:
		return true
	case <-r.Context().Done():
		return false
	}
}
