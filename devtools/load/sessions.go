package load

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/devtools/harness"
)

// SessionOptions of a bounded-memory measure: waves of distinct web
// conversations, each a few turns, against a gateway with
// session.idleMinutes 1, sampled when the wave is answered and after its
// sessions left memory.
type SessionOptions struct {
	Conversations int // per wave
	Turns         int // per conversation
	Waves         int
	Bin, Dir      string
	Log           io.Writer
}

// SessionSample is the gateway process after one wave.
type SessionSample struct {
	Loaded, Evicted harness.Proc // when the wave was answered; after its sessions left memory
	SessionsLoaded  int          // herald_sessions_loaded when the wave was answered
	Answer          time.Duration
	EvictWait       time.Duration
}

// Sessions runs the measure and returns one sample per wave.
func Sessions(ctx context.Context, o SessionOptions) ([]SessionSample, error) {
	o.Conversations, o.Turns, o.Waves = max(o.Conversations, 1), max(o.Turns, 1), max(o.Waves, 1)
	r, err := startRig(ctx, o.Dir, o.Bin, o.Log, harness.ModelOptions{}, harness.Config{MainConcurrent: 16, GraceSeconds: 5,
		MaxQueued: o.Conversations * o.Turns, Extra: "session: { idleMinutes: 1 },"})
	if err != nil {
		return nil, err
	}
	defer r.close()
	gw, logf := r.gw, r.logf
	web := harness.NewWeb(gw.Base, 64)
	var out []SessionSample
	answered := 0
	for w := range o.Waves {
		var s SessionSample
		start := time.Now()
		jobs := make(chan int)
		errs := make(chan error, 64)
		var workers sync.WaitGroup
		for range 64 {
			workers.Go(func() {
				for i := range jobs {
					for k := range o.Turns {
						if _, err := web.Post(ctx, fmt.Sprintf("w%d-c%d", w, i), fmt.Sprintf("SAY w%d-c%d-t%d", w, i, k)); err != nil {
							select {
							case errs <- err:
							default:
							}
							return
						}
					}
				}
			})
		}
		for i := range o.Conversations {
			jobs <- i
		}
		close(jobs)
		workers.Wait()
		select {
		case err := <-errs:
			return out, err
		default:
		}
		answered += o.Conversations * o.Turns
		logf("wave %d: %d conversations × %d turns posted; waiting for the answers …", w+1, o.Conversations, o.Turns)
		if err := waitMetric(ctx, gw.Base, `herald_outbox_delivered_total{kind="assistant"}`, func(v float64) bool { return v >= float64(answered) }); err != nil {
			return out, err
		}
		s.Answer = time.Since(start)
		s.Loaded, _ = harness.ReadProc(gw.Pid())
		loaded, _ := metric(ctx, gw.Base, "herald_sessions_loaded")
		s.SessionsLoaded = int(loaded)
		logf("wave %d answered in %s: %d sessions loaded, RSS %.1f MiB, %d FDs; waiting for eviction …", w+1, s.Answer.Round(time.Millisecond), s.SessionsLoaded, mib(s.Loaded.RSS), s.Loaded.FDs)
		evictStart := time.Now()
		if err := waitMetric(ctx, gw.Base, "herald_sessions_loaded", func(v float64) bool { return v == 0 }); err != nil {
			return out, err
		}
		s.EvictWait = time.Since(evictStart)
		s.Evicted, _ = harness.ReadProc(gw.Pid())
		logf("wave %d evicted after %s: RSS %.1f MiB, %d FDs", w+1, s.EvictWait.Round(time.Second), mib(s.Evicted.RSS), s.Evicted.FDs)
		out = append(out, s)
	}
	return out, nil
}

// metric reads one sample from the gateway's /metrics.
func metric(ctx context.Context, base, sample string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, sc.Err()
}

// waitMetric polls a sample every second until ok holds or ctx ends.
func waitMetric(ctx context.Context, base, sample string, ok func(float64) bool) error {
	for {
		v, err := metric(ctx, base, sample)
		if err == nil && ok(v) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s (last %v, %v): %w", sample, v, err, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}
