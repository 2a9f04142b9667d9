package providers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	anthropicsse "github.com/anthropics/anthropic-sdk-go/packages/ssestream"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/tidwall/gjson"

	"github.com/heraldhq/herald/agent"
)

// Stream is Complete through the Messages API's streaming: onText gets the
// text written so far (cumulative) as it arrives. A retried attempt starts
// its text again from the beginning.
func (p *anthropicProvider) Stream(ctx context.Context, req agent.Request, onText func(string)) (*agent.Response, error) {
	params := p.params(req)
	return p.retry.do(ctx, func(ctx context.Context, key string) (*agent.Response, error) {
		return p.stream(ctx, params, key, onText)
	}, classifyAnthropic)
}

// stream is one attempt of Stream. The reply is put together on the heap
// and each event is copied out in take: the frames that wait for the
// answer hold neither (an event is 5 KB, a Message 1.4 KB), nor the
// params (see anthropicNew).
func (p *anthropicProvider) stream(ctx context.Context, params *anthropic.MessageNewParams, key string, onText func(string)) (*agent.Response, error) {
	stream := anthropicNewStreaming(ctx, &p.client, params, key)
	defer stream.Close()
	acc := newAnthropicAccumulator()
	for stream.Next() {
		text, err := acc.take(stream)
		if err != nil {
			return nil, err
		}
		if text {
			onText(acc.text.String())
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return p.response(&acc.msg), nil
}

// anthropicNewStreaming is Messages.NewStreaming with params by pointer.
//
//go:noinline
func anthropicNewStreaming(ctx context.Context, c *anthropic.Client, params *anthropic.MessageNewParams, key string) *anthropicsse.Stream[anthropic.MessageStreamEventUnion] {
	opts := anthropicKey(key)
	return c.Messages.NewStreaming(ctx, *params, opts...)
}

// anthropicAccumulator is a streamed Messages reply put together, and its
// text so far.
type anthropicAccumulator struct {
	msg  anthropic.Message
	text strings.Builder
}

// newAnthropicAccumulator makes one on the heap: not inlined, so escape
// analysis cannot keep it (its Message is 1.4 KB) in the frame of stream.
//
//go:noinline
func newAnthropicAccumulator() *anthropicAccumulator { return &anthropicAccumulator{} }

// take adds the stream's current event; text reports whether it added
// text.
//
//go:noinline
func (a *anthropicAccumulator) take(stream *anthropicsse.Stream[anthropic.MessageStreamEventUnion]) (text bool, err error) {
	ev := stream.Current()
	if err := a.msg.Accumulate(ev); err != nil {
		return false, err
	}
	// The union's own fields, not AsAny: AsAny decodes the event again by
	// reflection (Accumulate did once).
	if ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" && ev.Delta.Text != "" {
		a.text.WriteString(ev.Delta.Text)
		return true, nil
	}
	return false, nil
}

// Stream is Complete through Chat Completions streaming (with the usage
// chunk): onText gets the text written so far as it arrives. The body is
// ours (openai_body.go) and so are the chunks (decodeChunk): the SDK's
// reflection-based decoder was most of the stream's CPU.
func (p *openAIProvider) Stream(ctx context.Context, req agent.Request, onText func(string)) (*agent.Response, error) {
	body := p.body(req, true)
	return p.retry.do(ctx, func(ctx context.Context, key string) (*agent.Response, error) {
		return p.stream(ctx, body, key, onText)
	}, classifyOpenAI)
}

// stream is one attempt of Stream. It stays on the stack while the answer
// comes, so the reply is put together on the heap (docs/performance.md,
// memory per model call in flight).
func (p *openAIProvider) stream(ctx context.Context, body *openAIBody, key string, onText func(string)) (*agent.Response, error) {
	var raw *http.Response
	if err := p.post(ctx, body, &raw, key); err != nil {
		if raw != nil && raw.Body != nil {
			raw.Body.Close()
		}
		return nil, err
	}
	events := ssestream.NewDecoder(raw)
	if events == nil {
		return nil, &agent.ProviderError{Provider: p.id, StatusCode: http.StatusOK, Message: "the streamed reply had no choices"}
	}
	defer events.Close()
	acc := newChunkAccumulator()
	chunk := &streamChunk{}
	for events.Next() {
		ev := events.Event()
		if bytes.HasPrefix(ev.Data, []byte("[DONE]")) {
			break
		}
		if err := decodeChunk(ev, chunk); err != nil {
			return nil, err
		}
		if err := acc.add(chunk); err != nil {
			return nil, &agent.ProviderError{Provider: p.id, StatusCode: http.StatusOK, Message: err.Error()}
		}
		if len(chunk.Choices) > 0 && chunk.Choices[0].Index == 0 && chunk.Choices[0].Delta.Content != "" {
			onText(acc.text.String())
		}
	}
	if err := events.Err(); err != nil {
		return nil, err
	}
	if !acc.choice {
		return nil, &agent.ProviderError{Provider: p.id, StatusCode: http.StatusOK, Message: "the streamed reply had no choices"}
	}
	return openAIResponse(acc.completion()), nil
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
	usage             streamChunkUsage
}

// newChunkAccumulator makes one on the heap, not in the frame of stream
// (see newAnthropicAccumulator).
//
//go:noinline
func newChunkAccumulator() *chunkAccumulator { return &chunkAccumulator{} }

type streamedTool struct {
	id, typ    string
	name, args strings.Builder
}

// add takes one chunk in; chunks of another reply (another id) are
// skipped, as the SDK's accumulator skips them.
func (a *chunkAccumulator) add(c *streamChunk) error {
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
func (a *chunkAccumulator) completion() *completionBody {
	b := &completionBody{ID: a.id, Model: a.model, Usage: a.usage, Choices: make([]completionChoice, 1)}
	ch := &b.Choices[0]
	ch.FinishReason = a.finish
	ch.Message.Content = a.text.String()
	if len(a.tools) > 0 {
		ch.Message.ToolCalls = make([]streamChunkToolCall, len(a.tools))
	}
	for i, t := range a.tools {
		tc := &ch.Message.ToolCalls[i]
		tc.ID, tc.Type = t.id, t.typ
		tc.Function.Name, tc.Function.Arguments = t.name.String(), t.args.String()
	}
	return b
}

// Stream answers like Complete, the whole text at once.
func (d *Demo) Stream(ctx context.Context, req agent.Request, onText func(string)) (*agent.Response, error) {
	resp, err := d.Complete(ctx, req)
	if err == nil && resp.Text != "" {
		onText(resp.Text)
	}
	return resp, err
}

// streamChunk is the part of a Chat Completions chunk that
// chunkAccumulator reads, decoded with encoding/json; openai-go's
// ChatCompletionChunk decodes every field by reflection with metadata
// for each (3–4 % of the gateway's CPU with 10,000 sub-agents in flight).
type streamChunk struct {
	ID      string              `json:"id"`
	Model   string              `json:"model"`
	Choices []streamChunkChoice `json:"choices"`
	Usage   streamChunkUsage    `json:"usage"`
	// Error is set when the event carries an error (the SDK's check).
	Error json.RawMessage `json:"error"`
}

type streamChunkChoice struct {
	Index int64 `json:"index"`
	Delta struct {
		Content   string                `json:"content"`
		ToolCalls []streamChunkToolCall `json:"tool_calls"`
	} `json:"delta"`
	FinishReason string `json:"finish_reason"`
}

type streamChunkToolCall struct {
	Index    int64  `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type streamChunkUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens     int64 `json:"cached_tokens"`
		CacheWriteTokens int64 `json:"cache_write_tokens"`
	} `json:"prompt_tokens_details"`
}

// decodeChunk decodes one event of a Chat Completions stream into c. An
// event with an "error" member is a *ssestream.StreamError, as the SDK's
// stream reports it. A chunk encoding/json refuses (a server writing a
// count as 5.0 or a string) is decoded by the SDK, which takes such
// values as it can, and copied over.
func decodeChunk(ev ssestream.Event, c *streamChunk) error {
	*c = streamChunk{}
	err := json.Unmarshal(ev.Data, c)
	if err == nil && len(c.Error) == 0 {
		return nil
	}
	if ep := gjson.GetBytes(ev.Data, "error"); ep.Exists() {
		return &ssestream.StreamError{Message: fmt.Sprintf("received error while streaming: %s", ep.String()), Event: ev}
	}
	var sdk openai.ChatCompletionChunk
	if err := json.Unmarshal(ev.Data, &sdk); err != nil {
		return err
	}
	*c = streamChunk{ID: sdk.ID, Model: sdk.Model}
	u := &sdk.Usage
	c.Usage.PromptTokens, c.Usage.CompletionTokens, c.Usage.TotalTokens = u.PromptTokens, u.CompletionTokens, u.TotalTokens
	c.Usage.PromptTokensDetails.CachedTokens = u.PromptTokensDetails.CachedTokens
	c.Usage.PromptTokensDetails.CacheWriteTokens = u.PromptTokensDetails.CacheWriteTokens
	c.Choices = make([]streamChunkChoice, len(sdk.Choices))
	for i, ch := range sdk.Choices {
		d := &c.Choices[i]
		d.Index, d.FinishReason, d.Delta.Content = ch.Index, ch.FinishReason, ch.Delta.Content
		d.Delta.ToolCalls = make([]streamChunkToolCall, len(ch.Delta.ToolCalls))
		for j, tc := range ch.Delta.ToolCalls {
			t := &d.Delta.ToolCalls[j]
			t.Index, t.ID, t.Type = tc.Index, tc.ID, string(tc.Type)
			t.Function.Name, t.Function.Arguments = tc.Function.Name, tc.Function.Arguments
		}
	}
	return nil
}

// completionBody is the part of a Chat Completions reply that
// openAIResponse reads, decoded with encoding/json as streamChunk is (the
// SDK's ChatCompletion is ~1 KB of fields and metadata a reply).
type completionBody struct {
	ID      string             `json:"id"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   streamChunkUsage   `json:"usage"`
}

type completionChoice struct {
	Message struct {
		Content   string                `json:"content"`
		ToolCalls []streamChunkToolCall `json:"tool_calls"`
	} `json:"message"`
	FinishReason string `json:"finish_reason"`
}

// decodeCompletion decodes a Chat Completions reply; one encoding/json
// refuses is decoded by the SDK, as the SDK's own method decoded it.
func decodeCompletion(raw []byte) (*completionBody, error) {
	var b completionBody
	if err := json.Unmarshal(raw, &b); err != nil {
		var cc openai.ChatCompletion
		if err := json.Unmarshal(raw, &cc); err != nil {
			return nil, fmt.Errorf("error parsing response json: %w", err)
		}
		return fromSDK(&cc), nil
	}
	return &b, nil
}

// fromSDK is the part of an SDK-decoded reply openAIResponse reads.
func fromSDK(cc *openai.ChatCompletion) *completionBody {
	u := &cc.Usage
	b := &completionBody{ID: cc.ID, Model: cc.Model, Choices: make([]completionChoice, len(cc.Choices))}
	b.Usage.PromptTokens, b.Usage.CompletionTokens, b.Usage.TotalTokens = u.PromptTokens, u.CompletionTokens, u.TotalTokens
	b.Usage.PromptTokensDetails.CachedTokens = u.PromptTokensDetails.CachedTokens
	b.Usage.PromptTokensDetails.CacheWriteTokens = u.PromptTokensDetails.CacheWriteTokens
	for i, ch := range cc.Choices {
		c := &b.Choices[i]
		c.FinishReason, c.Message.Content = ch.FinishReason, ch.Message.Content
		for _, t := range ch.Message.ToolCalls {
			tc := streamChunkToolCall{ID: t.ID, Type: t.Type}
			tc.Function.Name, tc.Function.Arguments = t.Function.Name, t.Function.Arguments
			c.Message.ToolCalls = append(c.Message.ToolCalls, tc)
		}
	}
	return b
}
