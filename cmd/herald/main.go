// Command herald is the Herald chat gateway: `herald gateway` runs the
// daemon; `herald config validate`, `herald runs list|info` and
// `herald sessions list` read the same config and state for operators.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/heraldhq/herald/admin"
	"github.com/heraldhq/herald/channels"
	_ "github.com/heraldhq/herald/channels/all"          // every channel module registers itself
	_ "github.com/heraldhq/herald/cmd/herald/stackstart" // one stack growth before package init (its doc)
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/gateway"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent"
)

// usageText is usage with the registered channels named (the registry, so
// a new channel needs no edit here).
func usageText() string {
	return strings.Replace(usage, "{{channels}}", strings.Join(channelNames(), ","), 1)
}

// channelNames names the registered channel modules.
func channelNames() []string {
	var names []string
	for _, m := range channels.Modules() {
		names = append(names, string(m.Name))
	}
	return names
}

const usage = `Usage: herald <command> [flags]

Commands:
  init                    write a commented starter config (asks on a terminal; else
                          --channel web,{{channels}} --provider anthropic|openai|
                          openai-compatible|demo) [--coding-agent codex,claude];
                          --force overwrites an existing file
  gateway                 run the daemon (web chat on gateway.http.listen, default 127.0.0.1:8790)
  version                 print the module version, VCS revision and time, and the Go version
  config validate         check the config file and print every problem
  doctor                  check the config, the state dir, the listener, every provider,
                          channel and MCP server against its real endpoint; exit 1 on a failure
  reload                  check the config, then make the running gateway re-read it
                          (same as SIGHUP); prints what changed, exit 1 if rejected
  runs list               list sub-agent runs (newest first)
  runs info <runId>       show one run
  runs stop <runId>       stop a run and the runs below it (asks the running gateway)
  sessions list           list sessions
  transcripts tail [-f] <sessionKey>
                          print the session's transcript as JSONL (from the file, or from
                          PostgreSQL with state.driver postgres); -f: keep printing new lines
  backup FILE             write a consistent copy of the state database to FILE (safe while running)
  outbox list             list the outbox, newest first (--pending: only what is not delivered yet;
                          --failed: refused by the channel; --dead: dead letters, SPEC §27)
  outbox retry|drop <id>  send a failed or dead item again (attempts and age reset), or drop it
  intake list             list inbound messages, newest first (--owed: only those whose turn is owed)
  schedules list          list schedules (config, chat and tool) with state, next due time and counts
  usage [--json]          model spend (UTC) today and this month: in total, per agent,
                          conversation and model, and the five costliest runs
  (list commands, mcp list included, take --json; runs/sessions/outbox/intake list take --limit N)
  mcp list                list MCP servers with their state and tools (from the running
                          gateway, else by starting each server briefly); exit 1 if one is down
  skills list             each agent's skills (name, description, SKILL.md path) and the
                          malformed SKILL.md files, which are skipped

Flags (every command):
  --config FILE           config file (else $HERALD_CONFIG, else ~/.herald/herald.json5;
                          when that default file is missing, the built-in default is used)
  --state-dir DIR         state dir (else $HERALD_STATE_DIR, else ~/.herald)
  --log-format json|console
  --log-level debug|info|warn|error
  --pprof ADDR            gateway: serve net/http/pprof on a loopback address (profiling)
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type flags struct {
	config, stateDir, logFormat, logLevel string
	limit                                 int
	pprof                                 string   // gateway only: loopback address for net/http/pprof
	json, pending                         bool     // list commands: JSON output; outbox list: pending only
	failed, dead, owed                    bool     // outbox list: failed or dead only; intake list: owed only
	channels                              listFlag // init: channels to configure
	provider                              string   // init: model provider
	coding                                listFlag // init: ACP coding agents to add
	force                                 bool     // init: overwrite an existing config
	follow                                bool     // transcripts tail: keep printing
}

// listFlag is a flag that may be repeated or hold a comma-separated list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, w := range splitList(v) {
		if !slices.Contains(*l, w) {
			*l = append(*l, w)
		}
	}
	return nil
}

func parse(name string, args []string, stderr io.Writer) (*flags, []string, error) {
	f := &flags{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usageText()) }
	fs.StringVar(&f.config, "config", "", "config file")
	fs.StringVar(&f.stateDir, "state-dir", "", "state dir")
	fs.StringVar(&f.logFormat, "log-format", "", "json or console")
	fs.StringVar(&f.logLevel, "log-level", "", "debug, info, warn or error")
	fs.IntVar(&f.limit, "limit", 50, "rows to list")
	fs.StringVar(&f.pprof, "pprof", "", "gateway: serve net/http/pprof on this loopback address")
	fs.BoolVar(&f.json, "json", false, "list commands: print JSON")
	fs.BoolVar(&f.pending, "pending", false, "outbox list: only messages not yet delivered or failed")
	fs.BoolVar(&f.failed, "failed", false, "outbox list: only messages a channel refused for good")
	fs.BoolVar(&f.dead, "dead", false, "outbox list: only dead letters (outbox.maxAttempts or outbox.maxAgeHours passed)")
	fs.BoolVar(&f.owed, "owed", false, "intake list: only messages whose turn is owed")
	fs.Var(&f.channels, "channel", "init: a channel to configure (web or a registered one: "+strings.Join(channelNames(), ", ")+"); repeat or comma-separate")
	fs.StringVar(&f.provider, "provider", "", "init: the model provider (anthropic, openai, openai-compatible, demo)")
	fs.BoolVar(&f.force, "force", false, "init: overwrite an existing config file")
	fs.Var(&f.coding, "coding-agent", "init: add a coding agent as a sub-agent over ACP ("+strings.Join(initCodingAgents, ", ")+"); repeat or comma-separate")
	fs.BoolVar(&f.follow, "f", false, "transcripts tail: keep printing lines as they are appended")
	fs.BoolVar(&f.follow, "follow", false, "transcripts tail: keep printing lines as they are appended")
	// Accept flags before and after positional words.
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return f, rest, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stdout, usageText())
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd := args[0]
	f, rest, err := parse(cmd, args[1:], stderr)
	if err != nil {
		return 2
	}
	switch {
	case cmd == "version" && len(rest) == 0:
		printVersion(stdout)
		return 0
	case cmd == "gateway" && len(rest) == 0:
		return runGateway(f, stderr)
	case cmd == "init" && len(rest) == 0:
		return initCmd(f, os.Stdin, isTerminal(os.Stdin), stdout, stderr)
	case cmd == "doctor" && len(rest) == 0:
		return doctor(f, stdout)
	case cmd == "reload" && len(rest) == 0:
		return reloadCmd(f, stdout, stderr)
	case cmd == "config" && len(rest) == 1 && rest[0] == "validate":
		return validate(f, stdout, stderr)
	case cmd == "runs" && len(rest) == 1 && rest[0] == "list":
		return withStore(f, stderr, func(ctx context.Context, db *store.DB) error { return listRuns(ctx, db, f, stdout) })
	case cmd == "runs" && len(rest) == 2 && rest[0] == "info":
		return withStore(f, stderr, func(ctx context.Context, db *store.DB) error { return runInfo(ctx, db, rest[1], stdout) })
	case cmd == "transcripts" && len(rest) == 2 && rest[0] == "tail":
		return withStore(f, stderr, func(ctx context.Context, db *store.DB) error {
			return tailTranscript(ctx, db, rest[1], f.follow, stdout)
		})
	case cmd == "mcp" && len(rest) == 1 && rest[0] == "list":
		return mcpList(f, stdout, stderr)
	case cmd == "skills" && len(rest) == 1 && rest[0] == "list":
		return skillsList(f, stdout, stderr)
	case cmd == "backup" && len(rest) == 1:
		return withStore(f, stderr, func(ctx context.Context, db *store.DB) error {
			if err := db.Backup(ctx, rest[0]); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "backup written to %s (transcripts: copy %s)\n", rest[0], filepath.Join(db.StateDir(), "transcripts"))
			return nil
		})
	case cmd == "outbox" && len(rest) == 1 && rest[0] == "list":
		if n := countTrue(f.pending, f.failed, f.dead); n > 1 {
			// One state at a time: two used to list the first silently.
			fmt.Fprintln(stderr, "herald: outbox list takes one of --pending, --failed and --dead (none lists every state)")
			return 2
		}
		return withStore(f, stderr, func(ctx context.Context, db *store.DB) error { return listOutbox(ctx, db, f, stdout) })
	case cmd == "outbox" && len(rest) == 2 && (rest[0] == "retry" || rest[0] == "drop"):
		return withConfigStore(f, stderr, func(ctx context.Context, cfg *config.Config, db *store.DB) error {
			return outboxAction(ctx, cfg, db, rest[0], rest[1], stdout)
		})
	case cmd == "runs" && len(rest) == 2 && rest[0] == "stop":
		cfg, path, err := config.OpenState(f.config, nil)
		if err != nil {
			fmt.Fprintf(stderr, "herald: config %s:\n%v\n", path, err)
			return 1
		}
		if err := runsStop(context.Background(), cfg, rest[1], stdout); err != nil {
			fmt.Fprintf(stderr, "herald: %v\n", err)
			return 1
		}
		return 0
	case cmd == "intake" && len(rest) == 1 && rest[0] == "list":
		return withStore(f, stderr, func(ctx context.Context, db *store.DB) error { return listIntake(ctx, db, f, stdout) })
	case cmd == "schedules" && len(rest) == 1 && rest[0] == "list":
		return withStore(f, stderr, func(ctx context.Context, db *store.DB) error { return listSchedules(ctx, db, f, stdout) })
	case cmd == "usage" && len(rest) == 0:
		return withStore(f, stderr, func(ctx context.Context, db *store.DB) error { return usageCmd(ctx, db, f, stdout) })
	case cmd == "sessions" && len(rest) == 1 && rest[0] == "list":
		return withStore(f, stderr, func(ctx context.Context, db *store.DB) error { return listSessions(ctx, db, f, stdout) })
	}
	words := append([]string{cmd}, rest...)
	for _, u := range argUsages {
		if name := strings.Fields(u.name); slices.Equal(words[:min(len(words), len(name))], name) {
			fmt.Fprintf(stderr, "herald: usage: herald %s %s\n  %s\n", u.name, u.args, u.what)
			return 2
		}
	}
	fmt.Fprintf(stderr, "herald: unknown command %q\n\n%s", strings.Join(args, " "), usageText())
	return 2
}

// argUsages are the commands that take arguments: called with the wrong
// number, they say what they take (not "unknown command").
var argUsages = []struct{ name, args, what string }{
	{"transcripts tail", "[-f] <sessionKey>", "a session key from `herald sessions list`"},
	{"runs info", "<runId>", "a runId (or its first characters) or a child session key from `herald runs list`"},
	{"backup", "FILE", "the file to write the copy of the state database to"},
	{"runs stop", "<runId>", "a runId from `herald runs list` (the running gateway stops it)"},
	{"outbox retry", "<id>", "an outbox item id from `herald outbox list --dead` (or --failed)"},
	{"outbox drop", "<id>", "an outbox item id from `herald outbox list`"},
}

// tailTranscript prints the transcript of the session key as JSONL; with
// follow it goes on until SIGINT/SIGTERM.
func tailTranscript(ctx context.Context, db interface {
	store.Sessions
	store.Transcripts
}, key string, follow bool, w io.Writer) error {
	s, err := db.GetSession(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no session %q (herald sessions list shows the keys)", key)
	}
	if err != nil {
		return err
	}
	path := s.TranscriptPath
	if path == "" {
		path = db.TranscriptPath(s.AgentID, s.ID)
	}
	if !follow {
		if found := db.FindTranscript(ctx, path); found != "" {
			path = found
		}
		return db.TailTranscript(ctx, path, false, w)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return db.TailTranscript(ctx, path, true, w)
}

// openState opens the state database the config names.
func openState(ctx context.Context, cfg *config.Config, f *flags) (*store.DB, error) {
	return store.OpenStore(ctx, cfg.State.Driver, cfg.State.URL.Value(), config.ResolveStateDir(f.stateDir, nil))
}

// loadConfig resolves, loads and validates the config; problems go to stderr.
func loadConfig(f *flags, stderr io.Writer) (*config.Config, string, bool) {
	cfg, path, err := config.Open(f.config, nil)
	if err != nil {
		fmt.Fprintf(stderr, "herald: config %s:\n%v\n", path, err)
		defaultFileHint(f, path, stderr)
		return nil, path, false
	}
	return cfg, path, true
}

// defaultFileHint tells whoever ran `make run` (or a bare `herald gateway`)
// after `herald init` why the built-in default no longer applies.
func defaultFileHint(f *flags, path string, stderr io.Writer) {
	if _, explicit := config.ResolvePath(f.config, nil); explicit || path == "" {
		return
	}
	fmt.Fprintf(stderr, "(%s is the default config file, written by `herald init`;\n"+
		"`herald gateway` and `make run` read it whenever it exists: set what it asks for,\n"+
		"move it away to use the built-in default, or pass --config FILE)\n", path)
}

func validate(f *flags, stdout, stderr io.Writer) int {
	_, path, ok := loadConfig(f, stderr)
	if !ok {
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok\n", cmpPath(path)) // no file: the built-in default
	return 0
}

func newLogger(f *flags, cfg *config.Config) (*zap.Logger, error) {
	format := cmp.Or(f.logFormat, cfg.Gateway.LogFormat, "json")
	levelName := cmp.Or(f.logLevel, cfg.Gateway.LogLevel, "info")
	level, err := zapcore.ParseLevel(levelName)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", levelName)
	}
	var zc zap.Config
	switch format {
	case "json":
		zc = zap.NewProductionConfig()
		zc.EncoderConfig.TimeKey = "ts"
		zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	case "console":
		zc = zap.NewDevelopmentConfig()
		zc.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
	default:
		return nil, fmt.Errorf("--log-format %q: want json or console", format)
	}
	zc.Level = zap.NewAtomicLevelAt(level)
	zc.Sampling = nil
	zc.DisableStacktrace = true
	return zc.Build()
}

func runGateway(f *flags, stderr io.Writer) int {
	resumeGC := pauseGC() // until ready (startgc.go)
	defer resumeGC()
	cfg, path, ok := loadConfig(f, stderr)
	if !ok {
		return 1
	}
	log, err := newLogger(f, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "herald: %v\n", err)
		return 2
	}
	defer log.Sync()
	stateDir := config.ResolveStateDir(f.stateDir, nil)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first SIGINT/SIGTERM drains; a second one during the drain exits
	// at once. The watcher ends when runGateway returns.
	returned := make(chan struct{})
	var reloads sync.WaitGroup // the SIGHUP watcher
	defer func() {             // runs before stop: the watchers are gone first
		close(returned)
		reloads.Wait()
	}()
	go func() {
		select {
		case <-ctx.Done():
		case <-returned:
			return
		}
		again := make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(again)
		select {
		case sig := <-again:
			fmt.Fprintf(stderr, "herald: second %v during the drain: exiting now; owed turns stay in the store\n", sig)
			os.Exit(1)
		case <-returned:
		}
	}()
	log.Info("starting", zap.String("config", path), zap.String("stateDir", stateDir))
	if f.pprof != "" {
		stopPprof, err := startPprof(f.pprof, log)
		if err != nil {
			fmt.Fprintf(stderr, "herald: %v\n", err)
			return 2
		}
		defer stopPprof()
	}
	if cfg.State.Driver == store.DriverPostgres {
		log = log.With(zap.String("replicaId", cfg.ReplicaID()))
	}
	// A replica that lost its lease exits at once: the others take its
	// work over, and it must not go on with it meanwhile.
	lost := func(reason string) {
		fmt.Fprintf(stderr, "herald: %s; exiting (status 1) so that no work runs twice\n", reason)
		_ = log.Sync()
		os.Exit(1)
	}
	g, err := gateway.New(ctx, gateway.Options{Config: cfg, StateDir: stateDir, Logger: log, OnLeaseLost: lost, OwnsProcess: true, OnReady: resumeGC})
	if err != nil {
		fmt.Fprintf(stderr, "herald: cannot start: %v\n", err)
		return 1
	}
	fmt.Fprintln(stderr, startedLine(cfg, g.Addr()))
	removePID, err := writePID(stateDir)
	if err != nil {
		fmt.Fprintf(stderr, "herald: %v\n", err)
		return 1
	}
	defer removePID()
	reloads.Add(1)
	go func() { defer reloads.Done(); watchReloads(g, f, log, returned) }()
	if err := g.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "herald: %v\n", err)
		return 1
	}
	return 0
}

// startedLine is what the gateway prints once it serves: the web chat's
// address only when the web chat is on, and the console's (always served).
func startedLine(cfg *config.Config, addr string) string {
	chans := cfg.EnabledChannels()
	model := cfg.AgentModel(cfg.DefaultAgentID())
	if cfg.WebEnabled() {
		also := ""
		if len(chans) > 0 {
			also = "; also " + strings.Join(chans, ", ")
		}
		return fmt.Sprintf("herald: web chat on http://%s/ (model %s%s), console on http://%s/admin", addr, model, also, addr)
	}
	return fmt.Sprintf("herald: serving %s (model %s); the web chat is off, http://%s/ serves the console at /admin, /healthz, /readyz, /metrics and webhooks",
		cmp.Or(strings.Join(chans, ", "), "no channel"), model, addr)
}

// withStore opens the state of the config (state.driver: the SQLite file in
// the state dir, or PostgreSQL) and runs fn on it. It reads only the
// config's state section: an operator listing runs needs no channel token
// or provider key in the shell.
func withStore(f *flags, stderr io.Writer, fn func(context.Context, *store.DB) error) int {
	return withConfigStore(f, stderr, func(ctx context.Context, _ *config.Config, db *store.DB) error { return fn(ctx, db) })
}

// withConfigStore is withStore for a command that also reaches the running
// gateway (gateway.http.listen, gateway.admin.token: read as the file has
// them, like the state section).
func withConfigStore(f *flags, stderr io.Writer, fn func(context.Context, *config.Config, *store.DB) error) int {
	cfg, path, err := config.OpenState(f.config, nil)
	if err != nil {
		fmt.Fprintf(stderr, "herald: config %s:\n%v\n", path, err)
		return 1
	}
	ctx := context.Background()
	db, err := openState(ctx, cfg, f)
	if err != nil {
		fmt.Fprintf(stderr, "herald: %v\n", err)
		return 1
	}
	defer db.Close()
	if err := fn(ctx, cfg, db); err != nil {
		fmt.Fprintf(stderr, "herald: %v\n", err)
		return 1
	}
	return 0
}

func listRuns(ctx context.Context, db store.Runs, f *flags, w io.Writer) error {
	runs, err := db.ListRuns(ctx, store.RunFilter{Limit: f.limit})
	if err != nil {
		return err
	}
	if f.json {
		return writeJSON(w, admin.Runs(runs, time.Now())) // the console's shape
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATUS\tAGENT\tCREATED\tRUNTIME\tTOKENS\tTASK\tREQUESTER")
	for i := range runs {
		r := &runs[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID[:min(8, len(r.ID))], subagent.DisplayStatus(r), r.AgentID,
			r.CreatedAt.Local().Format(time.DateTime), subagent.FormatRuntime(subagent.Runtime(r, time.Now())),
			subagent.FormatTokens(r.TokensIn+r.TokensOut), subagent.TaskTitle(r.Label, r.Task), r.RequesterKey)
	}
	return tw.Flush()
}

func runInfo(ctx context.Context, db interface {
	store.Runs
	store.Transcripts
}, id string, w io.Writer) error {
	runs, err := db.ListRuns(ctx, store.RunFilter{})
	if err != nil {
		return err
	}
	var found *store.Run
	for i := range runs {
		if strings.HasPrefix(runs[i].ID, id) || runs[i].ChildKey == id {
			if found != nil {
				return fmt.Errorf("run %q is ambiguous: give more characters", id)
			}
			found = &runs[i]
		}
	}
	if found == nil {
		return fmt.Errorf("no run matches %q", id)
	}
	r := found
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Local().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "Run:        %s\nStatus:     %s\nOutcome:    %s\nAgent:      %s\nModel:      %s\nLabel:      %s\nTask:       %s\nSession:    %s\nSessionId:  %s\nRequester:  %s\nOrigin:     %s\nTranscript: %s\nCreated:    %s\nStarted:    %s\nEnded:      %s\nRuntime:    %s\nTokens:     in %d / out %d\nCleanup:    %s\nArchive:    %s\nNote:       %s\n",
		r.ID, r.Status, cmp.Or(r.Outcome, "-"), r.AgentID, r.Model, cmp.Or(r.Label, "-"), r.Task, r.ChildKey,
		r.ChildSessionID, r.RequesterKey, r.Origin.String(), cmp.Or(db.FindTranscript(ctx, db.TranscriptPath(r.AgentID, r.ChildSessionID)), db.TranscriptPath(r.AgentID, r.ChildSessionID)+" (gone)"),
		ts(r.CreatedAt), ts(r.StartedAt), ts(r.EndedAt), subagent.FormatRuntime(subagent.Runtime(r, time.Now())),
		r.TokensIn, r.TokensOut, r.Cleanup, ts(r.ArchiveAt), cmp.Or(r.Note, "-"))
	if r.Resumes > 0 {
		fmt.Fprintf(w, "Resumed:    %d× after the gateway stopped\n", r.Resumes)
	}
	return nil
}

func listSessions(ctx context.Context, db store.Sessions, f *flags, w io.Writer) error {
	sessions, err := db.ListSessions(ctx, store.SessionFilter{Limit: f.limit})
	if err != nil {
		return err
	}
	if f.json {
		return writeJSON(w, sessionsJSON(sessions))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tKIND\tAGENT\tUPDATED\tTOKENS\tTRANSCRIPT")
	for _, s := range sessions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Key, s.Kind, s.AgentID, s.UpdatedAt.Local().Format(time.DateTime),
			subagent.FormatTokens(s.TokensIn+s.TokensOut), s.TranscriptPath)
	}
	return tw.Flush()
}

// countTrue is how many of bs are true (flags that exclude each other).
func countTrue(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
