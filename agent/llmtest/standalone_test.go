package llmtest

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/heraldhq/herald/agent"
)

// A streamed answer read through the real SDK's accumulator comes out the
// same as the non-streamed one: the text, the tool call and the usage.
func TestOpenAIStreamThroughSDK(t *testing.T) {
	h := NewHandler(APIOpenAI, func(c Call) Reply {
		return Reply{Text: "héllo " + c.LastUser(), Usage: agent.Usage{Input: 7, Output: 3},
			ToolCalls: []agent.ToolCall{{Name: "list_files", Args: json.RawMessage(`{"path":"."}`)}}}
	}, false)
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("k"))
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         "m",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("bob")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if chunks < 4 {
		t.Errorf("%d chunks, want the answer in several", chunks)
	}
	msg := acc.Choices[0].Message
	if msg.Content != "héllo bob" || acc.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("content %q finish %q", msg.Content, acc.Choices[0].FinishReason)
	}
	if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "list_files" || msg.ToolCalls[0].Function.Arguments != `{"path":"."}` {
		t.Errorf("tool calls %+v", msg.ToolCalls)
	}
	if acc.Usage.PromptTokens != 7 || acc.Usage.CompletionTokens != 3 {
		t.Errorf("usage %+v", acc.Usage)
	}
	if h.Count() != 0 {
		t.Errorf("a handler made with record=false kept %d calls", h.Count())
	}
}
