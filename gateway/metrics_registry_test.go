package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsRegistryMadeOnFirstScrape: the registry is made on the first
// scrape with every collector added before it and the Go collector; one
// added afterwards is registered at once.
func TestMetricsRegistryMadeOnFirstScrape(t *testing.T) {
	m := newMetrics()
	if m.reg != nil {
		t.Fatal("the registry was made before a scrape")
	}
	m.add(prometheus.NewCounter(prometheus.CounterOpts{Name: "test_before_total", Help: "h"}))
	names := func() map[string]bool {
		mfs, err := m.gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, mf := range mfs {
			out[mf.GetName()] = true
		}
		return out
	}
	got := names()
	for _, n := range []string{"test_before_total", "herald_outbox_delivered_total", "go_goroutines"} {
		if !got[n] {
			t.Errorf("first scrape lacks %s", n)
		}
	}
	m.add(prometheus.NewCounter(prometheus.CounterOpts{Name: "test_after_total", Help: "h"}))
	if !names()["test_after_total"] {
		t.Error("a collector added after the first scrape is not registered")
	}
}

// TestMetricsClashFailsEveryScrape: a collector the registry refuses (its
// name taken), added before or after the first scrape, makes every scrape
// answer 500 naming it, not a /metrics that silently lacks it.
func TestMetricsClashFailsEveryScrape(t *testing.T) {
	for _, after := range []bool{false, true} {
		m := newMetrics()
		clash := prometheus.NewCounter(prometheus.CounterOpts{Name: "herald_outbox_delivered_total", Help: "taken"})
		if after {
			if _, err := m.gather(); err != nil {
				t.Fatal(err)
			}
		}
		m.add(clash)
		h := m.handler()
		for i := range 2 {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "herald_outbox_delivered_total") {
				t.Errorf("after=%v scrape %d: %d %q; want 500 naming the clash", after, i+1, rec.Code, rec.Body.String())
			}
		}
	}
}
