package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels/slack/slackfake"
	"github.com/heraldhq/herald/channels/web/webtest"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent"
)

// batchModel spawns a batch for "batch <announce> <label>…" (one
// sessions_spawn with tasks, each task its label) and answers the tool's
// result with "tool: <result JSON>". A child waits for its label's gate,
// if any; a child whose task starts with "fail" gets a 400 from the model
// (its run ends error); "status <runId>" calls session_status; one whose
// task starts with "file" first sends the
// conversation's attachments/chart.png with send_file; one whose task
// starts with "long" answers with a result of about 1,500 characters. A
// wake (results as the input) is answered "woken: <labels>", a wake at a
// group's deadline "deadline: <labels> | <its input>", any other
// message "seen: <labels>" (orchModel).
func batchModel(gates map[string]*gate) llmtest.Handler {
	base := orchModel(nil)
	return func(c llmtest.Call) llmtest.Reply {
		last := c.LastUser()
		n := len(c.Messages)
		toolDone := n > 0 && c.Messages[n-1].Role == agent.RoleTool
		if strings.Contains(c.System, "Sub-agent context") {
			task := "?"
			if i := strings.Index(c.System, "- Task: "); i >= 0 {
				task, _, _ = strings.Cut(c.System[i+len("- Task: "):], "\n")
			}
			switch {
			case strings.Contains(last, "Announce step") && strings.HasPrefix(task, "long"):
				return llmtest.Reply{Text: "Result:\n" + strings.TrimSpace(strings.Repeat(task+" found a thing. ", 75)) + "\n\nNotes:\n(none)"}
			case strings.Contains(last, "Announce step"):
				return llmtest.Reply{Text: "Result:\nfindings of " + task + "\n\nNotes:\n(none)", Usage: agent.Usage{Input: 100, Output: 10}}
			case strings.HasPrefix(task, "fail"):
				return llmtest.Reply{Status: 400, Message: "the model refuses " + task}
			case strings.HasPrefix(task, "file") && !toolDone:
				return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "send_file",
					Args: json.RawMessage(`{"path": "attachments/chart.png", "caption": "chart of ` + task + `"}`)}}}
			}
			if g := gates[task]; g != nil {
				g.wait()
			}
			return llmtest.Reply{Text: "worked on " + task, Usage: agent.Usage{Input: 1000, Output: 100}}
		}
		if toolDone {
			return llmtest.Reply{Text: "tool: " + c.Messages[n-1].ToolResults[0].Content}
		}
		if _, rest, ok := strings.Cut(last, "batch "); ok {
			announce, labels, _ := strings.Cut(rest, " ")
			var tasks []string
			for _, l := range strings.Fields(labels) {
				tasks = append(tasks, fmt.Sprintf(`{"task":%q,"label":%q}`, l, l))
			}
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn",
				Args: json.RawMessage(fmt.Sprintf(`{"announce":%q,"tasks":[%s]}`, announce, strings.Join(tasks, ",")))}}}
		}
		if runID, ok := strings.CutPrefix(last, "status "); ok {
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "session_status", Args: json.RawMessage(fmt.Sprintf(`{"runId":%q}`, runID))}}}
		}
		if strings.HasPrefix(last, "[sub-agent result]") {
			return llmtest.Reply{Text: "woken: " + strings.Join(resultsSeen(c), ",")}
		}
		if strings.HasPrefix(last, subagent.WakePrefix) {
			return llmtest.Reply{Text: "deadline: " + strings.Join(resultsSeen(c), ",") + " | " + last}
		}
		return base(c)
	}
}

// spawnBatch posts "batch …" and returns the tool's result as the model
// saw it.
func spawnBatch(t *testing.T, tg *testGW, client, text string) string {
	t.Helper()
	seq := webPost(t, tg.URL, client, text)
	return waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return strings.HasPrefix(s, "tool: ") }).Text
}

// statsLast checks that the one Stats line of a batch announce is its last
// line.
func statsLast(t *testing.T, text string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "Stats: runtime ") || !strings.Contains(last, "(batch of ") {
		t.Errorf("the batch announce's last line %q is not its Stats line:\n%s", last, text)
	}
	if n := strings.Count(text, "Stats: "); n != 1 {
		t.Errorf("the batch announce has %d Stats lines, want one:\n%s", n, text)
	}
}

// TestE2EBatchAnnouncesOnce: a batch of four with announce chat, one of
// which fails, posts nothing per child and one announce when the last
// ends: "✅ 3 success · ❌ 1 error", each child's section under its label
// in the order of the tasks, the Stats line last; the file one child sent
// goes out with it; the parent's next turn holds the four results once.
func TestE2EBatchAnnouncesOnce(t *testing.T) {
	t.Parallel()
	last := newGate(t)
	tg := newTestGateway(t, filesE2EConfig, batchModel(map[string]*gate{"delta": last}))
	const client = "batch-chat"
	postFiles(t, tg.URL, client, "here is a chart", map[string][]byte{"chart.png": testPNG(t)})
	waitWeb(t, tg, client, 0, "assistant", func(string) bool { return true })
	res := spawnBatch(t, tg, client, "batch chat alpha file-beta fail-gamma delta")
	var spawn struct {
		Status string `json:"status"`
		Runs   []struct {
			RunID, ChildSessionKey string
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(res, "tool: ")), &spawn); err != nil || spawn.Status != "accepted" || len(spawn.Runs) != 4 {
		t.Fatalf("sessions_spawn with 4 tasks answered %s (%v), want accepted with 4 runs", res, err)
	}
	key := "agent:main:web:dm:" + client
	for _, label := range []string{"alpha", "file-beta", "fail-gamma"} {
		waitRunDone(t, tg, key, label)
	}
	if n := countWeb(t, tg, client, "announce", ""); n != 0 {
		t.Fatalf("%d announces while delta still runs; a batch posts once, when its last child ends", n)
	}
	last.open()
	ann := waitWeb(t, tg, client, 0, "announce", func(s string) bool { return strings.HasPrefix(s, "Status: ✅") })
	if !strings.HasPrefix(ann.Text, "Status: ✅ 3 success · ❌ 1 error\n") {
		t.Errorf("the batch announce's first line is not the count of its outcomes:\n%s", ann.Text)
	}
	prev := -1
	for i, label := range []string{"alpha", "file-beta", "fail-gamma", "delta"} {
		head := fmt.Sprintf("— %d/4 · %s —\nStatus: ", i+1, label)
		at := strings.Index(ann.Text, head)
		if at <= prev {
			t.Errorf("section %q missing or out of order in:\n%s", head, ann.Text)
		}
		prev = at
	}
	if !strings.Contains(ann.Text, "— 3/4 · fail-gamma —\nStatus: error\n") || !strings.Contains(ann.Text, "the model refuses fail-gamma") {
		t.Errorf("the failed child's section does not say error and why:\n%s", ann.Text)
	}
	statsLast(t, ann.Text)
	waitWeb(t, tg, client, ann.Seq, "announce", func(s string) bool { return s == "chart of file-beta" })
	var files []string
	announces := 0
	for _, m := range webFileMessages(t, tg.URL, client) {
		if m.Role == "announce" {
			announces++
			for _, f := range m.Files {
				files = append(files, f.Name+": "+m.Text)
			}
		}
	}
	if announces != 2 || len(files) != 1 || files[0] != "chart.png: chart of file-beta" {
		t.Errorf("%d announce messages with files %q; want the batch announce, then file-beta's chart", announces, files)
	}
	if got := askSeen(t, tg, client, "which of them failed?"); got != "seen: alpha,delta,fail-gamma,file-beta" {
		t.Errorf("the next turn saw %q, want the four results once", got)
	}
}

// batchLimitConfig allows 3 running or queued children per session.
const batchLimitConfig = `{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m", maxTokens: 8192 }] } } },
  agents: { defaults: { model: "anthropic/m", subagents: { maxChildrenPerSession: 3 } }, list: [{ id: "main" }] },
  channels: { web: { enabled: true } },
}`

// TestE2EBatchOverLimitRefused: with two children running and
// maxChildrenPerSession 3, a batch of two is refused whole — no run of it
// is started — and a batch of four is refused as over the limit; the
// running batch still announces once.
func TestE2EBatchOverLimitRefused(t *testing.T) {
	t.Parallel()
	gates := map[string]*gate{"one": newGate(t), "two": newGate(t)}
	tg := newTestGateway(t, batchLimitConfig, batchModel(gates))
	const client = "batch-limit"
	key := "agent:main:web:dm:" + client
	if res := spawnBatch(t, tg, client, "batch chat one two"); !strings.Contains(res, `"status":"accepted"`) {
		t.Fatalf("the first batch: %s", res)
	}
	res := spawnBatch(t, tg, client, "batch chat three four")
	if !strings.Contains(res, `"status":"forbidden"`) || !strings.Contains(res, "already has 2 running or queued sub-agents and the batch asks for 2 more (maxChildrenPerSession 3); none of the batch was started") {
		t.Errorf("a batch past maxChildrenPerSession answered %s", res)
	}
	res = spawnBatch(t, tg, client, "batch chat a b c d")
	if !strings.Contains(res, `"status":"error"`) || !strings.Contains(res, "tasks has 4 tasks; a batch may have at most maxChildrenPerSession (3)") {
		t.Errorf("a batch of 4 under maxChildrenPerSession 3 answered %s", res)
	}
	if runs := tg.runsOf(t, key); len(runs) != 2 {
		t.Errorf("%d runs, want only the first batch's 2: a refused batch starts none", len(runs))
	}
	gates["one"].open()
	gates["two"].open()
	ann := waitWeb(t, tg, client, 0, "announce", func(s string) bool { return strings.HasPrefix(s, "Status: ✅ 2 success\n") })
	statsLast(t, ann.Text)
	if runs := tg.runsOf(t, key); len(runs) != 2 {
		t.Errorf("%d runs after the batch ended, want 2", len(runs))
	}
	if n := countWeb(t, tg, client, "announce", ""); n != 1 {
		t.Errorf("%d announces, want the one of the batch", n)
	}
}

// TestE2EBatchSplitKeepsStatsLast: on Slack (4,000 characters a message)
// a batch announce of four long results is split into several messages in
// the requester's thread, each within the limit; the first begins with the
// outcomes and only the last holds the Stats line, as its last line.
func TestE2EBatchSplitKeepsStatsLast(t *testing.T) {
	t.Parallel()
	sf := slackfake.New(t)
	tg := newTestGateway(t, fmt.Sprintf(slackE2EConfig, slackfake.BotToken, slackfake.AppToken, sf.URL()), batchModel(nil))
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("the gateway's Slack channel did not connect over Socket Mode")
	}
	sf.SendMention("C1", slackfake.UserID, "batch chat long1 long2 long3 long4", slackT1)
	tg.waitDelivered(t, 2) // the reply and the batch's announce
	var parts []string
	for _, p := range sf.Posted() {
		if p.ThreadTS != slackT1 || p.Channel != "C1" {
			t.Errorf("a post outside C1 thread %s: %+v", slackT1, p)
		}
		if !strings.HasPrefix(p.Text, "tool: ") {
			parts = append(parts, p.Text)
		}
	}
	if len(parts) < 2 {
		t.Fatalf("the batch announce went out in %d message(s), want it split: %q", len(parts), parts)
	}
	if !strings.HasPrefix(parts[0], "Status: ✅ 4 success\n") {
		t.Errorf("the first part does not begin with the outcomes: %.80q", parts[0])
	}
	for i, p := range parts {
		if n := utf8.RuneCountInString(p); n > 4000 {
			t.Errorf("part %d has %d characters, over Slack's 4,000", i+1, n)
		}
		if i < len(parts)-1 && strings.Contains(p, "Stats: ") {
			t.Errorf("part %d of %d holds the Stats line; it belongs to the last", i+1, len(parts))
		}
	}
	statsLast(t, parts[len(parts)-1])
	for _, label := range []string{"long1", "long2", "long3", "long4"} {
		if !strings.Contains(strings.Join(parts, "\n"), " · "+label+" —\nStatus: success") {
			t.Errorf("no section for %s in the parts", label)
		}
	}
}

// TestE2EBatchParentWakesOnce: a batch with announce parent posts nothing;
// when its last child ends the conversation is woken once with all the
// results, and the file a child sent goes out with the woken reply, once.
func TestE2EBatchParentWakesOnce(t *testing.T) {
	t.Parallel()
	last := newGate(t)
	tg := newTestGateway(t, filesE2EConfig, batchModel(map[string]*gate{"gamma": last}))
	const client = "batch-parent"
	events := openEvents(t, tg.URL, client)
	postFiles(t, tg.URL, client, "here is a chart", map[string][]byte{"chart.png": testPNG(t)})
	waitWeb(t, tg, client, 0, "assistant", func(string) bool { return true })
	if res := spawnBatch(t, tg, client, "batch parent alpha file-beta gamma"); !strings.Contains(res, `"status":"accepted"`) {
		t.Fatalf("the batch: %s", res)
	}
	key := "agent:main:web:dm:" + client
	waitRunDone(t, tg, key, "alpha")
	waitRunDone(t, tg, key, "file-beta")
	seq := webPost(t, tg.URL, client, "/subagents list")
	list := waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.Contains(s, "This conversation: waiting (1 child)") }).Text
	batch := tg.runsOf(t, key)[0].Batch[:8]
	if !strings.Contains(list, "\n📦1 batch "+batch+": 2 of 3 ended · ✅ 2 success · announce parent\n") || strings.Count(list, ") running · 📦1 gamma") != 1 ||
		strings.Count(list, " · 📦1 ") != 3 {
		t.Errorf("/subagents list does not show the batch, its progress and its runs:\n%s", list)
	}
	// The web chat's panel: the conversation waits, and the three runs
	// are marked with their batch.
	if !waitPanel(events, func(p panelState) bool {
		marked := 0
		for _, r := range p.Runs {
			if r.Batch == batch {
				marked++
			}
		}
		return p.Waiting == "This conversation: waiting (1 child)" && marked == 3
	}) {
		t.Error("the panel never showed the conversation waiting for the last run of its batch of 3")
	}
	last.open()
	got := waitWeb(t, tg, client, 0, "assistant", func(s string) bool { return strings.HasPrefix(s, "woken:") })
	if got.Text != "woken: alpha,file-beta,gamma" {
		t.Errorf("the wake answered %q, want the three results once", got.Text)
	}
	waitWeb(t, tg, client, got.Seq, "assistant", func(s string) bool { return s == "chart of file-beta" })
	var files []string
	for _, m := range webFileMessages(t, tg.URL, client) {
		if m.Role == "announce" {
			t.Errorf("an announce was posted for a batch with announce parent: %q", m.Text)
		}
		for _, f := range m.Files {
			if m.Role == "assistant" {
				files = append(files, f.Name+": "+m.Text)
			}
		}
	}
	if len(files) != 1 || files[0] != "chart.png: chart of file-beta" {
		t.Errorf("files with the replies: %q; want file-beta's chart once, with the woken reply", files)
	}
	if n := countWeb(t, tg, client, "assistant", "woken:"); n != 1 {
		t.Errorf("%d wake answers, want one", n)
	}
	for _, r := range tg.runsOf(t, key) {
		if r.Announce != store.AnnounceParent || r.Batch == "" {
			t.Errorf("run %s: announce %q, batch %q; want parent, one batch", r.Label, r.Announce, r.Batch)
		}
	}
}

// panelState is the web chat panel's event as the tests read it.
type panelState struct {
	Runs []struct {
		Label, Status, Batch string
	}
	Waiting string
}

// waitPanel reads the panel's events until one satisfies cond (true) or
// the wait ends (false).
func waitPanel(events <-chan sseEvent, cond func(panelState) bool) bool {
	deadline := time.After(e2eWait)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return false
			}
			var p panelState
			if ev.Name == "subagents" && json.Unmarshal([]byte(ev.Data), &p) == nil && cond(p) {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// TestE2EBrowserBatchPanel drives the web chat in headless Chromium: the
// panel shows a batch's runs under one heading with how many ended, and
// the batch's one announce is a card coloured by its worst outcome.
func TestE2EBrowserBatchPanel(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	bctx := webtest.NewBrowser(t)
	last := newGate(t)
	tg := newTestGateway(t, orchConfig, batchModel(map[string]*gate{"gamma": last}))
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	const client = "batch-browser"
	if err := webtest.Chat(ctx, tg.URL+"/?client="+client, "batch chat alpha fail-beta gamma"); err != nil {
		t.Fatal(err)
	}
	key := "agent:main:web:dm:" + client
	waitRunDone(t, tg, key, "alpha")
	waitRunDone(t, tg, key, "fail-beta")
	batch := tg.runsOf(t, key)[0].Batch[:8]
	poll(t, ctx, "the batch's heading with 2 of 3 ended",
		`Array.from(document.querySelectorAll("#subagents .batch")).some(h => h.textContent === "Batch `+batch+` · 2 of 3 ended")`)
	poll(t, ctx, "the batch's three runs under it", `document.querySelectorAll("#subagents .run.in-batch").length === 3`)
	last.open()
	poll(t, ctx, "the batch's announce as an error card",
		`Array.from(document.querySelectorAll("#messages .msg.announce.error .status")).some(s => s.textContent === "Status: ✅ 2 success · ❌ 1 error")`)
	poll(t, ctx, "the batch's heading with 3 of 3 ended",
		`Array.from(document.querySelectorAll("#subagents .batch")).some(h => h.textContent === "Batch `+batch+` · 3 of 3 ended")`)
}

// startAlphaBeta spawns the batch "alpha beta" with announce chat and
// waits until alpha has ended and beta has called the model.
func startAlphaBeta(t *testing.T, tg *testGW, client string) {
	t.Helper()
	if res := spawnBatch(t, tg, client, "batch chat alpha beta"); !strings.Contains(res, `"status":"accepted"`) {
		t.Fatalf("the batch: %s", res)
	}
	waitRunDone(t, tg, "agent:main:web:dm:"+client, "alpha")
	if !waitFor(e2eWait, func() bool {
		for _, c := range tg.LLM.Requests() {
			if strings.Contains(c.System, "- Task: beta") {
				return true
			}
		}
		return false
	}) {
		t.Fatal("beta never called the model")
	}
}

// TestE2EParentWokenAtGroupTimeout: a parent whose batch (announce
// parent) has a child still running at groupTimeoutSeconds is woken then,
// once, with the results so far in its history and an input that names
// the child still running; that child's later end does not wake it again
// (the parent runs once per group, SPEC §23) but its result reaches the
// next turn, and no announce is posted.
func TestE2EParentWokenAtGroupTimeout(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(orchConfig, `defaults: { model: "anthropic/m" }`, `defaults: { model: "anthropic/m", subagents: { groupTimeoutSeconds: 2 } }`, 1)
	hold := newGate(t)
	tg := newTestGateway(t, cfg, batchModel(map[string]*gate{"beta": hold}))
	const client = "parent-deadline"
	if res := spawnBatch(t, tg, client, "batch parent alpha beta"); !strings.Contains(res, `"status":"accepted"`) {
		t.Fatalf("the batch: %s", res)
	}
	woke := waitWeb(t, tg, client, 0, "assistant", func(s string) bool { return strings.HasPrefix(s, "deadline: ") })
	want := "deadline: alpha | " + subagent.WakePrefix + " groupTimeoutSeconds passed while 1 of your sub-agents still run (beta); " +
		"the results so far are above; the others reach this conversation when they end."
	if woke.Text != want {
		t.Errorf("the wake at the group deadline:\n got %q\nwant %q", woke.Text, want)
	}
	hold.open()
	waitRunDone(t, tg, "agent:main:web:dm:"+client, "beta")
	if got := askSeen(t, tg, client, "what did they find?"); got != "seen: alpha,beta" {
		t.Errorf("the next turn saw %q, want both results, beta's too", got)
	}
	if n := countWeb(t, tg, client, "assistant", "woken: "); n != 0 {
		t.Errorf("beta's end after the deadline woke the parent again (%d); the parent runs once per group", n)
	}
	if n := countWeb(t, tg, client, "assistant", "deadline: "); n != 1 {
		t.Errorf("%d wakes at the deadline, want one", n)
	}
	if n := countWeb(t, tg, client, "announce", ""); n != 0 {
		t.Errorf("%d announces for a batch with announce parent, want none", n)
	}
}

// TestE2EBatchSurvivesRestart: the gateway stops while one child of a
// batch still runs; after the restart that child resumes and ends, and
// the batch's one announce is posted once, with both children.
func TestE2EBatchSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hold := newGate(t)
	cfg := strings.Replace(orchConfig, "shutdownGraceSeconds: 5", "shutdownGraceSeconds: 1", 1)
	tg := newTestGatewayIn(t, dir, cfg, batchModel(map[string]*gate{"beta": hold}))
	const client = "batch-restart"
	key := "agent:main:web:dm:" + client
	startAlphaBeta(t, tg, client)
	tg.Stop() // beta's model call is held: its run is cut and resumes after the restart
	hold.open()

	tg = newTestGatewayIn(t, dir, cfg, batchModel(nil))
	ann := waitWeb(t, tg, client, 0, "announce", func(s string) bool { return strings.HasPrefix(s, "Status: ") })
	if !strings.HasPrefix(ann.Text, "Status: ✅ 2 success\n") || !strings.Contains(ann.Text, "— 2/2 · beta —\nStatus: success") {
		t.Errorf("the batch announce after the restart:\n%s", ann.Text)
	}
	statsLast(t, ann.Text)
	if r := waitRunDone(t, tg, key, "beta"); r.Resumes != 1 {
		t.Errorf("beta resumed %d times, want 1", r.Resumes)
	}
	tg.waitDelivered(t, 2) // the spawn's reply and the batch's announce
	if n := countWeb(t, tg, client, "announce", ""); n != 1 {
		t.Errorf("%d announces, want the batch's one", n)
	}
}

// TestE2EOrchestratorCarriesWorkerFiles: a worker of a depth-2
// orchestrator (announce parent, posting nothing) sends a file; the file
// goes out once, with the orchestrator's announce after its text.
func TestE2EOrchestratorCarriesWorkerFiles(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(filesE2EConfig, `defaults: { model: "anthropic/claude-sonnet-4-5" }`,
		`defaults: { model: "anthropic/claude-sonnet-4-5", subagents: { maxDepth: 2 } }`, 1)
	base := batchModel(nil)
	tg := newTestGateway(t, cfg, func(c llmtest.Call) llmtest.Reply {
		last := c.LastUser()
		n := len(c.Messages)
		toolDone := n > 0 && c.Messages[n-1].Role == agent.RoleTool
		switch {
		case strings.Contains(c.System, "- Task: orchestrate"):
			switch {
			case strings.Contains(last, "Announce step"):
				return llmtest.Reply{Text: "Result:\n" + agent.LastAssistantText(c.Messages) + "\n\nNotes:\n(none)"}
			case strings.HasPrefix(last, "[sub-agent result]"):
				return llmtest.Reply{Text: "combined: " + strings.Join(resultsSeen(c), ",")}
			case toolDone:
				return llmtest.Reply{Text: "worker started"}
			}
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn", Args: json.RawMessage(`{"task":"file-w1","label":"file-w1"}`)}}}
		case strings.Contains(c.System, "Sub-agent context"):
			return base(c)
		case toolDone:
			return llmtest.Reply{Text: "started"}
		case strings.Contains(last, "spawn orchestrate"):
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn", Args: json.RawMessage(`{"task":"orchestrate","label":"orchestrate"}`)}}}
		}
		return base(c)
	})
	const client = "orch-files"
	postFiles(t, tg.URL, client, "here is a chart", map[string][]byte{"chart.png": testPNG(t)})
	waitWeb(t, tg, client, 0, "assistant", func(string) bool { return true })
	webPost(t, tg.URL, client, "spawn orchestrate")
	ann := waitWeb(t, tg, client, 0, "announce", func(s string) bool { return strings.Contains(s, "Task: orchestrate") })
	if !strings.Contains(ann.Text, "combined: file-w1") {
		t.Errorf("the orchestrator's announce does not carry its worker's result:\n%s", ann.Text)
	}
	waitWeb(t, tg, client, ann.Seq, "announce", func(s string) bool { return s == "chart of file-w1" })
	var files []string
	for _, m := range webFileMessages(t, tg.URL, client) {
		for _, f := range m.Files {
			if m.Role != "user" {
				files = append(files, m.Role+" "+f.Name+": "+m.Text)
			}
		}
	}
	if len(files) != 1 || files[0] != "announce chart.png: chart of file-w1" {
		t.Errorf("files posted: %q; want the worker's chart once, with the orchestrator's announce", files)
	}
}

// TestE2ESilentChildFileWithNextReply: a child spawned with announce
// silent posts nothing; the file it sent goes out with the reply of the
// turn that takes its result in, once, and not with the turn after.
func TestE2ESilentChildFileWithNextReply(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, filesE2EConfig, batchModel(nil))
	const client = "silent-file"
	postFiles(t, tg.URL, client, "here is a chart", map[string][]byte{"chart.png": testPNG(t)})
	waitWeb(t, tg, client, 0, "assistant", func(string) bool { return true })
	if res := spawnBatch(t, tg, client, "batch silent file-a"); !strings.Contains(res, `"status":"accepted"`) {
		t.Fatalf("the batch: %s", res)
	}
	waitRunDone(t, tg, "agent:main:web:dm:"+client, "file-a")
	seq := webPost(t, tg.URL, client, "what did it find?")
	reply := waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return strings.HasPrefix(s, "seen:") })
	if reply.Text != "seen: file-a" {
		t.Errorf("the next turn saw %q, want the silent child's result", reply.Text)
	}
	waitWeb(t, tg, client, reply.Seq, "assistant", func(s string) bool { return s == "chart of file-a" })
	if got := askSeen(t, tg, client, "and now?"); got != "seen: file-a" {
		t.Errorf("the turn after saw %q", got)
	}
	var files []string
	for _, m := range webFileMessages(t, tg.URL, client) {
		for _, f := range m.Files {
			if m.Role != "user" {
				files = append(files, m.Role+" "+f.Name+": "+m.Text)
			}
		}
	}
	if len(files) != 1 || files[0] != "assistant chart.png: chart of file-a" {
		t.Errorf("files posted: %q; want the silent child's chart once, with the reply that took its result in", files)
	}
}

// TestE2EBatchGroupTimeout: a batch with announce chat whose child beta
// does not end within groupTimeoutSeconds posts its one announce then,
// with alpha's result and beta shown still running — also when the
// gateway stopped and started again meanwhile; beta's later end posts no
// second announce, and its result still reaches the conversation's
// history. /subagents info and session_status name beta's batch.
func TestE2EBatchGroupTimeout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := strings.Replace(orchConfig, "shutdownGraceSeconds: 5", "shutdownGraceSeconds: 1", 1)
	cfg = strings.Replace(cfg, `defaults: { model: "anthropic/m" }`, `defaults: { model: "anthropic/m", subagents: { groupTimeoutSeconds: 4 } }`, 1)
	hold := newGate(t)
	tg := newTestGatewayIn(t, dir, cfg, batchModel(map[string]*gate{"beta": hold}))
	const client = "batch-deadline"
	key := "agent:main:web:dm:" + client
	startAlphaBeta(t, tg, client)
	// Stopped (most likely) before the deadline: the restarted gateway
	// arms it again from the stored runs; either way the batch announces
	// once.
	tg.Stop()
	hold.open()

	again := newGate(t)
	tg = newTestGatewayIn(t, dir, cfg, batchModel(map[string]*gate{"beta": again}))
	ann := waitWeb(t, tg, client, 0, "announce", func(s string) bool { return strings.HasPrefix(s, "Status: ") })
	if !strings.HasPrefix(ann.Text, "Status: ✅ 1 success · ⏳ 1 running\n") ||
		!strings.Contains(ann.Text, "— 1/2 · alpha —\nStatus: success") || !strings.Contains(ann.Text, "findings of alpha") ||
		!strings.Contains(ann.Text, "— 2/2 · beta —\nStatus: running") || !strings.Contains(ann.Text, "still running when groupTimeoutSeconds passed") {
		t.Errorf("the batch announce at its group deadline:\n%s", ann.Text)
	}
	statsLast(t, ann.Text)

	var beta store.Run
	for _, r := range tg.runsOf(t, key) {
		if r.Label == "beta" {
			beta = r
		}
	}
	if beta.Status == store.StatusDone || beta.Batch == "" {
		t.Fatalf("beta: status %s, batch %q; want still running, in a batch", beta.Status, beta.Batch)
	}
	seq := webPost(t, tg.URL, client, "/subagents info beta")
	if info := waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.HasPrefix(s, "ℹ️ Subagent info") }); !strings.Contains(info.Text, "\nBatch: "+beta.Batch+"\n") {
		t.Errorf("/subagents info beta does not name its batch %s:\n%s", beta.Batch, info.Text)
	}
	seq = webPost(t, tg.URL, client, "status "+beta.ID)
	if st := waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return strings.HasPrefix(s, "tool: ") }); !strings.Contains(st.Text, `"batch":"`+beta.Batch+`"`) {
		t.Errorf("session_status of beta does not name its batch %s: %s", beta.Batch, st.Text)
	}

	again.open()
	waitRunDone(t, tg, key, "beta")
	if got := askSeen(t, tg, client, "what did they find?"); got != "seen: alpha,beta" {
		t.Errorf("the next turn saw %q, want both results, beta's too", got)
	}
	if !waitFor(e2eWait, func() bool { p, _, _ := tg.outbox(t); return p == 0 }) {
		t.Fatal("the outbox never emptied")
	}
	if n := countWeb(t, tg, client, "announce", ""); n != 1 {
		t.Errorf("%d announces, want the batch's one: beta's end after the deadline posts none", n)
	}
}
