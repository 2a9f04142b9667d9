package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/agent/providers"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

// echoTool answers its "text" argument.
type echoTool struct{}

func (echoTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{Name: "echo", Description: "echo text", Schema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)}
}
func (echoTool) Group() string { return "" }
func (echoTool) Call(ctx context.Context, cc agent.CallContext, args json.RawMessage) (string, error) {
	var a struct{ Text string }
	if err := json.Unmarshal(args, &a); err != nil {
		return "", err
	}
	return `{"echo":"` + a.Text + `"}`, nil
}

func newModel(t *testing.T, h llmtest.Handler) (*agent.Model, *llmtest.Server) {
	t.Helper()
	srv := llmtest.NewAnthropic(t, h)
	p, err := providers.New("anthropic", config.Provider{API: "anthropic", BaseURL: srv.URL, APIKey: "k", Models: []config.Model{{ID: "m"}}}, providers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &agent.Model{Ref: "anthropic/m", ProviderID: "anthropic", ID: "m", Provider: p}, srv
}

func TestTurnWritesTranscriptBeforeNextCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	var linesAtSecondCall int
	model, _ := newModel(t, func(c llmtest.Call) llmtest.Reply {
		if len(c.Messages) == 1 {
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "echo", Args: json.RawMessage(`{"text":"hi"}`)}, {Name: "nope", Args: json.RawMessage(`{}`)}}}
		}
		_, entries, _ := store.FileTranscripts{}.ReadTranscript(context.Background(), path)
		linesAtSecondCall = len(entries)
		return llmtest.Reply{Text: "done", Usage: agent.Usage{Input: 7, Output: 3}}
	})
	s, err := agent.LoadSession(context.Background(), "k", "id", "main", "", path, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Run(context.Background(), agent.Turn{Model: model, Tools: agent.NewRegistry(echoTool{})}, "go")
	if err != nil || res.Text != "done" || res.Iterations != 2 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	// user, assistant (tool calls), a line per tool result: on disk before
	// the second call.
	if linesAtSecondCall != 4 {
		t.Errorf("transcript had %d lines at the second model call, want 4", linesAtSecondCall)
	}
	results := s.History[2].ToolResults
	if len(results) != 2 || results[0].Content != `{"echo":"hi"}` || !results[1].IsError || !strings.Contains(results[1].Content, `unknown tool \"nope\"`) {
		t.Errorf("tool results = %+v", results)
	}
	if res.Usage.Input < 7 || res.Usage.Output < 3 {
		t.Errorf("usage not summed: %+v", res.Usage)
	}
}

func TestTurnStopsAtMaxIterations(t *testing.T) {
	model, srv := newModel(t, func(c llmtest.Call) llmtest.Reply {
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "echo", Args: json.RawMessage(`{"text":"again"}`)}}}
	})
	s := &agent.Session{Key: "k"}
	_, err := s.Run(context.Background(), agent.Turn{Model: model, Tools: agent.NewRegistry(echoTool{}), MaxIterations: 3}, "loop forever")
	if !errors.Is(err, agent.ErrMaxIterations) {
		t.Fatalf("err = %v, want ErrMaxIterations", err)
	}
	if n := srv.Count(); n != 3 {
		t.Errorf("%d model calls, want 3", n)
	}
}

func TestAuthorizerRefusalIsAToolError(t *testing.T) {
	model, _ := newModel(t, llmtest.Script(
		llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "echo", Args: json.RawMessage(`{"text":"x"}`)}}},
		llmtest.Reply{Text: "ok, I will not"},
	))
	s := &agent.Session{Key: "k"}
	deny := func(ctx context.Context, cc agent.CallContext, call agent.ToolCall, tool agent.Tool) error {
		return errors.New("tool echo is denied by the tool policy")
	}
	res, err := s.Run(context.Background(), agent.Turn{Model: model, Tools: agent.NewRegistry(echoTool{}), Authorize: deny}, "try")
	if err != nil || res.Text != "ok, I will not" {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if r := s.History[2].ToolResults[0]; !r.IsError || !strings.Contains(r.Content, "denied by the tool policy") {
		t.Errorf("refusal result = %+v", r)
	}
}

func TestLoadSessionClosesInterruptedToolCalls(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	tr, err := store.FileTranscripts{}.OpenTranscript(context.Background(), path, store.TranscriptHeader{SessionKey: "k", SessionID: "id"})
	if err != nil {
		t.Fatal(err)
	}
	calls, _ := json.Marshal([]agent.ToolCall{{ID: "c1", Name: "echo", Args: json.RawMessage(`{}`)}})
	tr.Append(context.Background(), store.TranscriptEntry{Type: "message", Role: "user", Content: "hi"})
	tr.Append(context.Background(), store.TranscriptEntry{Type: "message", Role: "assistant", ToolCalls: calls})
	tr.Close() // the gateway died before the tool result was written
	model, srv := newModel(t, llmtest.Text("recovered"))
	s, err := agent.LoadSession(context.Background(), "k", "id", "main", "", path, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Run(context.Background(), agent.Turn{Model: model, Tools: agent.NewRegistry(echoTool{})}, "are you there?")
	if err != nil || res.Text != "recovered" {
		t.Fatalf("Run after an interrupted tool call = %+v, %v", res, err)
	}
	last, _ := srv.Last()
	if len(last.Messages) < 3 || last.Messages[2].Role != agent.RoleTool || last.Messages[2].ToolResults[0].Content != agent.InterruptedResult {
		t.Errorf("the interrupted call was not closed with an error result: %+v", last.Messages)
	}
}

// safeEcho is echo declared safe to run again after a crash.
type safeEcho struct{ echoTool }

func (safeEcho) Repeatable() bool { return true }

// A resumed turn runs the tool calls the crash left without results when
// they are safe to run again (it does not mark them interrupted), then goes
// on with the model. (An unsafe one is closed as interrupted: see
// TestLoadSessionClosesInterruptedToolCalls and the kill test of exec.)
func TestResumedTurnRunsPendingToolCalls(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	tr, err := store.FileTranscripts{}.OpenTranscript(context.Background(), path, store.TranscriptHeader{SessionKey: "k", SessionID: "id"})
	if err != nil {
		t.Fatal(err)
	}
	calls, _ := json.Marshal([]agent.ToolCall{{ID: "c1", Name: "echo", Args: json.RawMessage(`{"text":"once"}`)}})
	tr.Append(context.Background(), store.TranscriptEntry{Type: "message", Role: "user", Content: "do it"})
	tr.Append(context.Background(), store.TranscriptEntry{Type: "message", Role: "assistant", ToolCalls: calls})
	tr.Close() // killed while the tool ran
	model, srv := newModel(t, llmtest.Text("done"))
	s, err := agent.LoadSession(context.Background(), "k", "id", "main", "", path, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Run(context.Background(), agent.Turn{Model: model, Tools: agent.NewRegistry(safeEcho{}), Resume: true}, "do it")
	if err != nil || res.Text != "done" {
		t.Fatalf("resumed Run = %+v, %v", res, err)
	}
	last, _ := srv.Last()
	if n := len(last.Messages); n != 3 || last.Messages[0].Text != "do it" || last.Messages[2].Role != agent.RoleTool ||
		strings.Contains(last.Messages[2].ToolResults[0].Content, "gateway stopped") {
		t.Errorf("the model saw %+v; want the user message once, the call and its real result", last.Messages)
	}
}

// prepTool is echo as a Preparer: it records what Prepare was given and
// which calls Call made, in order.
type prepTool struct {
	echoTool
	log *[]string
}

func (t prepTool) Prepare(calls []agent.PreparedCall) {
	ids := make([]string, len(calls))
	for i, c := range calls {
		ids[i] = c.CC.CallID
	}
	*t.log = append(*t.log, "prepare "+strings.Join(ids, ","))
}

func (t prepTool) Done(calls []agent.PreparedCall) {
	ids := make([]string, len(calls))
	for i, c := range calls {
		ids[i] = c.CC.CallID
	}
	*t.log = append(*t.log, "done "+strings.Join(ids, ","))
}

func (t prepTool) Call(ctx context.Context, cc agent.CallContext, args json.RawMessage) (string, error) {
	*t.log = append(*t.log, "call "+cc.CallID)
	if strings.Contains(string(args), "panic") {
		panic("the tool broke")
	}
	return t.echoTool.Call(ctx, cc, args)
}

// A turn cut by a panic in one of the prepared calls still tells the
// Preparer it is done with them, so what it did for the calls never made
// (b here) is not left behind.
func TestPreparerIsDoneWhenACallPanics(t *testing.T) {
	call := func(id, text string) agent.ToolCall {
		return agent.ToolCall{ID: id, Name: "echo", Args: json.RawMessage(`{"text":"` + text + `"}`)}
	}
	model, _ := newModel(t, llmtest.Script(llmtest.Reply{ToolCalls: []agent.ToolCall{call("a", "panic"), call("b", "2")}}))
	var log []string
	s := &agent.Session{Key: "k"}
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Error("the tool's panic did not reach the caller")
			}
		}()
		_, _ = s.Run(context.Background(), agent.Turn{Model: model, Tools: agent.NewRegistry(prepTool{log: &log})}, "go")
	}()
	if want := "prepare a,b; call a; done a,b"; strings.Join(log, "; ") != want {
		t.Errorf("log = %q, want %q", strings.Join(log, "; "), want)
	}
}

// Consecutive calls of a Preparer tool in one response are prepared
// together — only those the Authorizer allows, after it decided each —
// and then each is called and answered in order as alone.
func TestPreparerGetsTheAllowedCallsOfARun(t *testing.T) {
	call := func(id, text string) agent.ToolCall {
		return agent.ToolCall{ID: id, Name: "echo", Args: json.RawMessage(`{"text":"` + text + `"}`)}
	}
	model, _ := newModel(t, llmtest.Script(
		llmtest.Reply{ToolCalls: []agent.ToolCall{call("a", "1"), call("b", "deny"), call("c", "3"), call("d", "4"),
			{ID: "e", Name: "nope"}, call("f", "6")}},
		llmtest.Reply{Text: "done"},
	))
	var log []string
	deny := func(ctx context.Context, cc agent.CallContext, call agent.ToolCall, tool agent.Tool) error {
		log = append(log, "check "+call.ID)
		if strings.Contains(string(call.Args), "deny") {
			return errors.New("echo deny is refused")
		}
		return nil
	}
	s := &agent.Session{Key: "k"}
	res, err := s.Run(context.Background(), agent.Turn{Model: model, Tools: agent.NewRegistry(prepTool{log: &log}), Authorize: deny}, "go")
	if err != nil || res.Text != "done" {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	want := []string{"check a", "check b", "check c", "check d", "prepare a,c,d", "call a", "call c", "call d", "done a,c,d", "check f", "call f"}
	if strings.Join(log, "; ") != strings.Join(want, "; ") {
		t.Errorf("log = %q\nwant %q", log, want)
	}
	rs := s.History[2].ToolResults
	if len(rs) != 6 || rs[0].Content != `{"echo":"1"}` || !rs[1].IsError || !strings.Contains(rs[1].Content, "refused") ||
		rs[2].Content != `{"echo":"3"}` || rs[3].CallID != "d" || !rs[4].IsError || rs[5].Content != `{"echo":"6"}` {
		t.Errorf("tool results = %+v", rs)
	}
}

// TestDeferredInputReachesTheTranscript: a DeferInput turn's message is
// not on disk while its first model call is in flight, is written with
// the answer in the same write, and a turn whose call fails still leaves
// it in the transcript when Run returns (not only at Close).
func TestDeferredInputReachesTheTranscript(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	onDisk := func() []string {
		_, entries, err := store.FileTranscripts{}.ReadTranscript(context.Background(), path)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			out = append(out, e.Role+":"+e.Content)
		}
		return out
	}
	var atCall [][]string
	model, _ := newModel(t, func(c llmtest.Call) llmtest.Reply {
		atCall = append(atCall, onDisk())
		if c.LastUser() == "fail" {
			return llmtest.Reply{Status: 400, Message: "bad request"}
		}
		return llmtest.Reply{Text: "hello"}
	})
	s, err := agent.LoadSession(context.Background(), "k", "id", "main", "", path, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if res, err := s.Run(context.Background(), agent.Turn{Model: model, DeferInput: true}, "hi"); err != nil || res.Text != "hello" {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if _, err := s.Run(context.Background(), agent.Turn{Model: model, DeferInput: true}, "fail"); err == nil {
		t.Fatal("the failing call's turn returned no error")
	}
	if len(atCall) != 2 || len(atCall[0]) != 0 || strings.Join(atCall[1], "|") != "user:hi|assistant:hello" {
		t.Errorf("on disk at each model call: %q; want nothing, then the first turn's two lines", atCall)
	}
	// Read before Close: the failed turn's message is there already.
	if got := strings.Join(onDisk(), "|"); got != "user:hi|assistant:hello|user:fail" {
		t.Errorf("transcript after the failed turn: %q", got)
	}
}
