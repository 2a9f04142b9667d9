package gateway_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels/telegram/tgfake"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/devtools/pgtest"
	"github.com/heraldhq/herald/gateway"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/telemetry"
	"github.com/heraldhq/herald/telemetry/otlptest"
)

// traceConfig is the web chat and the demo model, traced to a collector
// ({{otlp}}) and to traces.jsonl in the state dir.
const traceConfig = `{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { demo: { api: "demo", models: [{ id: "demo" }] } } },
  agents: { defaults: { model: "demo/demo" }, list: [{ id: "main" }] },
  channels: { web: { enabled: true } },
  telemetry: { otlp: { endpoint: "{{otlp}}", headers: { "X-Collector-Key": "collector-SECRET-1" } },
               traces: { file: "traces.jsonl" }, recordContent: {{content}} },
}`

// traceSecret is in the message (and so in the sub-agents' tasks and the
// replies); no attribute may hold it unless recordContent is on.
const traceSecret = "zebra-SECRET-4711"

// startTraced starts a traced gateway whose logs the test reads; the
// collector's batches go out every 20 ms.
func startTraced(t *testing.T, content bool) (*testGW, *otlptest.Receiver, *observer.ObservedLogs) {
	t.Helper()
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	rcv := otlptest.New(t)
	core, logs := observer.New(zapcore.DebugLevel)
	testLogger = zap.New(core)
	defer func() { testLogger = nil }()
	cfg := strings.NewReplacer("{{otlp}}", rcv.URL, "{{content}}", fmt.Sprint(content)).Replace(traceConfig)
	return newTestGateway(t, cfg, nil), rcv, logs
}

// waitSpans waits until the collector holds want spans named name in
// total, and returns every span it holds.
func waitSpans(t *testing.T, rcv *otlptest.Receiver, counts map[string]int) []otlptest.Span {
	t.Helper()
	var got []otlptest.Span
	have := map[string]int{}
	if !waitFor(e2eWait, func() bool {
		got = rcv.Spans()
		have = map[string]int{}
		for _, s := range got {
			have[s.Name]++
		}
		for name, n := range counts {
			if have[name] < n {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("collector has spans %v, want at least %v (refused: %v)", have, counts, rcv.Refused())
	}
	return got
}

// TestE2ETraceOneMessage: one web message that spawns two sub-agents is
// one trace — intake, turn, its model calls (GenAI attributes), its two
// sessions_spawn tool calls, each run (a child of the call that spawned
// it) with its own model calls, and a delivery span for the reply and each
// announce — in the collector (OTLP protobuf, with the configured header)
// and the same spans in the traces file. No attribute holds message text,
// and every log line about the message names the trace.
func TestE2ETraceOneMessage(t *testing.T) {
	tg, rcv, logs := startTraced(t, false)
	webPost(t, tg.URL, "tr1", "spawn 2 researchers on "+traceSecret)
	tg.waitDelivered(t, 3) // the reply and two announces

	spans := waitSpans(t, rcv, map[string]int{"herald.intake": 1, "herald.turn": 1, "execute_tool sessions_spawn": 2,
		"herald.run": 2, "herald.deliver": 3, "chat demo": 6})
	byID := map[string]otlptest.Span{}
	traces := map[string]bool{}
	for _, s := range spans {
		byID[s.SpanID] = s
		traces[s.TraceID] = true
	}
	if len(traces) != 1 {
		t.Fatalf("spans in %d traces, want 1: %v", len(traces), spanNames(spans))
	}
	parentName := func(s otlptest.Span) string { return byID[s.ParentSpanID].Name }
	for _, s := range spans {
		switch s.Name {
		case "herald.intake":
			if s.ParentSpanID != "" || s.Attributes["herald.channel"] != "web" || s.Attributes["herald.intake.id"] == nil {
				t.Errorf("intake span %+v: want a root with channel web and the intake id", s)
			}
		case "herald.turn":
			if parentName(s) != "herald.intake" || s.Attributes["herald.turn.outcome"] != "done" {
				t.Errorf("turn span %+v: want a child of the intake, outcome done", s)
			}
		case "chat demo":
			if p := parentName(s); p != "herald.turn" && p != "herald.run" {
				t.Errorf("model call span under %q, want under the turn or a run", p)
			}
			a := s.Attributes
			if a["gen_ai.operation.name"] != "chat" || a["gen_ai.request.model"] != "demo" || a["gen_ai.provider.name"] == nil ||
				a["gen_ai.system"] == nil || a["gen_ai.usage.input_tokens"] == nil || a["gen_ai.usage.output_tokens"] == nil ||
				a["gen_ai.response.finish_reasons"] == nil {
				t.Errorf("model call span lacks GenAI attributes: %v", a)
			}
		case "execute_tool sessions_spawn":
			if parentName(s) != "herald.turn" || s.Attributes["gen_ai.tool.name"] != "sessions_spawn" || s.Attributes["gen_ai.tool.call.id"] == "" ||
				s.Attributes["gen_ai.operation.name"] != "execute_tool" {
				t.Errorf("tool span %+v: want a child of the turn with gen_ai.tool.name and gen_ai.tool.call.id", s)
			}
		case "herald.run":
			if parentName(s) != "execute_tool sessions_spawn" || s.Attributes["herald.run.id"] == nil || s.Attributes["herald.run.outcome"] != "success" {
				t.Errorf("run span %+v: want a child of its sessions_spawn call, with its id and outcome", s)
			}
		case "herald.deliver":
			if p := parentName(s); p != "herald.turn" && p != "herald.run" {
				t.Errorf("delivery span under %q, want under the turn (reply) or a run (announce)", p)
			}
			if s.Attributes["herald.channel"] != "web" || s.Attributes["herald.destination"] == "" || s.Attributes["herald.part"] != int64(1) {
				t.Errorf("delivery span attributes %v, want channel, destination and part", s.Attributes)
			}
		}
		for k, v := range s.Attributes {
			if strings.Contains(fmt.Sprint(v), "SECRET") {
				t.Errorf("span %s attribute %s holds content or a secret: %v", s.Name, k, v)
			}
		}
	}
	for _, h := range rcv.Headers() {
		if h.Get("X-Collector-Key") != "collector-SECRET-1" {
			t.Errorf("an export without the configured header: %v", h)
		}
	}

	// The file holds the same spans (each written as it ended).
	fileSpans, err := telemetry.ReadFile(filepath.Join(tg.StateDir, "traces.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	inFile := map[string]telemetry.FileSpan{}
	for _, s := range fileSpans {
		inFile[s.SpanID] = s
	}
	for _, s := range spans {
		f, ok := inFile[s.SpanID]
		if !ok || f.Name != s.Name || f.TraceID != s.TraceID || f.ParentSpanID != s.ParentSpanID {
			t.Errorf("span %s %s: in the file as %+v (found %v)", s.Name, s.SpanID, f, ok)
		}
	}

	// Every log line about the message from its intake on (its intake,
	// turn, runs and deliveries) names the trace; none holds a collector
	// header. (A channel adapter logs what it received before the
	// message is stored and its trace starts; adapters know no traces.)
	var traceID string
	for id := range traces {
		traceID = id
	}
	about := 0
	for _, e := range logs.All() {
		f := e.ContextMap()
		if strings.Contains(fmt.Sprint(f), "collector-SECRET") {
			t.Errorf("log line holds a collector header: %s %v", e.Message, f)
		}
		if e.LoggerName == "channel" || f["intakeId"] == nil && f["runId"] == nil && f["outboxId"] == nil && f["sessionKey"] != "agent:main:web:dm:tr1" {
			continue
		}
		about++
		if f["traceId"] != traceID {
			t.Errorf("log line %q %v: traceId %v, want %s", e.Message, f, f["traceId"], traceID)
		}
	}
	if about < 5 {
		t.Errorf("only %d log lines about the message", about)
	}
}

// TestE2ETraceRecordContent: with recordContent the message text is in
// the intake span, the tool call's arguments in its span, and the model's
// output in its model call spans.
func TestE2ETraceRecordContent(t *testing.T) {
	tg, rcv, _ := startTraced(t, true)
	webPost(t, tg.URL, "tr2", "spawn 1 researcher on "+traceSecret)
	tg.waitDelivered(t, 2)
	spans := waitSpans(t, rcv, map[string]int{"herald.intake": 1, "execute_tool sessions_spawn": 1, "herald.deliver": 2})
	for _, want := range []struct{ span, attr string }{
		{"herald.intake", "herald.message.text"},
		{"execute_tool sessions_spawn", "gen_ai.tool.call.arguments"},
		{"chat demo", "gen_ai.input.messages"},
		{"herald.deliver", "herald.message.text"},
	} {
		if !slices.ContainsFunc(spans, func(s otlptest.Span) bool {
			return s.Name == want.span && strings.Contains(fmt.Sprint(s.Attributes[want.attr]), traceSecret)
		}) {
			t.Errorf("no %s span with the content in %s", want.span, want.attr)
		}
	}
}

func spanNames(spans []otlptest.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name+"@"+s.TraceID[:8])
	}
	slices.Sort(out)
	return out
}

// TestE2ETraceDeliveryPerPart: a reply Telegram takes in three parts is
// three herald.deliver spans under the turn, one per part (1/3, 2/3, 3/3),
// each with the message id Telegram gave it, in the message's trace; the
// Telegram update's span is the trace's root.
func TestE2ETraceDeliveryPerPart(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	rcv := otlptest.New(t)
	tf := tgfake.New(t, tgToken)
	cfg := fmt.Sprintf(`{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" } },
  channels: { telegram: { enabled: true, botToken: %q, apiUrl: %q }, web: { enabled: false } },
  telemetry: { otlp: { endpoint: %q } },
}`, tgToken, tf.URL(), rcv.URL)
	newTestGateway(t, cfg, func(llmtest.Call) llmtest.Reply { return llmtest.Reply{Text: threeParts} })
	tf.SendText(555, "private", 0, 555, "a long answer, please")
	waitTelegram(t, tf, 3)
	spans := waitSpans(t, rcv, map[string]int{"herald.intake": 1, "herald.turn": 1, "herald.deliver": 3})
	var turn otlptest.Span
	for _, s := range spans {
		if s.Name == "herald.turn" {
			turn = s
		}
	}
	parts := map[int64]bool{}
	for _, s := range spans {
		if s.TraceID != turn.TraceID {
			t.Errorf("span %s in trace %s, want the message's %s", s.Name, s.TraceID, turn.TraceID)
		}
		if s.Name != "herald.deliver" {
			continue
		}
		a := s.Attributes
		part, _ := a["herald.part"].(int64)
		parts[part] = true
		if s.ParentSpanID != turn.SpanID || a["herald.parts"] != int64(3) || a["herald.channel"] != "telegram" ||
			a["herald.destination"] == "" || a["herald.platform.message_id"] == nil {
			t.Errorf("delivery span %+v: want a child of the turn, part n of 3 on telegram with its message id", s)
		}
	}
	if !parts[1] || !parts[2] || !parts[3] {
		t.Errorf("delivered parts %v, want 1, 2 and 3", parts)
	}
}

// TestE2ETraceTurnResumedAfterRestart: a turn cut by a shutdown (its model
// call in flight) stays owed; the next gateway on the same state resumes
// it, and that second herald.turn (herald.resumed) is in the message's
// trace under the same intake span as the cut one, as is the delivery of
// the answer it finally gives.
func TestE2ETraceTurnResumedAfterRestart(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	rcv := otlptest.New(t)
	var mu sync.Mutex
	life, hung := 1, false
	llm := llmtest.NewAnthropic(t, func(llmtest.Call) llmtest.Reply {
		mu.Lock()
		defer mu.Unlock()
		if life == 1 {
			hung = true
			return llmtest.Reply{Text: "never", Delay: 10 * time.Minute}
		}
		return llmtest.Reply{Text: "the answer after the restart"}
	})
	cfg := fmt.Sprintf(`{
  gateway: { shutdownGraceSeconds: 1 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: %q, apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" } },
  channels: { web: { enabled: true } },
  telemetry: { otlp: { endpoint: %q } },
}`, llm.URL, rcv.URL)
	stateDir := t.TempDir()

	first := startStoppable(t, stateDir, cfg)
	webPost(t, first.url, "tr3", "a question")
	if !waitFor(e2eWait, func() bool { mu.Lock(); defer mu.Unlock(); return hung }) {
		t.Fatal("the model call never arrived")
	}
	first.stop(t)
	mu.Lock()
	life = 2
	mu.Unlock()

	second := startStoppable(t, stateDir, cfg)
	defer second.stop(t)
	spans := waitSpans(t, rcv, map[string]int{"herald.intake": 1, "herald.turn": 2, "herald.deliver": 1})
	var intake otlptest.Span
	var turns []otlptest.Span
	for _, s := range spans {
		switch s.Name {
		case "herald.intake":
			intake = s
		case "herald.turn":
			turns = append(turns, s)
		}
	}
	for _, s := range spans {
		if s.TraceID != intake.TraceID {
			t.Errorf("span %s in trace %s, want the message's %s", s.Name, s.TraceID, intake.TraceID)
		}
	}
	cut, resumed := turns[0], turns[1]
	if cut.Attributes["herald.resumed"] == true {
		cut, resumed = resumed, cut
	}
	if cut.ParentSpanID != intake.SpanID || cut.Attributes["herald.turn.outcome"] != "cut" {
		t.Errorf("first turn %+v: want a child of the intake, outcome cut", cut)
	}
	if resumed.ParentSpanID != intake.SpanID || resumed.Attributes["herald.resumed"] != true || resumed.Attributes["herald.turn.outcome"] != "done" {
		t.Errorf("resumed turn %+v: want a child of the intake, herald.resumed, outcome done", resumed)
	}
}

// stoppable is a gateway a test stops before it ends (a restart).
type stoppable struct {
	url    string
	cancel context.CancelFunc
	done   chan error
}

// startStoppable runs a gateway on stateDir (its PostgreSQL database in
// the suite's PostgreSQL run) until stop.
func startStoppable(t *testing.T, stateDir, src string) *stoppable {
	t.Helper()
	cfg, err := config.Parse(t.Name()+".json5", []byte(src), func(string) (string, bool) { return "", false })
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		t.Fatal(err)
	}
	if pgtest.OnPostgres() {
		cfg.State.Driver, cfg.State.URL = store.DriverPostgres, config.Secret(stateURL(t, stateDir))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(context.Background(), gateway.Options{Config: cfg, StateDir: stateDir, Listener: ln,
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &stoppable{url: "http://" + g.Addr(), cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- g.Run(ctx) }()
	(&testGW{URL: s.url}).waitReady(t)
	return s
}

func (s *stoppable) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("gateway.Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("gateway did not stop within 30 s")
	}
}
