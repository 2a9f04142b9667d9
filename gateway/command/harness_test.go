package command

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent"
	"github.com/heraldhq/herald/subagent/subagenttest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// harness wires the commands to a real store, a real sub-agent Manager and
// a fake Anthropic server.
type harness struct {
	t   testing.TB
	m   *subagent.Manager
	db  *store.DB
	cfg *config.Config
	llm *llmtest.Server
	now time.Time
}

const testConfig = `{
  models: { providers: {
    anthropic: { api: "anthropic", baseUrl: "%s", apiKey: "test-key",
      models: [{ id: "claude-test", cost: { input: 3, output: 15 } }] } } },
  agents: {
    defaults: { model: "anthropic/claude-test", subagents: { %s } },
    list: [ { id: "main" } ],
  },
}`

// Requester sessions of two conversations.
const (
	sessA = "agent:main:slack:group:C1:thread:111.1"
	sessB = "agent:main:slack:group:C1:thread:222.2"
	sessC = "agent:main:telegram:dm:42"
)

func newHarness(t testing.TB, limits string, h llmtest.Handler) *harness {
	t.Helper()
	llm := llmtest.NewAnthropic(t, h)
	p := subagenttest.New(t, fmt.Sprintf(testConfig, llm.URL, limits), nil)
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	// A fixed clock keeps the Manager on the fixtures' time, so its archiver
	// does not archive fixture runs whose deadline passed in wall-clock time.
	m := subagent.New(subagent.Deps{
		Config: p.Config, Store: p.Store, Catalog: p.Catalog, Clock: subagenttest.FixedClock(now),
		Tools: p.Tools, Workspace: p.WorkspaceOf,
	})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	subagenttest.StopAtCleanup(t, m)
	return &harness{t: t, m: m, db: p.Store, cfg: p.Config, llm: llm, now: now}
}

// env is the command environment of a conversation, with a fixed clock and
// an Approve that, like the gateway's, resolves only that session's codes.
func (h *harness) env() Env {
	return Env{
		Subagents: h.m, Store: h.db, Config: h.cfg, AgentID: "main",
		AbortTurn: func(string) bool { return false },
		Approve: func(ctx context.Context, sessionKey, code string, approve bool, by string) (*store.Approval, error) {
			a, err := h.db.GetApproval(ctx, code)
			if err != nil {
				return nil, err
			}
			if a.SessionKey != sessionKey {
				return nil, fmt.Errorf("approval %s: %w", code, store.ErrNotFound)
			}
			status := store.ApprovalDenied
			if approve {
				status = store.ApprovalApproved
			}
			return h.db.ResolveApproval(ctx, code, status, by, h.now)
		},
		Now: func() time.Time { return h.now },
	}
}

// do runs text as a command in session and returns the reply.
func (h *harness) do(session, text string) string {
	h.t.Helper()
	return h.doEnv(h.env(), session, text)
}

func (h *harness) doEnv(env Env, session, text string) string {
	h.t.Helper()
	reply, handled := Handle(context.Background(), env, Request{SessionKey: session, SenderID: "U1", Text: text,
		Origin: channels.Origin{Channel: "slack", ChatID: "C1", ChatType: "group"}})
	if !handled {
		h.t.Fatalf("%q was not handled", text)
	}
	return strings.ReplaceAll(reply, h.db.StateDir(), "<state>")
}

// fixture stores a run (and its child session) exactly as given.
func (h *harness) fixture(r store.Run) store.Run {
	h.t.Helper()
	if r.AgentID == "" {
		r.AgentID = "main"
	}
	if r.Model == "" {
		r.Model = "anthropic/claude-test"
	}
	if r.Cleanup == "" {
		r.Cleanup = "keep"
	}
	if r.Depth == 0 {
		r.Depth = 1
	}
	if r.RequesterKey == "" {
		r.RequesterKey = sessA
	}
	r.CostUSD = -1
	child := &store.Session{Key: r.ChildKey, ID: r.ChildSessionID,
		TranscriptPath: h.db.TranscriptPath(r.AgentID, r.ChildSessionID)}
	if err := h.db.CreateRun(context.Background(), &r, child); err != nil {
		h.t.Fatal(err)
	}
	return r
}

// transcript writes a child transcript: entries alternate as given.
func (h *harness) transcript(r store.Run, entries ...store.TranscriptEntry) {
	h.t.Helper()
	tr, err := store.FileTranscripts{}.OpenTranscript(context.Background(), h.db.TranscriptPath(r.AgentID, r.ChildSessionID), store.TranscriptHeader{
		Type: "session", Version: 1, SessionKey: r.ChildKey, SessionID: r.ChildSessionID, AgentID: r.AgentID,
		ParentKey: r.RequesterKey, CreatedAt: r.CreatedAt})
	if err != nil {
		h.t.Fatal(err)
	}
	defer tr.Close()
	for _, e := range entries {
		e.Type = "message"
		if e.Timestamp.IsZero() {
			e.Timestamp = r.CreatedAt
		}
		if err := tr.Append(context.Background(), e); err != nil {
			h.t.Fatal(err)
		}
	}
}

func msg(role, text string) store.TranscriptEntry {
	return store.TranscriptEntry{Role: role, Content: text}
}

func toolCall(name, args string) store.TranscriptEntry {
	calls, _ := json.Marshal([]agent.ToolCall{{ID: "call_1", Name: name, Args: json.RawMessage(args)}})
	return store.TranscriptEntry{Role: "assistant", ToolCalls: calls}
}

func toolResult(name, content string) store.TranscriptEntry {
	res, _ := json.Marshal([]agent.ToolResult{{CallID: "call_1", Name: name, Content: content}})
	return store.TranscriptEntry{Role: "tool", ToolResults: res}
}

// waitRuns waits until session has n runs, all running, and returns them.
func (h *harness) waitRuns(session string, n int) []store.Run {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		runs, err := h.m.Runs(context.Background(), session)
		if err != nil {
			h.t.Fatal(err)
		}
		running := 0
		for _, r := range runs {
			if r.Status == store.StatusRunning {
				running++
			}
		}
		if running == n && len(runs) == n {
			return runs
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("session %s has %d runs, %d running; want %d running", session, len(runs), running, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitOutcome polls the store until every run ended with outcome, within
// bound; it reports how long that took and which runs did not make it.
func (h *harness) waitOutcome(ids []string, outcome string, bound time.Duration) (missing []string) {
	deadline := time.Now().Add(bound)
	for {
		missing = missing[:0]
		for _, id := range ids {
			r, err := h.db.GetRun(context.Background(), id)
			if err != nil || r.Status != store.StatusDone || r.Outcome != outcome {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			return missing
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func golden(t testing.TB, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no golden file %s; run go test -update", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("reply differs from %s\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}

// slowOrEcho blocks sub-agent turns whose last user message starts with
// "slow" (until the request's context ends) and answers everything else.
func slowOrEcho(c llmtest.Call) llmtest.Reply {
	last := c.LastUser()
	if strings.HasPrefix(last, "slow") {
		return llmtest.Reply{Text: "too late", Delay: time.Minute}
	}
	if strings.HasPrefix(last, "Announce step") {
		return llmtest.Reply{Text: "Result:\ndone\n\nNotes:\n(none)"}
	}
	return llmtest.Reply{Text: "reply to: " + last, Usage: agent.Usage{Input: 10, Output: 5}}
}
