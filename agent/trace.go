package agent

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldhq/herald/telemetry"
)

// Spans of the model loop (SPEC §22): "chat <model>" per model call with
// the GenAI semantic conventions, "execute_tool <tool>" per tool call.
// They are started with the Tracer in ctx (telemetry.WithTracer); without
// one they cost nothing. Content goes in only with recordContent.

// genAIProvider is gen_ai.provider.name of a model's API.
func genAIProvider(api string) string {
	switch api {
	case "anthropic":
		return "anthropic"
	case "openai", "openai-compatible":
		return "openai"
	case "":
		return "unknown"
	}
	return "herald." + api
}

func startChatSpan(ctx context.Context, m *Model, req *Request) (context.Context, trace.Span) {
	tr := telemetry.From(ctx)
	ctx, span := tr.Start(ctx, telemetry.ChatSpan(m.ID), trace.WithSpanKind(trace.SpanKindClient))
	if !span.IsRecording() {
		return ctx, span
	}
	prov := genAIProvider(m.API)
	attrs := []attribute.KeyValue{
		telemetry.GenAIOperation.String("chat"),
		telemetry.GenAIProvider.String(prov),
		telemetry.AttrGenAISystem.String(prov),
		telemetry.GenAIRequestModel.String(m.ID),
	}
	if req.MaxTokens > 0 {
		attrs = append(attrs, telemetry.GenAIMaxTokens.Int(req.MaxTokens))
	}
	if tr.RecordContent() {
		attrs = append(attrs, telemetry.AttrInput.String(telemetry.Content(messagesJSON(req.Messages))))
	}
	span.SetAttributes(attrs...)
	return ctx, span
}

func endChatSpan(ctx context.Context, span trace.Span, resp *Response, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(telemetry.ErrorType.String(errorType(err)))
		span.End()
		return
	}
	if resp != nil {
		attrs := []attribute.KeyValue{
			telemetry.GenAIInputTokens.Int64(resp.Usage.Input),
			telemetry.GenAIOutputTokens.Int64(resp.Usage.Output),
		}
		if resp.Model != "" {
			attrs = append(attrs, telemetry.GenAIResponseModel.String(resp.Model))
		}
		if resp.StopReason != "" {
			attrs = append(attrs, telemetry.GenAIFinishReasons.StringSlice([]string{resp.StopReason}))
		}
		if resp.Usage.CacheRead > 0 {
			attrs = append(attrs, telemetry.GenAICacheRead.Int64(resp.Usage.CacheRead))
		}
		if resp.Usage.CacheWrite > 0 {
			attrs = append(attrs, telemetry.GenAICacheWrite.Int64(resp.Usage.CacheWrite))
		}
		if telemetry.From(ctx).RecordContent() {
			attrs = append(attrs, telemetry.AttrOutput.String(telemetry.Content(messagesJSON([]Message{{Role: RoleAssistant, Text: resp.Text, ToolCalls: resp.ToolCalls}}))))
		}
		span.SetAttributes(attrs...)
	}
	span.End()
}

// errorType is error.type of a failed model call: the HTTP status, or
// "context_length", "canceled", "timeout", "error".
func errorType(err error) string {
	switch {
	case errors.Is(err, ErrContextLength):
		return "context_length"
	case strings.Contains(err.Error(), "context canceled"):
		return "canceled"
	case strings.Contains(err.Error(), "deadline exceeded"):
		return "timeout"
	}
	if pe := (*ProviderError)(nil); errors.As(err, &pe) && pe.StatusCode != 0 {
		return strconv.Itoa(pe.StatusCode)
	}
	return "error"
}

func startToolSpan(ctx context.Context, call ToolCall, args json.RawMessage) (context.Context, trace.Span) {
	tr := telemetry.From(ctx)
	ctx, span := tr.Start(ctx, telemetry.ToolSpan(call.Name), trace.WithSpanKind(trace.SpanKindInternal))
	if !span.IsRecording() {
		return ctx, span
	}
	attrs := []attribute.KeyValue{
		telemetry.GenAIOperation.String("execute_tool"),
		telemetry.GenAIToolName.String(call.Name),
		telemetry.GenAIToolType.String("function"),
	}
	if call.ID != "" {
		attrs = append(attrs, telemetry.GenAIToolCallID.String(call.ID))
	}
	if tr.RecordContent() {
		attrs = append(attrs, telemetry.AttrToolArgs.String(telemetry.Content(string(args))))
	}
	span.SetAttributes(attrs...)
	return ctx, span
}

func endToolSpan(ctx context.Context, span trace.Span, r ToolResult) {
	if span.IsRecording() {
		if r.IsError {
			// The message may quote the call's arguments: not in the status.
			span.SetStatus(codes.Error, "the tool returned an error")
			span.SetAttributes(telemetry.ErrorType.String("tool_error"))
		}
		if telemetry.From(ctx).RecordContent() {
			span.SetAttributes(telemetry.AttrToolResult.String(telemetry.Content(r.Content)))
		}
	}
	span.End()
}

// messagesJSON renders messages in the GenAI conventions' shape
// ([{role, parts: [{type, content | name, id, arguments | response}]}]).
func messagesJSON(msgs []Message) string {
	type part struct {
		Type      string          `json:"type"`
		Content   string          `json:"content,omitempty"`
		ID        string          `json:"id,omitempty"`
		Name      string          `json:"name,omitempty"`
		Arguments json.RawMessage `json:"arguments,omitempty"`
		Response  string          `json:"response,omitempty"`
	}
	type msg struct {
		Role  string `json:"role"`
		Parts []part `json:"parts"`
	}
	out := make([]msg, 0, len(msgs))
	for _, m := range msgs {
		x := msg{Role: string(m.Role)}
		if m.Text != "" {
			x.Parts = append(x.Parts, part{Type: "text", Content: m.Text})
		}
		for _, c := range m.ToolCalls {
			x.Parts = append(x.Parts, part{Type: "tool_call", ID: c.ID, Name: c.Name, Arguments: c.Args})
		}
		for _, r := range m.ToolResults {
			x.Parts = append(x.Parts, part{Type: "tool_call_response", ID: r.CallID, Response: r.Content})
		}
		out = append(out, x)
	}
	b, _ := json.Marshal(out)
	return string(b)
}
