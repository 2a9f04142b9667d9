package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for the probe of a PostgreSQL state
	_ "modernc.org/sqlite"             // database/sql driver "sqlite", for the probe of a SQLite state

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/devtools/harness"
	"github.com/heraldhq/herald/devtools/pgtest"
	"github.com/heraldhq/herald/store"
)

// Crash checks of SPEC §23 (issue 36): a sub-agent's result reaches its
// parent's history exactly once, and a wake runs exactly once, when the
// gateway is killed with SIGKILL between a child's end and the parent's
// next turn, before its wake runs or during it — on SQLite, and on two
// PostgreSQL replicas where the survivor adopts what the killed one held.
// Every kill waits for an observable condition (a store row, a request of
// the fake model), never for time.

// orchModel is the scripted model of these tests (OpenAI wire format).
//   - The main agent answers "spawn [parent] <label>…" with one
//     sessions_spawn per label (announce "parent" when asked), then
//     "started"; a wake (its input is a "[sub-agent result]") with
//     "woken: <labels of the results its history holds>", one at a
//     group's deadline with "deadline: <labels …>"; any other message
//     with "seen: <labels …>".
//   - "batch <label>…" spawns them as one batch (sessions_spawn tasks).
//   - "code: <agent>" spawns that (ACP) agent.
//   - A sub-agent labelled "orch…" spawns workers w1 and w2 (announce
//     "parent", the default at depth 2), says "workers started", answers
//     their results with "combined: <labels>" and announces that.
//   - A sub-agent answers "worked on <label>", its announce step
//     "Result:\nfindings of <label>\n\nNotes:\n(none)".
//
// Each call is recorded under a key — "work:<label>", "announce:<label>",
// "wake:<labels>", "deadline:<labels>", "seen:<client text>", "spawn",
// "started" — and a key with hangs
// left is not answered (until the gateway that asked dies). A call of a
// gated key waits for its gate.
type orchModel struct {
	url   string // where it is served (orchRig)
	mu    sync.Mutex
	hang  map[string]int
	calls map[string][]llmtest.Call
	at    map[string][]time.Time // when each call of a key arrived
	gates map[string]chan struct{}
}

func newOrchModel(hang map[string]int, gated ...string) *orchModel {
	m := &orchModel{hang: hang, calls: map[string][]llmtest.Call{}, at: map[string][]time.Time{}, gates: map[string]chan struct{}{}}
	for _, l := range gated {
		m.gates[l] = make(chan struct{})
	}
	return m
}

// open lets the calls of a gated key answer.
func (m *orchModel) open(label string) { close(m.gates[label]) }

// seen lists, sorted, the labels of the "[sub-agent result]" messages a
// call's history holds, once per message.
func seen(c llmtest.Call) []string {
	var labels []string
	for _, msg := range c.Messages {
		if msg.Role != agent.RoleUser {
			continue
		}
		for _, part := range strings.Split(msg.Text, "[sub-agent result] ")[1:] {
			label, _, _ := strings.Cut(part, " · run ")
			labels = append(labels, label)
		}
	}
	slices.Sort(labels)
	return labels
}

func (m *orchModel) handle(c llmtest.Call) llmtest.Reply {
	key, rep := m.reply(c)
	m.mu.Lock()
	m.calls[key] = append(m.calls[key], c)
	m.at[key] = append(m.at[key], time.Now())
	hang := m.hang[key] > 0
	if hang {
		m.hang[key]--
	}
	gate := m.gates[key]
	m.mu.Unlock()
	if hang {
		return llmtest.Reply{Text: "never delivered", Delay: 10 * time.Minute}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-time.After(2 * time.Minute):
		}
	}
	return rep
}

func (m *orchModel) reply(c llmtest.Call) (string, llmtest.Reply) {
	last := c.LastUser()
	if strings.Contains(c.System, "Sub-agent context") {
		label := "?"
		if mm := resumeLabelRe.FindStringSubmatch(c.System); mm != nil {
			label = mm[1]
		}
		if strings.HasPrefix(label, "orch") { // an orchestrator (maxDepth 2)
			switch {
			case strings.Contains(last, "Announce step"):
				return "announce:" + label, llmtest.Reply{Text: "Result:\n" + agent.LastAssistantText(c.Messages) + "\n\nNotes:\n(none)"}
			case strings.HasPrefix(last, "[sub-agent result]"):
				return "combine:" + label, llmtest.Reply{Text: "combined: " + strings.Join(seen(c), ",")}
			case len(c.Messages) > 0 && c.Messages[len(c.Messages)-1].Role == agent.RoleTool:
				return "spawn:" + label, llmtest.Reply{Text: "workers started"}
			}
			return "spawn:" + label, llmtest.Reply{ToolCalls: []agent.ToolCall{
				{Name: "sessions_spawn", Args: json.RawMessage(`{"task":"work one","label":"w1"}`)},
				{Name: "sessions_spawn", Args: json.RawMessage(`{"task":"work two","label":"w2"}`)}}}
		}
		if strings.Contains(last, "Announce step") {
			return "announce:" + label, llmtest.Reply{Text: "Result:\nfindings of " + label + "\n\nNotes:\n(none)"}
		}
		return "work:" + label, llmtest.Reply{Text: "worked on " + label}
	}
	if n := len(c.Messages); n > 0 && c.Messages[n-1].Role == agent.RoleTool {
		return "started", llmtest.Reply{Text: "started"}
	}
	if id, ok := strings.CutPrefix(last, "code: "); ok { // an ACP agent (acp_test.go)
		args, _ := json.Marshal(map[string]string{"agentId": id, "task": "work on the code", "label": id})
		return "spawn", llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn", Args: args}}}
	}
	if rest, ok := strings.CutPrefix(last, "batch "); ok { // sessions_spawn tasks
		var tasks []map[string]string
		for _, label := range strings.Fields(rest) {
			tasks = append(tasks, map[string]string{"task": "look into " + label, "label": label})
		}
		args, _ := json.Marshal(map[string]any{"tasks": tasks})
		return "spawn", llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn", Args: args}}}
	}
	if rest, ok := strings.CutPrefix(last, "spawn "); ok {
		announce := "chat"
		if r, ok := strings.CutPrefix(rest, "parent "); ok {
			announce, rest = "parent", r
		}
		var calls []agent.ToolCall
		for _, label := range strings.Fields(rest) {
			args, _ := json.Marshal(map[string]string{"task": "look into " + label, "label": label, "announce": announce})
			calls = append(calls, agent.ToolCall{Name: "sessions_spawn", Args: args})
		}
		return "spawn", llmtest.Reply{ToolCalls: calls}
	}
	labels := strings.Join(seen(c), ",")
	if strings.HasPrefix(last, "[sub-agent result]") {
		return "wake:" + labels, llmtest.Reply{Text: "woken: " + labels}
	}
	if strings.HasPrefix(last, "[sub-agent wake]") { // at a group's deadline
		return "deadline:" + labels, llmtest.Reply{Text: "deadline: " + labels}
	}
	return "seen:" + last, llmtest.Reply{Text: "seen: " + labels}
}

// count is how many calls of key the model got.
func (m *orchModel) count(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.calls[key])
}

// last is the last call of key.
func (m *orchModel) last(key string) llmtest.Call {
	m.mu.Lock()
	defer m.mu.Unlock()
	cs := m.calls[key]
	if len(cs) == 0 {
		return llmtest.Call{}
	}
	return cs[len(cs)-1]
}

// between is the time from the first call of key a to the first of key b.
func (m *orchModel) between(a, b string) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.at[a]) == 0 || len(m.at[b]) == 0 {
		return 0
	}
	return m.at[b][0].Sub(m.at[a][0])
}

// probe reads a gateway's state from outside (read-only SQL): SQLite
// (WAL, so reading beside the gateway is safe) or PostgreSQL.
type probe struct {
	t  *testing.T
	db *sql.DB
}

func sqliteProbe(t *testing.T, stateDir string) *probe {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(stateDir, store.DBFile)+"?_pragma=busy_timeout(5000)&_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &probe{t: t, db: db}
}

func postgresProbe(t *testing.T, url string) *probe {
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &probe{t: t, db: db}
}

// n is the count query q returns (-1 while the table is not there yet).
func (p *probe) n(q string) int {
	var n int
	if err := p.db.QueryRow(q).Scan(&n); err != nil {
		return -1
	}
	return n
}

// results is how many result rows the runs labelled label have; folded:
// only those a turn took in.
func (p *probe) results(label string, folded bool) int {
	q := fmt.Sprintf(`SELECT count(*) FROM results r JOIN runs ON runs.id = r.run_id WHERE runs.label = '%s'`, label)
	if folded {
		q += ` AND r.folded_by <> ''`
	}
	return p.n(q)
}

// wakes is how many wake rows the web conversation client has; owed:
// only those not done.
func (p *probe) wakes(client string, owed bool) int {
	q := fmt.Sprintf(`SELECT count(*) FROM intake WHERE kind = 'wake' AND session_key = '%s'`, webKey(client))
	if owed {
		q += ` AND done_at IS NULL`
	}
	return p.n(q)
}

func webKey(client string) string { return "agent:main:web:dm:" + client }

// webAnswers are the texts of a conversation's messages of role that
// begin with prefix.
func webAnswers(ctx context.Context, web *harness.Web, client, role, prefix string) []string {
	msgs, err := web.Messages(ctx, client, 0)
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range msgs {
		if m.Role == role && strings.HasPrefix(m.Text, prefix) {
			out = append(out, m.Text)
		}
	}
	return out
}

// orchRig is a rig for the scripted orchModel on SQLite; extra is more
// members of agents.defaults.subagents.
func orchRig(t *testing.T, model *orchModel, mainConcurrent int, extra ...string) *rig {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped with -short: runs real gateway processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	bin, err := harness.BuildOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	llm := llmtest.NewOpenAI(t, model.handle)
	model.url = llm.URL
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := &rig{t: t, ctx: ctx, bin: bin, addr: addr, cfgPath: filepath.Join(dir, "herald.json5"),
		stateDir: filepath.Join(dir, "state"), logPath: filepath.Join(dir, "gateway.log")}
	cfg := harness.Config{Listen: addr, ModelURL: llm.URL, MainConcurrent: mainConcurrent, Subagents: 4, Children: 5, GraceSeconds: 1,
		SubagentsExtra: strings.Join(extra, ", ")}
	if err := cfg.Write(r.cfgPath); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestResultsReachParentAcrossKill9 (SPEC §23, SQLite): two children of a
// conversation end across three SIGKILLs — one while beta's model call is
// in flight after alpha ended, one right after beta's result was stored
// (before the parent's next turn), one while that turn's model call is in
// flight (its results already taken in). The turn that finally answers
// sees both results once, it is answered once, and each child is
// announced once.
func TestResultsReachParentAcrossKill9(t *testing.T) {
	model := newOrchModel(map[string]int{"work:beta": 1, "seen:what did they find?": 1})
	r := orchRig(t, model, 2)
	const client = "orch"
	p := sqliteProbe(t, r.stateDir)

	gw := r.start()
	web := harness.NewWeb(gw.Base, 2)
	if _, err := web.Post(r.ctx, client, "spawn alpha beta"); err != nil {
		t.Fatal(err)
	}
	r.waitUntil("alpha's result stored, beta in its model call", func() bool {
		return p.results("alpha", false) == 1 && model.count("work:beta") == 1
	})
	if err := gw.Kill(); err != nil {
		t.Fatal(err)
	}

	gw = r.start() // beta resumes and ends
	r.waitUntil("beta's result stored", func() bool { return p.results("beta", false) == 1 })
	if err := gw.Kill(); err != nil { // between the child's end and the parent's next turn
		t.Fatal(err)
	}

	gw = r.start()
	if _, err := web.Post(r.ctx, client, "what did they find?"); err != nil {
		t.Fatal(err)
	}
	r.waitUntil("the parent's next turn in its model call", func() bool { return model.count("seen:what did they find?") == 1 })
	if err := gw.Kill(); err != nil {
		t.Fatal(err)
	}

	gw = r.start()
	r.waitUntil("the parent's answer", func() bool { return len(webAnswers(r.ctx, web, client, "assistant", "seen:")) > 0 })
	if got := webAnswers(r.ctx, web, client, "assistant", "seen:"); len(got) != 1 || got[0] != "seen: alpha,beta" {
		t.Errorf("the parent answered %q; want one answer that saw both results once", got)
	}
	if got := seen(model.last("seen:what did they find?")); fmt.Sprint(got) != "[alpha beta]" {
		t.Errorf("the resumed turn's model call held the results %v, want [alpha beta]", got)
	}
	for _, label := range []string{"alpha", "beta"} {
		if n := len(announces(t, web, client)[label]); n != 1 {
			t.Errorf("%s announced %d times, want once", label, n)
		}
		if n := p.results(label, true); n != 1 {
			t.Errorf("%s: %d results taken in by a turn, want 1", label, n)
		}
	}
	// A later turn still holds each once (nothing folded twice).
	if _, err := web.Post(r.ctx, client, "and now?"); err != nil {
		t.Fatal(err)
	}
	r.waitUntil("the answer to the later turn", func() bool { return model.count("seen:and now?") == 1 })
	if got := seen(model.last("seen:and now?")); fmt.Sprint(got) != "[alpha beta]" {
		t.Errorf("a later turn's history holds the results %v, want [alpha beta]", got)
	}
}

// TestOrchestratorWaitsAcrossKill9 (SPEC §23 with §25, SQLite): a
// sub-agent (maxDepth 2) spawns workers w1 and w2 with announce parent and
// waits for them. SIGKILL after w1 ended while w2's model call is in
// flight; after the restart both resume, w2 ends, and the orchestrator
// takes both results in — SIGKILL again during that turn's model call.
// After the second restart the orchestrator announces once, its announce
// carrying both workers' results once; no worker announce reaches the
// chat.
func TestOrchestratorWaitsAcrossKill9(t *testing.T) {
	model := newOrchModel(map[string]int{"work:w2": 1, "combine:orch": 1})
	r := orchRig(t, model, 2, "maxDepth: 2")
	const client = "orch-depth2"
	p := sqliteProbe(t, r.stateDir)

	gw := r.start()
	web := harness.NewWeb(gw.Base, 2)
	if _, err := web.Post(r.ctx, client, "spawn orch"); err != nil {
		t.Fatal(err)
	}
	r.waitUntil("w1's result stored, w2 in its model call", func() bool {
		return p.results("w1", false) == 1 && model.count("work:w2") == 1
	})
	if err := gw.Kill(); err != nil {
		t.Fatal(err)
	}
	gw = r.start()
	r.waitUntil("the orchestrator's turn on its workers' results in its model call", func() bool { return model.count("combine:orch") == 1 })
	if err := gw.Kill(); err != nil {
		t.Fatal(err)
	}
	gw = r.start()
	r.waitUntil("the orchestrator's announce", func() bool { return len(announces(t, web, client)["orch"]) > 0 })
	r.waitUntil("every run ended", func() bool {
		return p.n(`SELECT count(*) FROM runs WHERE status <> 'done'`) == 0
	})
	got := announces(t, web, client)
	if len(got["orch"]) != 1 || !strings.Contains(got["orch"][0], "combined: w1,w2\n") || !strings.Contains(got["orch"][0], "Status: success") {
		t.Errorf("the orchestrator's announces: %q; want one, success, carrying both workers' results once", got["orch"])
	}
	if len(got) != 1 {
		t.Errorf("announces in the chat: %q; want only the orchestrator's", got)
	}
	if n := model.count("combine:orch"); n != 2 {
		t.Errorf("the orchestrator's turn on its workers' results reached the model %d times, want 2 (cut, then once)", n)
	}
	if n := model.count("announce:orch"); n != 1 {
		t.Errorf("the orchestrator's announce step reached the model %d times, want once", n)
	}
}

// TestBatchAnnouncesOnceAcrossKill9 (SPEC §23 batch spawn, SQLite): a
// batch of three; SIGKILL after two of them ended while the third is
// mid-call, and again right after the third's result is stored (its end
// wrote the batch's announce). One announce for the batch, with the three
// sections, and the parent's next turn holds the three results once.
func TestBatchAnnouncesOnceAcrossKill9(t *testing.T) {
	model := newOrchModel(map[string]int{"work:b2": 1})
	r := orchRig(t, model, 2)
	const client = "batch"
	p := sqliteProbe(t, r.stateDir)

	gw := r.start()
	web := harness.NewWeb(gw.Base, 2)
	if _, err := web.Post(r.ctx, client, "batch b1 b2 b3"); err != nil {
		t.Fatal(err)
	}
	r.waitUntil("b1's and b3's results stored, b2 in its model call", func() bool {
		return p.results("b1", false) == 1 && p.results("b3", false) == 1 && model.count("work:b2") == 1
	})
	if n := len(webAnswers(r.ctx, web, client, "announce", "")); n != 0 {
		t.Fatalf("%d announces while b2 runs; a batch posts once, when its last child ends", n)
	}
	if err := gw.Kill(); err != nil {
		t.Fatal(err)
	}
	gw = r.start()
	r.waitUntil("b2's result stored", func() bool { return p.results("b2", false) == 1 })
	if err := gw.Kill(); err != nil {
		t.Fatal(err)
	}
	gw = r.start()
	r.waitUntil("the batch's announce", func() bool { return len(webAnswers(r.ctx, web, client, "announce", "")) > 0 })
	r.waitUntil("the outbox settled", func() bool { return metric(t, gw.Base, `herald_outbox_pending`) == 0 })
	anns := webAnswers(r.ctx, web, client, "announce", "")
	if len(anns) != 1 || !strings.HasPrefix(anns[0], "Status: ✅ 3 success\n") {
		t.Fatalf("announces %q; want one for the batch, ✅ 3 success", anns)
	}
	for i, label := range []string{"b1", "b2", "b3"} {
		if !strings.Contains(anns[0], fmt.Sprintf("— %d/3 · %s —\nStatus: success\n", i+1, label)) {
			t.Errorf("the batch announce lacks %s's section:\n%s", label, anns[0])
		}
	}
	if !strings.Contains(anns[0], "Resumed after the gateway stopped (1×).") {
		t.Errorf("the batch announce does not say b2 was resumed:\n%s", anns[0])
	}
	if _, err := web.Post(r.ctx, client, "what did they find?"); err != nil {
		t.Fatal(err)
	}
	r.waitUntil("the parent's answer", func() bool { return len(webAnswers(r.ctx, web, client, "assistant", "seen:")) > 0 })
	if got := webAnswers(r.ctx, web, client, "assistant", "seen:"); fmt.Sprint(got) != "[seen: b1,b2,b3]" {
		t.Errorf("the parent answered %q; want the three results once", got)
	}
}

// TestSpawnTurnCutAcrossKill9 (SPEC §23, SQLite): the turn that spawned
// two "parent" children is SIGKILLed during its last model call, after
// both children ended (their ends could not add the wake: the turn was
// still owed). After the restart the turn finishes, and its completion
// adds the wake, which runs once with both results.
func TestSpawnTurnCutAcrossKill9(t *testing.T) {
	model := newOrchModel(map[string]int{"started": 1})
	r := orchRig(t, model, 2)
	const client = "cut"
	p := sqliteProbe(t, r.stateDir)

	gw := r.start()
	web := harness.NewWeb(gw.Base, 2)
	if _, err := web.Post(r.ctx, client, "spawn parent alpha beta"); err != nil {
		t.Fatal(err)
	}
	r.waitUntil("both results stored, the spawning turn in its last model call", func() bool {
		return p.results("alpha", false) == 1 && p.results("beta", false) == 1 && model.count("started") == 1
	})
	if n := p.wakes(client, false); n != 0 {
		t.Fatalf("%d wakes stored while the spawning turn is owed; want none yet", n)
	}
	if err := gw.Kill(); err != nil {
		t.Fatal(err)
	}
	gw = r.start()
	r.waitUntil("the wake's answer", func() bool { return len(webAnswers(r.ctx, web, client, "assistant", "woken:")) > 0 })
	r.waitUntil("no wake owed", func() bool { return p.wakes(client, true) == 0 })
	if got := webAnswers(r.ctx, web, client, "assistant", ""); fmt.Sprint(got) != "[started woken: alpha,beta]" {
		t.Errorf("answers %q; want the spawning turn's once, then one wake with both results", got)
	}
	if n := model.count("wake:alpha,beta"); n != 1 {
		t.Errorf("the wake reached the model %d times, want once", n)
	}
}

// TestGroupDeadlineAcrossKill9 (SPEC §23 groupTimeoutSeconds, SQLite):
// gamma ends, zed never does; SIGKILL while zed's model call is in flight.
// After the restart zed resumes (and hangs again), and at the group's
// deadline the parent is woken once with gamma's result.
func TestGroupDeadlineAcrossKill9(t *testing.T) {
	model := newOrchModel(map[string]int{"work:zed": 1000})
	r := orchRig(t, model, 2, "groupTimeoutSeconds: 3")
	const client = "late"
	p := sqliteProbe(t, r.stateDir)

	gw := r.start()
	web := harness.NewWeb(gw.Base, 2)
	if _, err := web.Post(r.ctx, client, "spawn parent gamma zed"); err != nil {
		t.Fatal(err)
	}
	r.waitUntil("gamma's result stored, zed in its model call", func() bool {
		return p.results("gamma", false) == 1 && model.count("work:zed") == 1
	})
	if err := gw.Kill(); err != nil {
		t.Fatal(err)
	}
	gw = r.start()
	r.waitUntil("the wake at the group's deadline answered", func() bool {
		return len(webAnswers(r.ctx, web, client, "assistant", "deadline:")) > 0 && p.wakes(client, true) == 0
	})
	if got := webAnswers(r.ctx, web, client, "assistant", "deadline:"); len(got) != 1 || got[0] != "deadline: gamma" {
		t.Errorf("answers at the deadline %q; want one, with gamma's result", got)
	}
	if n := model.count("work:zed"); n != 2 {
		t.Errorf("zed's model call was made %d times, want 2 (before the kill, resumed after)", n)
	}
	if n := p.wakes(client, false); n != 1 {
		t.Errorf("%d wakes stored, want 1", n)
	}
}

// TestWakeReplyWrittenAcrossKill9 (SPEC §23 with §12, SQLite): the
// wake's reply is in the transcript but its completion (the reply and the
// done mark, one transaction) could not commit — the test holds the
// database's write lock — when the gateway is SIGKILLed. After the
// restart the written reply is delivered once, with no second model call.
func TestWakeReplyWrittenAcrossKill9(t *testing.T) {
	model := newOrchModel(nil, "wake:alpha,beta")
	r := orchRig(t, model, 2)
	const client = "written"
	p := sqliteProbe(t, r.stateDir)

	gw := r.start()
	web := harness.NewWeb(gw.Base, 2)
	if _, err := web.Post(r.ctx, client, "spawn parent alpha beta"); err != nil {
		t.Fatal(err)
	}
	r.waitUntil("the wake in its model call", func() bool { return model.count("wake:alpha,beta") == 1 })
	unlock := lockSQLite(t, r.stateDir)
	model.open("wake:alpha,beta")
	r.waitUntil("the wake's reply in the transcript", func() bool { return transcriptsWith(r.stateDir, `"woken: alpha,beta"`) == 1 })
	if err := gw.Kill(); err != nil {
		t.Fatal(err)
	}
	unlock()
	if n := p.wakes(client, true); n != 1 {
		t.Fatalf("%d wakes owed at the kill, want 1 (its completion must not have committed)", n)
	}
	gw = r.start()
	r.waitUntil("the wake's answer", func() bool {
		return p.wakes(client, true) == 0 && len(webAnswers(r.ctx, web, client, "assistant", "woken:")) > 0
	})
	if got := webAnswers(r.ctx, web, client, "assistant", "woken:"); fmt.Sprint(got) != "[woken: alpha,beta]" {
		t.Errorf("wake answers %q, want one with both results", got)
	}
	if n := model.count("wake:alpha,beta"); n != 1 {
		t.Errorf("the wake reached the model %d times; its written reply should have been delivered without a second call", n)
	}
}

// lockSQLite takes the write lock of the state database under stateDir
// and returns the function that gives it back.
func lockSQLite(t *testing.T, stateDir string) (unlock func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(stateDir, store.DBFile)+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin()
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	var once sync.Once
	unlock = func() {
		once.Do(func() {
			_ = tx.Rollback()
			db.Close()
		})
	}
	t.Cleanup(unlock)
	return unlock
}

// TestWakeRunsOnceAcrossKill9 (SPEC §23, SQLite): one main-lane slot. w1's
// two "parent" children end and its wake's model call hangs (the slot is
// taken); w2's two children end meanwhile, so w2's wake is stored and owed
// but has not run. SIGKILL. After the restart each wake runs once: one
// synthesized answer per conversation with both of its results, no
// announce; w2's wake reached the model only after the restart.
func TestWakeRunsOnceAcrossKill9(t *testing.T) {
	model := newOrchModel(map[string]int{"wake:alpha,beta": 1}, "work:beta", "work:delta")
	r := orchRig(t, model, 1)
	p := sqliteProbe(t, r.stateDir)

	gw := r.start()
	web := harness.NewWeb(gw.Base, 2)
	started := func(client string) func() bool {
		return func() bool { return len(webAnswers(r.ctx, web, client, "assistant", "started")) == 1 }
	}
	if _, err := web.Post(r.ctx, "w1", "spawn parent alpha beta"); err != nil {
		t.Fatal(err)
	}
	r.waitUntil("w1's children spawned", started("w1"))
	if _, err := web.Post(r.ctx, "w2", "spawn parent gamma delta"); err != nil {
		t.Fatal(err)
	}
	r.waitUntil("w2's children spawned", started("w2"))
	model.open("work:beta")
	r.waitUntil("w1's wake in its model call", func() bool { return model.count("wake:alpha,beta") == 1 })
	t.Logf("SQLite: the last child's announce-step call → its parent's wake call: %s (the fake's answer, the run's end with its result and the wake, the main lane, the fold)",
		model.between("announce:beta", "wake:alpha,beta").Round(time.Microsecond))
	model.open("work:delta")
	r.waitUntil("w2's wake stored, owed", func() bool { return p.wakes("w2", true) == 1 && p.results("delta", false) == 1 })
	if n := model.count("wake:delta,gamma"); n != 0 {
		t.Fatalf("w2's wake ran before the kill (%d model calls); the main lane should have held it", n)
	}
	if err := gw.Kill(); err != nil {
		t.Fatal(err)
	}

	gw = r.start()
	r.waitUntil("both wakes answered", func() bool {
		return len(webAnswers(r.ctx, web, "w1", "assistant", "woken:")) > 0 && len(webAnswers(r.ctx, web, "w2", "assistant", "woken:")) > 0
	})
	// Let anything that would run a wake twice show itself: every owed
	// row done first.
	r.waitUntil("no wake owed", func() bool { return p.wakes("w1", true) == 0 && p.wakes("w2", true) == 0 })
	for client, want := range map[string]string{"w1": "woken: alpha,beta", "w2": "woken: delta,gamma"} {
		if got := webAnswers(r.ctx, web, client, "assistant", "woken:"); len(got) != 1 || got[0] != want {
			t.Errorf("%s: wake answers %q, want exactly one %q", client, got, want)
		}
		if n := len(webAnswers(r.ctx, web, client, "announce", "")); n != 0 {
			t.Errorf("%s: %d announces posted; children with announce parent post none", client, n)
		}
		if n := p.wakes(client, false); n != 1 {
			t.Errorf("%s: %d wake rows, want 1", client, n)
		}
	}
	if n := model.count("wake:alpha,beta"); n != 2 {
		t.Errorf("w1's wake reached the model %d times, want 2 (the call cut by the kill, then once)", n)
	}
	if n := model.count("wake:delta,gamma"); n != 1 {
		t.Errorf("w2's wake reached the model %d times, want once", n)
	}
}

// replica is one `herald gateway` process of a PostgreSQL state, named by
// its gateway.replicaId.
type replica struct {
	*harness.Gateway
	id  string
	web *harness.Web
}

// replicaSet starts replicas of one PostgreSQL state (leaseSeconds 2) on
// the scripted model at modelURL.
type replicaSet struct {
	t              *testing.T
	ctx            context.Context
	bin, db, model string
	dir            string
	mainConcurrent int
	// agents and subagents are harness.Config's Agents and
	// SubagentsExtra.
	agents, subagents string
}

// start starts replica id (again, under the same id) and waits until it
// is ready.
func (s *replicaSet) start(id string) *replica {
	s.t.Helper()
	dir := filepath.Join(s.dir, id)
	addr, err := harness.FreeAddr()
	if err != nil {
		s.t.Fatal(err)
	}
	cfg := harness.Config{Listen: addr, ModelURL: s.model, MainConcurrent: s.mainConcurrent, Subagents: 4, Children: 5, GraceSeconds: 1, ReplicaID: id,
		Agents: s.agents, SubagentsExtra: s.subagents,
		Extra: fmt.Sprintf("state: { driver: \"postgres\", url: %q, leaseSeconds: 2 },", s.db)}
	cfgPath := filepath.Join(dir, "herald.json5")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		s.t.Fatal(err)
	}
	if err := cfg.Write(cfgPath); err != nil {
		s.t.Fatal(err)
	}
	g, err := harness.StartGateway(s.bin, cfgPath, filepath.Join(dir, "state"), filepath.Join(dir, "gateway.log"), "http://"+addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		_ = g.Kill()
		if s.t.Failed() {
			s.t.Logf("%s log:\n%s", id, g.Tail(30))
		}
	})
	if err := g.WaitReady(s.ctx); err != nil {
		s.t.Fatalf("%s: %v", id, err)
	}
	return &replica{Gateway: g, id: id, web: harness.NewWeb(g.Base, 2)}
}

// waitFor polls cond until it holds, or fails the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// s is the text query q returns ("" when none).
func (p *probe) s(q string) string {
	var s string
	if err := p.db.QueryRow(q).Scan(&s); err != nil {
		return ""
	}
	return s
}

// TestOrchestrationOnTwoReplicas (SPEC §23 with §14): two gateway
// processes on one PostgreSQL state, one main-lane slot each.
//   - Results: gw-a spawns alpha and beta; it is SIGKILLed while beta's
//     model call is in flight, after alpha ended; gw-b adopts beta once
//     gw-a's lease lapses and ends it. gw-b is SIGKILLed during the
//     parent's next turn (its results taken in); gw-a, started again,
//     adopts the turn: one answer, both results once, each child announced
//     once.
//   - Wakes: on gw-a, w1's wake hangs in its model call (taking the slot)
//     and w2's wake is stored, owed, not run; gw-a is SIGKILLed; gw-b
//     adopts both and each conversation gets one synthesized answer.
func TestOrchestrationOnTwoReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: runs real gateway processes")
	}
	dbURL := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := harness.BuildOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	model := newOrchModel(map[string]int{"work:beta": 1, "seen:what did they find?": 1, "wake:delta,gamma": 1}, "work:delta", "work:zeta")
	llm := llmtest.NewOpenAI(t, model.handle)
	set := &replicaSet{t: t, ctx: ctx, bin: bin, db: dbURL, model: llm.URL, dir: t.TempDir(), mainConcurrent: 1}
	p := postgresProbe(t, dbURL)
	wait := func(what string, cond func() bool) { t.Helper(); waitFor(t, what, cond) }
	owner := func(label string) string {
		return p.s(fmt.Sprintf(`SELECT owner FROM runs WHERE label = '%s'`, label))
	}

	a, b := set.start("gw-a"), set.start("gw-b")
	if _, err := a.web.Post(ctx, "orch", "spawn alpha beta"); err != nil {
		t.Fatal(err)
	}
	wait("alpha's result stored, beta in its model call on gw-a", func() bool {
		return p.results("alpha", false) == 1 && model.count("work:beta") == 1 && owner("beta") == "gw-a"
	})
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	wait("beta adopted by gw-b and ended", func() bool { return p.results("beta", false) == 1 })
	t.Logf("gw-a SIGKILLed → beta resumed and ended on %s after %s (leaseSeconds 2)", owner("beta"), time.Since(killed).Round(time.Millisecond))
	if _, err := b.web.Post(ctx, "orch", "what did they find?"); err != nil {
		t.Fatal(err)
	}
	wait("the parent's next turn in its model call on gw-b", func() bool { return model.count("seen:what did they find?") == 1 })
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	a = set.start("gw-a")
	wait("the parent's answer", func() bool { return len(webAnswers(ctx, a.web, "orch", "assistant", "seen:")) > 0 })
	if got := webAnswers(ctx, a.web, "orch", "assistant", "seen:"); len(got) != 1 || got[0] != "seen: alpha,beta" {
		t.Errorf("the parent answered %q; want one answer that saw both results once", got)
	}
	if got := seen(model.last("seen:what did they find?")); fmt.Sprint(got) != "[alpha beta]" {
		t.Errorf("the adopted turn's model call held the results %v, want [alpha beta]", got)
	}
	for _, label := range []string{"alpha", "beta"} {
		if n := len(announces(t, a.web, "orch")[label]); n != 1 {
			t.Errorf("%s announced %d times, want once", label, n)
		}
	}

	b = set.start("gw-b")
	started := func(client string) func() bool {
		return func() bool { return len(webAnswers(ctx, a.web, client, "assistant", "started")) == 1 }
	}
	if _, err := a.web.Post(ctx, "w1", "spawn parent gamma delta"); err != nil {
		t.Fatal(err)
	}
	wait("w1's children spawned", started("w1"))
	if _, err := a.web.Post(ctx, "w2", "spawn parent eps zeta"); err != nil {
		t.Fatal(err)
	}
	wait("w2's children spawned", started("w2"))
	model.open("work:delta")
	wait("w1's wake in its model call", func() bool { return model.count("wake:delta,gamma") == 1 })
	t.Logf("PostgreSQL: the last child's announce-step call → its parent's wake call: %s", model.between("announce:delta", "wake:delta,gamma").Round(time.Microsecond))
	model.open("work:zeta")
	wait("w2's wake stored, owed, held by gw-a", func() bool {
		return p.wakes("w2", true) == 1 && p.s(fmt.Sprintf(`SELECT claimed_by FROM intake WHERE kind = 'wake' AND session_key = '%s'`, webKey("w2"))) == "gw-a"
	})
	if n := model.count("wake:eps,zeta"); n != 0 {
		t.Fatalf("w2's wake ran before the kill (%d model calls); gw-a's main lane should have held it", n)
	}
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	killed = time.Now()
	wait("both wakes answered", func() bool {
		return len(webAnswers(ctx, b.web, "w1", "assistant", "woken:")) > 0 && len(webAnswers(ctx, b.web, "w2", "assistant", "woken:")) > 0
	})
	t.Logf("gw-a SIGKILLed → both wakes answered by gw-b after %s", time.Since(killed).Round(time.Millisecond))
	wait("no wake owed", func() bool { return p.wakes("w1", true) == 0 && p.wakes("w2", true) == 0 })
	for client, want := range map[string]string{"w1": "woken: delta,gamma", "w2": "woken: eps,zeta"} {
		if got := webAnswers(ctx, b.web, client, "assistant", "woken:"); len(got) != 1 || got[0] != want {
			t.Errorf("%s: wake answers %q, want exactly one %q", client, got, want)
		}
		if n := len(webAnswers(ctx, b.web, client, "announce", "")); n != 0 {
			t.Errorf("%s: %d announces posted; children with announce parent post none", client, n)
		}
	}
	if n := model.count("wake:delta,gamma"); n != 2 {
		t.Errorf("w1's wake reached the model %d times, want 2 (the call cut by the kill, then once on gw-b)", n)
	}
	if n := model.count("wake:eps,zeta"); n != 1 {
		t.Errorf("w2's wake reached the model %d times, want once", n)
	}
}

// transcriptsWith counts the transcripts under stateDir holding text.
func transcriptsWith(stateDir, text string) int {
	paths, _ := filepath.Glob(filepath.Join(stateDir, "transcripts", "*", "*.jsonl"))
	n := 0
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), text) {
			n++
		}
	}
	return n
}
