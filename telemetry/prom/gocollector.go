package prom

import (
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"time"
)

// goCollector exports the Go runtime's figures under the names
// client_golang's Go collector used (go_goroutines, go_threads, go_info,
// go_gc_duration_seconds, go_memstats_*), read at every scrape.
type goCollector struct{}

// NewGoCollector returns the Go runtime collector.
func NewGoCollector() Collector { return goCollector{} }

func (goCollector) collect(emit func(family)) {
	one := func(name, help, typ string, v float64, ls ...label) {
		emit(family{name: name, help: help, typ: typ, groups: [][]sample{{{labels: ls, value: v}}}})
	}
	one("go_goroutines", "Number of goroutines that currently exist.", typeGauge, float64(runtime.NumGoroutine()))
	one("go_threads", "Number of OS threads created.", typeGauge, float64(pprof.Lookup("threadcreate").Count()))
	one("go_info", "Information about the Go environment.", typeGauge, 1, label{"version", runtime.Version()})
	one("go_sched_gomaxprocs_threads", "The current runtime.GOMAXPROCS setting.", typeGauge, float64(runtime.GOMAXPROCS(0)))

	var gc debug.GCStats
	gc.PauseQuantiles = make([]time.Duration, 5)
	debug.ReadGCStats(&gc)
	var q []sample
	for i, at := range []string{"0", "0.25", "0.5", "0.75", "1"} {
		q = append(q, sample{labels: []label{{"quantile", at}}, value: gc.PauseQuantiles[i].Seconds()})
	}
	q = append(q, sample{suffix: "_sum", value: gc.PauseTotal.Seconds()}, sample{suffix: "_count", value: float64(gc.NumGC)})
	emit(family{name: "go_gc_duration_seconds", help: "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.",
		typ: typeSummary, groups: [][]sample{q}})

	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	for _, s := range []struct {
		name, help, typ string
		v               uint64
	}{
		{"alloc_bytes", "Number of bytes allocated in heap and currently in use.", typeGauge, m.Alloc},
		{"alloc_bytes_total", "Total number of bytes allocated in heap until now, even if released already.", typeCounter, m.TotalAlloc},
		{"sys_bytes", "Number of bytes obtained from system.", typeGauge, m.Sys},
		{"mallocs_total", "Total number of heap objects allocated.", typeCounter, m.Mallocs},
		{"frees_total", "Total number of heap objects frees.", typeCounter, m.Frees},
		{"heap_alloc_bytes", "Number of heap bytes allocated and currently in use.", typeGauge, m.HeapAlloc},
		{"heap_sys_bytes", "Number of heap bytes obtained from system.", typeGauge, m.HeapSys},
		{"heap_idle_bytes", "Number of heap bytes waiting to be used.", typeGauge, m.HeapIdle},
		{"heap_inuse_bytes", "Number of heap bytes that are in use.", typeGauge, m.HeapInuse},
		{"heap_released_bytes", "Number of heap bytes released to OS.", typeGauge, m.HeapReleased},
		{"heap_objects", "Number of currently allocated objects.", typeGauge, m.HeapObjects},
		{"stack_inuse_bytes", "Number of bytes obtained from system for stack allocator in non-CGO environments.", typeGauge, m.StackInuse},
		{"stack_sys_bytes", "Number of bytes obtained from system for stack allocator.", typeGauge, m.StackSys},
		{"mspan_inuse_bytes", "Number of bytes in use by mspan structures.", typeGauge, m.MSpanInuse},
		{"mcache_inuse_bytes", "Number of bytes in use by mcache structures.", typeGauge, m.MCacheInuse},
		{"buck_hash_sys_bytes", "Number of bytes used by the profiling bucket hash table.", typeGauge, m.BuckHashSys},
		{"gc_sys_bytes", "Number of bytes used for garbage collection system metadata.", typeGauge, m.GCSys},
		{"other_sys_bytes", "Number of bytes used for other system allocations.", typeGauge, m.OtherSys},
		{"next_gc_bytes", "Number of heap bytes when next garbage collection will take place.", typeGauge, m.NextGC},
	} {
		one("go_memstats_"+s.name, s.help, s.typ, float64(s.v))
	}
	one("go_memstats_last_gc_time_seconds", "Number of seconds since 1970 of last garbage collection.", typeGauge, float64(m.LastGC)/1e9)
}
