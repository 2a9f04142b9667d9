// Command herald-load measures a real gateway process under load through
// the web API (see package devtools/load) and prints one summary line:
//
//	go run ./cmd/herald-load -s 100 -m 100 -latency 5s
//	make load S=100 M=100 LATENCY=5s
//
// With -sessions it measures bounded memory instead: waves of N distinct
// conversations, each -turns turns, against session.idleMinutes 1, with
// RSS and open files when a wave is answered and after its sessions left
// memory (make load-sessions N=10000).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/heraldhq/herald/devtools/load"
	"github.com/heraldhq/herald/devtools/tracewait"
)

func main() {
	var o load.Options
	flag.IntVar(&o.Conversations, "s", 10, "web conversations, each posting one message")
	flag.IntVar(&o.SubAgents, "m", 10, "sub-agents each message asks for (0: a plain reply)")
	flag.DurationVar(&o.Latency, "latency", time.Second, "the fake model's latency per call")
	flag.BoolVar(&o.ModelTLS, "h2", false, "the fake model speaks HTTPS with HTTP/2, as real providers do (default: clear-text HTTP/1.1)")
	flag.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "give up after this long")
	flag.StringVar(&o.Bin, "bin", "", "a built herald binary (default: build ./cmd/herald)")
	flag.StringVar(&o.Dir, "dir", "", "keep config, state and gateway.log here (default: a temp dir, removed)")
	flag.StringVar(&o.ProfileDir, "profile", "", "write cpu.pprof, heap.pprof, goroutine.pprof and (without -trace) one second of trace.out (go tool trace) of the gateway here, and what is live (heap-live.pprof, memstats-live.txt; work-* half a latency earlier, the children in their work calls)")
	flag.StringVar(&o.PostgresURL, "postgres", "", "keep the gateway's state in this PostgreSQL database (a fresh one: scripts/postgres.sh start)")
	flag.IntVar(&o.Replicas, "replicas", 1, "with -postgres: this many gateway processes share the state; conversations are spread over them")
	flag.BoolVar(&o.Serial, "serial", false, "one conversation at a time: open its event stream, post, wait for its replies, close the stream (a loop of turns; CPU per turn without overlap)")
	flag.DurationVar(&o.Trace, "trace", 0, "with -profile: also write trace.out, a runtime/trace this long from just before the first spawn answer (go tool trace)")
	flag.IntVar(&o.MaxConns, "max-conns", 0, "the fake provider's models.providers.fake.maxConnections (default: the gateway's, a quarter of the open-file limit)")
	flag.DurationVar(&o.TraceAt, "trace-at", 0, "with -trace: start the trace this long after the first spawn answer (e.g. 2×latency: the announces)")
	flag.BoolVar(&o.Timeline, "timeline", false, "after the summary, print when each step's Nth event happened (model calls by kind, spawns registered, runs ended, announces seen), from the model's first spawn answer")
	quiet := flag.Bool("q", false, "print only the summary line")
	sessions := flag.Int("sessions", 0, "measure bounded memory: this many distinct conversations per wave (instead of the sub-agent load)")
	turns := flag.Int("turns", 3, "with -sessions: turns per conversation")
	waves := flag.Int("waves", 2, "with -sessions: waves of new conversations")
	ttft := flag.Int("ttft", 0, "measure time to the first streamed token: this many conversations, one message each (instead of the sub-agent load)")
	streamDelay := flag.Duration("stream-delay", 200*time.Millisecond, "with -ttft: the fake model's pause between streamed pieces")
	uploads := flag.Int("uploads", 0, "measure file uploads: this many web conversations each post one message with a file at once (instead of the sub-agent load)")
	uploadBytes := flag.Int64("upload-bytes", 20_000_000, "with -uploads: bytes of each file")
	compare := flag.String("compare", "", "compare two built binaries, OLD,NEW: start → ready, idle RSS, a plain turn and SPAWN 8, interleaved (scripts/perfcompare.sh builds them)")
	compareNames := flag.String("compare-names", "", "with -compare: names for the two binaries, OLD,NEW")
	rounds := flag.Int("rounds", 2, "with -compare: rounds (each measures OLD then NEW)")
	starts := flag.Int("starts", 5, "with -compare: starts per binary per round (the median is kept)")
	startsOnly := flag.Bool("starts-only", false, "with -compare: measure start and idle memory only, no turns")
	idleTurns := flag.Bool("idle-turns", false, "with -compare: before each timed turn and SPAWN 8, wait until the gateway used no CPU for 20 ms (a message reaching an idle gateway; the previous SPAWN 8's tail not counted)")
	settle := flag.Duration("settle", 2*time.Second, "with -compare: how long after ready the idle memory is read")
	traceWaits := flag.String("trace-waits", "", "read this execution trace (a -profile DIR's trace.out) and print how long none, one, two … of its goroutines ran, and what ended each stretch with none running (devtools/tracewait); nothing else runs")
	uploadAttachments := flag.String("upload-attachments", "", `with -uploads: more fields of the attachments config, e.g. "maxStoredMB: 50, maxTotalMB: 500"`)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "herald-load: unexpected argument %q\n", flag.Arg(0))
		flag.Usage()
		os.Exit(2)
	}
	if !*quiet {
		o.Log = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *traceWaits != "" {
		if err := printTraceWaits(*traceWaits); err != nil {
			fmt.Fprintf(os.Stderr, "herald-load: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if *compare != "" {
		co := load.CompareOptions{Rounds: *rounds, Starts: *starts, NoTurns: *startsOnly, IdleTurns: *idleTurns, Settle: *settle, Log: o.Log}
		bins, names := strings.Split(*compare, ","), strings.Split(*compareNames+",", ",")
		if len(bins) != 2 {
			fmt.Fprintln(os.Stderr, "herald-load: -compare takes two binaries, OLD,NEW")
			os.Exit(2)
		}
		copy(co.Bins[:], bins)
		copy(co.Names[:], names)
		cctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		samples, err := load.Compare(cctx, co)
		fmt.Print(load.CompareTable(co, samples))
		if err != nil {
			fmt.Fprintf(os.Stderr, "herald-load: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if *ttft > 0 {
		tctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		r, err := load.TTFT(tctx, load.TTFTOptions{Conversations: *ttft, Latency: o.Latency, StreamDelay: *streamDelay, Bin: o.Bin, Dir: o.Dir, Log: o.Log})
		fmt.Printf("ttft: conversations=%d model-first-piece=%s stream-delay=%s first-delta p50=%s p95=%s (%d of %d streamed) final p50=%s p95=%s\n",
			*ttft, o.Latency, *streamDelay, load.Percentile(r.First, 50).Round(time.Millisecond), load.Percentile(r.First, 95).Round(time.Millisecond),
			len(r.First), len(r.Final), load.Percentile(r.Final, 50).Round(time.Millisecond), load.Percentile(r.Final, 95).Round(time.Millisecond))
		if err != nil {
			fmt.Fprintf(os.Stderr, "herald-load: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if *uploads > 0 {
		uctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		r, err := load.Uploads(uctx, load.UploadOptions{Conversations: *uploads, Bytes: *uploadBytes, Bin: o.Bin, Dir: o.Dir, Log: o.Log, PostgresURL: o.PostgresURL, Attachments: *uploadAttachments})
		fmt.Printf("uploads: conversations=%d bytes=%d %s\n", *uploads, *uploadBytes, r)
		if err != nil {
			fmt.Fprintf(os.Stderr, "herald-load: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if *sessions > 0 {
		so := load.SessionOptions{Conversations: *sessions, Turns: *turns, Waves: *waves, Bin: o.Bin, Dir: o.Dir, Log: o.Log}
		sctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		samples, err := load.Sessions(sctx, so)
		for i, s := range samples {
			fmt.Printf("sessions: wave=%d conversations=%d turns=%d answered-in=%s loaded=%d rss=%.1fMiB fds=%d | evicted-after=%s rss=%.1fMiB fds=%d\n",
				i+1, so.Conversations, so.Turns, s.Answer.Round(time.Millisecond), s.SessionsLoaded, float64(s.Loaded.RSS)/(1<<20), s.Loaded.FDs,
				s.EvictWait.Round(time.Second), float64(s.Evicted.RSS)/(1<<20), s.Evicted.FDs)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "herald-load: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if o.ProfileDir != "" {
		// herald-load's own CPU (the fake model, its TLS, the event
		// streams' clients) shares the machine with the gateway.
		if err := os.MkdirAll(o.ProfileDir, 0o755); err == nil {
			if f, err := os.Create(filepath.Join(o.ProfileDir, "herald-load-cpu.pprof")); err == nil {
				if pprof.StartCPUProfile(f) == nil {
					defer func() { pprof.StopCPUProfile(); f.Close() }()
				}
			}
		}
	}
	res, err := load.Run(ctx, o)
	fmt.Println(res)
	if o.Timeline {
		fmt.Print(res.Timeline)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "herald-load: %v\n", err)
		os.Exit(1)
	}
}

// printTraceWaits prints tracewait's report of the trace at path.
func printTraceWaits(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	rep, err := tracewait.Read(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }
	fmt.Printf("traced %s; goroutines running:", ms(rep.Traced))
	for n, d := range rep.Running {
		fmt.Printf(" %d: %s", n, ms(d))
	}
	fmt.Println("\nwhat ended the stretches with none running:")
	for _, w := range rep.Waits[:min(len(rep.Waits), 25)] {
		fmt.Printf("%10s  %s\n", ms(w.Time), w.What)
	}
	return nil
}
