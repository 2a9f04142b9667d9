package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/admin"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
)

// consoleConfig: the web chat and the console on a loopback listener, the
// console with a token (then required on loopback too).
const consoleConfig = `{
  gateway: { shutdownGraceSeconds: 5, admin: { token: "console-s3cret" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [
    { id: "main", default: true },
    { id: "coder", runtime: { type: "acp", command: "codex-acp", network: true } }] },
}`

const consoleToken = "console-s3cret"

var bearer = map[string]string{"Authorization": "Bearer " + consoleToken}

// consoleGet decodes GET /admin/api/<path> with the token into v.
func consoleGet(t *testing.T, tg *testGW, path string, v any) {
	t.Helper()
	resp, body := webReq(t, "GET", tg.URL+"/admin/api/"+path, nil, bearer)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /admin/api/%s: %d %s", path, resp.StatusCode, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET /admin/api/%s: %v in %s", path, err, body)
	}
}

// TestE2EConsoleAPI (SPEC §27) through the real gateway, on this run's
// engine: the token guard (401 with no detail, never in a URL, the login
// cookie's attributes, cross-site posts refused), the overview, a
// conversation found by search with its transcript, runs as a tree with
// rolled-up tokens and cost, a dead letter retried and dropped, 404 with a
// one-line reason for unknown ids, and the page's CSP.
func TestE2EConsoleAPI(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, consoleConfig, echoModel)
	ctx := context.Background()
	db := tg.G.Store().(*store.DB)

	// The guard.
	for name, h := range map[string]map[string]string{"no token": nil, "wrong token": {"Authorization": "Bearer nope"}} {
		resp, body := webReq(t, "GET", tg.URL+"/admin/api/overview", nil, h)
		if resp.StatusCode != http.StatusUnauthorized || strings.TrimSpace(body) != `{"error":"unauthorized"}` {
			t.Errorf("%s: %d %s; want 401 with no detail", name, resp.StatusCode, body)
		}
	}
	if resp, _ := webReq(t, "GET", tg.URL+"/admin/api/overview?token="+consoleToken, nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("token in the URL: %d; want 401", resp.StatusCode)
	}
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	if resp, _ := webReq(t, "POST", tg.URL+"/admin/login", []byte("token=wrong"), form); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("login with a wrong token: %d", resp.StatusCode)
	}
	resp, body := webReq(t, "POST", tg.URL+"/admin/login", []byte(url.Values{"token": {consoleToken}}.Encode()), form)
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == admin.CookieName {
			cookie = c
		}
	}
	if resp.StatusCode != http.StatusOK || cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Secure || cookie.Value == consoleToken {
		t.Fatalf("login: %d %s cookie %+v; want an HttpOnly SameSite=Strict cookie (not Secure on plain loopback) that is not the token", resp.StatusCode, body, cookie)
	}
	if resp, body := webReq(t, "GET", tg.URL+"/admin/api/overview", nil, nil, cookie); resp.StatusCode != http.StatusOK {
		t.Errorf("overview with the login cookie: %d %s", resp.StatusCode, body)
	}
	crossSite := map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}
	if resp, _ := webReq(t, "POST", tg.URL+"/admin/api/outbox/1/drop", nil, crossSite, cookie); resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site post with the cookie: %d; want 403", resp.StatusCode)
	}

	// A conversation, found by search, with its transcript.
	webPost(t, tg.URL, "ann", "hello console")
	waitWeb(t, tg, "ann", 0, "assistant", func(s string) bool { return s == "re: hello console" })
	var convs struct{ Conversations []admin.Conversation }
	consoleGet(t, tg, "conversations?q=ANN", &convs)
	if len(convs.Conversations) != 1 || convs.Conversations[0].SessionKey != "agent:main:web:dm:ann" || convs.Conversations[0].Chat != "web:dm:ann" {
		t.Fatalf("conversations?q=ANN = %+v", convs)
	}
	consoleGet(t, tg, "conversations?q=nobody", &convs)
	if len(convs.Conversations) != 0 {
		t.Errorf("conversations?q=nobody = %+v", convs)
	}
	var tr struct {
		Transcript []store.TranscriptEntry
	}
	consoleGet(t, tg, "conversations/"+url.PathEscape("agent:main:web:dm:ann"), &tr)
	var said []string
	for _, l := range tr.Transcript {
		said = append(said, l.Role+": "+l.Content)
	}
	if got := strings.Join(said, "\n"); !strings.Contains(got, "user: hello console") || !strings.Contains(got, "assistant: re: hello console") {
		t.Errorf("transcript:\n%s", got)
	}

	// Runs as a tree: a parent with a child; tokens and cost rolled up.
	parent := &store.Run{ID: "run-parent", RequesterKey: "agent:main:web:dm:ann", AgentID: "main", Label: "parent", Task: "plan",
		Status: store.StatusRunning, TokensIn: 100, TokensOut: 10, CostUSD: 0.5, CreatedAt: time.Now().Add(-time.Minute), StartedAt: time.Now().Add(-time.Minute)}
	child := &store.Run{ID: "run-child", RequesterKey: "agent:main:subagent:run-parent", AgentID: "main", Label: "child", Task: "dig",
		Status: store.StatusDone, Outcome: store.OutcomeSuccess, TokensIn: 40, TokensOut: 4, CostUSD: 0.25, CreatedAt: time.Now()}
	for _, r := range []*store.Run{parent, child} {
		if err := db.CreateRun(ctx, r, &store.Session{Key: "agent:main:subagent:" + r.ID, ID: "s-" + r.ID}); err != nil {
			t.Fatal(err)
		}
	}
	var runs struct{ Runs []admin.Run }
	consoleGet(t, tg, "runs", &runs)
	if len(runs.Runs) != 1 || len(runs.Runs[0].Children) != 1 {
		t.Fatalf("runs = %+v; want one tree of two", runs)
	}
	if p, c := runs.Runs[0], runs.Runs[0].Children[0]; p.Tokens != 154 || p.CostUSD != 0.75 || p.Status != "running" || c.ParentRunID != "run-parent" || c.Status != "success" || c.Tokens != 44 {
		t.Errorf("tree = %+v; want the parent's tokens 154 and cost 0.75 with the child's, the child under it", runs.Runs[0])
	}
	consoleGet(t, tg, "runs?status=success", &runs)
	if len(runs.Runs) != 1 || runs.Runs[0].RunID != "run-parent" || len(runs.Runs[0].Children) != 1 {
		t.Errorf("runs?status=success = %+v; want the child with its ancestor", runs)
	}

	// A dead letter: listed, retried (pending again), dropped.
	dead := &store.OutboxItem{Origin: channels.Origin{Channel: "telegram", ChatID: "42", ChatType: channels.ChatDM}, Kind: channels.KindReply,
		Text: "lost", CreatedAt: time.Now().Add(-48 * time.Hour)}
	if _, err := db.EnqueueOutbox(ctx, dead); err != nil {
		t.Fatal(err)
	}
	tg.G.WakeOutbox() // its delivery pass finds it past outbox.maxAgeHours
	if !waitFor(e2eWait, func() bool {
		it, err := db.GetOutbox(ctx, dead.ID)
		return err == nil && it.State() == store.OutboxDead
	}) {
		t.Fatal("an item older than outbox.maxAgeHours did not become dead")
	}
	var ob struct{ Items []admin.OutboxItem }
	consoleGet(t, tg, "outbox?state=dead", &ob)
	if len(ob.Items) != 1 || ob.Items[0].ID != dead.ID || ob.Items[0].Destination != "telegram:dm:42" || ob.Items[0].State != "dead" {
		t.Fatalf("outbox?state=dead = %+v", ob)
	}
	var ov admin.Overview
	consoleGet(t, tg, "overview", &ov)
	if ov.Outbox.Dead != 1 || ov.Version == "" || len(ov.Lanes) != 2 || len(ov.Channels) == 0 || ov.Channels[0].Name != "web" || ov.Channels[0].State != "up" {
		t.Errorf("overview = %+v", ov)
	}
	if len(ov.ACP) != 1 || fmt.Sprint(ov.ACP[0]) != "map[command:codex-acp name:coder network:true]" {
		t.Errorf("overview's ACP agents = %v, want the configured coder", ov.ACP)
	}
	id := strconv.FormatInt(dead.ID, 10)
	if resp, body := webReq(t, "POST", tg.URL+"/admin/api/outbox/"+id+"/retry", nil, bearer); resp.StatusCode != http.StatusOK {
		t.Errorf("retry: %d %s", resp.StatusCode, body)
	}
	if it, _ := db.GetOutbox(ctx, dead.ID); it.State() != store.OutboxPending && it.State() != store.OutboxDead {
		t.Errorf("after retry the item is %s", it.State())
	}
	if resp, body := webReq(t, "POST", tg.URL+"/admin/api/outbox/"+id+"/drop", nil, bearer); resp.StatusCode != http.StatusOK {
		t.Errorf("drop: %d %s", resp.StatusCode, body)
	}

	// Unknown ids: 404 with a one-line reason.
	for _, path := range []string{"outbox/" + id + "/retry", "outbox/x/drop", "runs/no-such-run/stop", "schedules/no-such/pause"} {
		resp, body := webReq(t, "POST", tg.URL+"/admin/api/"+path, []byte(`{}`), bearer)
		var e struct{ Error string }
		if json.Unmarshal([]byte(body), &e); resp.StatusCode != http.StatusNotFound || e.Error == "" || strings.Contains(e.Error, "\n") {
			t.Errorf("POST %s: %d %s; want 404 with a one-line error", path, resp.StatusCode, body)
		}
	}
	if resp, _ := webReq(t, "GET", tg.URL+"/admin/api/conversations/agent:main:web:dm:nobody", nil, bearer); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown conversation: %d", resp.StatusCode)
	}

	// Stop on a run: the run is not live here, the answer still ok.
	if resp, body := webReq(t, "POST", tg.URL+"/admin/api/runs/run-parent/stop", nil, bearer); resp.StatusCode != http.StatusOK {
		t.Errorf("stop: %d %s", resp.StatusCode, body)
	}

	// The page: served without the token (it holds no data), strict CSP.
	resp, body = webReq(t, "GET", tg.URL+"/admin", nil, nil)
	csp := resp.Header.Get("Content-Security-Policy")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Herald console") || strings.Contains(csp, "unsafe-inline") ||
		!strings.Contains(csp, "script-src 'sha256-") || !strings.Contains(csp, "default-src 'none'") || strings.Contains(body, "http://") || strings.Contains(body, "https://") {
		t.Errorf("page: %d CSP %q", resp.StatusCode, csp)
	}
}
