package subagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent/subagenttest"
)

// harness wires a Manager to a real store and a fake Anthropic server.
type harness struct {
	t   *testing.T
	m   *Manager
	db  *store.DB
	llm *llmtest.Server
	cfg *config.Config
}

const baseConfig = `{
  models: { providers: {
    anthropic: { api: "anthropic", baseUrl: "%s", apiKey: "test-key",
      models: [{ id: "claude-test", cost: { input: 3, output: 15 } }, { id: "claude-small" }] } } },
  agents: {
    defaults: { model: "anthropic/claude-test", subagents: { %s } },
    list: [ { id: "main", subagents: { allowAgents: ["main", "researcher"] } }, { id: "researcher" }, { id: "other" } ],
  },
  %s
}`

func newHarness(t *testing.T, limits, extra string, h llmtest.Handler) *harness {
	t.Helper()
	llm := llmtest.NewAnthropic(t, h)
	p := subagenttest.New(t, fmt.Sprintf(baseConfig, llm.URL, limits, extra), nil)
	m := startManager(t, p, p.Store)
	return &harness{t: t, m: m, db: p.Store, llm: llm, cfg: p.Config}
}

// startManager starts a Manager of p's parts over st (p.Store, or a test's
// wrapper of it) and stops it when the test ends.
func startManager(t *testing.T, p *subagenttest.Parts, st Store) *Manager {
	t.Helper()
	m := New(Deps{
		Config: p.Config, Store: st, Catalog: p.Catalog, Tools: p.Tools, Workspace: p.WorkspaceOf,
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
	})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	subagenttest.StopAtCleanup(t, m)
	return m
}

// caller is a top-level requester session in a Slack thread.
func caller(thread string) agent.CallContext {
	key := "agent:main:slack:group:C1:thread:" + thread
	return agent.CallContext{SessionKey: key, RootKey: key, AgentID: "main", Depth: 0,
		Origin: channels.Origin{Channel: "slack", ChatID: "C1", ChatType: "group", ThreadID: thread},
		Model:  "anthropic/claude-test", Tools: []string{"read_file", "write_file", "list_files", "exec", "web_fetch", "sessions_spawn"}}
}

func (h *harness) waitAnnounces(n int) []store.OutboxItem {
	h.t.Helper()
	return subagenttest.WaitAnnounces(h.t, h.db, n)
}

func (h *harness) waitDone(runID string) *store.Run {
	h.t.Helper()
	return subagenttest.WaitDone(h.t, h.db, runID)
}

// standard answers like a well-behaved model: sub-agents answer their task,
// the announce step answers in the Result/Notes form.
func standard(c llmtest.Call) llmtest.Reply {
	last := c.LastUser()
	switch {
	case strings.Contains(last, "Announce step"):
		return llmtest.Reply{Text: "Result:\nfindings for " + taskOf(c) + "\n\nNotes:\n(none)", Usage: agent.Usage{Input: 100, Output: 20}}
	case strings.Contains(c.System, "Sub-agent context"):
		return llmtest.Reply{Text: "worked on " + last, Usage: agent.Usage{Input: 1000, Output: 200}}
	}
	return llmtest.Reply{Text: "hello"}
}

func taskOf(c llmtest.Call) string {
	for _, line := range strings.Split(c.System, "\n") {
		if t, ok := strings.CutPrefix(line, "- Task: "); ok {
			return t
		}
	}
	return "?"
}

func TestSpawnAnnouncesToEachOrigin(t *testing.T) {
	h := newHarness(t, "", "", standard)
	ctx := context.Background()
	threads := []string{"111.1", "222.2", "333.3"}
	for _, th := range threads {
		res := h.m.Spawn(ctx, caller(th), SpawnParams{Task: "task in " + th})
		if res.Status != "accepted" || !strings.HasPrefix(res.ChildSessionKey, "agent:main:subagent:") || res.ModelApplied != "anthropic/claude-test" {
			t.Fatalf("spawn = %+v", res)
		}
	}
	items := h.waitAnnounces(3)
	for _, it := range items {
		var thread string
		for _, th := range threads {
			if strings.Contains(it.Text, "findings for task in "+th) {
				thread = th
			}
		}
		if thread == "" || it.Origin.ThreadID != thread || it.Origin.ChatID != "C1" || it.Kind != channels.KindAnnounce {
			t.Errorf("announce routed to %+v:\n%s", it.Origin, it.Text)
		}
		if !strings.HasPrefix(it.Text, "Status: success\nTask: task in ") {
			t.Errorf("announce header wrong:\n%s", it.Text)
		}
		// 1000+100 in, 200+20 out: the announce step counts too.
		// Cost: (1100*3 + 220*15)/1e6 = 0.0066.
		if !strings.Contains(it.Text, "Stats: runtime ") || !strings.Contains(it.Text, "tokens 1.3k (in 1.1k / out 220) • est $0.0066 • sessionKey agent:main:subagent:") {
			t.Errorf("stats line wrong:\n%s", it.Text)
		}
	}
}

func TestAnnounceSkipPostsNothing(t *testing.T) {
	h := newHarness(t, "", "", func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.LastUser(), "Announce step") {
			return llmtest.Reply{Text: "ANNOUNCE_SKIP"}
		}
		return llmtest.Reply{Text: "quiet work"}
	})
	res := h.m.Spawn(context.Background(), caller("1"), SpawnParams{Task: "quiet"})
	r := h.waitDone(res.RunID)
	if r.Outcome != store.OutcomeSuccess {
		t.Errorf("outcome %q", r.Outcome)
	}
	items, _ := h.db.PendingOutbox(context.Background(), 10)
	if len(items) != 0 {
		t.Errorf("ANNOUNCE_SKIP posted %d messages", len(items))
	}
}

func TestAnnounceFallbackAndErrors(t *testing.T) {
	h := newHarness(t, "", "", func(c llmtest.Call) llmtest.Reply {
		switch {
		case strings.Contains(c.LastUser(), "Announce step"):
			return llmtest.Reply{Status: 400, Message: "announce broke"}
		case strings.Contains(c.LastUser(), "fail"):
			return llmtest.Reply{Status: 400, Message: "prompt is too long"}
		}
		return llmtest.Reply{Text: "my last words"}
	})
	ok := h.m.Spawn(context.Background(), caller("1"), SpawnParams{Task: "works", Label: "worker"})
	bad := h.m.Spawn(context.Background(), caller("1"), SpawnParams{Task: "will fail"})
	items := h.waitAnnounces(2)
	byRun := map[string]string{}
	for _, it := range items {
		byRun[it.RunID] = it.Text
	}
	if s := byRun[ok.RunID]; !strings.HasPrefix(s, "Status: success\nTask: worker\n\nResult:\nmy last words\n\nNotes:\nThe announce step failed") {
		t.Errorf("fallback announce:\n%s", s)
	}
	if s := byRun[bad.RunID]; !strings.HasPrefix(s, "Status: error\n") || !strings.Contains(s, "prompt is too long") {
		t.Errorf("error announce:\n%s", s)
	}
}

func TestLimits(t *testing.T) {
	block := make(chan struct{})
	h := newHarness(t, "maxChildrenPerSession: 2, maxTotalSpawns: 3", "", func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "Sub-agent context") && !strings.HasPrefix(c.LastUser(), "Announce") {
			<-block
		}
		return standard(c)
	})
	defer close(block)
	ctx := context.Background()
	cc := caller("1")
	for i := 0; i < 2; i++ {
		if r := h.m.Spawn(ctx, cc, SpawnParams{Task: "t"}); r.Status != "accepted" {
			t.Fatalf("spawn %d: %+v", i, r)
		}
	}
	if r := h.m.Spawn(ctx, cc, SpawnParams{Task: "t"}); r.Status != "forbidden" || !strings.Contains(r.Error, "maxChildrenPerSession 2") {
		t.Errorf("third child: %+v", r)
	}
	// Another thread has its own children limit, and the spawn budget is per root.
	if r := h.m.Spawn(ctx, caller("2"), SpawnParams{Task: "t"}); r.Status != "accepted" {
		t.Errorf("other session: %+v", r)
	}
	cases := []struct {
		name string
		cc   agent.CallContext
		p    SpawnParams
		want string
	}{
		{"agent not allowed", caller("3"), SpawnParams{Task: "t", AgentID: "other"}, `agent "other" is not allowed`},
		{"unknown agent", caller("3"), SpawnParams{Task: "t", AgentID: "ghost"}, `unknown agentId "ghost"`},
		{"depth", func() agent.CallContext { c := caller("3"); c.Depth = 1; return c }(), SpawnParams{Task: "t"}, "maxDepth is 1"},
		{"unknown tool", caller("3"), SpawnParams{Task: "t", AllowedTools: []string{"rm_rf"}}, `unknown tool "rm_rf"`},
		{"no task", caller("3"), SpawnParams{}, `"task" is required`},
		{"bad cleanup", caller("3"), SpawnParams{Task: "t", Cleanup: "shred"}, "cleanup must be"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.m.Spawn(ctx, c.cc, c.p)
			if r.Status == "accepted" || !strings.Contains(r.Error, c.want) {
				t.Errorf("got %+v, want an error containing %q", r, c.want)
			}
		})
	}
	total := caller("9")
	total.RootKey = cc.RootKey // a session below the same root
	if r := h.m.Spawn(ctx, total, SpawnParams{Task: "t"}); r.Status != "accepted" {
		t.Fatalf("third spawn under root: %+v", r)
	}
	if r := h.m.Spawn(ctx, total, SpawnParams{Task: "t"}); r.Status != "forbidden" || !strings.Contains(r.Error, "maxTotalSpawns 3") {
		t.Errorf("fourth spawn under root: %+v", r)
	}
}

func TestModelChainWarning(t *testing.T) {
	h := newHarness(t, `model: "anthropic/claude-small"`, "", standard)
	ctx := context.Background()
	r := h.m.Spawn(ctx, caller("1"), SpawnParams{Task: "t", Model: "openai/gpt-nope"})
	if r.Status != "accepted" || r.ModelApplied != "anthropic/claude-small" || !strings.Contains(r.Warning, `"openai/gpt-nope" is not configured`) {
		t.Errorf("spawn = %+v", r)
	}
	r = h.m.Spawn(ctx, caller("1"), SpawnParams{Task: "t"})
	if r.ModelApplied != "anthropic/claude-small" || r.Warning != "" {
		t.Errorf("defaults.subagents.model not applied: %+v", r)
	}
	h.waitAnnounces(2)
	for _, c := range h.llm.Requests() {
		if strings.Contains(c.System, "Sub-agent context") && c.Model != "claude-small" {
			t.Errorf("child called model %q", c.Model)
		}
	}
}

func TestDepthRemovesSessionToolsAndFilters(t *testing.T) {
	var spawned atomic.Bool
	h := newHarness(t, "maxDepth: 2", `tools: { subagents: { tools: { deny: ["exec"] } } },`, func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "Sub-agent context") && strings.Contains(c.System, "- Task: outer") && len(c.Messages) == 1 {
			if spawned.CompareAndSwap(false, true) {
				return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn", Args: []byte(`{"task":"inner","announce":"chat"}`)}}}
			}
		}
		return standard(c)
	})
	h.m.Spawn(context.Background(), caller("1"), SpawnParams{Task: "outer"})
	h.waitAnnounces(2)
	seen := map[string][]string{}
	for _, c := range h.llm.Requests() {
		if len(c.Messages) == 1 {
			seen[taskOf(c)] = c.Tools
		}
	}
	has := func(list []string, name string) bool {
		for _, n := range list {
			if n == name {
				return true
			}
		}
		return false
	}
	if !has(seen["outer"], "sessions_spawn") || has(seen["outer"], "exec") || !has(seen["outer"], "read_file") {
		t.Errorf("depth-1 child tools = %v; want sessions_spawn and read_file, no exec", seen["outer"])
	}
	for _, name := range []string{"sessions_spawn", "sessions_send", "sessions_list", "sessions_history", "exec"} {
		if has(seen["inner"], name) {
			t.Errorf("deepest child was given %s: %v", name, seen["inner"])
		}
	}
	if !has(seen["inner"], "read_file") {
		t.Errorf("deepest child lost its workspace tools: %v", seen["inner"])
	}
}

func TestLaneCapAndOrder(t *testing.T) {
	var mu sync.Mutex
	var running, peak int
	var order []string
	release := make(chan struct{})
	h := newHarness(t, "maxConcurrent: 2, maxChildrenPerSession: 10", "", func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "Sub-agent context") && len(c.Messages) == 1 {
			mu.Lock()
			running++
			peak = max(peak, running)
			order = append(order, taskOf(c))
			mu.Unlock()
			<-release
			mu.Lock()
			running--
			mu.Unlock()
		}
		return standard(c)
	})
	for i := 0; i < 6; i++ {
		h.m.Spawn(context.Background(), caller("1"), SpawnParams{Task: fmt.Sprintf("job %d", i)})
	}
	runs, _ := h.m.Runs(context.Background(), caller("1").SessionKey)
	queued := 0
	for _, r := range runs {
		if r.Status == store.StatusQueued {
			queued++
		}
	}
	if queued < 4 {
		t.Errorf("%d runs visible as queued, want at least 4 with a lane of 2", queued)
	}
	close(release)
	h.waitAnnounces(6)
	if peak > 2 {
		t.Errorf("peak concurrency %d with maxConcurrent 2", peak)
	}
	if len(order) != 6 {
		t.Errorf("%d runs started, want 6", len(order))
	}
}

func TestLaneStartsRunsInSpawnOrder(t *testing.T) {
	var mu sync.Mutex
	var order []string
	h := newHarness(t, "maxConcurrent: 1, maxChildrenPerSession: 10", "", func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "Sub-agent context") && !strings.Contains(c.LastUser(), "Announce step") {
			mu.Lock()
			order = append(order, taskOf(c))
			mu.Unlock()
		}
		return standard(c)
	})
	for i := 0; i < 5; i++ {
		h.m.Spawn(context.Background(), caller("1"), SpawnParams{Task: fmt.Sprintf("job %d", i)})
	}
	h.waitAnnounces(5)
	for i, task := range order {
		if task != fmt.Sprintf("job %d", i) {
			t.Fatalf("start order %v is not the spawn order", order)
		}
	}
}

func TestTimeoutAndStop(t *testing.T) {
	h := newHarness(t, "maxChildrenPerSession: 10", "", func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "Sub-agent context") && !strings.Contains(c.LastUser(), "Announce step") {
			return llmtest.Reply{Text: "late", Delay: time.Minute}
		}
		return standard(c)
	})
	ctx := context.Background()
	one := 1
	tr := h.m.Spawn(ctx, caller("1"), SpawnParams{Task: "slow", RunTimeoutSeconds: &one})
	sr := h.m.Spawn(ctx, caller("2"), SpawnParams{Task: "slow too"})
	if r := h.waitDone(tr.RunID); r.Outcome != store.OutcomeTimeout {
		t.Errorf("timeout run outcome %q", r.Outcome)
	}
	items := h.waitAnnounces(1)
	if !strings.HasPrefix(items[0].Text, "Status: timeout\n") || !strings.Contains(items[0].Text, "Run timed out after 1s.") {
		t.Errorf("timeout announce:\n%s", items[0].Text)
	}
	if n := h.m.StopBelow(ctx, caller("2").SessionKey); n != 1 {
		t.Errorf("StopBelow stopped %d, want 1", n)
	}
	if r := h.waitDone(sr.RunID); r.Outcome != store.OutcomeStopped {
		t.Errorf("stopped run outcome %q", r.Outcome)
	}
	h.waitAnnounces(1) // the stopped run posts nothing
}

func TestRecoveryAfterCrash(t *testing.T) {
	h := newHarness(t, "", "", standard)
	ctx := context.Background()
	now := time.Now()
	mk := func(id, status string) {
		r := &store.Run{ID: id, ChildKey: "agent:main:subagent:" + id, ChildSessionID: "s-" + id, RequesterKey: "agent:main:web:dm:c1",
			RootKey: "agent:main:web:dm:c1", Depth: 1, AgentID: "main", Task: "crashy " + id, Model: "anthropic/claude-test",
			Cleanup: "keep", Origin: channels.Origin{Channel: "web", ChatID: "c1", ChatType: "dm"}, Status: store.StatusQueued, CreatedAt: now, CostUSD: -1}
		if err := h.db.CreateRun(ctx, r, &store.Session{Key: r.ChildKey, ID: r.ChildSessionID, AgentID: "main", Kind: store.KindSubagent,
			ParentKey: r.RequesterKey, RootKey: r.RootKey, Depth: 1, CreatedAt: now, UpdatedAt: now}); err != nil {
			t.Fatal(err)
		}
		if status == store.StatusRunning {
			h.db.StartRun(ctx, id, now)
		}
	}
	mk("00000000-run1", store.StatusRunning)
	mk("00000000-run2", store.StatusQueued)
	// A second manager on the same store plays the restarted gateway.
	m2 := New(h.m.d)
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m2.Shutdown(ctx)
	items := h.waitAnnounces(2)
	got := map[string]string{}
	for _, it := range items {
		got[it.RunID] = it.Text
	}
	// A run that was running resumes (SPEC §25); it had written nothing yet.
	if a := got["00000000-run1"]; !strings.HasPrefix(a, "Status: success\n") || !strings.Contains(a, "Resumed after the gateway stopped (1×).") {
		t.Errorf("running run after restart:\n%s", a)
	}
	if !strings.HasPrefix(got["00000000-run2"], "Status: success\n") {
		t.Errorf("queued run after restart:\n%s", got["00000000-run2"])
	}
}

func TestSteerRunningAndOneMoreTurn(t *testing.T) {
	h := newHarness(t, "", "", func(c llmtest.Call) llmtest.Reply {
		last := c.LastUser()
		switch {
		case strings.Contains(last, "Announce step"):
			return standard(c)
		case strings.Contains(last, "focus on speed"):
			return llmtest.Reply{Text: "steered: speed it is"}
		case strings.Contains(last, "one more thing"):
			return llmtest.Reply{Text: "sure, one more thing done"}
		case strings.Contains(c.System, "Sub-agent context"):
			// Keep the child busy in tool calls until it is steered.
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "list_files", Args: []byte(`{}`)}}, Delay: 100 * time.Millisecond}
		}
		return standard(c)
	})
	ctx := context.Background()
	res := h.m.Spawn(ctx, caller("1"), SpawnParams{Task: "busy"})
	run, err := h.m.Resolve(ctx, caller("1").SessionKey, res.RunID[:8])
	if err != nil {
		t.Fatal(err)
	}
	sr := h.m.Send(ctx, run, "focus on speed", 15*time.Second)
	if sr.Status != "ok" || sr.Reply != "steered: speed it is" {
		t.Fatalf("steer = %+v", sr)
	}
	done := h.waitDone(res.RunID)
	sr = h.m.Send(ctx, done, "one more thing", 15*time.Second)
	if sr.Status != "ok" || sr.Reply != "sure, one more thing done" {
		t.Fatalf("send to a finished run = %+v", sr)
	}
	msgs, err := h.m.History(context.Background(), done)
	if err != nil {
		t.Fatal(err)
	}
	lines := HistoryLines(msgs, false)
	if last := lines[len(lines)-1]; last.Text != "sure, one more thing done" {
		t.Errorf("transcript does not end with the extra turn: %+v", last)
	}
	// Another conversation cannot address this run.
	if _, err := h.m.Resolve(ctx, caller("2").SessionKey, res.RunID[:8]); err == nil {
		t.Error("a run was visible from another conversation")
	}
}

func TestCleanupDeleteArchivesAfterAnnounce(t *testing.T) {
	h := newHarness(t, "", "", standard)
	res := h.m.Spawn(context.Background(), caller("1"), SpawnParams{Task: "short lived", Cleanup: "delete"})
	h.waitAnnounces(1)
	path := h.db.TranscriptPath("main", "")
	dir := filepath.Dir(path)
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := h.db.GetRun(context.Background(), res.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if !r.ArchivedAt.IsZero() {
			matches, _ := filepath.Glob(filepath.Join(dir, r.ChildSessionID+".jsonl.deleted.*"))
			if len(matches) != 1 {
				t.Fatalf("archived transcript not found in %s", dir)
			}
			if _, err := os.Stat(filepath.Join(dir, r.ChildSessionID+".jsonl")); !os.IsNotExist(err) {
				t.Errorf("live transcript still present after archive")
			}
			s, err := h.db.GetSession(context.Background(), r.ChildKey)
			if err == nil && s.DeletedAt.IsZero() {
				t.Errorf("child session not marked deleted")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("run was not archived after its announce")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDelegateAndAgentsList(t *testing.T) {
	h := newHarness(t, "", "", func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.LastUser(), "summarise") {
			for _, name := range c.Tools {
				if name == "delegate" || name == "sessions_spawn" {
					return llmtest.Reply{Text: "delegate child was given " + name}
				}
			}
			return llmtest.Reply{Text: "summary done", Usage: agent.Usage{Input: 40, Output: 2}}
		}
		return standard(c)
	})
	ctx := context.Background()
	res := h.m.Delegate(ctx, caller("1"), "researcher", "summarise the notes")
	if res.Status != "ok" || res.Result != "summary done" || res.Tokens.Total != 42 {
		t.Errorf("delegate = %+v", res)
	}
	if res := h.m.Delegate(ctx, caller("1"), "ghost", "x"); res.Status != "error" || !strings.Contains(res.Error, `unknown agent "ghost"`) {
		t.Errorf("delegate to an unknown agent = %+v", res)
	}
	var list agent.Tool
	for _, tl := range h.m.SessionTools(0) {
		if tl.Spec().Name == "agents_list" {
			list = tl
		}
	}
	if list == nil {
		t.Fatal("agents_list not registered with three agents configured")
	}
	out, err := list.Call(ctx, caller("1"), []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	// main may spawn main and researcher, not other; requester first.
	if !strings.HasPrefix(out, `{"agents":[{"id":"main"`) || !strings.Contains(out, `"id":"researcher"`) || strings.Contains(out, `"id":"other"`) || !strings.Contains(out, `"allowAny":false`) {
		t.Errorf("agents_list = %s", out)
	}
}

// Parallel spawns from one session take the last slot once: the limit is
// checked in the transaction that records the run (issue 10.15).
func TestParallelSpawnsRespectChildrenLimit(t *testing.T) {
	block := make(chan struct{})
	h := newHarness(t, "maxChildrenPerSession: 2, maxTotalSpawns: 50", "", func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "Sub-agent context") && !strings.HasPrefix(c.LastUser(), "Announce") {
			<-block
		}
		return standard(c)
	})
	defer close(block)
	results := make([]SpawnResult, 12)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = h.m.Spawn(context.Background(), caller("1"), SpawnParams{Task: fmt.Sprintf("t%d", i)})
		}()
	}
	wg.Wait()
	accepted := 0
	for _, r := range results {
		switch {
		case r.Status == "accepted":
			accepted++
		case r.Status != "forbidden" || !strings.Contains(r.Error, "maxChildrenPerSession 2"):
			t.Errorf("spawn = %+v", r)
		}
	}
	if accepted != 2 {
		t.Errorf("%d of 12 parallel spawns accepted, want 2", accepted)
	}
}

// TestSpawnNeverWidensTheCallersTools: like delegate, a sessions_spawn
// without allowedTools gives the child only tools its caller has: a caller
// without exec cannot get it through another agent, and a child limited to
// read_file and sessions_spawn cannot get the rest back through a
// grandchild spawned without a list.
func TestSpawnNeverWidensTheCallersTools(t *testing.T) {
	var spawned atomic.Bool
	h := newHarness(t, "maxDepth: 2", "", func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "- Task: outer") && len(c.Messages) == 1 && spawned.CompareAndSwap(false, true) {
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn", Args: []byte(`{"task":"inner","announce":"chat"}`)}}}
		}
		return standard(c)
	})
	narrow := caller("1")
	narrow.Tools = []string{"read_file", "list_files", "sessions_spawn"} // no exec, no write_file
	if r := h.m.Spawn(context.Background(), narrow, SpawnParams{Task: "other agent", AgentID: "researcher"}); r.Status != "accepted" {
		t.Fatalf("spawn of researcher: %+v", r)
	}
	if r := h.m.Spawn(context.Background(), caller("2"), SpawnParams{Task: "outer", AllowedTools: []string{"read_file", "sessions_spawn"}}); r.Status != "accepted" {
		t.Fatalf("spawn of outer: %+v", r)
	}
	h.waitAnnounces(3)
	seen := map[string][]string{}
	for _, c := range h.llm.Requests() {
		if len(c.Messages) == 1 && strings.Contains(c.System, "Sub-agent context") {
			seen[taskOf(c)] = c.Tools
		}
	}
	for task, want := range map[string][]string{
		"other agent": {"list_files", "read_file", "sessions_spawn"}, // depth 1 of 2 keeps the caller's sessions_spawn
		"inner":       {"read_file"},
	} {
		got := slices.Sorted(slices.Values(seen[task]))
		if !slices.Equal(got, want) {
			t.Errorf("child %q has tools %v, want %v (its caller's tools only)", task, got, want)
		}
	}
}

// stepClock is a Clock a test moves forward.
type stepClock struct{ ns atomic.Int64 }

func (c *stepClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *stepClock) advance(d time.Duration) { c.ns.Add(int64(d)) }
func newStepClock(at time.Time) *stepClock   { c := &stepClock{}; c.ns.Store(at.UnixNano()); return c }

// A run end whose archive deadline is later than the archiver's next look
// does not wake it (each wake read every unarchived run); but once the
// clock has passed that look, the next run end does, and the runs due by
// then are archived.
func TestArchiveDeadlinesFollowTheClock(t *testing.T) {
	llm := llmtest.NewAnthropic(t, standard)
	p := subagenttest.New(t, fmt.Sprintf(baseConfig, llm.URL, "archiveAfterMinutes: 60", ""), nil)
	clock := newStepClock(time.Now())
	m := New(Deps{
		Config: p.Config, Store: p.Store, Catalog: p.Catalog, Tools: p.Tools, Workspace: p.WorkspaceOf, Clock: clock,
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
	})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	subagenttest.StopAtCleanup(t, m)
	ctx := context.Background()
	run := func(thread string) *store.Run {
		t.Helper()
		res := m.Spawn(ctx, caller(thread), SpawnParams{Task: "task " + thread})
		if res.Status != "accepted" {
			t.Fatalf("spawn = %+v", res)
		}
		return subagenttest.WaitDone(t, p.Store, res.RunID)
	}
	a, b := run("1"), run("2")
	clock.advance(61 * time.Minute) // a and b are due; the archiver's timer is an hour of real time away
	c := run("3")
	deadline := time.Now().Add(20 * time.Second)
	for _, r := range []*store.Run{a, b} {
		for {
			got, err := p.Store.GetRun(ctx, r.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !got.ArchivedAt.IsZero() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s, due %s ago by the clock, was not archived after a later run ended", r.ID, clock.Now().Sub(got.ArchiveAt))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if got, err := p.Store.GetRun(ctx, c.ID); err != nil || !got.ArchivedAt.IsZero() {
		t.Errorf("run %s, due in an hour, archived at %v (%v)", c.ID, got.ArchivedAt, err)
	}
}

// endOutage is a store whose first EndRun of the run with task fails (an
// outage), reporting on failed.
type endOutage struct {
	Store
	task   string
	once   sync.Once
	failed chan struct{}
}

func (s *endOutage) EndRun(ctx context.Context, r *store.Run, end store.RunEnd) error {
	hit := false
	if r.Task == s.task {
		s.once.Do(func() { hit = true })
	}
	if hit {
		close(s.failed)
		return errors.New("store unreachable")
	}
	return s.Store.EndRun(ctx, r, end)
}

// A run whose end cannot be recorded (its write retried through an
// outage) does not hold the queued run it would hand its slot to: that
// run starts in the next slot that frees, instead of waiting for the
// outage to end while later runs could overtake it.
func TestRunEndRetriedGivesTheNextRunBack(t *testing.T) {
	working := make(chan string, 3)
	release := map[string]chan struct{}{"first": make(chan struct{}), "second": make(chan struct{}), "third": make(chan struct{})}
	close(release["third"])
	llm := llmtest.NewAnthropic(t, func(c llmtest.Call) llmtest.Reply {
		if task := taskOf(c); strings.Contains(c.System, "Sub-agent context") && len(c.Messages) == 1 && release[task] != nil {
			working <- task
			select {
			case <-release[task]:
			case <-time.After(30 * time.Second):
			}
		}
		return standard(c)
	})
	p := subagenttest.New(t, fmt.Sprintf(baseConfig, llm.URL, "maxConcurrent: 2, maxChildrenPerSession: 10", ""), nil)
	db := &endOutage{Store: p.Store, task: "first", failed: make(chan struct{})}
	outage := make(chan struct{})
	m := New(Deps{
		Config: p.Config, Store: db, Catalog: p.Catalog, Tools: p.Tools, Workspace: p.WorkspaceOf,
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)),
		RetryWrite: func(ctx context.Context, _ string, _ *zap.Logger, write func(context.Context) error) error {
			if err := write(ctx); err == nil {
				return nil
			}
			select { // the outage lasts until the test ends it
			case <-outage:
			case <-time.After(30 * time.Second):
			}
			return write(ctx)
		},
	})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	subagenttest.StopAtCleanup(t, m)
	ctx := context.Background()
	waitWorking := func(want ...string) {
		t.Helper()
		var got []string
		for range want {
			select {
			case task := <-working:
				got = append(got, task)
			case <-time.After(20 * time.Second):
				t.Fatalf("working: %v; want %v", got, want)
			}
		}
		if slices.Sort(got); !slices.Equal(got, want) {
			t.Fatalf("working: %v; want %v", got, want)
		}
	}
	var ids []string
	for _, task := range []string{"first", "second", "third"} {
		res := m.Spawn(ctx, caller("1"), SpawnParams{Task: task})
		if res.Status != "accepted" {
			t.Fatalf("spawn %s = %+v", task, res)
		}
		ids = append(ids, res.RunID)
	}
	waitWorking("first", "second")
	close(release["first"]) // its end's write fails and is retried until the outage ends
	select {
	case <-db.failed:
	case <-time.After(20 * time.Second):
		t.Fatal("the first run's end was not written")
	}
	close(release["second"]) // its slot frees: the third run takes it
	waitWorking("third")
	close(outage)
	for _, id := range ids {
		subagenttest.WaitDone(t, p.Store, id)
	}
}

// A run queued behind a full lane is running in the store while it works
// (what another replica and `herald runs list` read), with its start:
// the run before it records that start with its own end, and the spawn
// that found a free slot records its run running at once.
func TestQueuedRunIsStoredRunningWhileItWorks(t *testing.T) {
	working := make(chan string, 2)
	release := make(chan struct{}, 2)
	h := newHarness(t, "maxConcurrent: 1, maxChildrenPerSession: 10", "", func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "Sub-agent context") && len(c.Messages) == 1 {
			working <- taskOf(c)
			select {
			case <-release:
			case <-time.After(30 * time.Second):
			}
		}
		return standard(c)
	})
	ctx := context.Background()
	first := h.m.Spawn(ctx, caller("1"), SpawnParams{Task: "first"})
	second := h.m.Spawn(ctx, caller("1"), SpawnParams{Task: "second"})
	for _, step := range []struct{ task, id, other, otherStatus string }{
		{"first", first.RunID, second.RunID, store.StatusQueued},
		{"second", second.RunID, first.RunID, store.StatusDone},
	} {
		select {
		case got := <-working:
			if got != step.task {
				t.Fatalf("%s is working, want %s", got, step.task)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s did not start working", step.task)
		}
		r, err := h.db.GetRun(ctx, step.id)
		if err != nil || r.Status != store.StatusRunning || r.StartedAt.IsZero() {
			t.Fatalf("%s while it works: %+v, %v; want running with its start in the store", step.task, r, err)
		}
		if o, err := h.db.GetRun(ctx, step.other); err != nil || o.Status != step.otherStatus {
			t.Fatalf("the other run while %s works: %+v, %v; want %s", step.task, o, err, step.otherStatus)
		}
		release <- struct{}{}
	}
	h.waitAnnounces(2)
}
