package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/heraldhq/herald/config"
)

// bodies is a collector that keeps each request's body and headers.
type bodies struct {
	mu      sync.Mutex
	got     [][]byte
	headers []http.Header
	status  []int // answers, in order; then 200
}

func (c *bodies) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, b)
	c.headers = append(c.headers, r.Header.Clone())
	if len(c.status) > 0 {
		code := c.status[0]
		c.status = c.status[1:]
		w.WriteHeader(code)
	}
}

// testSpans has every kind of field the exporter writes: all attribute
// types, events, links, a remote parent, both status codes, two scopes and
// two resources.
func testSpans() []sdktrace.ReadOnlySpan {
	tid := trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	ts, _ := trace.ParseTraceState("herald=1,other=x")
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{9, 9}, TraceFlags: trace.FlagsSampled, Remote: true})
	linked := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{7}, TraceState: ts})
	res1 := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.43.0", attribute.String("service.name", "herald"), attribute.Int("n", 3))
	res2 := resource.NewSchemaless(attribute.String("service.name", "other"))
	at := time.Unix(1_700_000_000, 123456789)
	attrs := []attribute.KeyValue{
		attribute.String("s", "text ✓"), attribute.String("empty", ""), attribute.Bool("b", true), attribute.Bool("f", false),
		attribute.Int64("i", -42), attribute.Int64("zero", 0), attribute.Float64("x", 2.5),
		attribute.StringSlice("ss", []string{"a", ""}), attribute.BoolSlice("bs", []bool{true, false}),
		attribute.Int64Slice("is", []int64{1, -1}), attribute.Float64Slice("fs", []float64{0.5}),
		{Key: "missing"},
	}
	stubs := tracetest.SpanStubs{
		{Name: "herald.turn", SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, TraceState: ts}),
			Parent: parent, SpanKind: trace.SpanKindServer, StartTime: at, EndTime: at.Add(time.Second), Attributes: attrs,
			Events: []sdktrace.Event{{Name: "ev", Time: at.Add(time.Millisecond), Attributes: attrs[:3], DroppedAttributeCount: 2}, {Name: "bare"}},
			Links:  []sdktrace.Link{{SpanContext: linked, Attributes: attrs[4:6], DroppedAttributeCount: 1}},
			Status: sdktrace.Status{Code: codes.Error, Description: "it broke"}, DroppedAttributes: 1, DroppedEvents: 2, DroppedLinks: 3,
			Resource: res1, InstrumentationScope: instrumentation.Scope{Name: scope, Version: "v1", SchemaURL: "https://s", Attributes: attribute.NewSet(attribute.String("k", "v"))}},
		{Name: "chat m", SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{2}}),
			Parent: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1}}), SpanKind: trace.SpanKindClient,
			StartTime: at, EndTime: at, Status: sdktrace.Status{Code: codes.Ok}, Resource: res1, InstrumentationScope: instrumentation.Scope{Name: scope, Version: "v1", SchemaURL: "https://s", Attributes: attribute.NewSet(attribute.String("k", "v"))}},
		{Name: "other scope", SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{3}}), Resource: res1},
		{Name: "other resource", SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{4}}),
			SpanKind: trace.SpanKindInternal, Resource: res2, InstrumentationScope: instrumentation.Scope{Name: "x"}},
	}
	return stubs.Snapshots()
}

// TestOTLPMatchesOtlptracehttp: the request Herald's exporter posts
// decodes to the same ExportTraceServiceRequest as OpenTelemetry's own
// OTLP/HTTP exporter's for the same spans (so collectors see no change),
// with the same path, content type and headers.
func TestOTLPMatchesOtlptracehttp(t *testing.T) {
	ours, theirs := &bodies{}, &bodies{}
	srvOurs, srvTheirs := httptest.NewServer(http.HandlerFunc(ours.serve)), httptest.NewServer(http.HandlerFunc(theirs.serve))
	defer srvOurs.Close()
	defer srvTheirs.Close()

	exp, err := newOTLP(config.OTLP{Endpoint: srvOurs.URL + "/base/", Headers: map[string]config.Secret{"Authorization": "Bearer t"}})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpoint(strings.TrimPrefix(srvTheirs.URL, "http://")),
		otlptracehttp.WithURLPath("/base/v1/traces"), otlptracehttp.WithInsecure(), otlptracehttp.WithHeaders(map[string]string{"Authorization": "Bearer t"}))
	if err != nil {
		t.Fatal(err)
	}
	spans := testSpans()
	for _, e := range []sdktrace.SpanExporter{exp, ref} {
		if err := e.ExportSpans(context.Background(), spans); err != nil {
			t.Fatal(err)
		}
		if err := e.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if len(ours.got) != 1 || len(theirs.got) != 1 {
		t.Fatalf("requests: ours %d, otlptracehttp %d; want 1 each", len(ours.got), len(theirs.got))
	}
	var a, b collectorpb.ExportTraceServiceRequest
	if err := proto.Unmarshal(ours.got[0], &a); err != nil {
		t.Fatalf("our request does not decode: %v", err)
	}
	if err := proto.Unmarshal(theirs.got[0], &b); err != nil {
		t.Fatal(err)
	}
	// otlptracehttp orders resources by map iteration.
	if len(a.ResourceSpans) != 2 || len(b.ResourceSpans) != 2 {
		t.Fatalf("resource spans: ours %d, theirs %d; want 2", len(a.ResourceSpans), len(b.ResourceSpans))
	}
	if !proto.Equal(a.ResourceSpans[0], b.ResourceSpans[0]) {
		a.ResourceSpans[0], a.ResourceSpans[1] = a.ResourceSpans[1], a.ResourceSpans[0]
	}
	if !proto.Equal(&a, &b) {
		t.Errorf("requests differ:\nours:   %v\ntheirs: %v", &a, &b)
	}
	for _, h := range []string{"Content-Type", "Authorization"} {
		if g, w := ours.headers[0].Get(h), theirs.headers[0].Get(h); g != w {
			t.Errorf("header %s = %q, otlptracehttp sends %q", h, g, w)
		}
	}
}

// TestOTLPRetries: a 503 is retried (after Retry-After), a 400 is not,
// and nothing is sent after Shutdown.
func TestOTLPRetries(t *testing.T) {
	c := &bodies{status: []int{http.StatusServiceUnavailable, http.StatusBadRequest}}
	srv := httptest.NewServer(http.HandlerFunc(c.serve))
	defer srv.Close()
	exp, err := newOTLP(config.OTLP{Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	spans := testSpans()[:1]
	err = exp.ExportSpans(context.Background(), spans)
	if err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("export = %v, want the 400 after one retried 503", err)
	}
	if err := exp.ExportSpans(context.Background(), spans); err != nil {
		t.Fatalf("export after the collector recovered: %v", err)
	}
	_ = exp.Shutdown(context.Background())
	if err := exp.ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	if len(c.got) != 3 {
		t.Errorf("requests = %d, want 3 (503, 400, 200; none after Shutdown)", len(c.got))
	}
}
