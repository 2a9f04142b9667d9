package gateway_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/agent/providers"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/devtools/pgtest"
	"github.com/heraldhq/herald/gateway"
	"github.com/heraldhq/herald/store"
)

// testReadTimeout is gateway.Options.HTTPReadTimeout of the next test
// gateway (0: the default); a test that sets it resets it.
var testReadTimeout time.Duration

// testLogger, when set, is the Logger of the next test gateway (a test that
// reads log lines sets and resets it).
var testLogger *zap.Logger

// testChannels, when set, are extra channels of the next test gateway (a
// test that sets it resets it).
var testChannels []channels.Channel

// testNoWaitReady, when set, makes the next test gateway return without
// waiting for /readyz 200 (a test of the start-up phases sets and resets it).
var testNoWaitReady bool

// testClock, when set, is the clock of the gateways a test starts next
// (archive deadlines, the file retention sweep); nil is the wall clock.
var testClock agent.Clock

// e2eWait bounds every wait of the end-to-end tests.
const e2eWait = 20 * time.Second

// testGW is a whole gateway running in the test process.
type testGW struct {
	G        *gateway.Gateway
	LLM      *llmtest.Server // the fake Anthropic API; nil without a handler
	URL      string          // http://127.0.0.1:<port>, the gateway's HTTP listener
	StateDir string
	// Stop ends the gateway and waits for Run to return (also at cleanup).
	Stop func()
}

// newTestGateway starts a gateway configured by cfgJSON5 and runs it until
// the test ends. With a handler h, a fake Anthropic API answers with h and
// every "{{llm}}" in cfgJSON5 becomes its URL. The gateway listens on a free
// loopback port, logs warnings and errors to the test log, and retries model
// calls almost at once. It returns when /readyz reports every channel up;
// at cleanup it stops the gateway, waits for Run to return, and checks that
// no goroutine running gateway or chat-library code is left behind.
func newTestGateway(t *testing.T, cfgJSON5 string, h llmtest.Handler) *testGW {
	t.Helper()
	return newTestGatewayIn(t, t.TempDir(), cfgJSON5, h)
}

// newTestGatewayIn is newTestGateway on a state dir the test prepared;
// edits change the parsed config before it is validated.
func newTestGatewayIn(t *testing.T, stateDir, cfgJSON5 string, h llmtest.Handler, edits ...func(*config.Config)) *testGW {
	t.Helper()
	// Registered first, so it runs last: after the gateway stopped and the
	// fake LLM closed. The gateway's goroutines carry a label of its own
	// (inherited by every goroutine they start), so the check sees only
	// this gateway's, whatever other tests run meanwhile.
	label := strconv.FormatInt(gatewaySeq.Add(1), 10)
	t.Cleanup(func() { checkGoroutines(t, label) })

	tg := &testGW{StateDir: stateDir}
	if h != nil {
		tg.LLM = llmtest.NewAnthropic(t, h)
		cfgJSON5 = strings.ReplaceAll(cfgJSON5, "{{llm}}", tg.LLM.URL)
	}
	cfg, err := config.Parse(t.Name()+".json5", []byte(cfgJSON5), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("parse test config: %v", err)
	}
	// The disk floor (attachments.minFreeMB, 1 GB by default) is the
	// host's free space: a test gateway keeps 1 MB, so the tests do not
	// refuse files on a machine whose disk is merely full of other work
	// (seen: 507s and "disk is nearly full" at 0.9 GB free). The floor's
	// own tests are in channels/web (quota_test.go).
	cfg.Attachments.MinFreeMB = 1
	for _, edit := range edits {
		edit(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("validate test config: %v", err)
	}
	if pgtest.OnPostgres() && cfg.State.Driver == "sqlite" {
		cfg.State.Driver, cfg.State.URL = store.DriverPostgres, config.Secret(stateURL(t, stateDir))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	var g *gateway.Gateway
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	pprof.Do(context.Background(), pprof.Labels(gatewayLabel, label), func(context.Context) {
		g, err = gateway.New(context.Background(), gateway.Options{
			Config: cfg, StateDir: tg.StateDir, Listener: ln,
			Logger:          cmp.Or(testLogger, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))),
			Providers:       providers.Options{BackoffBase: time.Millisecond, MaxBackoff: 10 * time.Millisecond},
			HTTPReadTimeout: testReadTimeout,
			Channels:        testChannels,
			Clock:           testClock,
		})
		if err == nil {
			go func() { done <- g.Run(ctx) }()
		}
	})
	if err != nil {
		cancel()
		ln.Close()
		t.Fatalf("gateway.New: %v", err)
	}
	tg.G, tg.URL = g, "http://"+g.Addr()
	var stopOnce sync.Once
	tg.Stop = func() {
		stopOnce.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("gateway.Run returned %v after shutdown, want nil", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("gateway.Run did not return within 30s of its context ending")
			}
		})
	}
	t.Cleanup(tg.Stop)
	if !testNoWaitReady {
		tg.waitReady(t)
		// The leak check at cleanup can only fail if it sees the gateway's
		// goroutines while it runs.
		if len(gatewayGoroutines(label)) == 0 {
			t.Fatalf("no goroutine labelled %s=%s runs gateway code: the goroutine check would see nothing", gatewayLabel, label)
		}
	}
	return tg
}

// waitReady waits until /readyz answers 200: the store and every channel up.
func (tg *testGW) waitReady(t *testing.T) {
	t.Helper()
	var last string
	ok := waitFor(e2eWait, func() bool {
		resp, err := http.Get(tg.URL + "/readyz")
		if err != nil {
			last = err.Error()
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = resp.Status + " " + string(b)
		return resp.StatusCode == http.StatusOK
	})
	if !ok {
		t.Fatalf("gateway not ready within %s; last /readyz: %s", e2eWait, last)
	}
}

// outbox returns the outbox counters (pending, delivered, failed).
func (tg *testGW) outbox(t *testing.T) (pending, delivered, failed int) {
	t.Helper()
	p, d, f, err := tg.G.Store().OutboxStats(context.Background())
	if err != nil {
		t.Fatalf("outbox stats: %v", err)
	}
	return p, d, f
}

// waitDelivered waits until the outbox holds exactly n delivered messages,
// none pending and none failed: everything the gateway meant to say was
// said, and nothing more.
func (tg *testGW) waitDelivered(t *testing.T, n int) {
	t.Helper()
	var p, d, f int
	if !waitFor(e2eWait, func() bool {
		p, d, f = tg.outbox(t)
		return p == 0 && d == n && f == 0
	}) {
		t.Fatalf("outbox: %d pending, %d delivered, %d failed; want 0, %d, 0", p, d, f, n)
	}
}

// state describes the gateway's runs and outbox, for a failure message
// that says where a flow stopped.
func (tg *testGW) state(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	p, d, f, err := tg.G.Store().OutboxStats(context.Background())
	fmt.Fprintf(&b, "outbox: %d pending, %d delivered, %d failed (%v)", p, d, f, err)
	runs, err := tg.G.Store().ListRuns(context.Background(), store.RunFilter{})
	if err != nil {
		fmt.Fprintf(&b, "; runs: %v", err)
	}
	for _, r := range runs {
		fmt.Fprintf(&b, "\nrun %.8s %q %s/%s owner %s note %q", r.ID, r.Label, r.Status, r.Outcome, r.Owner, r.Note)
	}
	return b.String()
}

// sessionKeys returns the keys of the top-level (requester) sessions.
func (tg *testGW) sessionKeys(t *testing.T) []string {
	t.Helper()
	list, err := tg.G.Store().ListSessions(context.Background(), store.SessionFilter{Kind: store.KindMain})
	if err != nil {
		t.Fatalf("list sessions: %v", err)
	}
	var keys []string
	for _, s := range list {
		keys = append(keys, s.Key)
	}
	slices.Sort(keys)
	return keys
}

// runsOf returns the sub-agent runs spawned by the requester session key.
func (tg *testGW) runsOf(t *testing.T, key string) []store.Run {
	t.Helper()
	runs, err := tg.G.Store().ListRuns(context.Background(), store.RunFilter{RequesterKey: key})
	if err != nil {
		t.Fatalf("list runs of %s: %v", key, err)
	}
	return runs
}

// waitFor polls cond every 10ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitProgress is waitFor for work whose pace the machine sets: it polls
// cond until it holds and fails (returns false) only when state — what the
// work has done so far — has not changed for stall, or after most. A loaded
// machine (-race beside other builds, 2 cores) makes slow progress, which
// a fixed e2eWait cut short (a run's spawn, three sub-agents, their
// announces: over 20 s at load ~20); a stall still fails after stall.
func waitProgress(stall, most time.Duration, state func() string, cond func() bool) (ok bool, took time.Duration) {
	start := time.Now()
	last, moved, read := state(), start, start
	for {
		if cond() {
			return true, time.Since(start)
		}
		if now := time.Now(); now.Sub(read) >= 250*time.Millisecond { // state is a few store reads
			if s := state(); s != last {
				last, moved = s, now
			}
			read = now
			if now.Sub(moved) > stall || now.Sub(start) > most {
				return false, time.Since(start)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gate holds the fake sub-agents' work until the test opens it, so a test
// can act while runs are in flight. It opens by itself at cleanup (and after
// e2eWait) so no fake LLM request is left hanging.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{ch: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

func (g *gate) wait() {
	select {
	case <-g.ch:
	case <-time.After(e2eWait):
	}
}

// researchModel is the fake LLM of the Slack and Telegram tests. Asked to
// "research", the main agent spawns sub-agents alpha and beta and then says
// so; anything else gets "plain answer to: <text>". A sub-agent waits for
// the gate of its label (nil = no wait), then answers; its announce step
// answers in the Result/Notes form.
func researchModel(gates map[string]*gate) llmtest.Handler {
	return func(c llmtest.Call) llmtest.Reply {
		last := c.LastUser()
		if strings.Contains(c.System, "Sub-agent context") {
			task := "?"
			if i := strings.Index(c.System, "- Task: "); i >= 0 {
				task, _, _ = strings.Cut(c.System[i+len("- Task: "):], "\n")
			}
			if strings.Contains(last, "Announce step") {
				return llmtest.Reply{Text: "Result:\nfindings for " + task + "\n\nNotes:\n(none)"}
			}
			for label, g := range gates {
				if strings.HasPrefix(task, label+":") {
					g.wait()
				}
			}
			return llmtest.Reply{Text: "worked on " + task}
		}
		if n := len(c.Messages); n > 0 && c.Messages[n-1].Role == agent.RoleTool {
			return llmtest.Reply{Text: "Started alpha and beta; their results will follow here."}
		}
		if strings.Contains(last, "research") && slices.Contains(c.Tools, "sessions_spawn") {
			return llmtest.Reply{ToolCalls: []agent.ToolCall{
				{Name: "sessions_spawn", Args: json.RawMessage(`{"task":"alpha: read the first half","label":"alpha"}`)},
				{Name: "sessions_spawn", Args: json.RawMessage(`{"task":"beta: read the second half","label":"beta"}`)},
			}}
		}
		return llmtest.Reply{Text: "plain answer to: " + last}
	}
}

// checkAnnounce checks one announce text: success, the label as its task,
// the sub-agent's findings, and the stats line last.
func checkAnnounce(t *testing.T, text, label string) {
	t.Helper()
	if !strings.HasPrefix(text, "Status: success\nTask: "+label+"\n\nResult:\nfindings for "+label+":") {
		t.Errorf("announce of %s does not start with its status, task and result:\n%s", label, text)
	}
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "Stats: runtime ") || !strings.Contains(last, " • sessionKey agent:main:subagent:") {
		t.Errorf("announce of %s: last line %q is not the stats line", label, last)
	}
}

// gatewayLabel is the pprof label newTestGatewayIn gives a gateway's
// goroutines; gatewaySeq numbers the gateways.
const gatewayLabel = "herald-test-gateway"

var gatewaySeq atomic.Int64

// gatewayGoroutines returns the stacks of the goroutines of the gateway
// labelled label that run Herald code (but not test fakes or tests) or the
// chat libraries' clients (goroutine profile records: a count and a stack).
func gatewayGoroutines(label string) []string {
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		return []string{err.Error()}
	}
	want := fmt.Sprintf("%q:%q", gatewayLabel, label)
	var out []string
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if !strings.Contains(g, "# labels: {") || !strings.Contains(g, want) || strings.Contains(g, "testing.tRunner") || strings.Contains(g, "_test.go") {
			continue
		}
		ours := false
		for _, line := range strings.Split(g, "\n") {
			// #	0x4f5e2a	github.com/heraldhq/herald/gateway.(*Gateway).Run+0x2a	/…/gateway.go:123
			f := strings.Fields(line)
			if len(f) < 3 || f[0] != "#" || !strings.HasPrefix(f[1], "0x") {
				continue
			}
			frame := f[2]
			switch {
			case strings.Contains(frame, "/slackfake.") || strings.Contains(frame, "/tgfake.") ||
				strings.Contains(frame, "/llmtest.") || strings.Contains(frame, "/webtest.") ||
				strings.Contains(frame, "/matrixtest.") || strings.Contains(frame, "/slacktest.") ||
				strings.Contains(frame, "/mcptest.") || strings.Contains(frame, "/discordfake."):
				ours = false
			case strings.HasPrefix(frame, "github.com/heraldhq/herald/"),
				strings.HasPrefix(frame, "github.com/slack-go/slack"),
				strings.HasPrefix(frame, "github.com/go-telegram-bot-api/"),
				strings.HasPrefix(frame, "maunium.net/go/mautrix"),
				strings.HasPrefix(frame, "github.com/bwmarrin/discordgo"):
				ours = true
			default:
				continue
			}
			if !ours {
				break
			}
		}
		if ours {
			out = append(out, g)
		}
	}
	return out
}

// checkGoroutines fails the test when goroutines of the gateway labelled
// label that run gateway code are still there 20 s after it stopped.
func checkGoroutines(t *testing.T, label string) {
	if t.Failed() {
		return // a failed test may leave work behind on purpose; do not pile on
	}
	var left []string
	// 20 s: ending goroutines need the scheduler, which a loaded machine
	// makes wait; a leak stays for good.
	waitFor(20*time.Second, func() bool {
		left = gatewayGoroutines(label)
		return len(left) == 0
	})
	if len(left) > 0 {
		t.Errorf("goroutines of the gateway still run 20s after it stopped:\n%s", strings.Join(left, "\n\n"))
	}
}

// webPost posts text as client to the web chat API and returns the stored
// message's seq; the web channel may still be starting, so a 503 is retried.
func webPost(t *testing.T, base, client, text string) int64 {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"client": client, "text": text})
	var status string
	var out struct {
		SessionKey string `json:"sessionKey"`
		Seq        int64  `json:"seq"`
	}
	ok := waitFor(e2eWait, func() bool {
		resp, err := http.Post(base+"/api/messages", "application/json", bytes.NewReader(body))
		if err != nil {
			status = err.Error()
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		status = resp.Status + " " + string(b)
		if resp.StatusCode == http.StatusServiceUnavailable {
			return false
		}
		if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &out) != nil {
			t.Fatalf("POST /api/messages %q as %s: %s, want 202 {sessionKey, seq}", text, client, status)
		}
		return true
	})
	if !ok {
		t.Fatalf("POST /api/messages %q as %s: %s", text, client, status)
	}
	if want := "agent:main:web:dm:" + client; out.SessionKey != want {
		t.Errorf("POST /api/messages as %s: sessionKey %q, want %q", client, out.SessionKey, want)
	}
	return out.Seq
}

// webEntry is one message of GET /api/messages.
type webEntry struct {
	Seq   int64  `json:"seq"`
	Role  string `json:"role"`
	Text  string `json:"text"`
	RunID string `json:"runId"`
}

// webMessages lists the client's conversation after seq.
func webMessages(t *testing.T, base, client string, after int64) []webEntry {
	t.Helper()
	resp, err := http.Get(base + "/api/messages?client=" + client + "&after=" + strconv.FormatInt(after, 10))
	if err != nil {
		t.Fatalf("GET /api/messages: %v", err)
	}
	defer resp.Body.Close()
	var out struct {
		Messages []webEntry `json:"messages"`
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /api/messages as %s: %s %s", client, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("GET /api/messages as %s: %v", client, err)
	}
	return out.Messages
}

// metric reads one sample of the gateway's /metrics, e.g.
// `herald_outbox_retried_total{kind="announce"}`; a sample not exported
// yet reads 0.
func (tg *testGW) metric(t *testing.T, sample string) float64 {
	t.Helper()
	resp, err := http.Get(tg.URL + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s %v", resp.Status, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: bad value %q", sample, v)
			}
			return f
		}
	}
	return 0
}

// pgURLs maps a state dir to its PostgreSQL database in the PostgreSQL run
// of the suite, so a gateway restarted on a state dir finds its state.
var pgURLs sync.Map

// stateURL is the database URL of the gateway on stateDir (PostgreSQL run).
func stateURL(t *testing.T, stateDir string) string {
	if u, ok := pgURLs.Load(stateDir); ok {
		return u.(string)
	}
	u, _ := pgURLs.LoadOrStore(stateDir, pgtest.URL(t))
	return u.(string)
}

// openTestStore opens the store a gateway on stateDir uses (SQLite in the
// dir, or its PostgreSQL database), for a test that seeds or inspects it.
func openTestStore(t *testing.T, stateDir string) *store.DB {
	t.Helper()
	// A minute: on PostgreSQL this creates the schema in a fresh database,
	// which took over 10 s on the loaded machine (-race, 2 busy cores).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var db *store.DB
	var err error
	if pgtest.OnPostgres() {
		db, err = store.OpenPostgres(ctx, stateURL(t, stateDir), stateDir)
	} else {
		db, err = store.Open(ctx, stateDir)
	}
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// sqliteOnly skips, in the PostgreSQL run, a test about SQLite's files
// (transcript files, open file handles).
func sqliteOnly(t *testing.T) {
	if pgtest.OnPostgres() {
		t.Skip("about SQLite's files")
	}
}

// storeIndependent skips, in the PostgreSQL run, a test of what the store
// plays no part in (how the exec sandbox contains a command): it ran on
// SQLite, and running it again would only double its time.
func storeIndependent(t *testing.T) {
	if pgtest.OnPostgres() {
		t.Skip("the store plays no part in it: it ran on SQLite")
	}
}

// readyz is the body of /readyz.
type readyz struct {
	Ready  bool
	Status string
	Checks map[string]string
}

// waitReadyzStatus waits until url's /readyz answers 503 with status and a
// gateway check containing why; it fails the test with the last answer.
func waitReadyzStatus(t *testing.T, url, status, why string) {
	t.Helper()
	var rz readyz
	if !waitFor(e2eWait, func() bool {
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		rz = readyz{}
		json.NewDecoder(resp.Body).Decode(&rz)
		return resp.StatusCode == http.StatusServiceUnavailable && rz.Status == status &&
			strings.Contains(rz.Checks["gateway"], why)
	}) {
		t.Fatalf("/readyz never answered 503 %q with a gateway check naming %q; last %+v", status, why, rz)
	}
}

// waitProgress gives up when nothing moves for its stall time, and goes
// on while something does (here: three moves, 300 ms apart, each under the
// 400 ms stall, then the condition).
func TestWaitProgressFailsOnlyAStall(t *testing.T) {
	t.Parallel()
	if ok, took := waitProgress(100*time.Millisecond, time.Minute, func() string { return "same" }, func() bool { return false }); ok || took < 100*time.Millisecond {
		t.Errorf("a stall: ok %v after %v, want false after at least 100ms", ok, took)
	}
	start := time.Now()
	step := func() int { return int(time.Since(start) / (300 * time.Millisecond)) }
	if ok, _ := waitProgress(400*time.Millisecond, time.Minute, func() string { return fmt.Sprint(min(step(), 3)) }, func() bool { return step() >= 3 }); !ok {
		t.Error("work that kept moving was given up")
	}
}
