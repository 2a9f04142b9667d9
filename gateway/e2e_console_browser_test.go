package gateway_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/web/webtest"
	"github.com/heraldhq/herald/store"
)

// TestE2EBrowserConsole drives the operator's console (SPEC §27) of a whole
// gateway in headless Chromium: the login form takes the token, a
// sub-agent run appears in the runs view while it runs (pushed by the
// event stream, no reload) and its Stop button stops it; a dead letter's
// Retry puts it back to pending; a schedule's Pause pauses it; HTML in an
// outbox item's text does not run; the overview fits a phone's width.
// With HERALD_SCREENSHOTS=dir it saves a screenshot of each view.
func TestE2EBrowserConsole(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	bctx := webtest.NewBrowser(t)
	hold := newGate(t)
	tg := newTestGateway(t, consoleConfig, researchModel(map[string]*gate{"alpha": hold}))
	db := tg.G.Store()
	bg := context.Background()
	shots := os.Getenv("HERALD_SCREENSHOTS")
	shot := func(ctx context.Context, name string) {
		if shots != "" {
			if err := webtest.Screenshot(ctx, filepath.Join(shots, "console-"+name+".png")); err != nil {
				t.Error(err)
			}
		}
	}
	// A dead letter whose text is HTML, and a schedule.
	dead := &store.OutboxItem{Origin: channels.Origin{Channel: "telegram", ChatID: "42", ChatType: channels.ChatDM}, Kind: channels.KindReply,
		Text: `<img src=x onerror="window.__pwned=1">lost reply`, CreatedAt: time.Now().Add(-30 * time.Hour)}
	if _, err := db.EnqueueOutbox(bg, dead); err != nil {
		t.Fatal(err)
	}
	tg.G.WakeOutbox()
	sc := &store.Schedule{ID: "daily-digest", SessionKey: "agent:main:web:dm:ops", AgentID: "main", Kind: store.ScheduleEvery, Expr: "24h0m0s",
		Task: "summarise the day", Origin: channels.Origin{Channel: "web", ChatID: "ops", ChatType: channels.ChatDM}, Source: store.ScheduleFromChat,
		NextDue: time.Now().Add(time.Hour), CreatedAt: time.Now(), CreatedBy: "ops"}
	if err := db.AddSchedule(bg, sc, 10); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(tg.URL+"/admin"), chromedp.WaitVisible(chromedp.CSS("#token"))); err != nil {
		t.Fatal(err)
	}
	shot(ctx, "login")
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#token"), "wrong"), chromedp.Click(chromedp.CSS("#go"))); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the refusal", `document.getElementById("msg").textContent === "Wrong token."`)
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#token"), consoleToken), chromedp.Click(chromedp.CSS("#go"))); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the overview, live", `!document.getElementById("app").classList.contains("hidden") && document.getElementById("live").textContent === "● live"`)
	poll(t, ctx, "one dead letter in the overview", `document.querySelector("#c-dead b").textContent === "1"`)

	// A run appears while it runs, and Stop stops it.
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(`#tabs button[data-v="runs"]`))); err != nil {
		t.Fatal(err)
	}
	webPost(t, tg.URL, "ops", "please research it")
	const alphaRow = `[...document.querySelectorAll("#t-runs tbody tr")].find(r => r.textContent.includes("alpha"))`
	poll(t, ctx, "alpha running in the runs view", `(() => { const r = `+alphaRow+`; return !!r && r.querySelector(".st").textContent === "running" })()`)
	poll(t, ctx, "beta done", `[...document.querySelectorAll("#t-runs tbody tr")].some(r => r.textContent.includes("beta") && r.querySelector(".st").textContent === "success")`)
	shot(ctx, "runs")
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](alphaRow+`.querySelector("button.act").click()`)); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "alpha stopped", `(() => { const r = `+alphaRow+`; return !!r && r.querySelector(".st").textContent === "stopped" })()`)
	for _, r := range tg.runsOf(t, "agent:main:web:dm:ops") {
		if r.Label == "alpha" && r.Outcome != store.OutcomeStopped {
			t.Errorf("alpha after Stop: %s/%s", r.Status, r.Outcome)
		}
	}
	hold.open() // the fake model's call for alpha may still wait: let it end

	// The dead letter: its HTML is text; Retry makes it pending.
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(`#tabs button[data-v="outbox"]`))); err != nil {
		t.Fatal(err)
	}
	deadRow := `document.querySelector('#t-outbox tr[data-item="` + strconv.FormatInt(dead.ID, 10) + `"]')`
	poll(t, ctx, "the dead letter", `(() => { const r = `+deadRow+`; return !!r && r.querySelector(".st").textContent === "dead" && r.textContent.includes("<img src=x") })()`)
	shot(ctx, "outbox")
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](deadRow+`.querySelector("button.act").click()`)); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the retried item pending", `(() => { const r = `+deadRow+`; return !!r && r.querySelector(".st").textContent === "pending" })()`)
	if it, err := db.(*store.DB).GetOutbox(bg, dead.ID); err != nil || it.State() != store.OutboxPending || it.Attempts > 1 {
		t.Errorf("after Retry: %+v %v", it, err)
	}

	// Pause the schedule.
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(`#tabs button[data-v="schedules"]`))); err != nil {
		t.Fatal(err)
	}
	schedRow := `document.querySelector('#t-schedules tr[data-schedule="daily-digest"]')`
	poll(t, ctx, "the schedule", `!!`+schedRow)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](schedRow+`.querySelector("button.act").click()`)); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the schedule paused", `(() => { const r = `+schedRow+`; return !!r && r.querySelector(".st").textContent === "paused" })()`)
	if s, err := db.GetSchedule(bg, "daily-digest"); err != nil || !s.Paused {
		t.Errorf("schedule after Pause: %+v %v", s, err)
	}
	shot(ctx, "schedules")

	// Conversations with a transcript, then the overview at phone width.
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(`#tabs button[data-v="conversations"]`))); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the conversation", `[...document.querySelectorAll("#t-conversations a")].some(a => a.textContent === "agent:main:web:dm:ops")`)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](`[...document.querySelectorAll("#t-conversations a")].find(a => a.textContent === "agent:main:web:dm:ops").click()`)); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the transcript", `[...document.querySelectorAll("#transcript pre")].some(p => p.textContent.includes("please research it"))`)
	shot(ctx, "conversations")
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(`#tabs button[data-v="overview"]`))); err != nil {
		t.Fatal(err)
	}
	shot(ctx, "overview")
	if _, err := chromedp.Run(ctx, chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "an overview that fits the phone's width", `document.documentElement.scrollWidth <= 390`)
	shot(ctx, "phone")
	if pwned, err := chromedp.Run(ctx, chromedp.Evaluate[any](`window.__pwned`)); err != nil || pwned != nil {
		t.Errorf("HTML in an outbox item ran: %v %v", pwned, err)
	}
}
