// Command herald-load measures a real gateway process under load through
// the web API (see package devtools/load) and prints one summary line:
//
//	go run ./cmd/herald-load -s 100 -m 100 -latency 5s
//	make load S=100 M=100 LATENCY=5s
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/heraldhq/herald/devtools/load"
)

func main() {
	var o load.Options
	flag.IntVar(&o.Conversations, "s", 10, "web conversations, each posting one message")
	flag.IntVar(&o.SubAgents, "m", 10, "sub-agents each message asks for (0: a plain reply)")
	flag.DurationVar(&o.Latency, "latency", time.Second, "the fake model's latency per call")
	flag.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "give up after this long")
	flag.StringVar(&o.Bin, "bin", "", "a built herald binary (default: build ./cmd/herald)")
	flag.StringVar(&o.Dir, "dir", "", "keep config, state and gateway.log here (default: a temp dir, removed)")
	flag.StringVar(&o.ProfileDir, "profile", "", "write cpu.pprof, heap.pprof and goroutine.pprof of the gateway here")
	quiet := flag.Bool("q", false, "print only the summary line")
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
	res, err := load.Run(ctx, o)
	fmt.Println(res)
	if err != nil {
		fmt.Fprintf(os.Stderr, "herald-load: %v\n", err)
		os.Exit(1)
	}
}
