package telemetry

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// otlpExporter posts spans to an OTLP/HTTP collector as the binary
// protobuf ExportTraceServiceRequest (opentelemetry-proto
// collector/trace/v1), written field by field with protowire.
//
// It replaces OpenTelemetry's otlptracehttp, which links the generated
// OTLP types and through them gRPC, golang.org/x/net/trace and
// html/template into the binary: their package initialisation ran on every
// start, and html/template's reflective method calls kept every exported
// method of every linked type (the LLM SDKs' most of all) in the binary,
// 15 MB of text, whether tracing was configured or not.
// TestOTLPMatchesOtlptracehttp holds the bytes equal to otlptracehttp's.
type otlpExporter struct {
	url     string
	headers map[string]string
	client  *http.Client
	stopped atomic.Bool
}

// otlpTimeout bounds one export, retries included.
const otlpTimeout = 10 * time.Second

func (e *otlpExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.stopped.Load() || len(spans) == 0 {
		return nil
	}
	body := encodeSpans(spans)
	ctx, cancel := context.WithTimeout(ctx, otlpTimeout)
	defer cancel()
	// 429 and 502–504 are retried (the OTLP/HTTP spec), after Retry-After
	// when the collector names one, else 0.5 s, 1 s, …, within the timeout.
	wait := 500 * time.Millisecond
	for {
		retry, err := e.post(ctx, body)
		if err == nil || retry <= 0 {
			return err
		}
		if retry == time.Duration(math.MaxInt64) {
			retry = wait
			wait *= 2
		}
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (then %w)", err, ctx.Err())
		case <-t.C:
		}
	}
}

// post sends one request. retry > 0 says the error is worth retrying
// after that long (MaxInt64: after the exporter's own backoff).
func (e *otlpExporter) post(ctx context.Context, body []byte) (retry time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	for k, v := range e.headers {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return time.Duration(math.MaxInt64), fmt.Errorf("post spans to %s: %w", e.url, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	switch {
	case resp.StatusCode/100 == 2:
		return 0, nil
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusBadGateway,
		resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusGatewayTimeout:
		retry = time.Duration(math.MaxInt64)
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			retry = time.Duration(s) * time.Second
		}
	}
	return retry, fmt.Errorf("post spans to %s: %s: %s", e.url, resp.Status, bytes.TrimSpace(msg))
}

func (e *otlpExporter) Shutdown(context.Context) error {
	e.stopped.Store(true)
	e.client.CloseIdleConnections()
	return nil
}

// encodeSpans is the ExportTraceServiceRequest of spans: one
// ResourceSpans per resource, in it one ScopeSpans per instrumentation
// scope, in the order they first appear.
func encodeSpans(spans []sdktrace.ReadOnlySpan) []byte {
	type scopeKey struct {
		r  attribute.Distinct
		is instrumentation.Scope
	}
	type group struct {
		res    *resource.Resource
		scopes []scopeKey
	}
	var (
		order  []attribute.Distinct
		groups = map[attribute.Distinct]*group{}
		bySc   = map[scopeKey][]sdktrace.ReadOnlySpan{}
	)
	for _, s := range spans {
		if s == nil {
			continue
		}
		rk := s.Resource().Equivalent()
		g, ok := groups[rk]
		if !ok {
			g = &group{res: s.Resource()}
			groups[rk] = g
			order = append(order, rk)
		}
		k := scopeKey{rk, s.InstrumentationScope()}
		if _, ok := bySc[k]; !ok {
			g.scopes = append(g.scopes, k)
		}
		bySc[k] = append(bySc[k], s)
	}
	var out []byte
	for _, rk := range order {
		g := groups[rk]
		out = appendMsg(out, 1, func(b []byte) []byte { // ResourceSpans
			if g.res != nil {
				b = appendMsg(b, 1, func(b []byte) []byte { // Resource
					return appendKeyValues(b, 1, g.res.Attributes())
				})
			}
			for _, k := range g.scopes {
				b = appendMsg(b, 2, func(b []byte) []byte { // ScopeSpans
					if k.is != (instrumentation.Scope{}) {
						b = appendMsg(b, 1, func(b []byte) []byte { // InstrumentationScope
							b = appendString(b, 1, k.is.Name)
							b = appendString(b, 2, k.is.Version)
							return appendKeyValues(b, 3, k.is.Attributes.ToSlice())
						})
					}
					for _, s := range bySc[k] {
						b = appendMsg(b, 2, func(b []byte) []byte { return appendSpan(b, s) })
					}
					return appendString(b, 3, k.is.SchemaURL)
				})
			}
			if g.res != nil {
				b = appendString(b, 3, g.res.SchemaURL())
			}
			return b
		})
	}
	return out
}

// appendSpan writes the fields of one Span message.
func appendSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = appendBytes(b, 1, tid[:])
	b = appendBytes(b, 2, sid[:])
	b = appendString(b, 3, sc.TraceState().String())
	if p := s.Parent().SpanID(); p.IsValid() {
		b = appendBytes(b, 4, p[:])
	}
	b = appendString(b, 5, s.Name())
	b = appendVarint(b, 6, uint64(s.SpanKind()))
	b = appendFixed64(b, 7, unixNano(s.StartTime()))
	b = appendFixed64(b, 8, unixNano(s.EndTime()))
	b = appendKeyValues(b, 9, s.Attributes())
	b = appendVarint(b, 10, clampUint32(s.DroppedAttributes()))
	for _, ev := range s.Events() {
		b = appendMsg(b, 11, func(b []byte) []byte {
			b = appendFixed64(b, 1, unixNano(ev.Time))
			b = appendString(b, 2, ev.Name)
			b = appendKeyValues(b, 3, ev.Attributes)
			return appendVarint(b, 4, clampUint32(ev.DroppedAttributeCount))
		})
	}
	b = appendVarint(b, 12, clampUint32(s.DroppedEvents()))
	for _, l := range s.Links() {
		b = appendMsg(b, 13, func(b []byte) []byte {
			tid, sid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
			b = appendBytes(b, 1, tid[:])
			b = appendBytes(b, 2, sid[:])
			// No trace_state (3): otlptracehttp sends none for links.
			b = appendKeyValues(b, 4, l.Attributes)
			b = appendVarint(b, 5, clampUint32(l.DroppedAttributeCount))
			return appendFixed32(b, 6, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
		})
	}
	b = appendVarint(b, 14, clampUint32(s.DroppedLinks()))
	st := s.Status()
	b = appendMsg(b, 15, func(b []byte) []byte { // Status, always present
		b = appendString(b, 2, st.Description)
		code := uint64(0) // STATUS_CODE_UNSET
		switch st.Code {
		case codes.Ok:
			code = 1
		case codes.Error:
			code = 2
		}
		return appendVarint(b, 3, code)
	})
	return appendFixed32(b, 16, spanFlags(sc.TraceFlags(), s.Parent()))
}

// spanFlags: the W3C trace flags, "whether the parent is remote is
// known" (0x100) and "the parent is remote" (0x200).
func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | 0x100
	if parent.IsRemote() {
		f |= 0x200
	}
	return f
}

func appendKeyValues(b []byte, num protowire.Number, kvs []attribute.KeyValue) []byte {
	for _, kv := range kvs {
		b = appendMsg(b, num, func(b []byte) []byte {
			b = appendString(b, 1, string(kv.Key))
			return appendMsg(b, 2, func(b []byte) []byte { return appendAnyValue(b, kv.Value) })
		})
	}
	return b
}

// appendAnyValue writes the fields of an AnyValue.
func appendAnyValue(b []byte, v attribute.Value) []byte {
	array := func(n int, each func(b []byte, i int) []byte) []byte {
		return appendMsg(b, 5, func(b []byte) []byte { // ArrayValue
			for i := range n {
				b = appendMsg(b, 1, func(b []byte) []byte { return each(b, i) })
			}
			return b
		})
	}
	// Oneof members are written even when zero: their presence is the value.
	switch v.Type() {
	case attribute.STRING:
		return protowire.AppendString(protowire.AppendTag(b, 1, protowire.BytesType), v.AsString())
	case attribute.BOOL:
		return protowire.AppendVarint(protowire.AppendTag(b, 2, protowire.VarintType), protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		return protowire.AppendVarint(protowire.AppendTag(b, 3, protowire.VarintType), uint64(v.AsInt64()))
	case attribute.FLOAT64:
		return protowire.AppendFixed64(protowire.AppendTag(b, 4, protowire.Fixed64Type), math.Float64bits(v.AsFloat64()))
	case attribute.BYTESLICE:
		return protowire.AppendBytes(protowire.AppendTag(b, 7, protowire.BytesType), v.AsByteSlice())
	case attribute.STRINGSLICE:
		s := v.AsStringSlice()
		return array(len(s), func(b []byte, i int) []byte { return appendAnyValue(b, attribute.StringValue(s[i])) })
	case attribute.BOOLSLICE:
		s := v.AsBoolSlice()
		return array(len(s), func(b []byte, i int) []byte { return appendAnyValue(b, attribute.BoolValue(s[i])) })
	case attribute.INT64SLICE:
		s := v.AsInt64Slice()
		return array(len(s), func(b []byte, i int) []byte { return appendAnyValue(b, attribute.Int64Value(s[i])) })
	case attribute.FLOAT64SLICE:
		s := v.AsFloat64Slice()
		return array(len(s), func(b []byte, i int) []byte { return appendAnyValue(b, attribute.Float64Value(s[i])) })
	case attribute.SLICE:
		s := v.AsSlice()
		return array(len(s), func(b []byte, i int) []byte { return appendAnyValue(b, s[i]) })
	case attribute.MAP:
		return appendMsg(b, 6, func(b []byte) []byte { return appendKeyValues(b, 1, v.AsMap()) })
	case attribute.EMPTY:
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, 1, protowire.BytesType), "INVALID")
}

// appendMsg writes a length-delimited sub-message whose fields fill adds.
func appendMsg(b []byte, num protowire.Number, fill func([]byte) []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), fill(nil))
}

// The scalar writers leave out a zero value (proto3 has no presence for them).
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

func appendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendFixed64(protowire.AppendTag(b, num, protowire.Fixed64Type), v)
}

func appendFixed32(b []byte, num protowire.Number, v uint32) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendFixed32(protowire.AppendTag(b, num, protowire.Fixed32Type), v)
}

func unixNano(t time.Time) uint64 { return uint64(max(0, t.UnixNano())) }

func clampUint32(v int) uint64 { return uint64(min(max(v, 0), math.MaxUint32)) }
