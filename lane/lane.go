// Package lane is Herald's in-process work queue: a named FIFO with a
// concurrency cap, where jobs sharing a key run one at a time (per-session
// serial turns). The gateway's `main` lane and the `subagent` lane are lanes.
//
// It must not import any other Herald package.
package lane

import (
	"context"
	"errors"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

// ErrClosed is returned by Enqueue after Shutdown began.
var ErrClosed = errors.New("lane is shut down")

// SlowWait is how long a job may wait in the queue before the lane logs it.
const SlowWait = 2 * time.Second

// Job is one unit of work. Jobs with the same non-empty Key never run at the
// same time and start in the order they were enqueued.
type Job struct {
	Key string
	Run func(ctx context.Context)

	enqueued time.Time
}

// Lane is a bounded-concurrency FIFO. The zero value is not usable; call New.
type Lane struct {
	name string
	max  int
	log  *zap.Logger

	ctx    context.Context // passed to jobs; cancelled when Shutdown gives up waiting
	cancel context.CancelFunc

	mu      sync.Mutex
	queue   []Job // FIFO; guarded by mu
	busy    map[string]bool
	handed  map[string]Job // by running job's key: the job its slot goes to next (TakeNext)
	running int
	closed  bool
	wg      sync.WaitGroup
}

// New returns a lane running at most max jobs at once (max < 1 means 1).
func New(name string, max int, log *zap.Logger) *Lane {
	if max < 1 {
		max = 1
	}
	if log == nil {
		log = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Lane{name: name, max: max, log: log.Named("lane").With(zap.String("lane", name)),
		ctx: ctx, cancel: cancel, busy: make(map[string]bool), handed: make(map[string]Job)}
}

// Name returns the lane's name.
func (l *Lane) Name() string { return l.name }

// Enqueue adds j to the end of the queue and starts it when a slot and its
// key are free.
func (l *Lane) Enqueue(j Job) error {
	j.enqueued = time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	l.queue = append(l.queue, j)
	l.dispatchLocked()
	return nil
}

// SetMax changes how many jobs run at once (n < 1 means 1), as a config
// reload does. Running jobs are not interrupted: a smaller cap takes effect
// as they end; a larger one starts queued jobs at once.
func (l *Lane) SetMax(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.max = max(n, 1)
	l.dispatchLocked()
}

// Max returns how many jobs may run at once.
func (l *Lane) Max() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.max
}

// Stats returns how many jobs wait and how many run.
func (l *Lane) Stats() (queued, running int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue), l.running
}

// dispatchLocked starts queued jobs while slots are free. l.mu must be held.
func (l *Lane) dispatchLocked() {
	for l.running < l.max {
		i := l.nextLocked()
		if i < 0 {
			return
		}
		j := l.queue[i]
		if i == 0 { // the common case: take the head without moving the rest
			l.queue[0] = Job{}
			l.queue = l.queue[1:]
		} else {
			copy(l.queue[i:], l.queue[i+1:])
			l.queue[len(l.queue)-1] = Job{}
			l.queue = l.queue[:len(l.queue)-1]
		}
		if j.Key != "" {
			l.busy[j.Key] = true
		}
		l.running++
		l.wg.Add(1)
		go l.run(j)
	}
}

// nextLocked finds the first queued job whose key is free. l.mu must be held.
func (l *Lane) nextLocked() int {
	for i, j := range l.queue {
		if j.Key == "" || !l.busy[j.Key] {
			return i
		}
	}
	return -1
}

func (l *Lane) run(j Job) {
	defer l.wg.Done()
	for {
		l.runOne(j)
		l.mu.Lock()
		if j.Key != "" {
			delete(l.busy, j.Key)
		}
		next, handed := l.handed[j.Key]
		if handed {
			delete(l.handed, j.Key)
			if !l.closed {
				l.mu.Unlock()
				j = next // the slot goes on with the job TakeNext gave it
				continue
			}
			// Shutdown began: it is dropped as a queued job is (its owner
			// resumes it after the restart).
			if next.Key != "" {
				delete(l.busy, next.Key)
			}
		}
		l.running--
		if !l.closed {
			l.dispatchLocked()
		}
		l.mu.Unlock()
		return
	}
}

func (l *Lane) runOne(j Job) {
	if waited := time.Since(j.enqueued); waited > SlowWait {
		queued, _ := l.Stats()
		l.log.Info("job waited in lane", zap.String("lane", l.name), zap.String(l.keyName(), j.Key), zap.Duration("waited", waited), zap.Int("queued", queued))
	}
	defer func() {
		// A panic in one job must not take the daemon down: log it with the
		// job's key and stack; the job's owner sees it as a job that ended.
		if r := recover(); r != nil {
			l.log.Error("job panicked", zap.String("lane", l.name), zap.String(l.keyName(), j.Key),
				zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
		}
	}()
	j.Run(l.ctx)
}

// TakeNext is called by the running job key: it takes the job the lane
// would start next out of the queue and returns its key; that job runs in
// key's slot as soon as key's job returns (a sub-agent run that ends
// records the start of the run after it in its own end's transaction). ok
// is false when no job can start (none waits with a free key, the lane is
// over its max or shut down, key is no running job's, or it handed its
// slot already).
func (l *Lane) TakeNext(key string) (next string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || key == "" || !l.busy[key] || l.running > l.max {
		return "", false
	}
	if _, dup := l.handed[key]; dup {
		return "", false
	}
	i := l.nextLocked()
	if i < 0 {
		return "", false
	}
	j := l.queue[i]
	l.queue = slices.Delete(l.queue, i, i+1)
	if j.Key != "" {
		l.busy[j.Key] = true
	}
	l.handed[key] = j
	return j.Key, true
}

// GiveBack undoes key's TakeNext: the job it took goes back to the head
// of the queue, to start in the first free slot (a sub-agent run whose end
// cannot be recorded yet, an outage, does not hold the run after it). It
// is dropped when Shutdown began. A no-op when key took none.
func (l *Lane) GiveBack(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	j, ok := l.handed[key]
	if !ok {
		return
	}
	delete(l.handed, key)
	if j.Key != "" {
		delete(l.busy, j.Key)
	}
	if l.closed {
		return
	}
	l.queue = slices.Insert(l.queue, 0, j)
	l.dispatchLocked()
}

// Slot is a place in a lane taken by Reserve for a job that starts at
// once: it counts as a running job until Start runs the job in it or
// Release gives it back.
type Slot struct{ l *Lane }

// Reserve takes a free slot for a job about to be made, when the lane
// has one and no job waits (a waiting job keeps its turn); nil otherwise.
// The caller must Start or Release it. A sub-agent spawn records its run
// as running in the transaction that records it when it got a slot.
func (l *Lane) Reserve() *Slot {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || len(l.queue) > 0 || l.running >= l.max {
		return nil
	}
	l.running++
	l.wg.Add(1)
	return &Slot{l: l}
}

// Start runs j in the slot now, even when Shutdown began meanwhile: the
// slot was a running job since Reserve, and Shutdown waits for it as for
// any other. A j whose key is busy waits in the queue instead.
func (s *Slot) Start(j Job) {
	l := s.l
	j.enqueued = time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if j.Key != "" && l.busy[j.Key] {
		l.queue = append(l.queue, j)
		l.releaseLocked()
		return
	}
	if j.Key != "" {
		l.busy[j.Key] = true
	}
	go l.run(j)
}

// Release gives the slot back unused (nil: no-op).
func (s *Slot) Release() {
	if s == nil {
		return
	}
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	s.l.releaseLocked()
}

// releaseLocked frees a reserved slot and starts what waits for it.
// l.mu must be held.
func (l *Lane) releaseLocked() {
	l.running--
	l.wg.Done()
	if !l.closed {
		l.dispatchLocked()
	}
}

// Shutdown stops intake, drops jobs that have not started, and waits for
// running jobs until ctx ends; then it cancels their context and waits for
// them to return. It returns the number of dropped jobs.
func (l *Lane) Shutdown(ctx context.Context) int {
	l.mu.Lock()
	l.closed = true
	dropped := len(l.queue)
	l.queue = nil
	l.mu.Unlock()
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		l.log.Warn("lane shutdown grace ended; cancelling running jobs")
		l.cancel()
		<-done
	}
	l.cancel()
	return dropped
}

// keyName names a job's key in log lines: the main lane keys jobs by
// session, the subagent lane by run.
func (l *Lane) keyName() string {
	if l.name == "subagent" {
		return "runId"
	}
	return "sessionKey"
}
