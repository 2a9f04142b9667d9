package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/telegram/tgfake"
	"github.com/heraldhq/herald/channels/web/webtest"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

// scheduleConfig allows 1 s intervals (a test-only minIntervalSeconds)
// and at most 3 schedules per conversation.
const scheduleConfig = `{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" } },
  schedules: { minIntervalSeconds: 1, maxPerConversation: 3 },
}`

// scheduleModel: a sub-agent whose task is "break" fails (a 400 from the
// provider); "nothing new" answers ANNOUNCE_SKIP in its announce step;
// any other task is announced with the result "all green".
func scheduleModel() llmtest.Handler {
	return func(c llmtest.Call) llmtest.Reply {
		if !strings.Contains(c.System, "Sub-agent context") {
			if m := c.Messages[len(c.Messages)-1]; len(m.ToolResults) > 0 {
				return llmtest.Reply{Text: "tool said: " + m.ToolResults[0].Content}
			}
			if strings.HasPrefix(c.LastUser(), "remind me") {
				return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "schedule",
					Args: json.RawMessage(`{"action":"add","when":"in 1s","task":"tell them to stretch"}`)}}}
			}
			return llmtest.Reply{Text: "ok"}
		}
		announce := strings.Contains(c.LastUser(), "ANNOUNCE_SKIP")
		switch {
		case strings.Contains(c.System, "- Task: break"):
			return llmtest.Reply{Status: 400, Message: "broken on purpose"}
		case strings.Contains(c.System, "- Task: nothing new") && announce:
			return llmtest.Reply{Text: "ANNOUNCE_SKIP"}
		case announce:
			return llmtest.Reply{Text: "Result:\nall green\n\nNotes:\n(none)"}
		}
		return llmtest.Reply{Text: "checked"}
	}
}

var scheduleStatsRe = regexp.MustCompile(`• schedule (\S+) @ (\S+)$`)

// scheduleAnnounces returns the client's announces of schedule id, in the
// order the conversation shows them, with their due times.
func scheduleAnnounces(t *testing.T, tg *testGW, client, id string) (texts []string, dues []time.Time) {
	t.Helper()
	for _, m := range webMessages(t, tg.URL, client, 0) {
		if m.Role != "announce" {
			continue
		}
		lines := strings.Split(strings.TrimSpace(m.Text), "\n")
		sm := scheduleStatsRe.FindStringSubmatch(lines[len(lines)-1])
		if sm == nil || sm[1] != id {
			continue
		}
		due, err := time.Parse(time.RFC3339, sm[2])
		if err != nil {
			t.Fatalf("announce's schedule due time %q is not RFC 3339: %v", sm[2], err)
		}
		texts, dues = append(texts, m.Text), append(dues, due)
	}
	return texts, dues
}

// checkOncePerDue: due times strictly increase (in order, none twice) on
// whole seconds.
func checkOncePerDue(t *testing.T, dues []time.Time) {
	t.Helper()
	for i := 1; i < len(dues); i++ {
		if !dues[i].After(dues[i-1]) {
			t.Fatalf("announces out of order or twice for one due time: %v", dues)
		}
		if d := dues[i].Sub(dues[i-1]); d%time.Second != 0 {
			t.Fatalf("due times %v and %v are not whole seconds apart", dues[i-1], dues[i])
		}
	}
}

// TestE2EScheduleEveryThroughWebAPI: /schedule every 1s made in the web
// chat is announced there once per due time, in order, with its Stats
// field; /status shows the next firing; pause stops it; list, remove and
// every kind of bad input answer as SPEC §19 says.
func TestE2EScheduleEveryThroughWebAPI(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, scheduleConfig, scheduleModel())
	const client = "sched"

	seq := webPost(t, tg.URL, client, "/schedule every 1s check the status page")
	made := waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.HasPrefix(s, "⏰") || strings.HasPrefix(s, "⚠️") })
	m := regexp.MustCompile(`^⏰ Scheduled (s[0-9a-f]{7}): every 1s · next \d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)? UTC\.$`).FindStringSubmatch(made.Text)
	if m == nil {
		t.Fatalf("/schedule every answered %q", made.Text)
	}
	id := m[1]

	var texts []string
	var dues []time.Time
	if !waitFor(e2eWait, func() bool {
		texts, dues = scheduleAnnounces(t, tg, client, id)
		return len(dues) >= 4
	}) {
		t.Fatalf("%d announces of %s within %s", len(dues), id, e2eWait)
	}
	checkOncePerDue(t, dues)
	for _, text := range texts {
		if !strings.HasPrefix(text, "Status: success\nTask: check the status page\n\nResult:\nall green") {
			t.Errorf("announce:\n%s", text)
		}
	}

	seq = webPost(t, tg.URL, client, "/status")
	st := waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.HasPrefix(s, "📊 Status") })
	if !regexp.MustCompile(`\n⏰ Schedules: 1 · next \d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)? UTC \(` + id + `\)$`).MatchString(st.Text) {
		t.Errorf("/status does not show the next firing:\n%s", st.Text)
	}

	seq = webPost(t, tg.URL, client, "/schedule pause "+id)
	if got := waitWeb(t, tg, client, seq, "system", func(string) bool { return true }).Text; got != "⏸️ Paused "+id+"." {
		t.Fatalf("/schedule pause answered %q", got)
	}
	// Once paused, the store holds no run beyond those already recorded:
	// every run of the schedule is announced once (a run still running at
	// the pause announces later, but no new one starts).
	seq = webPost(t, tg.URL, client, "/schedule list")
	list := waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.HasPrefix(s, "⏰ Schedules") }).Text
	if want := "⏰ Schedules (this conversation)\n1) " + id + " · every 1s · paused · check the status page"; list != want {
		t.Errorf("/schedule list answered\n%s\nwant\n%s", list, want)
	}
	sc, err := tg.G.Store().GetSchedule(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var runs []store.Run
	if !waitFor(e2eWait, func() bool {
		runs = nil
		for _, r := range tg.runsOf(t, "agent:main:web:dm:"+client) {
			if r.ScheduleID == id {
				runs = append(runs, r)
			}
		}
		_, dues = scheduleAnnounces(t, tg, client, id)
		return len(runs) == int(sc.Fired) && len(dues) == len(runs)
	}) {
		t.Fatalf("%d runs recorded, %d fired, %d announced", len(runs), sc.Fired, len(dues))
	}
	checkOncePerDue(t, dues)

	for _, c := range []struct{ cmd, want string }{
		{"/schedule every 500ms x", "⚠️ every 500ms is more often than allowed: the shortest interval is 1s. Usage: /schedule"},
		{`/schedule cron "61 * * * *" x`, `⚠️ "61 * * * *" is not a cron expression`},
		{"/schedule at 2020-01-01 09:00 x", "⚠️ 2020-01-01 09:00 UTC is in the past"},
		{"/schedule in soon x", `⚠️ "soon" is not a duration`},
		{"/schedule resume s0000000", `⚠️ no schedule "s0000000" in this conversation (see /schedule list). Usage: /schedule`},
		{"/schedule every 1h", "⚠️ say what to do after the time. Usage: /schedule"},
		{"/schedule tomorrow x", `⚠️ "tomorrow" is not every, cron, in or at. Usage: /schedule`},
	} {
		seq = webPost(t, tg.URL, client, c.cmd)
		got := waitWeb(t, tg, client, seq, "system", func(string) bool { return true }).Text
		if !strings.HasPrefix(got, c.want) || strings.Contains(got, "\n") || !strings.Contains(got, "Usage: /schedule every") {
			t.Errorf("%s answered %q, want one line starting %q with the usage", c.cmd, got, c.want)
		}
	}
	// maxPerConversation 3: two more fit, the fourth does not.
	for i, want := range []string{"⏰ Scheduled", "⏰ Scheduled", "⚠️ this conversation already has 3 schedules (schedules.maxPerConversation 3)"} {
		seq = webPost(t, tg.URL, client, fmt.Sprintf("/schedule cron \"@daily\" report %d", i))
		if got := waitWeb(t, tg, client, seq, "system", func(string) bool { return true }).Text; !strings.HasPrefix(got, want) {
			t.Errorf("schedule %d answered %q, want %q…", i+2, got, want)
		}
	}
	// Another conversation sees none of them and cannot touch them.
	seq = webPost(t, tg.URL, "other", "/schedule remove "+id)
	if got := waitWeb(t, tg, "other", seq, "system", func(string) bool { return true }).Text; !strings.HasPrefix(got, "⚠️ no schedule") {
		t.Errorf("another conversation removing %s: %q", id, got)
	}
	seq = webPost(t, tg.URL, client, "/schedule remove "+id)
	if got := waitWeb(t, tg, client, seq, "system", func(string) bool { return true }).Text; got != "🗑️ Removed "+id+"." {
		t.Errorf("/schedule remove answered %q", got)
	}
	if v := tg.metric(t, `herald_schedule_firings_total{result="started"}`); v < 4 {
		t.Errorf("herald_schedule_firings_total{result=\"started\"} = %v, want ≥ 4", v)
	}
	if v := tg.metric(t, `herald_schedules{state="active"}`); v != 2 {
		t.Errorf("herald_schedules{state=\"active\"} = %v, want 2", v)
	}
}

// TestE2EScheduleSkipAndFailures: a run whose announce step says
// ANNOUNCE_SKIP posts nothing; failed runs are announced Status: error,
// and after three in a row the schedule pauses and says so.
func TestE2EScheduleSkipAndFailures(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, scheduleConfig, scheduleModel())
	const client = "sched-fail"
	ctx := context.Background()

	seq := webPost(t, tg.URL, client, "/schedule every 1s nothing new")
	quiet := regexp.MustCompile(`^⏰ Scheduled (s[0-9a-f]{7}):`).FindStringSubmatch(waitWeb(t, tg, client, seq, "system", func(string) bool { return true }).Text)
	seq = webPost(t, tg.URL, client, "/schedule every 1s break")
	broken := regexp.MustCompile(`^⏰ Scheduled (s[0-9a-f]{7}):`).FindStringSubmatch(waitWeb(t, tg, client, seq, "system", func(string) bool { return true }).Text)
	if quiet == nil || broken == nil {
		t.Fatal("the schedules were not made")
	}

	paused := waitWeb(t, tg, client, 0, "system", func(s string) bool { return strings.HasPrefix(s, "⏸️ Schedule") })
	if want := "⏸️ Schedule " + broken[1] + " paused after 3 failed runs in a row. Resume it with /schedule resume " + broken[1] + "."; paused.Text != want {
		t.Errorf("pause notice %q, want %q", paused.Text, want)
	}
	texts, dues := scheduleAnnounces(t, tg, client, broken[1])
	if len(texts) != 3 {
		t.Fatalf("%d announces of the failing schedule, want 3", len(texts))
	}
	checkOncePerDue(t, dues)
	for _, text := range texts {
		if !strings.HasPrefix(text, "Status: error\nTask: break") || !strings.Contains(text, "broken on purpose") {
			t.Errorf("failed run's announce:\n%s", text)
		}
	}
	if sc, _ := tg.G.Store().GetSchedule(ctx, broken[1]); !sc.Paused || sc.Failures != 3 {
		t.Errorf("failing schedule: paused %v, failures %d", sc.Paused, sc.Failures)
	}

	// The quiet schedule ran (its runs are done and successful) and posted
	// nothing.
	var done int
	if !waitFor(e2eWait, func() bool {
		done = 0
		for _, r := range tg.runsOf(t, "agent:main:web:dm:"+client) {
			if r.ScheduleID == quiet[1] && r.Status == store.StatusDone && r.Outcome == store.OutcomeSuccess {
				done++
			}
		}
		return done >= 2
	}) {
		t.Fatalf("%d quiet runs done", done)
	}
	if texts, _ := scheduleAnnounces(t, tg, client, quiet[1]); len(texts) != 0 {
		t.Errorf("an ANNOUNCE_SKIP run posted:\n%s", texts[0])
	}
}

// seedSchedule stores an every-1s schedule for web client c1 whose next
// due time is `behind` ago, as a gateway that stopped that long ago left it.
func seedSchedule(t *testing.T, catchUp string, behind time.Duration) string {
	t.Helper()
	dir := t.TempDir()
	db := openTestStore(t, dir)
	defer db.Close()
	now := time.Now().Truncate(time.Second)
	err := db.AddSchedule(context.Background(), &store.Schedule{ID: "late", SessionKey: "agent:main:web:dm:c1", AgentID: "main",
		Kind: store.ScheduleEvery, Expr: "1s", Timezone: "UTC", Task: "check the status page", CatchUp: catchUp,
		Origin: channels.Origin{Channel: "web", ChatID: "c1", ChatType: channels.ChatDM}, NextDue: now.Add(-behind)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestE2EScheduleCatchUpAfterDowntime: a gateway starting 10 s after the
// last one stopped: catchUp latest fires one late run saying how late and
// how many were missed, then on time again; all runs each missed due time,
// in order, once.
func TestE2EScheduleCatchUpAfterDowntime(t *testing.T) {
	t.Parallel()
	t.Run("latest", func(t *testing.T) {
		tg := newTestGatewayIn(t, seedSchedule(t, "latest", 10*time.Second), scheduleConfig, scheduleModel())
		var texts []string
		var dues []time.Time
		if !waitFor(e2eWait, func() bool { texts, dues = scheduleAnnounces(t, tg, "c1", "late"); return len(texts) >= 3 }) {
			t.Fatalf("%d announces", len(texts))
		}
		checkOncePerDue(t, dues)
		// Every due time from the seeded one (10–11 s before the start)
		// to the one run is counted as missed: how many depends on how long
		// the gateway took to start, so the count is checked against the
		// two due times the note names.
		m := regexp.MustCompile(`\nNotes:\nLate: due (\S+), started [0-9.]+m?s after it; (\d+) earlier due times since (\S+) passed while no gateway ran \(catchUp latest: not run\)\.\n`).FindStringSubmatch(texts[0])
		if m == nil {
			t.Fatalf("the catch-up run's announce does not say how late:\n%s", texts[0])
		}
		last, err1 := time.Parse(time.RFC3339, m[1])
		since, err2 := time.Parse(time.RFC3339, m[3])
		if n, _ := strconv.Atoi(m[2]); err1 != nil || err2 != nil || n < 10 || time.Duration(n)*time.Second != last.Sub(since) {
			t.Errorf("the catch-up run's announce miscounts the due times missed (%s earlier ones from %s to %s, every 1 s, at least 10):\n%s", m[2], m[3], m[1], texts[0])
		}
		if strings.Contains(texts[len(texts)-1], "Late:") {
			t.Errorf("a later run still says it is late:\n%s", texts[len(texts)-1])
		}
	})
	t.Run("all", func(t *testing.T) {
		tg := newTestGatewayIn(t, seedSchedule(t, "all", 5*time.Second), scheduleConfig, scheduleModel())
		var dues []time.Time
		if !waitFor(e2eWait, func() bool { _, dues = scheduleAnnounces(t, tg, "c1", "late"); return len(dues) >= 7 }) {
			t.Fatalf("%d announces", len(dues))
		}
		checkOncePerDue(t, dues)
		for i := 1; i < 6; i++ {
			if d := dues[i].Sub(dues[i-1]); d != time.Second {
				t.Fatalf("catchUp all skipped a due time between %v and %v", dues[i-1], dues[i])
			}
		}
	})
}

// TestE2EScheduleTwoReplicas: two gateways on one PostgreSQL state fire
// each due time of a 1 s schedule once between them.
func TestE2EScheduleTwoReplicas(t *testing.T) {
	t.Parallel()
	gws := startReplicas(t, 2, scheduleModel())
	err := gws[0].G.Store().AddSchedule(context.Background(), &store.Schedule{ID: "shared", SessionKey: "agent:main:web:dm:r1",
		AgentID: "main", Kind: store.ScheduleEvery, Expr: "1s", Timezone: "UTC", Task: "check the status page",
		Origin: channels.Origin{Channel: "web", ChatID: "r1", ChatType: channels.ChatDM}, NextDue: time.Now().Add(time.Second)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var dues []time.Time
	if !waitFor(e2eWait, func() bool { _, dues = scheduleAnnounces(t, gws[1], "r1", "shared"); return len(dues) >= 6 }) {
		t.Fatalf("%d announces", len(dues))
	}
	checkOncePerDue(t, dues)
	owners := map[string]int{}
	for _, r := range gws[0].runsOf(t, "agent:main:web:dm:r1") {
		owners[r.Owner]++
	}
	t.Logf("runs by replica: %v", owners)
}

// TestE2EBrowserSchedulePanel: the web chat's panel lists the
// conversation's schedules; Pause and Remove act on them.
func TestE2EBrowserSchedulePanel(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	bctx := webtest.NewBrowser(t)
	tg := newTestGateway(t, scheduleConfig, scheduleModel())
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	if err := webtest.Chat(ctx, tg.URL+"/?client=schedpanel", "/schedule every 1h water the plants"); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the schedule in the panel",
		`Array.from(document.querySelectorAll("#schedules .run.active .label")).some(l => l.textContent.includes("water the plants"))`)
	list, _ := tg.G.Store().ListSchedules(ctx, "agent:main:web:dm:schedpanel")
	if len(list) != 1 {
		t.Fatalf("%d schedules stored", len(list))
	}
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(`#schedules .run.active button.pause`))); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the schedule paused in the panel", `document.querySelector("#schedules .run.paused button.resume") !== null`)
	if sc, _ := tg.G.Store().GetSchedule(ctx, list[0].ID); !sc.Paused {
		t.Errorf("Pause in the panel did not pause %s", sc.ID)
	}
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(`#schedules .run.paused button.remove`))); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the schedule gone from the panel", `document.querySelectorAll("#schedules .run").length === 0`)
	if list, _ := tg.G.Store().ListSchedules(ctx, "agent:main:web:dm:schedpanel"); len(list) != 0 {
		t.Errorf("Remove in the panel left %d schedules", len(list))
	}
}

// TestE2EScheduleTool: the model's schedule tool makes a one-off schedule
// in the conversation ("remind me"), which fires once and is announced
// there; a toolPolicy deny keeps the model from it.
func TestE2EScheduleTool(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, scheduleConfig, scheduleModel())
	seq := webPost(t, tg.URL, "tool", "remind me in a second to stretch")
	reply := waitWeb(t, tg, "tool", seq, "assistant", func(string) bool { return true })
	var res struct{ Status, ID, Next, Message string }
	if err := json.Unmarshal([]byte(strings.TrimPrefix(reply.Text, "tool said: ")), &res); err != nil || res.Status != "ok" ||
		!strings.HasPrefix(res.Message, "⏰ Scheduled "+res.ID+": at ") {
		t.Fatalf("the tool answered %q (%v)", reply.Text, err)
	}
	var texts []string
	if !waitFor(e2eWait, func() bool { texts, _ = scheduleAnnounces(t, tg, "tool", res.ID); return len(texts) == 1 }) {
		t.Fatalf("%d announces of the reminder", len(texts))
	}
	if !strings.HasPrefix(texts[0], "Status: success\nTask: tell them to stretch") {
		t.Errorf("reminder announce:\n%s", texts[0])
	}
	if sc, _ := tg.G.Store().GetSchedule(context.Background(), res.ID); sc == nil || !sc.NextDue.IsZero() || sc.Fired != 1 || sc.Source != store.ScheduleFromTool {
		t.Errorf("the one-off after firing: %+v", sc)
	}

	denied := newTestGateway(t, strings.Replace(scheduleConfig, "schedules:", `security: { toolPolicy: { tools: { schedule: "deny" } } }, schedules:`, 1), scheduleModel())
	seq = webPost(t, denied.URL, "tool", "remind me in a second to stretch")
	reply = waitWeb(t, denied, "tool", seq, "assistant", func(string) bool { return true })
	if strings.Contains(reply.Text, `"status":"ok"`) {
		t.Errorf("a denied schedule tool ran: %q", reply.Text)
	}
	if list, _ := denied.G.Store().ListSchedules(context.Background(), ""); len(list) != 0 {
		t.Errorf("a denied schedule tool stored %d schedules", len(list))
	}
}

// TestE2EScheduleTelegramTopics: a config schedule delivered to forum
// topic 42 and one made with /schedule in topic 43 are announced each in
// its own topic, in order, once per due time.
func TestE2EScheduleTelegramTopics(t *testing.T) {
	t.Parallel()
	tf := tgfake.New(t, tgToken)
	cfg := fmt.Sprintf(`{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [{ id: "main" }] },
  channels: {
    telegram: { enabled: true, botToken: %q, apiUrl: %q, groups: { "-100123": { requireMention: false } } },
    web: { enabled: false },
  },
  schedules: { minIntervalSeconds: 1, list: [
    { id: "status42", every: "1s", task: "check the status page", deliver: { channel: "telegram", chat: "-100123", thread: "42" } },
  ] },
}`, tgToken, tf.URL())
	tg := newTestGateway(t, cfg, scheduleModel())
	tf.SendText(tgGroup, "supergroup", 43, tgBob, "/schedule every 1s check topic 43")

	byTopic := func() map[int][]time.Time {
		out := map[int][]time.Time{}
		for _, s := range tf.Sent() {
			lines := strings.Split(strings.TrimSpace(s.Text), "\n")
			if sm := scheduleStatsRe.FindStringSubmatch(lines[len(lines)-1]); sm != nil {
				due, _ := time.Parse(time.RFC3339, sm[2])
				out[s.ThreadID] = append(out[s.ThreadID], due)
				if (s.ThreadID == 42) != (sm[1] == "status42") {
					t.Errorf("schedule %s announced in topic %d", sm[1], s.ThreadID)
				}
			}
		}
		return out
	}
	var got map[int][]time.Time
	if !waitFor(e2eWait, func() bool { got = byTopic(); return len(got[42]) >= 3 && len(got[43]) >= 3 }) {
		t.Fatalf("announces by topic: %v", got)
	}
	for topic, dues := range got {
		if topic != 42 && topic != 43 {
			t.Errorf("announces in topic %d", topic)
		}
		checkOncePerDue(t, dues)
	}
	var made bool
	for _, s := range tf.Sent() {
		if s.ThreadID == 43 && strings.HasPrefix(s.Text, "⏰ Scheduled s") {
			made = true
		}
	}
	if !made {
		t.Error("no ⏰ Scheduled reply in topic 43")
	}
	list, _ := tg.G.Store().ListSchedules(context.Background(), tgK43)
	if len(list) != 1 || list[0].Origin.ThreadID != "43" {
		t.Errorf("topic 43's schedules: %+v", list)
	}
}

// TestE2EScheduleStoppedByBudget: a schedule's runs count against its
// conversation's budget (SPEC §20): once spent, each firing ends Status:
// error without a model call, and after three the schedule pauses — a
// runaway schedule is stopped by the budget, not by the bill.
func TestE2EScheduleStoppedByBudget(t *testing.T) {
	t.Parallel()
	cfg := `{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m", cost: { input: 100, output: 100 } }] } } },
  agents: { defaults: { model: "anthropic/m" } },
  budgets: { conversation: { dailyUSD: 0.5 } },
  schedules: { minIntervalSeconds: 1 },
}`
	calls := 0
	var mu sync.Mutex
	tg := newTestGateway(t, cfg, func(c llmtest.Call) llmtest.Reply {
		mu.Lock()
		calls++
		mu.Unlock()
		r := scheduleModel()(c)
		r.Usage = priced // $0.11 a call: a run (work + announce step) is $0.22
		return r
	})
	const client = "budget"
	seq := webPost(t, tg.URL, client, "/schedule every 1s check the status page")
	m := regexp.MustCompile(`^⏰ Scheduled (s[0-9a-f]{7}):`).FindStringSubmatch(waitWeb(t, tg, client, seq, "system", func(string) bool { return true }).Text)
	if m == nil {
		t.Fatal("the schedule was not made")
	}
	// Budget-stopped firings end "error" with the 💸 line but are not
	// failures: the schedule does not pause (the budget resets tomorrow).
	budgetLine := regexp.MustCompile(`(?m)^💸 Budget reached: conversation \$0\.\d\d of \$0\.50 today \(resets \d{4}-\d\d-\d\d 00:00 UTC\)\.$`)
	var texts []string
	var dues []time.Time
	if !waitFor(e2eWait, func() bool {
		texts, dues = scheduleAnnounces(t, tg, client, m[1])
		over := 0
		for _, text := range texts {
			if strings.HasPrefix(text, "Status: error") && budgetLine.MatchString(text) {
				over++
			}
		}
		return over >= 4
	}) {
		t.Fatalf("want 4 budget-stopped announces; got:\n%s", strings.Join(texts, "\n---\n"))
	}
	webPost(t, tg.URL, client, "/schedule remove "+m[1])
	for _, e := range webMessages(t, tg.URL, client, 0) {
		if strings.Contains(e.Text, "⏸️") {
			t.Errorf("the schedule paused over a budget: %q", e.Text)
		}
	}
	checkOncePerDue(t, dues)
	var ok, over int
	for _, text := range texts {
		switch {
		case strings.HasPrefix(text, "Status: success"):
			ok++
		case strings.HasPrefix(text, "Status: error") && budgetLine.MatchString(text):
			over++
		default:
			t.Errorf("announce:\n%s", text)
		}
	}
	mu.Lock()
	n := calls
	mu.Unlock()
	// $0.50 pays for two runs ($0.44) and the work call of the third (its
	// announce step is refused: that run ends "error" with the line), then
	// nothing.
	if ok > 2 || over < 4 || n > 5 {
		t.Errorf("%d runs succeeded, %d stopped by the budget, %d model calls; want ≤ 2, ≥ 4, ≤ 5", ok, over, n)
	}
}

// TestE2EScheduleReload: a reload that adds a config schedule starts it
// (reported as changed); one whose id a chat schedule has is rejected and
// the old config stays.
func TestE2EScheduleReload(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, scheduleConfig, scheduleModel())
	ctx := context.Background()
	seq := webPost(t, tg.URL, "reload", "/schedule every 1h water the plants")
	mine := regexp.MustCompile(`^⏰ Scheduled (s[0-9a-f]{7}):`).FindStringSubmatch(waitWeb(t, tg, "reload", seq, "system", func(string) bool { return true }).Text)
	if mine == nil {
		t.Fatal("the chat schedule was not made")
	}
	load := func(id string) func() (*config.Config, error) {
		return func() (*config.Config, error) {
			src := strings.Replace(strings.ReplaceAll(scheduleConfig, "{{llm}}", tg.LLM.URL), "maxPerConversation: 3 }",
				`maxPerConversation: 3, list: [{ id: "`+id+`", every: "1s", task: "check the status page", deliver: { channel: "web", chat: "reload" } }] }`, 1)
			cfg, err := config.Parse("reloaded.json5", []byte(src), func(string) (string, bool) { return "", false })
			if err != nil {
				return nil, err
			}
			return cfg, cfg.Validate()
		}
	}
	res := tg.G.Reload(ctx, load(mine[1]))
	if res.Result != "rejected" || len(res.Errors) != 1 || !strings.Contains(res.Errors[0], "already used by a schedule made in chat") {
		t.Fatalf("reload taking a chat schedule's id = %+v, want rejected", res)
	}
	res = tg.G.Reload(ctx, load("fromconfig"))
	if res.Result != "ok" || !slices.Contains(res.Changed, "schedules") {
		t.Fatalf("reload adding a schedule = %+v", res)
	}
	var dues []time.Time
	if !waitFor(e2eWait, func() bool { _, dues = scheduleAnnounces(t, tg, "reload", "fromconfig"); return len(dues) >= 2 }) {
		t.Fatalf("%d announces of the reloaded schedule", len(dues))
	}
	checkOncePerDue(t, dues)
}

// TestE2EScheduleFailureNoticeGoesOutAtOnce: a firing that fails (a
// stored schedule whose expression no longer parses) tells its
// conversation at once, not at the outbox's next one-minute pass.
func TestE2EScheduleFailureNoticeGoesOutAtOnce(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, scheduleConfig, scheduleModel())
	const client = "sched-broken"
	o := channels.Origin{Channel: "web", ChatID: client, ChatType: channels.ChatDM, SenderID: client}
	broken := &store.Schedule{ID: "sbad0001", SessionKey: "agent:main:web:dm:" + client, AgentID: "main", Kind: store.ScheduleEvery,
		Expr: "bogus", Task: "x", Origin: o, Source: store.ScheduleFromChat, NextDue: time.Now().Add(2 * time.Second), CreatedAt: time.Now()}
	if err := tg.G.Store().AddSchedule(context.Background(), broken, 0); err != nil {
		t.Fatal(err)
	}
	// A schedule made in chat wakes the scheduler, which then waits for
	// the broken one's due time; its reply is delivered well before.
	seq := webPost(t, tg.URL, client, "/schedule in 1h later")
	waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.HasPrefix(s, "⏰ Scheduled") })
	told := func() bool {
		for _, m := range webMessages(t, tg.URL, client, seq) {
			if m.Role == "system" && strings.HasPrefix(m.Text, "⚠️ Schedule sbad0001 cannot fire") {
				return true
			}
		}
		return false
	}
	if !waitFor(10*time.Second, told) { // the outbox's idle pass is a minute
		t.Fatal("the failed firing's notice did not go out within 10 s")
	}
}
