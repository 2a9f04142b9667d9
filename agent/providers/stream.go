package providers

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"

	"github.com/heraldhq/herald/agent"
)

// Stream is Complete through the Messages API's streaming: onText gets the
// text written so far (cumulative) as it arrives. A retried attempt starts
// its text again from the beginning.
func (p *anthropicProvider) Stream(ctx context.Context, req agent.Request, onText func(string)) (*agent.Response, error) {
	params := p.params(req)
	return p.retry.do(ctx, func(ctx context.Context, key string) (*agent.Response, error) {
		stream := p.client.Messages.NewStreaming(ctx, params, anthropicKey(key)...)
		defer stream.Close()
		var msg anthropic.Message
		var text strings.Builder
		for stream.Next() {
			ev := stream.Current()
			if err := msg.Accumulate(ev); err != nil {
				return nil, err
			}
			if d, ok := ev.AsAny().(anthropic.ContentBlockDeltaEvent); ok && d.Delta.Type == "text_delta" && d.Delta.Text != "" {
				text.WriteString(d.Delta.Text)
				onText(text.String())
			}
		}
		if err := stream.Err(); err != nil {
			return nil, err
		}
		return p.response(&msg), nil
	}, classifyAnthropic)
}

// Stream is Complete through Chat Completions streaming (with the usage
// chunk): onText gets the text written so far as it arrives.
func (p *openAIProvider) Stream(ctx context.Context, req agent.Request, onText func(string)) (*agent.Response, error) {
	params := p.params(req)
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	return p.retry.do(ctx, func(ctx context.Context, key string) (*agent.Response, error) {
		stream := p.client.Chat.Completions.NewStreaming(ctx, params, openAIKey(key)...)
		defer stream.Close()
		var acc chunkAccumulator
		for stream.Next() {
			chunk := stream.Current()
			if err := acc.add(&chunk); err != nil {
				return nil, &agent.ProviderError{Provider: p.id, StatusCode: http.StatusOK, Message: err.Error()}
			}
			if len(chunk.Choices) > 0 && chunk.Choices[0].Index == 0 && chunk.Choices[0].Delta.Content != "" {
				onText(acc.text.String())
			}
		}
		if err := stream.Err(); err != nil {
			return nil, err
		}
		if !acc.choice {
			return nil, &agent.ProviderError{Provider: p.id, StatusCode: http.StatusOK, Message: "the streamed reply had no choices"}
		}
		return openAIResponse(acc.completion()), nil
	}, classifyOpenAI)
}

// maxStreamToolCalls bounds the tool calls one streamed reply may open
// (their index is the server's to choose).
const maxStreamToolCalls = 4096

// chunkAccumulator puts a streamed Chat Completions reply together from
// its chunks: the first choice's text, finish reason and tool calls (id
// and type set, name and arguments appended by index), the model, and
// the usage summed, as openai-go's ChatCompletionAccumulator does for the
// fields openAIResponse reads. That accumulator allocated two tables of
// ~48 KB for every chunk that opens a tool call: 70 % of the gateway's
// allocations with 10,000 sub-agents spawned 100 per reply
// (docs/performance.md).
type chunkAccumulator struct {
	id, model, finish string
	choice            bool
	text              strings.Builder
	tools             []*streamedTool
	usage             openai.CompletionUsage
}

type streamedTool struct {
	id, typ    string
	name, args strings.Builder
}

// add takes one chunk in; chunks of another reply (another id) are
// skipped, as the SDK's accumulator skips them.
func (a *chunkAccumulator) add(c *openai.ChatCompletionChunk) error {
	if c.ID != "" {
		if a.id == "" {
			a.id = c.ID
		} else if c.ID != a.id {
			return nil
		}
	}
	if c.Model != "" {
		a.model = c.Model
	}
	u := &c.Usage
	a.usage.PromptTokens += u.PromptTokens
	a.usage.CompletionTokens += u.CompletionTokens
	a.usage.TotalTokens += u.TotalTokens
	a.usage.PromptTokensDetails.CachedTokens += u.PromptTokensDetails.CachedTokens
	a.usage.PromptTokensDetails.CacheWriteTokens += u.PromptTokensDetails.CacheWriteTokens
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.Index != 0 { // openAIResponse reads the first choice only
			continue
		}
		a.choice = true
		a.text.WriteString(ch.Delta.Content)
		if ch.FinishReason != "" {
			a.finish = ch.FinishReason
		}
		for j := range ch.Delta.ToolCalls {
			d := &ch.Delta.ToolCalls[j]
			if d.Index < 0 || d.Index >= maxStreamToolCalls {
				return fmt.Errorf("the streamed reply's tool call index %d is out of range", d.Index)
			}
			for int(d.Index) >= len(a.tools) {
				a.tools = append(a.tools, &streamedTool{})
			}
			t := a.tools[d.Index]
			if d.ID != "" {
				t.id = d.ID
			}
			if d.Type != "" {
				t.typ = d.Type
			}
			t.name.WriteString(d.Function.Name)
			t.args.WriteString(d.Function.Arguments)
		}
	}
	return nil
}

// completion is the reply put together, in the shape openAIResponse reads.
func (a *chunkAccumulator) completion() *openai.ChatCompletion {
	cc := &openai.ChatCompletion{ID: a.id, Model: a.model, Usage: a.usage, Choices: make([]openai.ChatCompletionChoice, 1)}
	ch := &cc.Choices[0]
	ch.FinishReason = a.finish
	ch.Message.Content = a.text.String()
	ch.Message.Role = "assistant"
	for _, t := range a.tools {
		tc := openai.ChatCompletionMessageToolCallUnion{ID: t.id, Type: t.typ}
		tc.Function.Name, tc.Function.Arguments = t.name.String(), t.args.String()
		ch.Message.ToolCalls = append(ch.Message.ToolCalls, tc)
	}
	return cc
}

// Stream answers like Complete, the whole text at once.
func (d *Demo) Stream(ctx context.Context, req agent.Request, onText func(string)) (*agent.Response, error) {
	resp, err := d.Complete(ctx, req)
	if err == nil && resp.Text != "" {
		onText(resp.Text)
	}
	return resp, err
}
