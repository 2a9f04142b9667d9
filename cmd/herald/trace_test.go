package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/telemetry"
	"github.com/heraldhq/herald/telemetry/otlptest"
)

// traceLLM is the fake model of TestTraceAcrossKill9: the main agent
// spawns "quick" and "slow"; quick answers at once; slow's model call
// hangs until the gateway is killed.
type traceLLM struct {
	mu   sync.Mutex
	hung bool
}

const traceText = "trace the pair: okapi-SECRET-2231"

func (f *traceLLM) handle(c llmtest.Call) llmtest.Reply {
	label := "main"
	if m := labelLine.FindStringSubmatch(c.System); m != nil && strings.Contains(c.System, "Sub-agent context") {
		label = m[1]
	}
	var last agent.Message
	if len(c.Messages) > 0 {
		last = c.Messages[len(c.Messages)-1]
	}
	switch {
	case label == "main" && last.Role == agent.RoleTool:
		return llmtest.Reply{Text: "Spawned the pair."}
	case label == "main":
		var calls []agent.ToolCall
		for _, l := range []string{"quick", "slow"} {
			b, _ := json.Marshal(map[string]string{"task": "look into " + traceText, "label": l})
			calls = append(calls, agent.ToolCall{Name: "sessions_spawn", Args: b})
		}
		return llmtest.Reply{Text: "Spawning.", ToolCalls: calls}
	case strings.Contains(last.Text, "Announce step"):
		return llmtest.Reply{Text: "Result:\n" + label + " result\n\nNotes:\n(none)"}
	case label == "slow":
		f.mu.Lock()
		f.hung = true
		f.mu.Unlock()
		return llmtest.Reply{Text: "never delivered", Delay: 10 * time.Minute}
	}
	return llmtest.Reply{Text: label + " answer"}
}

func (f *traceLLM) isHung() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hung
}

// TestTraceAcrossKill9: one message that spawns two sub-agents is one
// trace even though a real `herald gateway` is SIGKILLed while one of them
// runs: before the kill the collector gets the intake, the turn, its model
// and sessions_spawn calls, the quick run and the deliveries of the reply
// and its announce; after the restart the slow run — announced as unknown
// by the new process — continues the trace from the context stored with
// its run row (a herald.run span with herald.resumed, under the
// sessions_spawn call that made it), and so does its announce's delivery.
// The traces file holds the spans of both processes; no span holds the
// message text; the new process's log line about the run names the trace.
func TestTraceAcrossKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the herald binary and runs it twice")
	}
	bin := buildHerald(t)
	fake := &traceLLM{}
	llm := llmtest.NewAnthropic(t, fake.handle)
	rcv := otlptest.New(t)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // the children export every 50 ms

	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	addr := freeAddr(t)
	base := "http://" + addr
	cfg := fmt.Sprintf(`{
  gateway: { http: { listen: %q }, shutdownGraceSeconds: 5 },
  models: { providers: { fake: { api: "anthropic", baseUrl: %q, apiKey: "k", models: [{ id: "m" }] } } },
  // maxResumes 0: the cut run is not resumed (SPEC §25) but announced
  // unknown by the new process, whose span this test follows.
  agents: { defaults: { model: "fake/m", subagents: { maxResumes: 0 } } },
  channels: { web: { enabled: true } },
  telemetry: { otlp: { endpoint: %q }, traces: { file: "traces.jsonl" } },
}`, addr, llm.URL, rcv.URL)
	cfgPath := filepath.Join(dir, "herald.json5")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	gw1 := startGateway(t, bin, cfgPath, stateDir, filepath.Join(dir, "gateway1.log"))
	defer gw1.dumpLog(t)
	waitReady(t, gw1, base)
	crashPost(t, base, traceText)

	var runs map[string]store.Run
	count := func(name, attr string, val any) int {
		n := 0
		for _, s := range rcv.Spans() {
			if s.Name == name && (attr == "" || s.Attributes[attr] == val) {
				n++
			}
		}
		return n
	}
	waitFor(t, gw1, "quick announced, slow hanging, their spans exported", func() (bool, string) {
		r, err := runsByLabel(stateDir)
		if err != nil {
			return false, err.Error()
		}
		runs = r
		state := fmt.Sprintf("quick %s/%s, slow %s, hung %v, spans %d", r["quick"].Status, r["quick"].Outcome, r["slow"].Status, fake.isHung(), len(rcv.Spans()))
		if r["quick"].Status != store.StatusDone || r["slow"].Status != store.StatusRunning || !fake.isHung() {
			return false, state
		}
		// The reply's and quick's announce's deliveries are the last spans
		// of the first life.
		return count("herald.deliver", "herald.run.id", r["quick"].ID) == 1 && count("herald.deliver", "herald.message.kind", "assistant") == 1, state
	})
	gw1.kill(t)

	gw2 := startGateway(t, bin, cfgPath, stateDir, filepath.Join(dir, "gateway2.log"))
	defer gw2.dumpLog(t)
	waitReady(t, gw2, base)
	slowID := runs["slow"].ID
	waitFor(t, gw2, "slow announced after the restart and its spans exported", func() (bool, string) {
		msgs, err := webMessages(t, base)
		if err != nil {
			return false, err.Error()
		}
		announced := false
		for _, m := range msgs {
			announced = announced || (m.Role == "announce" && m.RunID == slowID)
		}
		return announced && count("herald.deliver", "herald.run.id", slowID) == 1,
			fmt.Sprintf("announced %v, slow's delivery spans %d", announced, count("herald.deliver", "herald.run.id", slowID))
	})

	spans := rcv.Spans()
	byID := map[string]otlptest.Span{}
	traces := map[string]int{}
	names := map[string]int{}
	for _, s := range spans {
		byID[s.SpanID] = s
		traces[s.TraceID]++
		names[s.Name]++
		for k, v := range s.Attributes {
			if strings.Contains(fmt.Sprint(v), "SECRET") {
				t.Errorf("span %s attribute %s holds the message text: %v", s.Name, k, v)
			}
		}
	}
	if len(traces) != 1 {
		t.Fatalf("spans in %d traces, want 1: %v", len(traces), names)
	}
	for name, n := range map[string]int{"herald.intake": 1, "herald.turn": 1, "execute_tool sessions_spawn": 2, "herald.run": 2, "herald.deliver": 3} {
		if names[name] != n {
			t.Errorf("%d %s spans, want %d (all: %v)", names[name], name, n, names)
		}
	}
	var resumed *otlptest.Span
	for i, s := range spans {
		if s.Name == "herald.run" && s.Attributes["herald.run.id"] == slowID {
			resumed = &spans[i]
		}
	}
	switch {
	case resumed == nil:
		t.Errorf("no herald.run span of the slow run: %v", names)
	case resumed.Attributes["herald.resumed"] != true || resumed.Attributes["herald.run.outcome"] != store.OutcomeUnknown:
		t.Errorf("slow run's span %v: want herald.resumed and outcome unknown", resumed.Attributes)
	case byID[resumed.ParentSpanID].Name != "execute_tool sessions_spawn":
		t.Errorf("slow run's span has parent %q, want the sessions_spawn call of the first process", byID[resumed.ParentSpanID].Name)
	}
	var traceID string
	for id := range traces {
		traceID = id
	}

	// The traces file has every span of both lives (each written as it
	// ended, so the kill lost none that had ended).
	inFile, err := telemetry.ReadFile(filepath.Join(stateDir, "traces.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	fileIDs := map[string]bool{}
	for _, s := range inFile {
		fileIDs[s.SpanID] = true
		if s.TraceID != traceID {
			t.Errorf("file span %s in trace %s, want %s", s.Name, s.TraceID, traceID)
		}
	}
	for _, s := range spans {
		if !fileIDs[s.SpanID] {
			t.Errorf("span %s %s is not in the traces file", s.Name, s.SpanID)
		}
	}

	// The new process's line about the run names the trace.
	f, err := os.Open(filepath.Join(dir, "gateway2.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	found := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil || line["runId"] != slowID {
			continue
		}
		found = true
		if line["traceId"] != traceID {
			t.Errorf("log line %q about the slow run: traceId %v, want %s", line["msg"], line["traceId"], traceID)
		}
	}
	if !found {
		t.Error("the second process logged no line about the slow run")
	}
}
