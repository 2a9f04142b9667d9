// Package prom is the part of a Prometheus client the gateway's /metrics
// uses: counters, gauges and histograms (alone or by label values), series
// read from a function at scrape time, a small Go runtime collector, and
// the text exposition format (version 0.0.4).
//
// It replaces github.com/prometheus/client_golang, whose packages (with
// procfs, expvar and the protobuf runtime under client_model) ran about
// 0.6 ms of package initialisation in every herald process, metrics
// scraped or not (docs/performance.md, "2026-11-28: start → ready").
package prom

import (
	"bufio"
	"cmp"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Collector is something a Registry reads at every scrape.
type Collector interface {
	collect(emit func(family))
}

// Opts names a series and says what it is.
type Opts struct {
	Name string
	Help string
	// ConstLabels are labels every sample of this collector carries.
	ConstLabels map[string]string
}

// Types of a family in the exposition format.
const (
	typeCounter   = "counter"
	typeGauge     = "gauge"
	typeHistogram = "histogram"
	typeSummary   = "summary"
)

// family is one collector's samples of one metric name, in groups: one
// per combination of label values (a histogram's group is its buckets, sum
// and count).
type family struct {
	name, help, typ string
	groups          [][]sample
}

// sample is one line of the exposition (suffix: _bucket, _sum, _count).
type sample struct {
	suffix string
	labels []label
	value  float64
}

type label struct{ name, value string }

// Registry holds collectors and writes their samples.
type Registry struct {
	mu sync.Mutex
	cs []Collector
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry { return &Registry{} }

// MustRegister adds cs.
func (r *Registry) MustRegister(cs ...Collector) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cs = append(r.cs, cs...)
}

// Handler serves the registry's samples in the text format.
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		bw := bufio.NewWriter(w)
		r.Write(bw)
		_ = bw.Flush()
	})
}

// Write writes every sample, families sorted by name (a name registered by
// several collectors is one family), samples by their labels.
func (r *Registry) Write(w *bufio.Writer) {
	r.mu.Lock()
	cs := slices.Clone(r.cs)
	r.mu.Unlock()
	byName := map[string]*family{}
	var names []string
	for _, c := range cs {
		c.collect(func(f family) {
			if have, ok := byName[f.name]; ok {
				have.groups = append(have.groups, f.groups...)
				return
			}
			byName[f.name] = &f
			names = append(names, f.name)
		})
	}
	slices.Sort(names)
	for _, n := range names {
		f := byName[n]
		if len(f.groups) == 0 {
			continue
		}
		slices.SortStableFunc(f.groups, func(a, b []sample) int {
			la, lb := a[0].labels, b[0].labels
			for i := range min(len(la), len(lb)) {
				if c := cmp.Compare(la[i].value, lb[i].value); c != 0 {
					return c
				}
			}
			return cmp.Compare(len(la), len(lb))
		})
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", f.name, escapeHelp(f.help), f.name, f.typ)
		for _, s := range slices.Concat(f.groups...) {
			w.WriteString(f.name)
			w.WriteString(s.suffix)
			if len(s.labels) > 0 {
				w.WriteByte('{')
				for i, l := range s.labels {
					if i > 0 {
						w.WriteByte(',')
					}
					w.WriteString(l.name)
					w.WriteString(`="`)
					w.WriteString(escapeValue(l.value))
					w.WriteByte('"')
				}
				w.WriteByte('}')
			}
			w.WriteByte(' ')
			w.WriteString(formatFloat(s.value))
			w.WriteByte('\n')
		}
	}
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	valueEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
func escapeValue(s string) string { return valueEscaper.Replace(s) }

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// sortedLabels is names paired with values, sorted by name (as Prometheus
// clients write them), with the const labels.
func sortedLabels(konst map[string]string, names, values []string) []label {
	ls := make([]label, 0, len(konst)+len(names))
	for k, v := range konst {
		ls = append(ls, label{k, v})
	}
	for i, n := range names {
		ls = append(ls, label{n, values[i]})
	}
	slices.SortFunc(ls, func(a, b label) int { return strings.Compare(a.name, b.name) })
	return ls
}

// value is a float64 updated atomically.
type value struct{ bits atomic.Uint64 }

func (v *value) add(d float64) {
	for {
		old := v.bits.Load()
		if v.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

func (v *value) set(f float64) { v.bits.Store(math.Float64bits(f)) }
func (v *value) get() float64  { return math.Float64frombits(v.bits.Load()) }

// Counter only goes up.
type Counter struct {
	v    value
	opts *Opts // set for a counter made by NewCounter
}

// Inc adds 1.
func (c *Counter) Inc() { c.v.add(1) }

// Add adds d, which must not be negative.
func (c *Counter) Add(d float64) {
	if d < 0 {
		panic("prom: a counter cannot decrease")
	}
	c.v.add(d)
}

// Gauge goes up and down.
type Gauge struct{ v value }

// Set sets the gauge to f.
func (g *Gauge) Set(f float64) { g.v.set(f) }

// Add adds d (negative: subtracts).
func (g *Gauge) Add(d float64) { g.v.add(d) }

// Histogram counts observations in buckets.
type Histogram struct {
	upper  []float64 // the buckets' upper bounds, ascending, +Inf not included
	counts []atomic.Uint64
	count  atomic.Uint64
	sum    value
}

func newHistogram(buckets []float64) *Histogram {
	return &Histogram{upper: buckets, counts: make([]atomic.Uint64, len(buckets))}
}

// Observe records v.
func (h *Histogram) Observe(v float64) {
	if i, _ := slices.BinarySearch(h.upper, v); i < len(h.upper) {
		h.counts[i].Add(1)
	}
	h.sum.add(v)
	h.count.Add(1)
}

func (h *Histogram) samples(ls []label) []sample {
	out := make([]sample, 0, len(h.upper)+3)
	var cum uint64
	for i, u := range h.upper {
		cum += h.counts[i].Load()
		out = append(out, sample{suffix: "_bucket", labels: append(slices.Clip(ls), label{"le", formatFloat(u)}), value: float64(cum)})
	}
	n := h.count.Load()
	out = append(out, sample{suffix: "_bucket", labels: append(slices.Clip(ls), label{"le", "+Inf"}), value: float64(n)},
		sample{suffix: "_sum", labels: ls, value: h.sum.get()},
		sample{suffix: "_count", labels: ls, value: float64(n)})
	return out
}

// ExponentialBuckets returns count upper bounds: start, start×factor, ….
func ExponentialBuckets(start, factor float64, count int) []float64 {
	if count < 1 || start <= 0 || factor <= 1 {
		panic("prom: ExponentialBuckets needs count ≥ 1, start > 0, factor > 1")
	}
	b := make([]float64, count)
	for i := range b {
		b[i] = start
		start *= factor
	}
	return b
}

// vec keeps one child per combination of label values.
type vec[T any] struct {
	opts   Opts
	typ    string
	labels []string
	make   func() *T
	read   func(*T, []label) []sample

	mu       sync.Mutex
	children map[string]*child[T]
}

type child[T any] struct {
	values []string
	m      *T
}

func (v *vec[T]) with(values []string) *T {
	if len(values) != len(v.labels) {
		panic(fmt.Sprintf("prom: %s takes %d label values, got %d", v.opts.Name, len(v.labels), len(values)))
	}
	key := strings.Join(values, "\xff")
	v.mu.Lock()
	defer v.mu.Unlock()
	if c, ok := v.children[key]; ok {
		return c.m
	}
	if v.children == nil {
		v.children = map[string]*child[T]{}
	}
	c := &child[T]{values: slices.Clone(values), m: v.make()}
	v.children[key] = c
	return c.m
}

func (v *vec[T]) collect(emit func(family)) {
	v.mu.Lock()
	cs := make([]*child[T], 0, len(v.children))
	for _, c := range v.children {
		cs = append(cs, c)
	}
	v.mu.Unlock()
	f := family{name: v.opts.Name, help: v.opts.Help, typ: v.typ}
	for _, c := range cs {
		f.groups = append(f.groups, v.read(c.m, sortedLabels(v.opts.ConstLabels, v.labels, c.values)))
	}
	emit(f)
}

// CounterVec is counters by label values.
type CounterVec struct{ v vec[Counter] }

// NewCounterVec returns counters with the label names given.
func NewCounterVec(o Opts, labels []string) *CounterVec {
	return &CounterVec{vec[Counter]{opts: o, typ: typeCounter, labels: labels, make: func() *Counter { return new(Counter) },
		read: func(c *Counter, ls []label) []sample { return []sample{{labels: ls, value: c.v.get()}} }}}
}

// WithLabelValues returns the counter of those values, made at 0 on first use.
func (c *CounterVec) WithLabelValues(values ...string) *Counter { return c.v.with(values) }

func (c *CounterVec) collect(emit func(family)) { c.v.collect(emit) }

// GaugeVec is gauges by label values.
type GaugeVec struct{ v vec[Gauge] }

// NewGaugeVec returns gauges with the label names given.
func NewGaugeVec(o Opts, labels []string) *GaugeVec {
	return &GaugeVec{vec[Gauge]{opts: o, typ: typeGauge, labels: labels, make: func() *Gauge { return new(Gauge) },
		read: func(g *Gauge, ls []label) []sample { return []sample{{labels: ls, value: g.v.get()}} }}}
}

// WithLabelValues returns the gauge of those values, made at 0 on first use.
func (g *GaugeVec) WithLabelValues(values ...string) *Gauge { return g.v.with(values) }

func (g *GaugeVec) collect(emit func(family)) { g.v.collect(emit) }

// HistogramVec is histograms by label values, all with the same buckets.
type HistogramVec struct{ v vec[Histogram] }

// NewHistogramVec returns histograms with the buckets' upper bounds
// (ascending) and the label names given.
func NewHistogramVec(o Opts, buckets []float64, labels []string) *HistogramVec {
	if !slices.IsSorted(buckets) {
		panic("prom: " + o.Name + ": buckets must be ascending")
	}
	return &HistogramVec{vec[Histogram]{opts: o, typ: typeHistogram, labels: labels,
		make: func() *Histogram { return newHistogram(buckets) }, read: (*Histogram).samples}}
}

// WithLabelValues returns the histogram of those values, made empty on first use.
func (h *HistogramVec) WithLabelValues(values ...string) *Histogram { return h.v.with(values) }

func (h *HistogramVec) collect(emit func(family)) { h.v.collect(emit) }

// NewCounter returns a counter without labels (but o.ConstLabels), a
// Collector of its own.
func NewCounter(o Opts) *Counter { return &Counter{opts: &o} }

func (c *Counter) collect(emit func(family)) {
	if c.opts == nil {
		return // a child of a CounterVec: the vec writes it
	}
	emit(family{name: c.opts.Name, help: c.opts.Help, typ: typeCounter,
		groups: [][]sample{{{labels: sortedLabels(c.opts.ConstLabels, nil, nil), value: c.v.get()}}}})
}

// Func is a series whose samples are read from a function at every scrape.
type Func struct {
	opts   Opts
	typ    string
	labels []string
	read   func(emit func(v float64, labelValues ...string))
}

// NewGaugeFunc returns a gauge without labels (but o.ConstLabels) whose
// value is f's at every scrape.
func NewGaugeFunc(o Opts, f func() float64) *Func {
	return &Func{opts: o, typ: typeGauge, read: func(emit func(float64, ...string)) { emit(f()) }}
}

// NewCounterFunc is NewGaugeFunc for a counter.
func NewCounterFunc(o Opts, f func() float64) *Func {
	return &Func{opts: o, typ: typeCounter, read: func(emit func(float64, ...string)) { emit(f()) }}
}

// NewGaugeVecFunc returns gauges by the label names given, read at every
// scrape: read emits one value per combination of label values.
func NewGaugeVecFunc(o Opts, labels []string, read func(emit func(v float64, labelValues ...string))) *Func {
	return &Func{opts: o, typ: typeGauge, labels: labels, read: read}
}

// NewCounterVecFunc is NewGaugeVecFunc for counters.
func NewCounterVecFunc(o Opts, labels []string, read func(emit func(v float64, labelValues ...string))) *Func {
	return &Func{opts: o, typ: typeCounter, labels: labels, read: read}
}

func (f *Func) collect(emit func(family)) {
	fam := family{name: f.opts.Name, help: f.opts.Help, typ: f.typ}
	f.read(func(v float64, values ...string) {
		if len(values) != len(f.labels) {
			panic(fmt.Sprintf("prom: %s takes %d label values, got %d", f.opts.Name, len(f.labels), len(values)))
		}
		fam.groups = append(fam.groups, []sample{{labels: sortedLabels(f.opts.ConstLabels, f.labels, values), value: v}})
	})
	emit(fam)
}
