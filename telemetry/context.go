package telemetry

import (
	"context"
	"encoding/hex"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Traceparent is the W3C traceparent of the span in ctx
// ("00-<trace id>-<span id>-<flags>"), or "" when ctx holds no valid span
// (tracing is off). A row stores it so that the work it stands for, done
// later, after a restart or on another replica, continues the trace.
func Traceparent(ctx context.Context) string {
	return FormatTraceparent(trace.SpanContextFromContext(ctx))
}

// FormatTraceparent is the W3C traceparent of sc ("" when sc is invalid).
func FormatTraceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	var b [55]byte
	tid, sid := sc.TraceID(), sc.SpanID()
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags())})
	return string(b[:])
}

// ParseTraceparent reads a W3C traceparent as a remote span context; ok is
// false for "" or a malformed value.
func ParseTraceparent(tp string) (sc trace.SpanContext, ok bool) {
	if len(tp) != 55 || tp[:3] != "00-" || tp[35] != '-' || tp[52] != '-' {
		return trace.SpanContext{}, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	var flags [1]byte
	if _, err := hex.Decode(tid[:], []byte(tp[3:35])); err != nil {
		return trace.SpanContext{}, false
	}
	if _, err := hex.Decode(sid[:], []byte(tp[36:52])); err != nil {
		return trace.SpanContext{}, false
	}
	if _, err := hex.Decode(flags[:], []byte(tp[53:55])); err != nil {
		return trace.SpanContext{}, false
	}
	sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true})
	return sc, sc.IsValid()
}

// Resume returns ctx whose parent span is the one tp names (stored with a
// row), so a span started from it continues that trace; ctx itself when tp
// is "" or malformed (a row from before tracing, or tracing off).
func Resume(ctx context.Context, tp string) context.Context {
	sc, ok := ParseTraceparent(tp)
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// TraceID is the trace id of a traceparent ("" when there is none).
func TraceID(tp string) string {
	if len(tp) != 55 {
		return ""
	}
	return tp[3:35]
}

// LogField is the "traceId" field of log lines about a traced message;
// zap.Skip() when tp holds none.
func LogField(tp string) zap.Field {
	if id := TraceID(tp); id != "" {
		return zap.String("traceId", id)
	}
	return zap.Skip()
}

// SpanLogField is LogField of the span in ctx.
func SpanLogField(ctx context.Context) zap.Field {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return zap.Skip()
	}
	return zap.String("traceId", sc.TraceID().String())
}
