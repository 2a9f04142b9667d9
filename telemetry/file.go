package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// FileSpan is one line of the traces file (SPEC §22).
type FileSpan struct {
	TraceID      string         `json:"traceId"`
	SpanID       string         `json:"spanId"`
	ParentSpanID string         `json:"parentSpanId"` // "" for a trace's first span
	Name         string         `json:"name"`
	Start        time.Time      `json:"start"`
	End          time.Time      `json:"end"`
	Attributes   map[string]any `json:"attributes"`
	// Links name other spans this one follows from (a run resumed by
	// another process links the span that spawned it).
	Links []FileLink `json:"links,omitempty"`
	// Status is "error" (with StatusMessage) for a failed operation.
	Status        string `json:"status,omitempty"`
	StatusMessage string `json:"statusMessage,omitempty"`
}

// FileLink is a link of a FileSpan.
type FileLink struct {
	TraceID string `json:"traceId"`
	SpanID  string `json:"spanId"`
}

// FileExporter writes spans as JSON lines, one span a line, appended to a
// file (created 0600: with recordContent it holds message text).
type FileExporter struct {
	mu  sync.Mutex
	f   *os.File // nil once closed
	buf bytes.Buffer
}

// OpenFile opens (or creates) path for appending spans; its directory is
// created when missing.
func OpenFile(path string) (*FileExporter, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	return &FileExporter{f: f}, nil
}

// ExportSpans appends one line per span with one write.
func (e *FileExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f == nil {
		return nil
	}
	e.buf.Reset()
	enc := json.NewEncoder(&e.buf)
	enc.SetEscapeHTML(false)
	for _, s := range spans {
		if err := enc.Encode(fileSpan(s)); err != nil {
			return fmt.Errorf("traces file: %w", err)
		}
	}
	if _, err := e.f.Write(e.buf.Bytes()); err != nil {
		return fmt.Errorf("traces file %s: %w", e.f.Name(), err)
	}
	return nil
}

// Shutdown is a no-op: Close closes the file after the provider stopped.
func (e *FileExporter) Shutdown(context.Context) error { return nil }

// Close closes the file; later exports write nothing.
func (e *FileExporter) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f == nil {
		return nil
	}
	err := e.f.Close()
	e.f = nil
	return err
}

func fileSpan(s sdktrace.ReadOnlySpan) FileSpan {
	sc := s.SpanContext()
	fs := FileSpan{TraceID: sc.TraceID().String(), SpanID: sc.SpanID().String(), Name: s.Name(),
		Start: s.StartTime().UTC(), End: s.EndTime().UTC(), Attributes: make(map[string]any, len(s.Attributes()))}
	if p := s.Parent(); p.IsValid() {
		fs.ParentSpanID = p.SpanID().String()
	}
	for _, kv := range s.Attributes() {
		fs.Attributes[string(kv.Key)] = attrValue(kv.Value)
	}
	for _, l := range s.Links() {
		fs.Links = append(fs.Links, FileLink{TraceID: l.SpanContext.TraceID().String(), SpanID: l.SpanContext.SpanID().String()})
	}
	if st := s.Status(); st.Code == codes.Error {
		fs.Status, fs.StatusMessage = "error", st.Description
	}
	return fs
}

func attrValue(v attribute.Value) any {
	switch v.Type() {
	case attribute.BOOL:
		return v.AsBool()
	case attribute.INT64:
		return v.AsInt64()
	case attribute.FLOAT64:
		return v.AsFloat64()
	case attribute.STRING:
		return v.AsString()
	case attribute.BOOLSLICE:
		return v.AsBoolSlice()
	case attribute.INT64SLICE:
		return v.AsInt64Slice()
	case attribute.FLOAT64SLICE:
		return v.AsFloat64Slice()
	case attribute.STRINGSLICE:
		return v.AsStringSlice()
	}
	return v.Emit()
}

// ReadFile reads a traces file's spans (tests, a look without a collector).
func ReadFile(path string) ([]FileSpan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []FileSpan
	for i, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var s FileSpan
		if err := json.Unmarshal(line, &s); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		out = append(out, s)
	}
	return out, nil
}
