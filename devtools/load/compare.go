package load

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/heraldhq/herald/devtools/harness"
)

// CompareOptions of one interleaved comparison of two built binaries
// (herald-load -compare; scripts/perfcompare.sh builds them).
type CompareOptions struct {
	Bins    [2]string // A (the older build) and B
	Names   [2]string // printed beside the figures
	Rounds  int       // rounds; each measures A then B (default 2)
	Starts  int       // starts per binary per round; the median is kept (default 5)
	Turns   int       // plain turns and SPAWN 8s per binary per round (default 5)
	NoTurns bool      // starts and idle memory only
	// IdleTurns: each timed turn and SPAWN 8 starts once the gateway has
	// used no CPU for 20 ms (quiet), instead of right after the previous
	// one's last entry arrived (whose tail, such as a SPAWN 8's runs
	// ending after their announces went out, is then counted in it).
	IdleTurns bool
	// Settle is how long an idle gateway is left after /readyz says 200
	// before its memory is read (start-up work that runs after ready, such
	// as the sandbox probe, is done by then).
	Settle time.Duration
	Log    io.Writer // progress lines; nil for none
}

// Sample is one binary's figures from one round: medians.
type Sample struct {
	Ready    time.Duration // process start → /readyz 200
	ReadyCPU time.Duration // the gateway's CPU time when ready (steadier than Ready on a busy machine)
	RSS      int64         // idle, Settle after ready
	RSSAnon  int64
	RSSFile  int64
	BusyRSS  int64         // after the turns and SPAWN 8s
	Turn     time.Duration // POST "SAY" → the reply on /api/events
	Spawn8   time.Duration // POST "SPAWN 8" → the 8th announce on /api/events
	// TurnCPU and Spawn8CPU are the gateway's CPU time from the POST to
	// that entry (medians): steadier than the wall times on a busy machine.
	TurnCPU, Spawn8CPU time.Duration
}

// Compare runs the rounds and returns [round][binary] samples.
func Compare(ctx context.Context, o CompareOptions) ([][2]Sample, error) {
	o.Rounds, o.Starts, o.Turns = cmp.Or(o.Rounds, 2), cmp.Or(o.Starts, 5), cmp.Or(o.Turns, 5)
	if o.Settle <= 0 {
		o.Settle = 2 * time.Second
	}
	for i, b := range o.Bins {
		if b == "" {
			return nil, fmt.Errorf("compare: binary %d not set", i+1)
		}
		abs, err := filepath.Abs(b)
		if err != nil {
			return nil, err
		}
		o.Bins[i] = abs
		if o.Names[i] == "" {
			o.Names[i] = filepath.Base(b)
		}
	}
	logf := func(format string, a ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", a...)
		}
	}
	model, err := harness.StartModel(harness.ModelOptions{})
	if err != nil {
		return nil, err
	}
	defer model.Close()
	out := make([][2]Sample, o.Rounds)
	for r := range o.Rounds {
		// Starts alternate A, B, A, B … so a burst of load on the machine
		// falls on both.
		var ready, cpu, rss, anon, file [2][]time.Duration
		for range o.Starts {
			for i, bin := range o.Bins {
				s, err := startIdle(ctx, bin, model.URL, o.Settle, nil)
				if err != nil {
					return out, fmt.Errorf("%s: %w", o.Names[i], err)
				}
				ready[i] = append(ready[i], s.Ready)
				cpu[i] = append(cpu[i], s.ReadyCPU)
				rss[i] = append(rss[i], time.Duration(s.RSS))
				anon[i] = append(anon[i], time.Duration(s.RSSAnon))
				file[i] = append(file[i], time.Duration(s.RSSFile))
			}
		}
		for i, bin := range o.Bins {
			s := &out[r][i]
			s.Ready, s.ReadyCPU, s.RSS, s.RSSAnon, s.RSSFile = median(ready[i]), median(cpu[i]), int64(median(rss[i])), int64(median(anon[i])), int64(median(file[i]))
			if !o.NoTurns {
				if _, err := startIdle(ctx, bin, model.URL, 0, func(gw *harness.Gateway) error {
					if err := turns(ctx, gw, o.Turns, o.IdleTurns, s); err != nil {
						return err
					}
					p, err := harness.ReadProc(gw.Pid())
					s.BusyRSS = p.RSS
					return err
				}); err != nil {
					return out, fmt.Errorf("%s: %w", o.Names[i], err)
				}
			}
			logf("round %d %-10s ready=%s cpu=%s idleRSS=%.1fMiB (anon %.1f, file %.1f) turn=%s spawn8=%s", r+1, o.Names[i],
				s.Ready.Round(100*time.Microsecond), s.ReadyCPU.Round(100*time.Microsecond), mib(s.RSS), mib(s.RSSAnon), mib(s.RSSFile),
				s.Turn.Round(100*time.Microsecond), s.Spawn8.Round(100*time.Microsecond))
		}
	}
	return out, nil
}

// CompareTable renders samples as the table docs/performance.md shows:
// each round's figures of A and B and the ratio B/A.
func CompareTable(o CompareOptions, samples [][2]Sample) string {
	row := func(name string, f func(Sample) float64, unit string) string {
		s := fmt.Sprintf("| %s |", name)
		for _, sm := range samples {
			a, b := f(sm[0]), f(sm[1])
			ratio := "—"
			if a > 0 {
				ratio = fmt.Sprintf("%.2f×", b/a)
			}
			s += fmt.Sprintf(" %.1f → %.1f %s (%s) |", a, b, unit, ratio)
		}
		return s + "\n"
	}
	head := fmt.Sprintf("| %s → %s |", cmp.Or(o.Names[0], "A"), cmp.Or(o.Names[1], "B"))
	sep := "|---|"
	for i := range samples {
		head += fmt.Sprintf(" round %d |", i+1)
		sep += "---|"
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return head + "\n" + sep + "\n" +
		row(fmt.Sprintf("start → /readyz 200 (median of %d)", cmp.Or(o.Starts, 5)), func(s Sample) float64 { return ms(s.Ready) }, "ms") +
		row("… its CPU time until ready", func(s Sample) float64 { return ms(s.ReadyCPU) }, "ms") +
		row("idle RSS", func(s Sample) float64 { return mib(s.RSS) }, "MiB") +
		row("… RssAnon", func(s Sample) float64 { return mib(s.RSSAnon) }, "MiB") +
		row("… RssFile", func(s Sample) float64 { return mib(s.RSSFile) }, "MiB") +
		row("RSS after the turns below", func(s Sample) float64 { return mib(s.BusyRSS) }, "MiB") +
		row(fmt.Sprintf("one plain turn (median of %d)", cmp.Or(o.Turns, 5)), func(s Sample) float64 { return ms(s.Turn) }, "ms") +
		row("… the gateway's CPU time during it", func(s Sample) float64 { return ms(s.TurnCPU) }, "ms") +
		row(fmt.Sprintf("SPAWN 8 → all announced (median of %d)", cmp.Or(o.Turns, 5)), func(s Sample) float64 { return ms(s.Spawn8) }, "ms") +
		row("… the gateway's CPU time during it", func(s Sample) float64 { return ms(s.Spawn8CPU) }, "ms")
}

// startIdle starts bin on a fresh state dir, times it to ready, reads its
// memory settle later, then runs use (when set) and stops it.
func startIdle(ctx context.Context, bin, modelURL string, settle time.Duration, use func(*harness.Gateway) error) (Sample, error) {
	var s Sample
	dir, err := os.MkdirTemp("", "herald-compare-")
	if err != nil {
		return s, err
	}
	defer os.RemoveAll(dir)
	addr, err := harness.FreeAddr()
	if err != nil {
		return s, err
	}
	cfg := harness.Config{Listen: addr, ModelURL: modelURL, MainConcurrent: 8, Subagents: 8, Children: 1000, GraceSeconds: 5, NoMaxStreams: true}
	cfgPath := filepath.Join(dir, "herald.json5")
	if err := cfg.Write(cfgPath); err != nil {
		return s, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	start := time.Now()
	gw, err := harness.StartGateway(bin, cfgPath, filepath.Join(dir, "state"), filepath.Join(dir, "gateway.log"), "http://"+addr)
	if err != nil {
		return s, err
	}
	defer func() { _ = gw.Term(15 * time.Second) }()
	if err := gw.WaitReady(ctx); err != nil {
		return s, err
	}
	s.Ready = time.Since(start)
	if s.ReadyCPU, err = harness.ThreadCPU(gw.Pid()); err != nil {
		return s, err
	}
	if settle > 0 {
		select {
		case <-time.After(settle):
		case <-ctx.Done():
			return s, ctx.Err()
		}
		p, err := harness.ReadProc(gw.Pid())
		if err != nil {
			return s, err
		}
		s.RSS, s.RSSAnon, s.RSSFile = p.RSS, p.RSSAnon, p.RSSFile
	}
	if use != nil {
		return s, use(gw)
	}
	return s, nil
}

// turns times n plain turns and n SPAWN 8s, each in a conversation of its
// own, after one of each to warm up; it sets s's medians. With idle, each
// starts once the gateway is quiet.
func turns(ctx context.Context, gw *harness.Gateway, n int, idle bool, s *Sample) error {
	web := harness.NewWeb(gw.Base, 4)
	cpu := func() time.Duration {
		d, _ := harness.ThreadCPU(gw.Pid())
		return d
	}
	var turnT, spawnT, turnC, spawnC []time.Duration
	for i := range n + 1 {
		if idle {
			quiet(ctx, cpu)
		}
		d, c, err := timed(ctx, web, cpu, fmt.Sprintf("turn-%d", i), fmt.Sprintf("SAY t%d", i), func(m harness.Message) bool { return m.Role == "assistant" }, 1)
		if err != nil {
			return err
		}
		if i > 0 {
			turnT, turnC = append(turnT, d), append(turnC, c)
		}
		if idle {
			quiet(ctx, cpu)
		}
		d, c, err = timed(ctx, web, cpu, fmt.Sprintf("spawn-%d", i), fmt.Sprintf("SPAWN 8 s%d", i), func(m harness.Message) bool { return m.Role == "announce" }, 8)
		if err != nil {
			return err
		}
		if i > 0 {
			spawnT, spawnC = append(spawnT, d), append(spawnC, c)
		}
	}
	s.Turn, s.Spawn8, s.TurnCPU, s.Spawn8CPU = median(turnT), median(spawnT), median(turnC), median(spawnC)
	return nil
}

// quiet waits until the gateway has used no CPU for 20 ms (at most 2 s):
// what the previous item left running (a SPAWN 8's runs ending after
// their announces went out, a panel refresh) is not counted in the next.
func quiet(ctx context.Context, cpu func() time.Duration) {
	deadline := time.Now().Add(2 * time.Second)
	last := cpu()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
		now := cpu()
		if now-last < 200*time.Microsecond {
			return
		}
		last = now
	}
}

// timed opens client's event stream, posts text and returns the time from
// the POST to the want-th entry that match accepts, and the gateway's CPU
// time (cpu) meanwhile.
func timed(ctx context.Context, web *harness.Web, cpu func() time.Duration, client, text string, match func(harness.Message) bool, want int) (time.Duration, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var (
		mu   sync.Mutex
		seen int
		last time.Time
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	ready := make(chan struct{})
	wg.Go(func() {
		_ = web.Events(ctx, client, ready, func(m harness.Message, at time.Time) {
			if !match(m) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if seen++; seen == want {
				last = at
				close(done)
			}
		})
	})
	defer wg.Wait()
	defer cancel()
	select {
	case <-ready:
	case <-ctx.Done():
		return 0, 0, fmt.Errorf("event stream of %s: %w", client, ctx.Err())
	}
	before := cpu()
	posted := time.Now()
	if _, err := web.Post(ctx, client, text); err != nil {
		return 0, 0, err
	}
	select {
	case <-done:
	case <-ctx.Done():
		return 0, 0, errors.New("no answer to " + text + " within 30 s")
	}
	used := cpu() - before
	mu.Lock()
	defer mu.Unlock()
	return last.Sub(posted), used, nil
}

// median of d (unsorted; d is left as it is).
func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return Percentile(s, 50)
}
