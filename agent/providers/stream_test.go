package providers

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/config"
)

// Both SDK providers stream: onText sees the text grow piece by piece to the
// whole reply, and the Response (text, tool calls, usage, thinking) is what
// Complete would return.
func TestStreamBothProviders(t *testing.T) {
	for _, api := range []string{llmtest.APIAnthropic, llmtest.APIOpenAI} {
		t.Run(api, func(t *testing.T) {
			reply := llmtest.Reply{Text: "Streaming makes the wait visible to people.", Thinking: "let me think",
				ToolCalls: []agent.ToolCall{{ID: "call_1", Name: "echo", Args: json.RawMessage(`{"text":"hi"}`)}},
				Usage:     agent.Usage{Input: 40, Output: 12}}
			var srv *llmtest.Server
			if api == llmtest.APIAnthropic {
				srv = llmtest.NewAnthropic(t, llmtest.Script(reply))
			} else {
				srv = llmtest.NewOpenAI(t, llmtest.Script(reply))
			}
			p, err := New(api, config.Provider{API: api, BaseURL: srv.URL, APIKey: "k", Models: []config.Model{{ID: "m"}}}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var seen []string
			resp, err := p.(agent.Streamer).Stream(context.Background(), agent.Request{Model: "m", Thinking: "low",
				Messages: []agent.Message{{Role: agent.RoleUser, Text: "go"}}}, func(s string) { seen = append(seen, s) })
			if err != nil {
				t.Fatal(err)
			}
			if len(seen) < 2 || seen[len(seen)-1] != reply.Text {
				t.Fatalf("onText saw %q; want several growing texts ending in the reply", seen)
			}
			for i := 1; i < len(seen); i++ {
				if !strings.HasPrefix(seen[i], seen[i-1]) || len(seen[i]) <= len(seen[i-1]) {
					t.Errorf("text did not grow: %q then %q", seen[i-1], seen[i])
				}
			}
			if resp.Text != reply.Text || len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "echo" ||
				string(resp.ToolCalls[0].Args) != `{"text":"hi"}` || resp.Usage.Input != 40 || resp.Usage.Output != 12 {
				t.Errorf("streamed response = %+v", resp)
			}
			if c := srv.Requests()[0]; !c.Stream {
				t.Error("the request was not a streaming one")
			}
		})
	}
}

// The streamed reply put together by chunkAccumulator is the one
// openai-go's ChatCompletionAccumulator puts together, for what
// openAIResponse reads: text in pieces, tool calls whose arguments come in
// pieces and interleave, a chunk of another reply (skipped), the finish
// reason and the usage chunk (every chunk names the model, as the API's
// do); cache writes are counted too (the SDK's accumulator drops them).
func TestChunkAccumulatorMatchesSDK(t *testing.T) {
	lines := []string{
		`{"id":"c1","model":"gpt-x","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}`,
		`{"id":"c1","model":"gpt-x","choices":[{"index":0,"delta":{"content":"lo"}}]}`,
		`{"id":"c1","model":"gpt-x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"sessions_spawn","arguments":"{\"ta"}}]}}]}`,
		`{"id":"c1","model":"gpt-x","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"exec","arguments":""}}]}}]}`,
		`{"id":"c1","model":"gpt-x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"sk\":\"a\"}"}},{"index":1,"function":{"arguments":"{\"command\":\"ls\"}"}}]}}]}`,
		`{"id":"other","choices":[{"index":0,"delta":{"content":" not this"}}]}`,
		`{"id":"c1","model":"gpt-x","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{"id":"c1","model":"gpt-x","choices":[],"usage":{"prompt_tokens":50,"completion_tokens":7,"total_tokens":57,"prompt_tokens_details":{"cached_tokens":20}}}`,
	}
	var sdk openai.ChatCompletionAccumulator
	var ours chunkAccumulator
	for _, l := range lines {
		var c openai.ChatCompletionChunk
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			t.Fatal(err)
		}
		sdk.AddChunk(c)
		var sc streamChunk
		if err := decodeChunk(ssestream.Event{Data: []byte(l)}, &sc); err != nil {
			t.Fatal(err)
		}
		if err := ours.add(&sc); err != nil {
			t.Fatal(err)
		}
	}
	want, got := openAIResponse(fromSDK(&sdk.ChatCompletion)), openAIResponse(ours.completion())
	if !reflect.DeepEqual(got, want) {
		t.Errorf("chunkAccumulator:\n%+v\nSDK accumulator:\n%+v", got, want)
	}
	if got.Text != "Hello" || len(got.ToolCalls) != 2 || string(got.ToolCalls[0].Args) != `{"task":"a"}` || got.Usage.CacheRead != 20 {
		t.Errorf("response = %+v", got)
	}

	var c streamChunk
	_ = decodeChunk(ssestream.Event{Data: []byte(`{"id":"c2","choices":[],"usage":{"prompt_tokens":50,"prompt_tokens_details":{"cache_write_tokens":30}}}`)}, &c)
	var w chunkAccumulator
	_ = w.add(&c)
	if u := w.completion().Usage.PromptTokensDetails.CacheWriteTokens; u != 30 {
		t.Errorf("cache writes = %d, want 30", u)
	}
	_ = decodeChunk(ssestream.Event{Data: []byte(`{"id":"c3","choices":[{"index":0,"delta":{"tool_calls":[{"index":100000,"id":"x"}]}}]}`)}, &c)
	if err := (&chunkAccumulator{}).add(&c); err == nil {
		t.Error("a tool call index of 100000 was taken")
	}
}

// A chunk encoding/json refuses (a count written 5.0, an index as a
// string) is read as the SDK reads it; an event with an error member is
// the SDK's StreamError.
func TestDecodeChunkLenientAsSDK(t *testing.T) {
	for _, l := range []string{
		`{"id":"c1","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5.0,"completion_tokens":2}}`,
		`{"id":"c1","choices":[{"index":"0","delta":{"content":"hi","tool_calls":[{"index":0,"id":"a","function":{"name":"n","arguments":"{}"}}]}}]}`,
	} {
		var sdk openai.ChatCompletionChunk
		if err := json.Unmarshal([]byte(l), &sdk); err != nil {
			t.Fatal(err)
		}
		var want openai.ChatCompletionAccumulator
		want.AddChunk(sdk)
		var c streamChunk
		if err := decodeChunk(ssestream.Event{Data: []byte(l)}, &c); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		var got chunkAccumulator
		if err := got.add(&c); err != nil {
			t.Fatal(err)
		}
		if g, w := openAIResponse(got.completion()), openAIResponse(fromSDK(&want.ChatCompletion)); !reflect.DeepEqual(g, w) {
			t.Errorf("%s:\nours %+v\nSDK  %+v", l, g, w)
		}
	}
	var c streamChunk
	err := decodeChunk(ssestream.Event{Data: []byte(`{"error":{"message":"overloaded","type":"server_error"}}`)}, &c)
	var se *ssestream.StreamError
	if !errors.As(err, &se) || !strings.Contains(se.Message, "overloaded") {
		t.Errorf("error event: %v", err)
	}
}

// A whole (not streamed) reply decoded by herald gives the response the
// SDK's decoding gave, also for one encoding/json refuses.
func TestDecodeCompletionAsSDK(t *testing.T) {
	for _, body := range []string{
		`{"id":"c1","model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":"hi","tool_calls":[{"id":"a","type":"function","function":{"name":"grep","arguments":"{\"p\":1}"}},{"id":"b","type":"custom","custom":{}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":50,"completion_tokens":7,"total_tokens":57,"prompt_tokens_details":{"cached_tokens":20,"cache_write_tokens":5}}}`,
		`{"id":"c2","choices":[{"message":{"content":null},"finish_reason":"stop"}],"usage":null}`,
		`{"id":"c3","choices":[{"message":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5.0}}`,
		`{"id":"c4","choices":[]}`,
	} {
		var want openai.ChatCompletion
		if err := json.Unmarshal([]byte(body), &want); err != nil {
			t.Fatal(err)
		}
		got, err := decodeCompletion([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if len(got.Choices) != len(want.Choices) {
			t.Fatalf("%s: %d choices, want %d", body, len(got.Choices), len(want.Choices))
		}
		if len(want.Choices) == 0 {
			continue
		}
		if g, w := openAIResponse(got), openAIResponse(fromSDK(&want)); !reflect.DeepEqual(g, w) {
			t.Errorf("%s:\nours %+v\nSDK  %+v", body, g, w)
		}
	}
	if _, err := decodeCompletion([]byte(`<html>bad gateway</html>`)); err == nil {
		t.Error("a body that is no JSON was taken")
	}
}
