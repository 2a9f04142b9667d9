package load

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/heraldhq/herald/devtools/harness"
)

// TTFTOptions of a time-to-first-token measure: N web conversations each
// post one message to a streaming fake model that waits Latency, then
// writes its answer in pieces StreamDelay apart.
type TTFTOptions struct {
	Conversations        int
	Latency, StreamDelay time.Duration
	Bin, Dir             string
	Log                  io.Writer
}

// TTFTResult: POST → first delta event and POST → final message, per
// conversation, as the web chat's event stream delivered them.
type TTFTResult struct {
	First, Final []time.Duration // sorted
}

// Percentile returns the p-th percentile (0–100) of sorted d.
func Percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, len(d)*p/100)]
}

// TTFT runs the measure.
func TTFT(ctx context.Context, o TTFTOptions) (TTFTResult, error) {
	var res TTFTResult
	o.Conversations = max(o.Conversations, 1)
	r, err := startRig(ctx, o.Dir, o.Bin, o.Log, harness.ModelOptions{Latency: o.Latency, StreamDelay: o.StreamDelay},
		harness.Config{MainConcurrent: o.Conversations, GraceSeconds: 5})
	if err != nil {
		return res, err
	}
	defer r.close()
	gw, logf := r.gw, r.logf
	web := harness.NewWeb(gw.Base, o.Conversations*2)
	var (
		mu           sync.Mutex
		posted       = make([]time.Time, o.Conversations)
		first, final = make([]time.Time, o.Conversations), make([]time.Time, o.Conversations)
		done         = make(chan struct{})
		left         = o.Conversations
		streams      sync.WaitGroup
	)
	sctx, stop := context.WithCancel(ctx)
	defer func() { stop(); streams.Wait() }()
	for i := range o.Conversations {
		ready := make(chan struct{})
		streams.Go(func() {
			_ = web.Events(sctx, fmt.Sprintf("ttft-%d", i), ready, func(m harness.Message, at time.Time) {
				mu.Lock()
				defer mu.Unlock()
				switch {
				case m.Role == "delta" && first[i].IsZero():
					first[i] = at
				case m.Role == "assistant" && final[i].IsZero():
					final[i] = at
					if left--; left == 0 {
						close(done)
					}
				}
			})
		})
		select {
		case <-ready:
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	logf("posting %d messages (model: %s to the first piece, %s between pieces) …", o.Conversations, o.Latency, o.StreamDelay)
	var posts sync.WaitGroup
	for i := range o.Conversations {
		posts.Go(func() {
			mu.Lock()
			posted[i] = time.Now()
			mu.Unlock()
			_, _ = web.Post(ctx, fmt.Sprintf("ttft-%d", i), fmt.Sprintf("SAY streamed answer number %d, long enough to come in pieces", i))
		})
	}
	posts.Wait()
	select {
	case <-done:
	case <-ctx.Done():
		return res, fmt.Errorf("not every reply arrived: %w", ctx.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range o.Conversations {
		if !first[i].IsZero() {
			res.First = append(res.First, first[i].Sub(posted[i]))
		}
		res.Final = append(res.Final, final[i].Sub(posted[i]))
	}
	slices.Sort(res.First)
	slices.Sort(res.Final)
	return res, nil
}
