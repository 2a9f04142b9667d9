package store

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkSpawnEach100 is the store's part of registering the 10,000
// case's spawns (docs/performance.md): each op is one model response's
// 100 sessions_spawn calls, recorded by one SpawnEach (limits counted,
// the spawn call, child session and run rows), started in their slots
// (status running), for one of 100 requesters in turn. It reports the
// process's CPU per spawn (getrusage: steadier than ns/op on a shared
// machine).
func BenchmarkSpawnEach100(b *testing.B) {
	const perOp, requesters = 100, 100
	db := newTestDB(b)
	ctx := context.Background()
	lim := SpawnLimits{MaxChildren: 1 << 20, MaxTotal: 1 << 30}
	now := time.Now()
	build := func(op int) ([]*Run, []*Session) {
		runs, children := make([]*Run, perOp), make([]*Session, perOp)
		req := "agent:main:web:dm:c" + strconv.Itoa(op%requesters)
		for j := range perOp {
			id := strconv.Itoa(op) + "-" + strconv.Itoa(j)
			runs[j], children[j] = spawnedRun("spawn", id, req, "s-"+req, now)
		}
		return runs, children
	}
	b.ReportAllocs()
	var cpu time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		runs, children := build(i)
		c0 := processCPU(b)
		b.StartTimer()
		errs, err := db.SpawnEach(ctx, runs, children, lim)
		b.StopTimer()
		cpu += processCPU(b) - c0
		b.StartTimer()
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range errs {
			if e != nil {
				b.Fatal(e)
			}
		}
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N*perOp), "cpu-µs/spawn")
}

// spawnedRun is run "<kind>-<id>" of requester req (session id
// reqSession), running since now, with its child session: one spawn of a
// model response as SpawnEach records it.
func spawnedRun(kind, id, req, reqSession string, now time.Time) (*Run, *Session) {
	r, child := newRun(kind + "-" + id)
	r.ChildKey, r.ChildSessionID = "", ""
	child.Key, child.ID = "agent:main:subagent:"+id, "sess-"+id
	r.RequesterKey, r.RequesterSessionID, r.SpawnCallID = req, reqSession, "call-"+id
	r.Status, r.CreatedAt, r.StartedAt, r.StretchAt = StatusRunning, now, now, now
	return r, child
}

// processCPU is the user+system CPU time this process has used.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
