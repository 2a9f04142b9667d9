package prom

import (
	"bufio"
	"bytes"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func text(t *testing.T, r *Registry) string {
	t.Helper()
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	r.Write(w)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestTextExposition: what a Prometheus server scrapes, byte for byte as
// client_golang's text format writes it: families sorted by name with one
// HELP and TYPE each (a name registered by several collectors is one
// family), samples by label values, label names sorted, const labels
// merged in, cumulative histogram buckets with le last, escaping, and
// families with no sample left out.
func TestTextExposition(t *testing.T) {
	r := NewRegistry()
	c := NewCounterVec(Opts{Name: "x_total", Help: "Things by kind.\nSecond line \\ backslash."}, []string{"kind", "channel"})
	c.WithLabelValues("b", "web").Add(2.5)
	c.WithLabelValues("a", "web").Inc()
	c.WithLabelValues("a", `q"uo\te`+"\n")
	g := NewGaugeVec(Opts{Name: "up"}, []string{"channel"})
	g.WithLabelValues("slack").Set(1)
	g.WithLabelValues("slack").Add(-3)
	h := NewHistogramVec(Opts{Name: "lat_seconds", Help: "Latency."}, ExponentialBuckets(0.1, 10, 2), []string{"p"})
	h.WithLabelValues("z").Observe(0.1) // on a bound: counted in it
	h.WithLabelValues("z").Observe(0.5)
	h.WithLabelValues("z").Observe(7)
	empty := NewCounterVec(Opts{Name: "aaa_empty_total", Help: "Nothing yet."}, []string{"k"})
	lone := NewCounter(Opts{Name: "lone_total", Help: "One."})
	lone.Add(1e6)
	r.MustRegister(c, g, h, empty, lone,
		NewGaugeFunc(Opts{Name: "lane", Help: "Lane.", ConstLabels: map[string]string{"lane": "sub"}}, func() float64 { return 3 }),
		NewGaugeFunc(Opts{Name: "lane", Help: "Lane.", ConstLabels: map[string]string{"lane": "main"}}, func() float64 { return 2 }),
		NewCounterVecFunc(Opts{Name: "fails_total", Help: "Fails."}, []string{"model"}, func(emit func(float64, ...string)) {
			emit(4, "m/2")
			emit(1, "m/1")
		}))
	want := `# HELP fails_total Fails.
# TYPE fails_total counter
fails_total{model="m/1"} 1
fails_total{model="m/2"} 4
# HELP lane Lane.
# TYPE lane gauge
lane{lane="main"} 2
lane{lane="sub"} 3
# HELP lat_seconds Latency.
# TYPE lat_seconds histogram
lat_seconds_bucket{p="z",le="0.1"} 1
lat_seconds_bucket{p="z",le="1"} 2
lat_seconds_bucket{p="z",le="+Inf"} 3
lat_seconds_sum{p="z"} 7.6
lat_seconds_count{p="z"} 3
# HELP lone_total One.
# TYPE lone_total counter
lone_total 1e+06
# HELP up 
# TYPE up gauge
up{channel="slack"} -2
# HELP x_total Things by kind.\nSecond line \\ backslash.
# TYPE x_total counter
x_total{channel="q\"uo\\te\n",kind="a"} 0
x_total{channel="web",kind="a"} 1
x_total{channel="web",kind="b"} 2.5
`
	if got := text(t, r); got != want {
		t.Errorf("exposition:\n%s\nwant:\n%s", got, want)
	}
}

// TestHandlerServesTextFormat: /metrics's content type is the text
// format's, and a concurrent update never tears a value.
func TestHandlerServesTextFormat(t *testing.T) {
	r := NewRegistry()
	c := NewCounterVec(Opts{Name: "n_total", Help: "N."}, []string{"k"})
	r.MustRegister(c, NewGoCollector())
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.WithLabelValues("a").Inc()
			}
		}()
	}
	wg.Wait()
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if ct := rec.Header().Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
		t.Errorf("content type %q", ct)
	}
	body, _ := io.ReadAll(rec.Body)
	for _, s := range []string{"n_total{k=\"a\"} 8000\n", "# TYPE go_goroutines gauge\n", "# TYPE go_gc_duration_seconds summary\n",
		"go_gc_duration_seconds{quantile=\"0.5\"} ", "go_memstats_heap_alloc_bytes ", "go_threads "} {
		if !strings.Contains(string(body), s) {
			t.Errorf("/metrics lacks %q:\n%s", s, body)
		}
	}
}
