package providers

import (
	"context"
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
		var acc openai.ChatCompletionAccumulator
		var text strings.Builder
		for stream.Next() {
			chunk := stream.Current()
			acc.AddChunk(chunk)
			if len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != "" {
				text.WriteString(chunk.Choices[0].Delta.Content)
				onText(text.String())
			}
		}
		if err := stream.Err(); err != nil {
			return nil, err
		}
		if len(acc.Choices) == 0 {
			return nil, &agent.ProviderError{Provider: p.id, StatusCode: http.StatusOK, Message: "the streamed reply had no choices"}
		}
		return openAIResponse(&acc.ChatCompletion), nil
	}, classifyOpenAI)
}

// Stream answers like Complete, the whole text at once.
func (d *Demo) Stream(ctx context.Context, req agent.Request, onText func(string)) (*agent.Response, error) {
	resp, err := d.Complete(ctx, req)
	if err == nil && resp.Text != "" {
		onText(resp.Text)
	}
	return resp, err
}
