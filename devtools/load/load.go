// Package load measures a real gateway process end to end: S web
// conversations each ask for M sub-agents through the web API, a scripted
// fake model (OpenAI wire format, a fixed latency per call) answers every
// call, and the announces are timestamped as they arrive on /api/events.
// It samples the gateway's RSS, CPU and open files from /proc, optionally
// takes pprof profiles, stops everything it started and returns one
// summary. `make load` and cmd/herald-load run it; docs/performance.md
// holds the figures.
package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/devtools/harness"
)

// Options of one load run.
type Options struct {
	Conversations int           // S
	SubAgents     int           // M per conversation
	Latency       time.Duration // per model call
	ModelTLS      bool          // the fake model speaks HTTPS with HTTP/2 (as real providers) instead of clear-text HTTP/1.1
	Timeout       time.Duration // the whole run, start to last announce
	Bin           string        // a built herald binary; built when empty
	Dir           string        // working dir (config, state, log); a temp dir when empty
	ProfileDir    string        // when set, CPU, heap and goroutine profiles are written here
	Trace         time.Duration // with ProfileDir: an execution trace this long from just before the first spawn answer (trace.out)
	TraceAt       time.Duration // … starting this long after the first spawn answer instead
	PostgresURL   string        // when set, the gateway's state is this PostgreSQL database (state.driver postgres)
	Replicas      int           // gateway processes sharing PostgresURL (default 1); conversations are spread over them
	Serial        bool          // post one conversation's message only after the previous one's replies all arrived (a loop of turns)
	Timeline      bool          // put Result.Timeline together (when each step's Nth event happened)
	MaxConns      int           // the fake provider's maxConnections (0: the default, a quarter of the open-file limit)
	Log           io.Writer     // progress lines; nil for none
}

// Result is what one run measured.
type Result struct {
	Options
	Runs, Announced   int           // with M=0: Announced counts the replies
	StartToReady      time.Duration // process start → /readyz 200
	IdleRSS           int64         // after ready, before any message
	PeakRSS           int64         // highest sample during the run
	PeakFDs           int           // highest open file count
	SpawnToAll        time.Duration // the model's first spawn answer → the last announce
	PostToAll         time.Duration // the first POST → the last announce
	FirstAnnounce     time.Duration // the first POST → the first announce
	AnnounceP50       time.Duration // the POSTs → each announce, median
	AnnounceP99       time.Duration // … 99th percentile
	CPU               time.Duration // gateway CPU from the first POST to the last announce
	ModelCalls        int64
	ModelFloor        time.Duration // what the model alone needs from the first spawn: a work turn and an announce step
	GatewayOverheadMs float64       // CPU per sub-agent run (with M=0: per turn)
	PerReplica        []int         // with replicas: runs each one ran to their end
	Timeline          Timeline      // with Options.Timeline
}

// String is the one summary line.
func (r Result) String() string {
	store := "sqlite"
	if r.PostgresURL != "" {
		store = "postgres"
	}
	wire := "http1"
	if r.ModelTLS {
		wire = "h2tls"
	}
	perReplica := ""
	if r.Replicas > 1 {
		perReplica = fmt.Sprintf(" replicas=%d runs/replica=%v", r.Replicas, r.PerReplica)
	}
	return fmt.Sprintf("load: store=%s model=%s%s S=%d M=%d latency=%s runs=%d announced=%d spawn→all=%s post→all=%s first=%s p50=%s p99=%s model-floor=%s "+
		"ready=%s idleRSS=%.1fMiB peakRSS=%.1fMiB peakFDs=%d cpu=%s cpu/run=%.3fms modelCalls=%d",
		store, wire, perReplica, r.Conversations, r.SubAgents, r.Latency, r.Runs, r.Announced, r.SpawnToAll.Round(time.Millisecond),
		r.PostToAll.Round(time.Millisecond), r.FirstAnnounce.Round(time.Millisecond),
		r.AnnounceP50.Round(time.Millisecond), r.AnnounceP99.Round(time.Millisecond), r.ModelFloor,
		r.StartToReady.Round(100*time.Microsecond), mib(r.IdleRSS), mib(r.PeakRSS), r.PeakFDs,
		r.CPU.Round(time.Millisecond), r.GatewayOverheadMs, r.ModelCalls)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// Run performs one load run. An error means the run could not be measured
// (the gateway failed, or not every announce arrived before the timeout);
// the Result holds what was measured until then.
func Run(ctx context.Context, o Options) (Result, error) {
	o.Conversations, o.SubAgents, o.Replicas = max(o.Conversations, 1), max(o.SubAgents, 0), max(o.Replicas, 1)
	if o.Replicas > 1 && o.PostgresURL == "" {
		return Result{Options: o}, errors.New("load: replicas share a PostgreSQL state: set PostgresURL (-postgres)")
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	res := Result{Options: o, Runs: o.Conversations * o.SubAgents}
	logf := func(format string, a ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", a...)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()

	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "herald-load-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	bin := o.Bin
	if bin == "" {
		logf("building herald …")
		b, err := harness.BuildHerald(ctx, dir)
		if err != nil {
			return res, err
		}
		bin = b
	}
	model, err := harness.StartModel(harness.ModelOptions{Latency: o.Latency, TLS: o.ModelTLS})
	if err != nil {
		return res, err
	}
	defer model.Close()

	var extra []string
	pprofAddr := ""
	if o.ProfileDir != "" {
		if pprofAddr, err = harness.FreeAddr(); err != nil {
			return res, err
		}
		extra = append(extra, "--pprof", pprofAddr)
	}
	// The replicas: the first one is sampled and profiled; CPU is summed.
	gws := make([]*harness.Gateway, o.Replicas)
	defer func() {
		for _, gw := range gws {
			if gw == nil {
				continue
			}
			if err := gw.Term(15 * time.Second); err != nil {
				logf("stopping a gateway: %v", err)
			}
		}
	}()
	start := time.Now()
	for i := range gws {
		gwDir := dir
		if o.Replicas > 1 {
			gwDir = filepath.Join(dir, fmt.Sprintf("replica-%d", i))
			if err := os.MkdirAll(gwDir, 0o700); err != nil {
				return res, err
			}
		}
		addr, err := harness.FreeAddr()
		if err != nil {
			return res, err
		}
		cfgPath := filepath.Join(gwDir, "herald.json5")
		cfg := harness.Config{Listen: addr, ModelURL: model.URL, MainConcurrent: o.Conversations,
			Subagents: max(res.Runs, 1), Children: max(o.SubAgents, 1), GraceSeconds: 5,
			// Within the default of channels.web.maxStreams (serial: one
			// stream at a time), leave the key out: builds older than it
			// (-bin of an older commit) start.
			NoMaxStreams: o.Serial || o.Conversations <= 60, MaxConnections: o.MaxConns}
		if o.PostgresURL != "" {
			cfg.Extra = fmt.Sprintf("state: { driver: \"postgres\", url: %q },", o.PostgresURL)
		}
		if o.Replicas > 1 {
			cfg.ReplicaID = fmt.Sprintf("load-%d", i)
		}
		if err := cfg.Write(cfgPath); err != nil {
			return res, err
		}
		args := extra
		if i > 0 {
			args = nil
		}
		gws[i], err = harness.StartGatewayEnv(model.Env(), bin, cfgPath, filepath.Join(gwDir, "state"), filepath.Join(gwDir, "gateway.log"), "http://"+addr, args...)
		if err != nil {
			return res, err
		}
	}
	for _, gw := range gws {
		if err := gw.WaitReady(ctx); err != nil {
			return res, err
		}
	}
	res.StartToReady = time.Since(start)
	gw := gws[0]
	pid := gw.Pid()
	if p, err := harness.ReadProc(pid); err == nil {
		res.IdleRSS, res.PeakRSS, res.PeakFDs = p.RSS, p.RSS, p.FDs
	}

	// One event stream per conversation, open before anything is posted,
	// on the replica its messages go to.
	webs := make([]*harness.Web, len(gws))
	for i, g := range gws {
		webs[i] = harness.NewWeb(g.Base, o.Conversations*2/len(gws)+2)
	}
	web := func(i int) *harness.Web { return webs[i%len(webs)] }
	var (
		mu                   sync.Mutex
		announced            int
		firstAnn, lastAnn    time.Time
		annAt                []time.Time
		cpuAt                []cpuSample
		allDone              = make(chan struct{})
		progress             = make(chan struct{}, 1)
		streams              sync.WaitGroup
		streamCtx, endStream = context.WithCancel(ctx)
	)
	defer func() { endStream(); streams.Wait() }()
	// With no sub-agents (M=0) each conversation's reply is what is
	// waited for and counted, and the CPU is per turn.
	want, role := res.Runs, "announce"
	if o.SubAgents == 0 {
		want, role = o.Conversations, "assistant"
	}
	// open opens conversation i's event stream and waits until it is
	// ready; stop closes it.
	open := func(i int) (stop func(), err error) {
		ready := make(chan struct{})
		sctx, cancel := context.WithCancel(streamCtx)
		streams.Go(func() {
			err := web(i).Events(sctx, client(i), ready, func(m harness.Message, at time.Time) {
				if m.Role != role {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				announced++
				if firstAnn.IsZero() {
					firstAnn = at
				}
				lastAnn = at
				annAt = append(annAt, at)
				select {
				case progress <- struct{}{}:
				default:
				}
				if announced == want {
					close(allDone)
				}
			})
			if err != nil && sctx.Err() == nil {
				logf("event stream %s: %v", client(i), err)
			}
		})
		select {
		case <-ready:
			return cancel, nil
		case <-ctx.Done():
			cancel()
			return nil, fmt.Errorf("opening event streams: %w", ctx.Err())
		}
	}
	if !o.Serial {
		for i := range o.Conversations {
			if _, err := open(i); err != nil {
				return res, err
			}
		}
	}

	// Sample the process while the load runs.
	sampleCtx, endSample := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if p, err := harness.ReadProc(pid); err == nil {
				now := time.Now()
				var self time.Duration
				if o.Timeline {
					if q, err := harness.ReadProc(os.Getpid()); err == nil {
						self = q.CPU
					}
				}
				mu.Lock()
				res.PeakRSS, res.PeakFDs = max(res.PeakRSS, p.RSS), max(res.PeakFDs, p.FDs)
				cpuAt = append(cpuAt, cpuSample{at: now, gateway: p.CPU, load: self})
				mu.Unlock()
			}
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
			}
		}
	})
	defer func() { endSample(); sampler.Wait() }()

	cpu0 := cpuOf(gws)
	var profiles sync.WaitGroup
	profCtx, endProfiles := context.WithCancel(ctx)
	defer endProfiles()
	if o.ProfileDir != "" {
		profiles.Go(func() { takeProfiles(profCtx, o, pprofAddr, model, logf) })
	}
	defer profiles.Wait()
	logf("posting %d conversations × %d sub-agents (model latency %s) …", o.Conversations, o.SubAgents, o.Latency)
	posted := time.Now()
	var posts sync.WaitGroup
	errs := make(chan error, o.Conversations)
	perConv := want / o.Conversations
	stopPrev := func() {}
	defer func() { stopPrev() }()
	for i := range o.Conversations {
		if o.Serial {
			// Wait for the previous conversation's replies, close its
			// stream and open this one's (as a browser tab would).
			for i > 0 {
				mu.Lock()
				n := announced
				mu.Unlock()
				if n >= i*perConv {
					break
				}
				select {
				case <-progress:
				case <-gw.Exited():
					return res, fmt.Errorf("the gateway exited during the load; log:\n%s", gw.Tail(20))
				case <-ctx.Done():
					return res, fmt.Errorf("serial: conversation %d's replies did not arrive: %w", i-1, ctx.Err())
				}
			}
			stopPrev()
			stop, err := open(i)
			if err != nil {
				return res, err
			}
			stopPrev = stop
		}
		posts.Go(func() {
			text := fmt.Sprintf("SPAWN %d t%d", o.SubAgents, i)
			if o.SubAgents == 0 {
				text = fmt.Sprintf("SAY t%d", i)
			}
			if _, err := web(i).Post(ctx, client(i), text); err != nil {
				errs <- err
			}
		})
	}
	posts.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return res, err
	}
	var runErr error
	select {
	case <-allDone:
	case <-gw.Exited():
		runErr = fmt.Errorf("the gateway exited during the load; log:\n%s", gw.Tail(20))
	case <-ctx.Done():
		runErr = fmt.Errorf("not every announce arrived within %s", o.Timeout)
	}
	endProfiles()
	cpu1 := cpuOf(gws)
	mu.Lock()
	res.Announced = announced
	if !lastAnn.IsZero() {
		res.PostToAll = lastAnn.Sub(posted)
		res.FirstAnnounce = firstAnn.Sub(posted)
		lat := make([]time.Duration, len(annAt))
		for i, at := range annAt {
			lat[i] = at.Sub(posted)
		}
		slices.Sort(lat)
		res.AnnounceP50, res.AnnounceP99 = Percentile(lat, 50), Percentile(lat, 99)
		if fs := model.FirstSpawn(); !fs.IsZero() {
			res.SpawnToAll = lastAnn.Sub(fs)
		}
	}
	mu.Unlock()
	res.CPU = cpu1 - cpu0
	if o.Replicas > 1 {
		for _, g := range gws {
			b, _ := os.ReadFile(g.Log)
			res.PerReplica = append(res.PerReplica, strings.Count(string(b), `"msg":"sub-agent run ended"`))
		}
	}
	res.GatewayOverheadMs = float64(res.CPU.Microseconds()) / 1000 / float64(want)
	res.ModelCalls = model.Calls()
	res.ModelFloor = 2 * o.Latency
	if o.Timeline {
		mu.Lock()
		ann, cpus := slices.Clone(annAt), slices.Clone(cpuAt)
		mu.Unlock()
		res.Timeline = timeline(model, gw.Log, ann, cpus)
	}
	return res, runErr
}

func client(i int) string { return fmt.Sprintf("load-%d", i) }

// cpuOf sums the CPU time the gateways used so far.
func cpuOf(gws []*harness.Gateway) time.Duration {
	var sum time.Duration
	for _, g := range gws {
		if p, err := harness.ReadProc(g.Pid()); err == nil {
			sum += p.CPU
		}
	}
	return sum
}

// takeProfiles writes CPU profiles of the whole load, in slices of
// cpuSlice until ctx ends (cpu-001.pprof, …; pprof merges them; the first
// lasts the model's latency, so that cpu-002 starts with the spawn
// answers), and heap
// and goroutine profiles while the runs are in flight (half a latency into
// the announce steps).
const cpuSlice = 2 * time.Second

func takeProfiles(ctx context.Context, o Options, addr string, model *harness.Model, logf func(string, ...any)) {
	if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
		logf("profiles: %v", err)
		return
	}
	get := func(path, file string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			logf("profile %s: %v", path, err)
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			if ctx.Err() == nil {
				logf("profile %s: %s %v", path, resp.Status, err)
			}
			return
		}
		if err := os.WriteFile(filepath.Join(o.ProfileDir, file), b, 0o644); err != nil {
			logf("profile %s: %v", path, err)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 1; ctx.Err() == nil; i++ {
			// The first slice lasts the model's latency (whole seconds), so
			// the later ones start about when the spawn answers arrive.
			secs := int(cpuSlice / time.Second)
			if i == 1 && o.Latency >= time.Second {
				secs = int(o.Latency / time.Second)
			}
			get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), fmt.Sprintf("cpu-%03d.pprof", i))
		}
	})
	if o.Trace == 0 {
		// Without -trace, one second of the execution trace from the
		// load's second second on: where a turn waits (go tool trace).
		// One trace at a time: -trace takes its own.
		wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			get("/debug/pprof/trace?seconds=1", "trace.out")
		})
	}
	// In flight: the first spawn answer plus 0.75 latencies (the work
	// calls), plus 1.5 (the announce calls).
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	if o.Trace > 0 {
		// An execution trace from just before the first spawn answer: the
		// spawns registered and the children's first calls made.
		wg.Go(func() {
			for {
				calls := model.Arrivals(harness.CallSpawn)
				if len(calls) > 0 && time.Until(calls[0].Add(o.Latency+o.TraceAt)) < 200*time.Millisecond {
					break
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
			get(fmt.Sprintf("/debug/pprof/trace?seconds=%g", o.Trace.Seconds()), "trace.out")
		})
	}
	// Until the first spawn answer plus frac latencies; false when the
	// load ended first.
	until := func(frac float64) bool {
		for model.FirstSpawn().IsZero() || time.Now().Before(model.FirstSpawn().Add(time.Duration(float64(o.Latency)*frac))) {
			select {
			case <-ctx.Done():
				return false
			case <-t.C:
			}
		}
		return true
	}
	// What is live (heap?gc=1 collects first; memstats then reads the
	// live heap as HeapAlloc) at two marks: the children in their work
	// calls, then in their announce calls (docs/performance.md, memory
	// per call in flight: the heap).
	live := func(prefix string) {
		get("/debug/pprof/heap?gc=1", prefix+"heap-live.pprof")
		get("/debug/pprof/heap?debug=1", prefix+"memstats-live.txt")
	}
	if !until(0.75) {
		wg.Wait()
		return
	}
	live("work-")
	get("/debug/pprof/goroutine", "work-goroutine.pprof")
	if !until(1.5) {
		wg.Wait()
		return
	}
	get("/debug/pprof/heap", "heap.pprof")
	get("/debug/pprof/heap?debug=1", "memstats.txt") // ends with runtime.MemStats: stacks vs heap
	get("/debug/pprof/goroutine", "goroutine.pprof")
	live("")
	wg.Wait()
	logf("profiles in %s (go tool pprof -top %s/cpu-*.pprof)", o.ProfileDir, o.ProfileDir)
}
