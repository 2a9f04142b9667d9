package telemetry_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/telemetry"
	"github.com/heraldhq/herald/telemetry/otlptest"
)

func ratio(r float64) *float64 { return &r }

func newTracer(t *testing.T, c config.Telemetry) *telemetry.Tracer {
	t.Helper()
	if c.ServiceName == "" {
		c.ServiceName = "herald"
	}
	tr, err := telemetry.New(telemetry.Options{Config: c, StateDir: t.TempDir()})
	if err != nil {
		t.Fatalf("telemetry.New: %v", err)
	}
	return tr
}

// TestOTLPAndFile: the same spans reach a collector (OTLP protobuf over
// HTTP, with the configured headers) and the traces file, one trace with
// its parent links, the service name on every span.
func TestOTLPAndFile(t *testing.T) {
	rcv := otlptest.New(t)
	file := filepath.Join(t.TempDir(), "spans", "traces.jsonl")
	tr := newTracer(t, config.Telemetry{
		OTLP:        config.OTLP{Endpoint: rcv.URL, Headers: map[string]config.Secret{"X-Api-Key": "k-123"}},
		Traces:      config.Traces{File: file},
		ServiceName: "herald-test",
	})
	ctx, root := tr.Start(context.Background(), telemetry.SpanIntake, trace.WithAttributes(telemetry.AttrChannel.String("web")))
	cctx, child := tr.Start(ctx, telemetry.ChatSpan("demo"))
	_, grand := tr.Start(cctx, telemetry.ToolSpan("list_files"))
	grand.End()
	child.End()
	root.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if bad := rcv.Refused(); len(bad) > 0 {
		t.Fatalf("collector refused exports: %v", bad)
	}
	got := rcv.Spans()
	if len(got) != 3 {
		t.Fatalf("collector got %d spans, want 3: %+v", len(got), got)
	}
	byName := map[string]otlptest.Span{}
	for _, s := range got {
		byName[s.Name] = s
		if s.Service != "herald-test" {
			t.Errorf("span %s: service.name %q, want herald-test", s.Name, s.Service)
		}
	}
	in, chat, tool := byName["herald.intake"], byName["chat demo"], byName["execute_tool list_files"]
	if in.ParentSpanID != "" || chat.ParentSpanID != in.SpanID || tool.ParentSpanID != chat.SpanID {
		t.Errorf("parents: intake %q, chat %q (want %s), tool %q (want %s)", in.ParentSpanID, chat.ParentSpanID, in.SpanID, tool.ParentSpanID, chat.SpanID)
	}
	if chat.TraceID != in.TraceID || tool.TraceID != in.TraceID {
		t.Errorf("spans in different traces: %s %s %s", in.TraceID, chat.TraceID, tool.TraceID)
	}
	if in.Attributes["herald.channel"] != "web" {
		t.Errorf("intake attributes %v, want herald.channel web", in.Attributes)
	}
	for _, h := range rcv.Headers() {
		if h.Get("X-Api-Key") != "k-123" {
			t.Errorf("export without the configured header: %v", h)
		}
	}

	lines, err := telemetry.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 3 {
		t.Fatalf("file has %d spans, want 3", len(lines))
	}
	for _, l := range lines {
		s, ok := byName[l.Name]
		if !ok || l.TraceID != s.TraceID || l.SpanID != s.SpanID || l.ParentSpanID != s.ParentSpanID {
			t.Errorf("file span %+v differs from the collector's %+v", l, s)
		}
		if l.Start.IsZero() || l.End.Before(l.Start) {
			t.Errorf("file span %s: start %v end %v", l.Name, l.Start, l.End)
		}
	}
	raw, _ := os.ReadFile(file)
	for _, key := range []string{`"traceId"`, `"spanId"`, `"parentSpanId"`, `"name"`, `"start"`, `"end"`, `"attributes"`} {
		if !strings.Contains(string(raw), key) {
			t.Errorf("file lines lack %s:\n%s", key, raw)
		}
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("traces file mode %v (%v), want 0600", fi.Mode(), err)
	}
}

// TestOffIsFree: without an endpoint or a file, New gives the no-op
// tracer: Start returns the same context, allocates nothing, and there is
// no trace context to store.
func TestOffIsFree(t *testing.T) {
	tr := newTracer(t, config.Telemetry{})
	if tr.Enabled() {
		t.Fatal("tracing on without endpoint or file")
	}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c, s := tr.Start(ctx, telemetry.SpanTurn)
		if s.IsRecording() { // as callers do: attributes only on a recording span
			s.SetAttributes(attribute.String("k", "v"))
		}
		s.End()
		if c != ctx {
			t.Fatal("Start changed the context")
		}
	})
	if allocs != 0 {
		t.Errorf("a span with tracing off allocates %v times, want 0", allocs)
	}
	if tp := telemetry.Traceparent(ctx); tp != "" {
		t.Errorf("traceparent %q with tracing off", tp)
	}
	if telemetry.From(telemetry.WithTracer(ctx, tr)).Enabled() {
		t.Error("From(WithTracer(off)) is on")
	}
}

// TestResumeContinuesTrace: a traceparent stored with a row and read by
// another process (here: another tracer) parents the spans started from
// it, in the same trace; a bad or empty one starts nothing from it.
func TestResumeContinuesTrace(t *testing.T) {
	rcv := otlptest.New(t)
	first := newTracer(t, config.Telemetry{OTLP: config.OTLP{Endpoint: rcv.URL}})
	ctx, s := first.Start(context.Background(), telemetry.SpanIntake)
	tp := telemetry.Traceparent(ctx)
	s.End()
	if err := first.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(tp) != 55 || !strings.HasSuffix(tp, "-01") {
		t.Fatalf("traceparent %q, want 00-<32 hex>-<16 hex>-01", tp)
	}
	if telemetry.TraceID(tp) != s.SpanContext().TraceID().String() {
		t.Errorf("TraceID(%q) = %q", tp, telemetry.TraceID(tp))
	}

	second := newTracer(t, config.Telemetry{OTLP: config.OTLP{Endpoint: rcv.URL}})
	_, turn := second.Start(telemetry.Resume(context.Background(), tp), telemetry.SpanTurn)
	turn.End()
	_, fresh := second.Start(telemetry.Resume(context.Background(), "00-bad"), telemetry.SpanTurn)
	fresh.End()
	if err := second.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Spans()
	if len(spans) != 3 {
		t.Fatalf("got %d spans, want 3", len(spans))
	}
	intake, resumed, other := spans[0], spans[1], spans[2]
	if resumed.TraceID != intake.TraceID || resumed.ParentSpanID != intake.SpanID {
		t.Errorf("resumed turn: trace %s parent %s, want trace %s parent %s", resumed.TraceID, resumed.ParentSpanID, intake.TraceID, intake.SpanID)
	}
	if other.TraceID == intake.TraceID || other.ParentSpanID != "" {
		t.Errorf("a malformed traceparent joined a trace: %+v", other)
	}
}

// TestSampling: at sampleRatio 0 no span is exported, yet the trace
// context exists (logs name the trace) and says "not sampled", so the
// spans resumed from it elsewhere are not exported either; at 1 a resumed
// sampled context is exported even by a tracer at 0 (parent-based).
func TestSampling(t *testing.T) {
	rcv := otlptest.New(t)
	never := newTracer(t, config.Telemetry{OTLP: config.OTLP{Endpoint: rcv.URL}, SampleRatio: ratio(0)})
	ctx, s := never.Start(context.Background(), telemetry.SpanIntake)
	tp := telemetry.Traceparent(ctx)
	s.End()
	_, child := never.Start(telemetry.Resume(context.Background(), tp), telemetry.SpanTurn)
	child.End()
	if !strings.HasSuffix(tp, "-00") || telemetry.TraceID(tp) == "" {
		t.Errorf("traceparent at ratio 0 = %q, want a trace id and flags 00", tp)
	}
	sampled := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	_, kept := never.Start(telemetry.Resume(context.Background(), sampled), telemetry.SpanTurn)
	kept.End()
	if err := never.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := rcv.Spans()
	if len(got) != 1 || got[0].TraceID != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("exported %+v, want only the span under the sampled parent", got)
	}
}

// BenchmarkSpan is the cost of one span with three attributes: off, on
// and sampled (ratio 1, exported in batches to a collector), on and not
// sampled (ratio 0), and written to the traces file. cpu-µs/span counts
// the process's CPU, the exporter's included.
func BenchmarkSpan(b *testing.B) {
	// A collector that reads and drops each export: its decoding is not
	// Herald's cost.
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer rcv.Close()
	for _, bc := range []struct {
		name string
		c    config.Telemetry
	}{
		{"off", config.Telemetry{}},
		{"ratio1", config.Telemetry{OTLP: config.OTLP{Endpoint: rcv.URL}, SampleRatio: ratio(1)}},
		{"ratio0", config.Telemetry{OTLP: config.OTLP{Endpoint: rcv.URL}, SampleRatio: ratio(0)}},
		{"file", config.Telemetry{Traces: config.Traces{File: filepath.Join(b.TempDir(), "t.jsonl")}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			bc.c.ServiceName = "herald"
			tr, err := telemetry.New(telemetry.Options{Config: bc.c})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			for b.Loop() {
				_, s := tr.Start(ctx, telemetry.SpanTurn)
				if s.IsRecording() {
					s.SetAttributes(telemetry.AttrChannel.String("web"), telemetry.AttrAgentID.String("main"), telemetry.AttrIntakeID.Int64(42))
				}
				s.End()
			}
			if err := tr.Shutdown(context.Background()); err != nil { // the export's CPU counts
				b.Fatal(err)
			}
			b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/1000/float64(b.N), "cpu-µs/span")
		})
	}
}

// cpuTime is the user+system CPU time this process has used (the
// exporter's goroutines included).
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestExportFailureLogged: a collector that cannot be reached is named in
// one warning (the endpoint, never the headers' values); spans are dropped,
// nothing waits. A traces file that cannot be opened refuses to start.
func TestExportFailureLogged(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	core, logs := observer.New(zapcore.InfoLevel)
	tr, err := telemetry.New(telemetry.Options{Logger: zap.New(core), Config: config.Telemetry{ServiceName: "herald",
		OTLP: config.OTLP{Endpoint: dead.URL, Headers: map[string]config.Secret{"Authorization": "Bearer tok-SECRET-9"}}}})
	if err != nil {
		t.Fatal(err)
	}
	_, s := tr.Start(context.Background(), telemetry.SpanIntake)
	s.End()
	_ = tr.Shutdown(context.Background())
	warned := logs.FilterMessage("could not export spans to the collector; they are dropped").All()
	if len(warned) != 1 || warned[0].ContextMap()["endpoint"] != dead.URL {
		t.Errorf("export failure lines %v, want one naming %s", warned, dead.URL)
	}
	for _, e := range logs.All() {
		if strings.Contains(fmt.Sprint(e.Message, e.ContextMap()), "SECRET") {
			t.Errorf("log line holds a header's value: %s %v", e.Message, e.ContextMap())
		}
	}

	_, err = telemetry.New(telemetry.Options{Config: config.Telemetry{ServiceName: "herald",
		Traces: config.Traces{File: "/proc/herald-cannot/traces.jsonl"}}})
	if err == nil || !strings.Contains(err.Error(), "telemetry.traces.file") {
		t.Errorf("unwritable traces file: %v, want an error naming telemetry.traces.file", err)
	}
}
