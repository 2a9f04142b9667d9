package gateway_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels/web/webtest"
	"github.com/heraldhq/herald/store"
)

// poll waits until the JavaScript condition holds on the page.
func poll(t *testing.T, ctx context.Context, what, cond string) {
	t.Helper()
	pctx, cancel := context.WithTimeout(ctx, e2eWait)
	defer cancel()
	if _, err := chromedp.Run(pctx, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(0))); err != nil {
		t.Fatalf("the page never showed %s: %v", what, err)
	}
}

// TestE2EBrowserPanelAndMarkdown drives the web chat of a whole gateway in
// headless Chromium: the sub-agents panel shows a running sub-agent, its
// Stop button stops it (the panel and the store say so), its Log button
// posts /subagents log; an assistant reply's Markdown is rendered, and
// script or event-handler HTML in it does not run. With
// HERALD_SCREENSHOTS=dir it saves desktop and phone-width screenshots.
func TestE2EBrowserPanelAndMarkdown(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	bctx := webtest.NewBrowser(t)
	hold := newGate(t)
	research := researchModel(map[string]*gate{"alpha": hold})
	tg := newTestGateway(t, sessionCmdConfig, func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.LastUser(), "markdown please") {
			return llmtest.Reply{Text: "## Plan\n\nThis is **bold**, `code` and a [link](https://example.org).\n\n```go\nfmt.Println(1)\n```\n\n- one\n- two 🚀"}
		}
		if strings.Contains(c.LastUser(), "html please") {
			return llmtest.Reply{Text: "Here:\n\n<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script>[click](javascript:window.__pwned=3)"}
		}
		return research(c)
	})
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	url := tg.URL + "/?client=panel"
	if err := webtest.Chat(ctx, url, "please research it"); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "alpha running in the panel",
		`Array.from(document.querySelectorAll("#subagents .run.running .label")).some(l => l.textContent.includes("alpha"))`)
	poll(t, ctx, "beta done in the panel",
		`Array.from(document.querySelectorAll("#subagents .run.success .label")).some(l => l.textContent.includes("beta"))`)
	if dir := os.Getenv("HERALD_SCREENSHOTS"); dir != "" {
		if err := webtest.Screenshot(ctx, filepath.Join(dir, "web-chat-panel.png")); err != nil {
			t.Error(err)
		}
	}

	// Stop alpha from the panel.
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(`#subagents .run.running button.stop`))); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "alpha stopped in the panel",
		`Array.from(document.querySelectorAll("#subagents .run.stopped .label")).some(l => l.textContent.includes("alpha"))`)
	var alpha store.Run
	for _, r := range tg.runsOf(t, "agent:main:web:dm:panel") {
		if r.Label == "alpha" {
			alpha = r
		}
	}
	if alpha.Status != store.StatusDone || alpha.Outcome != store.OutcomeStopped {
		t.Errorf("alpha after Stop: %s/%s", alpha.Status, alpha.Outcome)
	}
	// Log posts the command; its answer comes as a system message.
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(`#subagents .run.success button.log`))); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the log of beta",
		`Array.from(document.querySelectorAll("#messages .msg.system .text")).some(m => m.textContent.startsWith("📜 Subagent log: beta"))`)

	// Markdown.
	if err := webtest.Chat(ctx, url, "markdown please"); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the rendered reply", `document.querySelector("#messages .msg.assistant:not(.draft) .text.md h2") !== null`)
	check, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]any](`(() => {
		const md = Array.from(document.querySelectorAll("#messages .msg.assistant .text.md")).pop();
		return {
			strong: md.querySelector("strong") !== null,
			pre: md.querySelector("pre code") !== null,
			link: (md.querySelector('a[href="https://example.org"]') || {}).target === "_blank",
			list: md.querySelectorAll("ul li").length,
		};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"strong": true, "pre": true, "link": true, "list": float64(2)} {
		if check[k] != v {
			t.Errorf("rendered reply: %s = %v, want %v", k, check[k], v)
		}
	}
	// The screenshots for docs/channels-web.md, before the HTML test below
	// leaves its payload's text on the page.
	if dir := os.Getenv("HERALD_SCREENSHOTS"); dir != "" {
		if err := webtest.Screenshot(ctx, filepath.Join(dir, "web-chat-desktop.png")); err != nil {
			t.Error(err)
		}
	}
	// At phone width the message box's placeholder fits in the box.
	if _, err := chromedp.Run(ctx, chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "a placeholder that fits the phone-width message box", `(() => {
		const box = document.getElementById("input"), st = getComputedStyle(box);
		const c = document.createElement("canvas").getContext("2d");
		c.font = st.font;
		return box.placeholder !== "" && c.measureText(box.placeholder).width <= box.clientWidth - parseFloat(st.paddingLeft) - parseFloat(st.paddingRight);
	})()`)
	if dir := os.Getenv("HERALD_SCREENSHOTS"); dir != "" {
		if err := webtest.Screenshot(ctx, filepath.Join(dir, "web-chat-phone.png")); err != nil {
			t.Error(err)
		}
	}

	// Script and event-handler HTML in a reply does not run.
	if err := webtest.Chat(ctx, url, "html please"); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the HTML reply", `Array.from(document.querySelectorAll("#messages .msg.assistant:not(.draft) .text.md")).some(m => m.textContent.startsWith("Here:"))`)
	check, err = chromedp.Run(ctx, chromedp.Evaluate[map[string]any](`(() => {
		const md = Array.from(document.querySelectorAll("#messages .msg.assistant .text.md")).pop();
		return {
			img: document.querySelectorAll("#messages img").length,
			script: md.querySelectorAll("script").length,
			js: Array.from(md.querySelectorAll("a")).filter(a => a.href.startsWith("javascript:")).length,
			pwned: typeof window.__pwned,
		};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"img": float64(0), "script": float64(0), "js": float64(0), "pwned": "undefined"} {
		if check[k] != v {
			t.Errorf("rendered HTML reply: %s = %v, want %v", k, check[k], v)
		}
	}
	hold.open()
}
