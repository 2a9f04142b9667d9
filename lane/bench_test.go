package lane

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"
)

// BenchmarkEnqueueDispatch is the lane's cost per job: Enqueue, dispatch to a
// goroutine, run an empty job, free the slot and dispatch the next. At most
// 64 jobs are outstanding, so the queue stays short (BenchmarkDrainBacklog
// measures long queues). "nokey"
// jobs share no key; "keyed" jobs have a key each, as sub-agent runs do
// (their run id); "samekey" jobs share 16 keys, as main-lane turns of 16 busy
// sessions do, so most dispatches skip jobs whose key is busy.
func BenchmarkEnqueueDispatch(b *testing.B) {
	for _, bc := range []struct {
		name string
		key  func(i int) string
	}{
		{"nokey", func(int) string { return "" }},
		{"keyed", func(i int) string { return "run-" + strconv.Itoa(i) }},
		{"samekey", func(i int) string { return "session-" + strconv.Itoa(i%16) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l := New("bench", 8, nil)
			defer l.Shutdown(context.Background())
			keys := make([]string, b.N)
			for i := range keys {
				keys[i] = bc.key(i)
			}
			var wg sync.WaitGroup
			wg.Add(b.N)
			outstanding := make(chan struct{}, 64)
			run := func(context.Context) { <-outstanding; wg.Done() }
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				outstanding <- struct{}{}
				if err := l.Enqueue(Job{Key: keys[i], Run: run}); err != nil {
					b.Fatal(err)
				}
			}
			wg.Wait()
		})
	}
}

// BenchmarkDrainBacklog enqueues a backlog of blocked jobs first (as 10,000
// queued sub-agent runs are), then releases them and measures the time per
// job to drain the queue. It shows the cost of dequeuing from the front of a
// long queue.
func BenchmarkDrainBacklog(b *testing.B) {
	for _, backlog := range []int{1000, 10000} {
		b.Run(strconv.Itoa(backlog), func(b *testing.B) {
			b.ReportAllocs()
			for n := 0; n < b.N; n++ {
				b.StopTimer()
				l := New("bench", 8, nil)
				gate := make(chan struct{})
				var wg sync.WaitGroup
				wg.Add(backlog)
				for i := 0; i < backlog; i++ {
					if err := l.Enqueue(Job{Key: "run-" + strconv.Itoa(i), Run: func(context.Context) {
						<-gate
						wg.Done()
					}}); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				close(gate)
				wg.Wait()
				b.StopTimer()
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				l.Shutdown(ctx)
				cancel()
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*backlog), "ns/job")
		})
	}
}
