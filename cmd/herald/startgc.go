package main

import (
	"runtime/debug"
	"sync"
	"time"
)

// startHeapLimit bounds the Go heap while the collector waits for the
// gateway to be ready (pauseGC): a start that allocates more than this
// (it allocates ~5 MB) collects as before.
const startHeapLimit = 64 << 20

// startGCMax bounds the pause: a replica standing by for a lease, or a
// start that hangs, collects again after it.
const startGCMax = 5 * time.Second

// pauseGC turns the garbage collector off until the returned resume is
// called (or startGCMax passed), with startHeapLimit (or a lower
// GOMEMLIMIT) as the soft limit meanwhile. `herald gateway` allocates a
// few MB between main and ready — config, the store's statements, the
// channels, the metrics — and most of it is garbage by then: the one
// collection it made on the way (at the 4 MB first goal, while the config
// was read) cost 2.5–3 ms of the ~20 ms of CPU until ready, and the
// gateway collects and gives start's memory back right after ready anyway
// (debug.FreeOSMemory in gateway.afterReady). resume restores GOGC and
// GOMEMLIMIT as the environment set them; it is safe to call more than
// once.
func pauseGC() (resume func()) {
	percent := debug.SetGCPercent(-1)
	limit := debug.SetMemoryLimit(-1) // reads it
	debug.SetMemoryLimit(min(limit, startHeapLimit))
	var once sync.Once
	restore := func() {
		once.Do(func() {
			debug.SetGCPercent(percent)
			debug.SetMemoryLimit(limit)
		})
	}
	t := time.AfterFunc(startGCMax, restore)
	return func() {
		t.Stop()
		restore()
	}
}
