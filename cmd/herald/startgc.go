package main

import (
	"runtime/debug"
	"sync"
	"time"
)

// startGCPercent is GOGC while the gateway starts (pauseGC): the first
// collection comes at 16 MB of heap instead of 4 MB, and a start whose
// live heap is large (a restart adopting many runs) collects at five
// times it rather than twice, not in a loop under a fixed limit.
const startGCPercent = 400

// startGCMax bounds the pause: a replica standing by for a lease, or a
// start that hangs, collects as configured after it.
const startGCMax = 5 * time.Second

// pauseGC raises GOGC to startGCPercent until the returned resume is
// called (or startGCMax passed). `herald gateway` allocates a few MB
// between main and ready — the config, the store's statements, the
// channels, the metrics — on top of the ~2.5 MB package initialisation
// leaves, and most of it is garbage by then: the one collection it made
// on the way (at the 4 MB first goal, while the config was read) cost
// 2.5–3 ms of the ~20 ms of CPU until ready, and the gateway collects and
// gives start's memory back right after ready anyway (debug.FreeOSMemory
// in gateway.afterReady). A lower GOGC from the environment is raised
// for start only; GOGC=off and GOMEMLIMIT are left as they are. resume
// restores the setting; it is safe to call more than once.
func pauseGC() (resume func()) {
	percent := debug.SetGCPercent(-1) // reads it (and turns it off for a moment)
	debug.SetGCPercent(startPercent(percent))
	var once sync.Once
	restore := func() { once.Do(func() { debug.SetGCPercent(percent) }) }
	t := time.AfterFunc(startGCMax, restore)
	return func() {
		t.Stop()
		restore()
	}
}

// startPercent is GOGC during start given the configured one (< 0: off).
func startPercent(configured int) int {
	if configured < 0 {
		return configured
	}
	return max(configured, startGCPercent)
}
