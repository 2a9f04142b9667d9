package lane

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestLaneCapAndFIFO(t *testing.T) {
	l := New("t", 2, nil)
	var running, peak atomic.Int32
	var mu sync.Mutex
	var order []int
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		if err := l.Enqueue(Job{Run: func(ctx context.Context) {
			defer wg.Done()
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			<-release
			running.Add(-1)
		}}); err != nil {
			t.Fatal(err)
		}
	}
	if q, r := l.Stats(); q != 4 || r != 2 {
		t.Fatalf("stats = %d queued, %d running; want 4, 2", q, r)
	}
	for deadline := time.Now().Add(10 * time.Second); running.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if peak.Load() != 2 {
		t.Errorf("peak concurrency %d, want 2", peak.Load())
	}
	if len(order) != 6 {
		t.Errorf("%d jobs ran, want 6", len(order))
	}
}

func TestLaneFIFO(t *testing.T) {
	l := New("t", 1, nil)
	var order []int
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		l.Enqueue(Job{Run: func(ctx context.Context) { defer wg.Done(); order = append(order, i) }})
	}
	wg.Wait()
	for k, v := range order {
		if v != k {
			t.Fatalf("start order %v is not FIFO", order)
		}
	}
}

func TestLaneSerialPerKey(t *testing.T) {
	l := New("t", 4, nil)
	var inKey atomic.Int32
	var overlap atomic.Bool
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		l.Enqueue(Job{Key: "session", Run: func(ctx context.Context) {
			defer wg.Done()
			if inKey.Add(1) > 1 {
				overlap.Store(true)
			}
			time.Sleep(time.Millisecond)
			inKey.Add(-1)
		}})
	}
	wg.Wait()
	if overlap.Load() {
		t.Error("two jobs with the same key ran at once")
	}
}

func TestLaneShutdownCancelsAfterGrace(t *testing.T) {
	l := New("t", 1, nil)
	started := make(chan struct{})
	var cancelled atomic.Bool
	l.Enqueue(Job{Run: func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		cancelled.Store(true)
	}})
	l.Enqueue(Job{Run: func(ctx context.Context) { t.Error("queued job ran after shutdown") }})
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if dropped := l.Shutdown(ctx); dropped != 1 {
		t.Errorf("dropped %d, want 1", dropped)
	}
	if !cancelled.Load() {
		t.Error("running job was not cancelled")
	}
	if err := l.Enqueue(Job{Run: func(context.Context) {}}); err != ErrClosed {
		t.Errorf("Enqueue after shutdown = %v, want ErrClosed", err)
	}
}

// A job that panics is logged and the lane goes on with the next one; the
// process survives.
func TestLaneSurvivesPanickingJob(t *testing.T) {
	l := New("t", 1, nil)
	done := make(chan struct{})
	if err := l.Enqueue(Job{Key: "k", Run: func(context.Context) { panic("boom") }}); err != nil {
		t.Fatal(err)
	}
	if err := l.Enqueue(Job{Key: "k", Run: func(context.Context) { close(done) }}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the job after a panicking one never ran")
	}
	if q, r := l.Stats(); q != 0 {
		t.Errorf("stats after = %d queued, %d running", q, r)
	}
}

func TestLaneSetMaxStartsQueuedJobs(t *testing.T) {
	l := New("t", 1, nil)
	defer l.Shutdown(context.Background())
	release := make(chan struct{})
	started := make(chan int, 3)
	for i := 0; i < 3; i++ {
		if err := l.Enqueue(Job{Run: func(ctx context.Context) { started <- i; <-release }}); err != nil {
			t.Fatal(err)
		}
	}
	<-started
	if q, r := l.Stats(); q != 2 || r != 1 {
		t.Fatalf("stats = %d queued, %d running; want 2, 1", q, r)
	}
	l.SetMax(3) // a reload raising maxConcurrent starts the waiting jobs
	<-started
	<-started
	if q, r := l.Stats(); q != 0 || r != 3 || l.Max() != 3 {
		t.Errorf("after SetMax(3): %d queued, %d running, max %d", q, r, l.Max())
	}
	close(release)
}

// A reserved slot counts as a running job: no other job takes it, a
// queued job keeps its turn (Reserve gives nil while one waits), Release
// hands the slot to the queue, and Shutdown waits for a job started in a
// slot reserved before it.
func TestLaneReserve(t *testing.T) {
	l := New("t", 2, nil)
	a, b := l.Reserve(), l.Reserve()
	if a == nil || b == nil {
		t.Fatal("two free slots, Reserve gave nil")
	}
	if l.Reserve() != nil {
		t.Fatal("Reserve took a third slot of two")
	}
	ran := make(chan string, 3)
	if err := l.Enqueue(Job{Key: "q", Run: func(context.Context) { ran <- "q" }}); err != nil {
		t.Fatal(err)
	}
	if q, r := l.Stats(); q != 1 || r != 2 {
		t.Fatalf("stats = %d queued, %d running; want 1, 2", q, r)
	}
	b.Release()
	if got := <-ran; got != "q" {
		t.Fatalf("ran %q, want the queued job", got)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if q, r := l.Stats(); q == 0 && r == 1 {
			break
		}
		if time.Now().After(deadline) {
			q, r := l.Stats()
			t.Fatalf("stats = %d queued, %d running; want 0, 1 (the reserved slot)", q, r)
		}
	}
	release := make(chan struct{})
	done := make(chan int)
	go func() { done <- l.Shutdown(context.Background()) }()
	for deadline := time.Now().Add(10 * time.Second); !l.closedNow(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Shutdown did not close the lane")
		}
	}
	if l.Reserve() != nil {
		t.Fatal("Reserve took a slot of a lane shut down")
	}
	a.Start(Job{Key: "a", Run: func(context.Context) { <-release; ran <- "a" }})
	select {
	case <-done:
		t.Fatal("Shutdown returned while a job started in a reserved slot ran")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	if n := <-done; n != 0 {
		t.Fatalf("Shutdown dropped %d jobs, want 0", n)
	}
	if got := <-ran; got != "a" {
		t.Fatalf("ran %q, want the job started in the reserved slot", got)
	}
}

func (l *Lane) closedNow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// A running job that takes the next job (TakeNext) hands it its slot: the
// job leaves the queue at once, runs right after the taker returns, in
// the same slot, and no other job runs in between.
func TestLaneTakeNext(t *testing.T) {
	l := New("t", 1, nil)
	ran := make(chan string, 3)
	taken := make(chan string, 1)
	release := make(chan struct{})
	if err := l.Enqueue(Job{Key: "a", Run: func(context.Context) {
		<-release
		next, ok := l.TakeNext("a")
		if !ok {
			next = "none"
		}
		taken <- next
		if _, again := l.TakeNext("a"); again {
			taken <- "twice"
		}
		ran <- "a"
	}}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"b", "c"} {
		if err := l.Enqueue(Job{Key: k, Run: func(context.Context) { ran <- k }}); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := l.TakeNext("b"); ok {
		t.Fatal("a queued job took the next job")
	}
	close(release)
	if got := <-taken; got != "b" {
		t.Fatalf("TakeNext gave %q, want b (the queue's head)", got)
	}
	for _, want := range []string{"a", "b", "c"} {
		if got := <-ran; got != want {
			t.Fatalf("ran %q, want %q", got, want)
		}
	}
	select {
	case got := <-taken:
		t.Fatalf("TakeNext handed a slot twice (%s)", got)
	default:
	}
	if n := l.Shutdown(context.Background()); n != 0 {
		t.Fatalf("Shutdown dropped %d jobs", n)
	}
}

// A job handed a slot (TakeNext) whose taker returns after Shutdown began
// is dropped, as a queued job is: no new work starts during the grace.
func TestLaneHandedJobDroppedAtShutdown(t *testing.T) {
	l := New("t", 1, nil)
	taken := make(chan bool, 1)
	release := make(chan struct{})
	ran := make(chan string, 1)
	if err := l.Enqueue(Job{Key: "a", Run: func(context.Context) {
		_, ok := l.TakeNext("a")
		taken <- ok
		<-release
	}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Enqueue(Job{Key: "b", Run: func(context.Context) { ran <- "b" }}); err != nil {
		t.Fatal(err)
	}
	select {
	case ok := <-taken:
		if !ok {
			t.Fatal("TakeNext took nothing")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a did not run")
	}
	done := make(chan struct{})
	go func() { defer close(done); l.Shutdown(context.Background()) }()
	if !waitClosed(l, 10*time.Second) {
		t.Fatal("Shutdown did not begin")
	}
	close(release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return")
	}
	select {
	case got := <-ran:
		t.Fatalf("%s started after Shutdown began", got)
	default:
	}
}

// waitClosed waits until Shutdown began on l.
func waitClosed(l *Lane, within time.Duration) bool {
	end := time.Now().Add(within)
	for !l.closedNow() {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}
