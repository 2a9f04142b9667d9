package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
)

// crashedRun stores run id as a crash left it: its row in status (with
// edit applied) and its transcript lines (raw: each written as is, a
// newline after each unless torn).
func (h *harness) crashedRun(id, status string, edit func(*store.Run), lines ...string) *store.Run {
	h.t.Helper()
	ctx := context.Background()
	started := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	r := &store.Run{ID: id, ChildKey: "agent:main:subagent:" + id, ChildSessionID: "s-" + id, RequesterKey: "agent:main:web:dm:c1",
		RootKey: "agent:main:web:dm:c1", Depth: 1, AgentID: "main", Task: "crashy " + id, Label: id, Model: "anthropic/claude-test",
		Cleanup: "keep", Origin: channels.Origin{Channel: "web", ChatID: "c1", ChatType: "dm"}, Status: status,
		CreatedAt: started, StartedAt: started, CostUSD: -1, MaxIterations: 30}
	if edit != nil {
		edit(r)
	}
	if err := h.db.CreateRun(ctx, r, &store.Session{Key: r.ChildKey, ID: r.ChildSessionID, AgentID: r.AgentID, Kind: store.KindSubagent,
		ParentKey: r.RequesterKey, RootKey: r.RootKey, Depth: 1, CreatedAt: started, UpdatedAt: started}); err != nil {
		h.t.Fatal(err)
	}
	if len(lines) > 0 {
		path := h.db.TranscriptPath(r.AgentID, r.ChildSessionID)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			h.t.Fatal(err)
		}
		header := `{"type":"session","version":1,"sessionKey":"` + r.ChildKey + `","sessionId":"` + r.ChildSessionID + `","agentId":"main","createdAt":"2026-11-27T10:00:00Z"}` + "\n"
		if err := os.WriteFile(path, []byte(header+strings.Join(lines, "")), 0o600); err != nil {
			h.t.Fatal(err)
		}
	}
	return r
}

// line is a transcript line (with its newline) for a message.
func line(t *testing.T, role, content string, calls []agent.ToolCall, results []agent.ToolResult, usage *agent.Usage) string {
	t.Helper()
	e := store.TranscriptEntry{Type: "message", Role: role, Content: content, Timestamp: time.Now().Add(-50 * time.Minute).UTC()}
	if calls != nil {
		e.ToolCalls, _ = json.Marshal(calls)
	}
	if results != nil {
		e.ToolResults, _ = json.Marshal(results)
	}
	if usage != nil {
		e.Usage, _ = json.Marshal(usage)
		e.Model = "anthropic/claude-test"
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

// restart plays the restarted gateway: a second Manager on the same store.
func (h *harness) restart() *Manager {
	h.t.Helper()
	m2 := New(h.m.d)
	if err := m2.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { m2.Shutdown(context.Background()) })
	return m2
}

// A run cut mid-batch resumes from its transcript: the recorded result is
// reused, the unanswered write_file is not made again (the model gets the
// interrupted result), the unanswered list_files is; it keeps its start,
// tokens and Notes say it was resumed (SPEC §25).
func TestResumeAfterCrashMidBatch(t *testing.T) {
	var mu sync.Mutex
	var seen []agent.Message
	h := newHarness(t, "", "", func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.LastUser(), "Announce step") {
			return llmtest.Reply{Text: "Result:\nresumed fine\n\nNotes:\n(none)", Usage: agent.Usage{Input: 100, Output: 20}}
		}
		mu.Lock()
		seen = c.Messages
		mu.Unlock()
		return llmtest.Reply{Text: "done after the crash", Usage: agent.Usage{Input: 10, Output: 2}}
	})
	calls := []agent.ToolCall{
		{ID: "c1", Name: "write_file", Args: json.RawMessage(`{"path":"a.txt","content":"one"}`)},
		{ID: "c2", Name: "write_file", Args: json.RawMessage(`{"path":"b.txt","content":"two"}`)},
		{ID: "c3", Name: "list_files", Args: json.RawMessage(`{}`)},
	}
	r := h.crashedRun("00000000-mid", store.StatusRunning, nil,
		line(t, "user", "crashy 00000000-mid", nil, nil, nil),
		line(t, "assistant", "", calls, nil, &agent.Usage{Input: 1000, Output: 200}),
		line(t, "tool", "", nil, []agent.ToolResult{{CallID: "c1", Name: "write_file", Content: `{"status":"written before"}`}}, nil),
	)
	h.restart()
	items := h.waitAnnounces(1)
	got := h.waitDone(r.ID)
	if !strings.HasPrefix(items[0].Text, "Status: success\n") || !strings.Contains(items[0].Text, "resumed fine") ||
		!strings.Contains(items[0].Text, "Resumed after the gateway stopped (1×).") {
		t.Errorf("announce of the resumed run:\n%s", items[0].Text)
	}
	if got.Resumes != 1 || !got.StartedAt.Equal(r.StartedAt) || got.TokensIn != 1000+10+100 {
		t.Errorf("run = resumes %d, started %s, tokens in %d; want 1, %s (kept), 1110 (the recorded call's counted)",
			got.Resumes, got.StartedAt, got.TokensIn, r.StartedAt)
	}
	mu.Lock()
	defer mu.Unlock()
	var results []agent.ToolResult
	for _, m := range seen {
		if m.Role == agent.RoleTool {
			results = append(results, m.ToolResults...)
		}
	}
	if len(results) != 3 {
		t.Fatalf("the model saw results %+v; want 3", results)
	}
	if results[0].Content != `{"status":"written before"}` || results[1].Content != agent.InterruptedResult ||
		results[2].Content == agent.InterruptedResult || results[2].IsError {
		t.Errorf("results the model saw: %+v\nwant the recorded one, the interrupted one, a real list_files result", results)
	}
	filepath.WalkDir(h.m.d.Workspace(nil, "main"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && (d.Name() == "a.txt" || d.Name() == "b.txt") {
			t.Errorf("%s was written on resume: write_file is not repeatable", p)
		}
		return nil
	})
}

// A run cut in its announce step after the reply was recorded posts that
// reply: no model call; one cut before it asks again without a second
// prompt.
func TestResumeInAnnounceStep(t *testing.T) {
	h := newHarness(t, "", "", standard)
	h.crashedRun("00000000-ann", store.StatusAnnouncing, nil,
		line(t, "user", "crashy 00000000-ann", nil, nil, nil),
		line(t, "assistant", "the work", nil, nil, &agent.Usage{Input: 5, Output: 1}),
		line(t, "user", announcePrompt, nil, nil, nil),
		line(t, "assistant", "Result:\nrecorded reply\n\nNotes:\n(none)", nil, nil, &agent.Usage{Input: 5, Output: 1}),
	)
	h.crashedRun("00000000-ask", store.StatusAnnouncing, nil,
		line(t, "user", "crashy 00000000-ask", nil, nil, nil),
		line(t, "assistant", "other work", nil, nil, &agent.Usage{Input: 5, Output: 1}),
		line(t, "user", announcePrompt, nil, nil, nil),
	)
	h.restart()
	items := h.waitAnnounces(2)
	byRun := map[string]string{}
	for _, it := range items {
		byRun[it.RunID] = it.Text
	}
	if a := byRun["00000000-ann"]; !strings.Contains(a, "Result:\nrecorded reply") || !strings.Contains(a, "Resumed after the gateway stopped (1×).") {
		t.Errorf("announce of the run cut after its reply:\n%s", a)
	}
	if a := byRun["00000000-ask"]; !strings.Contains(a, "Result:\nfindings for crashy 00000000-ask") {
		t.Errorf("announce of the run cut before its reply:\n%s", a)
	}
	if n := h.llm.Count(); n != 1 {
		t.Errorf("%d model calls, want 1 (the second run's announce step only)", n)
	}
	for _, c := range h.llm.Requests() {
		prompts := 0
		for _, m := range c.Messages {
			if m.Role == agent.RoleUser && IsAnnouncePrompt(m.Text) {
				prompts++
			}
		}
		if prompts != 1 {
			t.Errorf("the resumed announce step sent %d announce prompts, want 1", prompts)
		}
	}
}

// Past maxResumes, or with a transcript that cannot be read or ends
// mid-line, a cut run ends unknown with a Note saying why; a run whose
// agent was removed ends error naming it; a run whose time was used up
// before the stop times out at once.
func TestResumeRefusals(t *testing.T) {
	h := newHarness(t, "runTimeoutSeconds: 600", "", standard)
	task := line(t, "user", "task", nil, nil, nil)
	h.crashedRun("00000000-max", store.StatusRunning, func(r *store.Run) { r.Resumes = 2 }, task)
	h.crashedRun("00000000-bad", store.StatusRunning, nil, task, "{not json\n", line(t, "assistant", "x", nil, nil, nil))
	h.crashedRun("00000000-torn", store.StatusRunning, nil, task, `{"type":"message","role":"assis`)
	h.crashedRun("00000000-gone", store.StatusRunning, func(r *store.Run) { r.AgentID = "removed" }, task)
	h.crashedRun("00000000-late", store.StatusRunning, func(r *store.Run) { r.TimeoutSeconds, r.Ran, r.Resumes = 60, time.Minute, 1 }, task)
	h.restart()
	want := map[string]struct{ status, note string }{
		"00000000-max":  {"unknown", "Resumed 2×; the gateway stopped again, its outcome is unknown."},
		"00000000-bad":  {"unknown", "its transcript cannot be read"},
		"00000000-torn": {"unknown", "its transcript ends mid-line"},
		"00000000-gone": {"error", "agent removed is no longer configured"},
		"00000000-late": {"timeout", "Resumed after the gateway stopped (2×)."},
	}
	for id, w := range want {
		r := h.waitDone(id)
		if r.Outcome != w.status || !strings.Contains(r.Note, w.note) {
			t.Errorf("run %s ended %s with Notes %q; want %s with %q", id, r.Outcome, r.Note, w.status, w.note)
		}
	}
	if n := h.llm.Count(); n != 1 {
		// Only the timed-out run's announce step calls the model.
		t.Errorf("%d model calls, want 1", n)
	}
}

// A resumed run is live again: /stop (Manager.Stop) reaches it and it ends
// stopped, not announced.
func TestStopReachesAResumedRun(t *testing.T) {
	h := newHarness(t, "", "", func(c llmtest.Call) llmtest.Reply {
		return llmtest.Reply{Text: "never", Delay: 10 * time.Minute}
	})
	r := h.crashedRun("00000000-stop", store.StatusRunning, nil, line(t, "user", "crashy 00000000-stop", nil, nil, nil))
	m2 := h.restart()
	deadline := time.Now().Add(20 * time.Second)
	for h.llm.Count() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the resumed run never called its model")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := m2.Stop(context.Background(), r.ID); n != 1 {
		t.Fatalf("Stop of the resumed run stopped %d runs, want 1", n)
	}
	if got := h.waitDone(r.ID); got.Outcome != store.OutcomeStopped || got.Resumes != 1 {
		t.Errorf("resumed run after /stop: outcome %s, resumes %d; want stopped, 1", got.Outcome, got.Resumes)
	}
}

// heldCall keeps one model call of a test in flight until freed (at the
// latest when the test ends: spawnHeld).
type heldCall struct {
	in, release chan struct{}
	once        sync.Once
}

func newHeldCall() *heldCall {
	return &heldCall{in: make(chan struct{}, 1), release: make(chan struct{})}
}

// hold is the model handler's: it blocks the call until free.
func (c *heldCall) hold() {
	c.in <- struct{}{}
	<-c.release
}

func (c *heldCall) free() { c.once.Do(func() { close(c.release) }) }

// resumeCrashed restarts the manager, checks that r (left by a crash)
// resumes and announces its task's findings, its second announce of the
// test, and returns its transcript's lines.
func (h *harness) resumeCrashed(r *store.Run) []store.TranscriptEntry {
	h.t.Helper()
	h.restart()
	items := h.waitAnnounces(2)
	got := h.waitDone(r.ID)
	if got.Outcome != store.OutcomeSuccess || got.Resumes != 1 {
		h.t.Errorf("resumed run: outcome %q, resumes %d; want success, 1", got.Outcome, got.Resumes)
	}
	if a := items[len(items)-1].Text; !strings.Contains(a, "findings for "+r.Task) || !strings.Contains(a, "Resumed after the gateway stopped (1×).") {
		h.t.Errorf("announce of the resumed run:\n%s", a)
	}
	_, entries, err := h.db.ReadTranscript(context.Background(), h.db.TranscriptPath(r.AgentID, r.ChildSessionID))
	if err != nil {
		h.t.Fatal(err)
	}
	return entries
}

// spawnHeld spawns task and returns its run's row once c holds its call.
func (h *harness) spawnHeld(c *heldCall, task string) *store.Run {
	h.t.Helper()
	h.t.Cleanup(c.free) // after the harness's: freed before its server and manager stop
	ctx := context.Background()
	res := h.m.Spawn(ctx, caller("1"), SpawnParams{Task: task})
	if res.Status != "accepted" {
		h.t.Fatalf("spawn: %+v", res)
	}
	select {
	case <-c.in:
	case <-time.After(20 * time.Second):
		h.t.Fatalf("the held call of %q did not come", task)
	}
	r, err := h.db.GetRun(ctx, res.RunID)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

// A run's task reaches its transcript with its first answer, in one
// write (agent.Turn.DeferInput): while that call is in flight the run's
// transcript has no line, which is what a crash then leaves. A restart
// finds such a run without its task in the transcript and runs it again
// from the task in its row (SPEC §25). Its history shows the task
// meanwhile, as the transcript did.
func TestTaskWrittenWithFirstAnswer(t *testing.T) {
	held := newHeldCall()
	h := newHarness(t, "", "", func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "Sub-agent context") && c.LastUser() == "held task" {
			held.hold()
		}
		return standard(c)
	})
	ctx := context.Background()
	live := h.spawnHeld(held, "held task")
	path := h.db.TranscriptPath(live.AgentID, live.ChildSessionID)
	_, statErr := os.Stat(path)
	hist, histErr := h.m.History(ctx, live) // /subagents log, sessions_history
	requeued := *live                       // as a restart finds it before its lane takes it
	requeued.Status, requeued.Resumes = store.StatusQueued, 1
	histQ, histQErr := h.m.History(ctx, &requeued)
	held.free()
	if !errors.Is(statErr, fs.ErrNotExist) {
		t.Errorf("the transcript is there while the first call is in flight (%v); its task should come with the answer", statErr)
	}
	if histErr != nil || len(hist) != 1 || hist[0].Role != agent.RoleUser || hist[0].Text != "held task" {
		t.Errorf("history while the first call is in flight: %+v, %v; want the task", hist, histErr)
	}
	if histQErr != nil || len(histQ) != 1 || histQ[0].Text != "held task" {
		t.Errorf("history of the run queued again after a crash: %+v, %v; want the task", histQ, histQErr)
	}
	h.waitDone(live.ID)
	_, entries, err := h.db.ReadTranscript(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 2 || entries[0].Role != "user" || entries[0].Content != "held task" ||
		entries[1].Role != "assistant" || entries[1].Content != "worked on held task" {
		t.Errorf("transcript lines %+v; want the task, then the first answer", entries)
	}

	// What a crash during that call leaves: the run in its row, as the
	// live one stood, and no transcript.
	entries = h.resumeCrashed(h.crashedRun("00000000-held", live.Status, nil))
	if len(entries) < 2 || entries[0].Role != "user" || entries[0].Content != "crashy 00000000-held" ||
		entries[1].Content != "worked on crashy 00000000-held" {
		t.Errorf("resumed run's transcript %+v; want its task from the row, then the answer", entries)
	}
}

// The announce step's prompt reaches the transcript with its reply, in one
// write: while that call is in flight the transcript ends with the work's
// answer, which is what a crash then leaves. A restart finds the work
// done and the step not begun, and runs the step (SPEC §25).
func TestAnnouncePromptWrittenWithReply(t *testing.T) {
	held := newHeldCall()
	h := newHarness(t, "", "", func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.LastUser(), "Announce step") && taskOf(c) == "held announce" {
			held.hold()
		}
		return standard(c)
	})
	ctx := context.Background()
	live := h.spawnHeld(held, "held announce")
	path := h.db.TranscriptPath(live.AgentID, live.ChildSessionID)
	_, during, readErr := h.db.ReadTranscript(ctx, path)
	held.free()
	if readErr != nil || len(during) != 2 || during[1].Content != "worked on held announce" {
		t.Errorf("transcript while the announce call is in flight: %+v, %v; want the task and the work's answer only", during, readErr)
	}
	h.waitDone(live.ID)
	_, entries, err := h.db.ReadTranscript(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 4 || !IsAnnouncePrompt(entries[2].Content) || entries[3].Content != "Result:\nfindings for held announce\n\nNotes:\n(none)" {
		t.Errorf("transcript lines %+v; want task, answer, prompt, reply", entries)
	}

	// What a crash during that call leaves: the work's answer last.
	entries = h.resumeCrashed(h.crashedRun("00000000-ann-held", live.Status, nil,
		line(t, "user", "crashy 00000000-ann-held", nil, nil, nil),
		line(t, "assistant", "worked on crashy 00000000-ann-held", nil, nil, &agent.Usage{Input: 1000, Output: 200})))
	prompts := 0
	for _, e := range entries {
		if e.Role == "user" && IsAnnouncePrompt(e.Content) {
			prompts++
		}
	}
	if len(entries) != 4 || prompts != 1 || entries[1].Content != "worked on crashy 00000000-ann-held" {
		t.Errorf("resumed run's transcript %+v; want the work once, then one prompt and its reply", entries)
	}
}

// A step that folded its children's results first writes its prompt at
// once: with a folded result last, a transcript cut there would read as a
// work turn waiting for its answer.
func TestAnnouncePromptAfterFoldWrittenAtOnce(t *testing.T) {
	held := newHeldCall()
	var spawned atomic.Bool
	var h *harness
	h = newHarness(t, "maxDepth: 2", "", func(c llmtest.Call) llmtest.Reply {
		if taskOf(c) != "outer" {
			return standard(c)
		}
		switch {
		case strings.Contains(c.LastUser(), "Announce step"):
			held.hold()
		case spawned.CompareAndSwap(false, true):
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{ID: "s1", Name: "sessions_spawn", Args: []byte(`{"task":"inner","announce":"silent"}`)}}}
		default:
			// The work ends after its child's result is stored: the
			// announce step folds it.
			key := "?"
			for _, l := range strings.Split(c.System, "\n") {
				if k, ok := strings.CutPrefix(l, "- Your session: "); ok {
					key = k
				}
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				if res, _ := h.db.PendingResults(context.Background(), key, ""); len(res) > 0 {
					break
				}
				if time.Now().After(deadline) {
					h.t.Errorf("the inner run's result was not stored for %s within 20 s", key)
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		return standard(c)
	})
	ctx := context.Background()
	r := h.spawnHeld(held, "outer")
	_, during, readErr := h.db.ReadTranscript(ctx, h.db.TranscriptPath(r.AgentID, r.ChildSessionID))
	held.free()
	n := len(during)
	if readErr != nil || n < 2 || !IsAnnouncePrompt(during[n-1].Content) || !strings.HasPrefix(during[n-2].Content, "[sub-agent result]") {
		t.Errorf("transcript while the announce call is in flight: %+v, %v; want the folded result, then the prompt, last", during, readErr)
	}
	h.waitDone(r.ID)
}
