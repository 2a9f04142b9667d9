package gateway_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels/web/webtest"
	"github.com/heraldhq/herald/devtools/pgtest"
)

// webE2EConfig: the built-in demo model as the only provider and only the
// web chat, as someone trying Herald without an API key would run it.
const webE2EConfig = `{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { demo: { api: "demo", models: [{ id: "demo" }] } } },
  agents: { defaults: { model: "demo/demo" }, list: [{ id: "main" }] },
  channels: { web: { enabled: true } },
}`

const webSpawn = "spawn 3 researchers on Go generics"

// TestE2EWebBrowserSpawn types a spawn request into the chat page in a real
// headless Chromium: the demo agent's reply and three announce cards, each
// a successful run, appear on the page.
func TestE2EWebBrowserSpawn(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	tg := newTestGateway(t, webE2EConfig, nil)
	bctx := webtest.NewBrowser(t) // skips without Chromium unless $CI is set
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()

	if err := webtest.Chat(ctx, tg.URL+"/?client=e2e-browser", webSpawn); err != nil {
		t.Fatalf("type into the chat page: %v", err)
	}
	replies, err := webtest.WaitMessages(ctx, "assistant", 1)
	if err != nil {
		t.Fatalf("waiting for the assistant's reply: %v", err)
	}
	if !slices.ContainsFunc(replies, func(s string) bool { return strings.Contains(s, "3 of 3 sub-agents accepted") }) {
		t.Errorf("assistant replies %q, want one saying 3 of 3 sub-agents were accepted", replies)
	}
	cards, err := webtest.WaitMessages(ctx, "announce", 3)
	if err != nil {
		t.Fatalf("waiting for three announces: %v", err)
	}
	if len(cards) != 3 {
		t.Errorf("%d announce cards, want 3: %q", len(cards), cards)
	}
	var tasks []string
	for _, c := range cards {
		c = strings.TrimSpace(c)
		if !strings.HasPrefix(c, "Status: success") {
			t.Errorf("announce card does not start with Status: success:\n%s", c)
		}
		if m := regexp.MustCompile(`Task: (researcher #\d)`).FindStringSubmatch(c); m != nil {
			tasks = append(tasks, m[1])
		}
	}
	slices.Sort(tasks)
	if want := []string{"researcher #1", "researcher #2", "researcher #3"}; !slices.Equal(tasks, want) {
		t.Errorf("announced tasks %q, want %q", tasks, want)
	}
	if users, err := webtest.Messages(ctx, "user"); err != nil || !slices.Equal(users, []string{webSpawn}) {
		t.Errorf("user messages on the page %q (%v), want just the typed one", users, err)
	}
}

// waitWeb polls the client's conversation after seq until a message of role
// satisfies ok, and returns it.
func waitWeb(t *testing.T, tg *testGW, client string, after int64, role string, ok func(string) bool) webEntry {
	t.Helper()
	var got []webEntry
	var hit webEntry
	if !waitFor(e2eWait, func() bool {
		got = webMessages(t, tg.URL, client, after)
		for _, m := range got {
			if m.Role == role && ok(m.Text) {
				hit = m
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no fitting %s message for %s after seq %d; got %+v", role, client, after, got)
	}
	return hit
}

// TestE2EWebAPISubagentCommands drives the web chat's JSON API: a spawn
// request is announced three times; /subagents list and info then show
// the three runs of that conversation, and another client sees none of them.
func TestE2EWebAPISubagentCommands(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, webE2EConfig, nil)
	const a, b = "e2e-api-a", "e2e-api-b"

	seq := webPost(t, tg.URL, a, webSpawn)
	var announces []webEntry
	if !waitFor(e2eWait, func() bool {
		announces = announces[:0]
		for _, m := range webMessages(t, tg.URL, a, seq) {
			if m.Role == "announce" {
				announces = append(announces, m)
			}
		}
		return len(announces) >= 3
	}) {
		t.Fatalf("%d announces for %s, want 3: %+v\nthe conversation: %+v\n%s", len(announces), a, announces, webMessages(t, tg.URL, a, 0), tg.state(t))
	}
	runIDs := map[string]bool{}
	for _, m := range announces {
		if !strings.HasPrefix(m.Text, "Status: success\nTask: researcher #") {
			t.Errorf("announce does not start with a successful researcher run:\n%s", m.Text)
		}
		runIDs[m.RunID] = true
	}
	if len(runIDs) != 3 || runIDs[""] {
		t.Errorf("announces carry run ids %v, want 3 distinct ones", runIDs)
	}
	tg.waitDelivered(t, 4) // the reply and three announces

	seq = webPost(t, tg.URL, a, "/subagents list")
	list := waitWeb(t, tg, a, seq, "system", func(s string) bool { return strings.HasPrefix(s, "🧭 Subagents") })
	lines := strings.Split(list.Text, "\n")
	if len(lines) != 5 || lines[0] != "🧭 Subagents (current session)" || lines[1] != "Active: 0 · Done: 3" {
		t.Fatalf("/subagents list answered:\n%s\nwant a header, Active: 0 · Done: 3 and three runs", list.Text)
	}
	for i, l := range lines[2:] {
		if !regexp.MustCompile(`^` + string(rune('1'+i)) + `\) success · researcher #\d · .* · run [0-9a-f]{8} · agent:main:subagent:[0-9a-f-]{36}$`).MatchString(l) {
			t.Errorf("/subagents list line %d = %q", i+1, l)
		}
	}

	seq = webPost(t, tg.URL, a, "/subagents info 1")
	info := waitWeb(t, tg, a, seq, "system", func(s string) bool { return strings.HasPrefix(s, "ℹ️ Subagent info") })
	var transcript string
	for _, l := range strings.Split(info.Text, "\n") {
		if p, ok := strings.CutPrefix(l, "Transcript: "); ok {
			transcript = p
		}
	}
	if !strings.HasSuffix(transcript, ".jsonl") || !pgtest.OnPostgres() && !strings.HasPrefix(transcript, tg.StateDir) {
		t.Errorf("/subagents info 1 has transcript %q, want a .jsonl file in the state dir:\n%s", transcript, info.Text)
	} else if _, _, err := tg.G.Store().ReadTranscript(context.Background(), transcript); err != nil {
		t.Errorf("the transcript /subagents info names is not there: %v", err)
	}
	if !strings.Contains(info.Text, "\nOutcome: success") {
		t.Errorf("/subagents info 1 does not say Outcome: success:\n%s", info.Text)
	}

	// Another browser is another conversation: it cannot see a's runs.
	seq = webPost(t, tg.URL, b, "/subagents info 1")
	if m := waitWeb(t, tg, b, seq, "system", func(string) bool { return true }); m.Text != `⚠️ No subagent matches "1".` {
		t.Errorf("/subagents info 1 from another client answered %q, want the no-match reply", m.Text)
	}
	seq = webPost(t, tg.URL, b, "/subagents list")
	if m := waitWeb(t, tg, b, seq, "system", func(string) bool { return true }); m.Text != "🧭 Subagents: none for this session." {
		t.Errorf("/subagents list from another client answered %q, want none", m.Text)
	}
	for _, m := range webMessages(t, tg.URL, b, 0) {
		if m.Role == "announce" {
			t.Errorf("client %s received an announce of %s's runs:\n%s", b, a, m.Text)
		}
	}
}
