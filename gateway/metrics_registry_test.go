package gateway

import (
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
	before := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_before_total", Help: "h"})
	m.add(before)
	names := func() map[string]bool {
		mfs, err := m.registry().Gather()
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
