// Package telemetry is Herald's OpenTelemetry tracing (SPEC §22): the
// tracer built from the telemetry config (OTLP over HTTP, a JSON-lines
// file, sampling), the W3C trace context that rows of the store carry so a
// message's trace goes on across restarts and replicas, and the span names
// and attribute keys every package uses.
//
// With neither an OTLP endpoint nor a traces file configured it is a no-op:
// Start returns the context unchanged and a span that records nothing. It
// must not import any Herald package but config; it never puts message text
// or a secret in a span unless recordContent is set.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/config"
)

// Span names (SPEC §22).
const (
	SpanIntake  = "herald.intake"
	SpanTurn    = "herald.turn"
	SpanRun     = "herald.run"
	SpanDeliver = "herald.deliver"
)

// ChatSpan is the name of a model call's span: "chat <model>".
func ChatSpan(model string) string { return "chat " + model }

// ToolSpan is the name of a tool call's span: "execute_tool <tool>".
func ToolSpan(tool string) string { return "execute_tool " + tool }

// scope is the instrumentation scope of Herald's spans.
const scope = "github.com/heraldhq/herald"

// maxContentChars caps an attribute that holds content (recordContent).
const maxContentChars = 16 << 10

// Options build a Tracer.
type Options struct {
	Config   config.Telemetry
	StateDir string // a relative traces.file is relative to it
	Version  string // service.version ("" = none)
	Replica  string // service.instance.id ("" = none)
	Logger   *zap.Logger
}

// Tracer starts Herald's spans. The zero value and a nil *Tracer are off.
type Tracer struct {
	on      bool
	content bool
	tracer  trace.Tracer
	sdk     *sdktrace.TracerProvider
	file    *FileExporter
}

var offTracer = &Tracer{tracer: noop.NewTracerProvider().Tracer(scope)}

// Off is a Tracer that records nothing.
func Off() *Tracer { return offTracer }

// New builds the Tracer the config asks for: Off when neither
// telemetry.otlp.endpoint nor telemetry.traces.file is set. Spans go to
// the collector in batches (a bounded queue: spans are dropped, never
// waited for, when the collector is slow) and to the file as each ends.
func New(o Options) (*Tracer, error) {
	c := o.Config
	if !c.TracingEnabled() {
		return Off(), nil
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	log := o.Logger.Named("telemetry")
	attrs := []attribute.KeyValue{semconv.ServiceName(c.ServiceName)}
	if o.Version != "" {
		attrs = append(attrs, semconv.ServiceVersion(o.Version))
	}
	if o.Replica != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(o.Replica))
	}
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL, attrs...))
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.Ratio()))),
	}
	t := &Tracer{on: true, content: c.RecordContent}
	if c.OTLP.Endpoint != "" {
		exp, err := newOTLP(c.OTLP)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sdktrace.WithBatcher(&loggedExporter{SpanExporter: exp, log: log, endpoint: c.OTLP.Endpoint}))
	}
	if c.Traces.File != "" {
		path := c.Traces.File
		if !filepath.IsAbs(path) && o.StateDir != "" {
			path = filepath.Join(o.StateDir, path)
		}
		f, err := OpenFile(path)
		if err != nil {
			if t.sdk != nil {
				_ = t.sdk.Shutdown(context.Background())
			}
			return nil, fmt.Errorf("telemetry.traces.file: %w", err)
		}
		t.file = f
		// Each span is written as it ends, so a crash loses none of the
		// spans that ended before it.
		opts = append(opts, sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(f)))
	}
	t.sdk = sdktrace.NewTracerProvider(opts...)
	t.tracer = t.sdk.Tracer(scope)
	log.Info("tracing on", zap.String("otlpEndpoint", c.OTLP.Endpoint), zap.Int("otlpHeaders", len(c.OTLP.Headers)),
		zap.String("file", c.Traces.File), zap.Float64("sampleRatio", c.Ratio()), zap.Bool("recordContent", c.RecordContent))
	return t, nil
}

// newOTLP is the OTLP/HTTP exporter of endpoint: spans are posted to
// <endpoint>/v1/traces (an endpoint already ending in /v1/traces is kept).
func newOTLP(c config.OTLP) (sdktrace.SpanExporter, error) {
	u, err := url.Parse(c.Endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("telemetry.otlp.endpoint %q is not an http(s) URL", c.Endpoint)
	}
	if !strings.HasSuffix(u.Path, "/v1/traces") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	}
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	h := make(map[string]string, len(c.Headers))
	for k, v := range c.Headers {
		h[k] = v.Value()
	}
	// Nothing connects before the first export.
	return &otlpExporter{url: u.String(), headers: h, client: &http.Client{Timeout: otlpTimeout}}, nil
}

// loggedExporter reports failed exports in Herald's log (at most one line
// a minute), instead of OpenTelemetry's global error handler. The error
// names the endpoint, never the headers.
type loggedExporter struct {
	sdktrace.SpanExporter
	log      *zap.Logger
	endpoint string

	mu     sync.Mutex
	last   time.Time
	failed int
}

func (e *loggedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err == nil {
		return nil
	}
	e.mu.Lock()
	e.failed += len(spans)
	if time.Since(e.last) >= time.Minute {
		e.log.Warn("could not export spans to the collector; they are dropped", zap.String("endpoint", e.endpoint),
			zap.Int("spans", e.failed), zap.Error(err))
		e.last, e.failed = time.Now(), 0
	}
	e.mu.Unlock()
	return nil
}

// Enabled reports whether spans are exported anywhere.
func (t *Tracer) Enabled() bool { return t != nil && t.on }

// RecordContent reports whether content (message text, tool arguments and
// results, model output) may go in attributes.
func (t *Tracer) RecordContent() bool { return t != nil && t.content }

// Start starts a span as a child of the span in ctx (or of the remote
// parent Extract put there). Off, it returns ctx and a span that records
// nothing, without allocating.
func (t *Tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t == nil || !t.on {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return t.tracer.Start(ctx, name, opts...)
}

// Content returns s cut to the content cap, for an attribute that holds
// content; the caller checks RecordContent first.
func Content(s string) string {
	if len(s) <= maxContentChars {
		return s
	}
	cut := maxContentChars
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// Shutdown exports the spans still queued and closes the exporters and the
// file, within ctx.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil || t.sdk == nil {
		return nil
	}
	err := t.sdk.Shutdown(ctx)
	if t.file != nil {
		err = errors.Join(err, t.file.Close())
	}
	return err
}

type tracerKey struct{}

// WithTracer returns ctx carrying t: code deep in a call (the model loop,
// tool calls) starts its spans with From(ctx).
func WithTracer(ctx context.Context, t *Tracer) context.Context {
	if !t.Enabled() {
		return ctx
	}
	return context.WithValue(ctx, tracerKey{}, t)
}

// From returns the Tracer WithTracer put in ctx, or Off.
func From(ctx context.Context) *Tracer {
	if t, ok := ctx.Value(tracerKey{}).(*Tracer); ok {
		return t
	}
	return offTracer
}
