package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/web/webtest"
	"github.com/heraldhq/herald/devtools/pgtest"
	"github.com/heraldhq/herald/store"
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
	// Fails when nothing moves for e2eWait (a lost wake-up), not when a
	// loaded machine takes longer than that for the whole spawn.
	ok, took := waitProgress(e2eWait, 3*time.Minute, func() string {
		return fmt.Sprint(len(webMessages(t, tg.URL, a, seq)), tg.state(t))
	}, func() bool {
		announces = announces[:0]
		for _, m := range webMessages(t, tg.URL, a, seq) {
			if m.Role == "announce" {
				announces = append(announces, m)
			}
		}
		return len(announces) >= 3
	})
	if !ok {
		t.Fatalf("%d announces for %s after %v, want 3: %+v\nthe conversation: %+v\n%s", len(announces), a, took.Round(time.Millisecond),
			announces, webMessages(t, tg.URL, a, 0), tg.state(t))
	}
	t.Logf("three announces after %v", took.Round(time.Millisecond))
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

// TestE2EWebReplyKeepsItsChatsOrder: a web reply is delivered with its
// turn's completion, once, in its chat's order: behind an announce of the
// same chat that could not go out yet it waits, and shows after it once
// that goes; every reply is in the conversation once, the outbox holds
// nothing pending, and a restart shows and sends nothing again.
func TestE2EWebReplyKeepsItsChatsOrder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	reply := llmtest.Text("the answer")
	tg := newTestGatewayIn(t, dir, sessionCmdConfig, reply)
	db := tg.G.Store()
	ctx := context.Background()
	const client = "in-order"
	webPost(t, tg.URL, client, "first")
	waitWeb(t, tg, client, 0, "assistant", func(s string) bool { return s == "the answer" })
	items, err := db.ListOutbox(ctx, false, 0)
	if err != nil || len(items) != 1 || items[0].State() != store.OutboxDelivered {
		t.Fatalf("outbox after the first turn = %+v, %v; want its reply delivered", items, err)
	}
	// An announce to the same chat whose send failed: retried in an hour.
	held := &store.OutboxItem{Origin: items[0].Origin, Kind: channels.KindAnnounce, Text: "held announce",
		NextAttemptAt: time.Now().Add(time.Hour)}
	if _, err := db.EnqueueOutbox(ctx, held); err != nil {
		t.Fatal(err)
	}
	webPost(t, tg.URL, client, "second")
	// The turn completes; its reply waits behind the announce.
	var waiting store.OutboxItem
	if !waitFor(e2eWait, func() bool {
		items, _ = db.ListOutbox(ctx, true, 0)
		for _, it := range items {
			if it.ID > held.ID {
				waiting = it
				return true
			}
		}
		return false
	}) {
		t.Fatalf("pending items %+v; want the second reply queued behind the announce", items)
	}
	if got := roles(webMessages(t, tg.URL, client, 0)); got != "user assistant user" {
		t.Fatalf("conversation %q while the announce waits; want the second reply not shown before it", got)
	}
	if err := db.RetryOutbox(ctx, held.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	tg.G.WakeOutbox()
	waitWeb(t, tg, client, 3, "assistant", func(s string) bool { return s == "the answer" })
	want := "user:first assistant:the answer user:second announce:held announce assistant:the answer"
	if got := texts(webMessages(t, tg.URL, client, 0)); got != want {
		t.Fatalf("conversation %q, want %q", got, want)
	}
	if pending, err := db.ListOutbox(ctx, true, 0); err != nil || len(pending) != 0 {
		t.Fatalf("pending = %+v, %v; want the announce and the second reply (%d) delivered", pending, err, waiting.ID)
	}
	tg.Stop()
	tg = newTestGatewayIn(t, dir, sessionCmdConfig, reply)
	webPost(t, tg.URL, client, "third")
	waitWeb(t, tg, client, 6, "assistant", func(s string) bool { return s == "the answer" })
	if got := texts(webMessages(t, tg.URL, client, 0)); got != want+" user:third assistant:the answer" {
		t.Errorf("conversation after a restart %q; want each message and reply once", got)
	}
	if pending, err := tg.G.Store().ListOutbox(ctx, true, 0); err != nil || len(pending) != 0 {
		t.Errorf("pending after a restart = %+v, %v; want none", pending, err)
	}
}

// roles and texts render a conversation as "role …" and "role:text …".
func roles(msgs []webEntry) string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Role)
	}
	return strings.Join(out, " ")
}

func texts(msgs []webEntry) string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Role+":"+m.Text)
	}
	return strings.Join(out, " ")
}

// TestE2EWebAnnouncesOnceEach: the announces of a spawn (delivered with
// their runs' ends) show each once with its run id, on the open event
// stream and in the conversation, and the stream shows what the
// conversation holds; the
// outbox holds nothing pending, and a restart shows and sends nothing
// again.
func TestE2EWebAnnouncesOnceEach(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tg := newTestGatewayIn(t, dir, webE2EConfig, nil)
	const client = "announced"
	stream := openEvents(t, tg.URL, client)
	webPost(t, tg.URL, client, webSpawn)
	var shown []webEntry
	deadline := time.After(e2eWait)
	for announces, replies := 0, 0; announces < 3 || replies < 1; {
		select {
		case ev, ok := <-stream:
			if !ok {
				t.Fatalf("event stream ended after %+v", shown)
			}
			var e webEntry
			if ev.Name != "" || json.Unmarshal([]byte(ev.Data), &e) != nil {
				continue
			}
			shown = append(shown, e)
			switch e.Role {
			case "announce":
				announces++
			case "assistant":
				replies++
			}
		case <-deadline:
			t.Fatalf("entries so far %+v; want the reply and three announces", shown)
		}
	}
	check := func(msgs []webEntry, when string) {
		t.Helper()
		runs := map[string]bool{}
		for i, m := range msgs {
			if m.Seq != int64(i+1) {
				t.Errorf("%s: entry %d has seq %d", when, i, m.Seq)
			}
			if m.Role == "announce" {
				if m.RunID == "" || runs[m.RunID] {
					t.Errorf("%s: announce %+v without a run id or shown twice", when, m)
				}
				runs[m.RunID] = true
			}
		}
		// A child may end before the turn that spawned it: its announce
		// then comes before the reply (the outbox's order is the rows').
		got := strings.Fields(roles(msgs))
		slices.Sort(got)
		if strings.Join(got, " ") != "announce announce announce assistant user" || msgs[0].Role != "user" || len(runs) != 3 {
			t.Errorf("%s: conversation %q; want the message, its reply and each announce once", when, roles(msgs))
		}
	}
	check(shown, "event stream")
	msgs := webMessages(t, tg.URL, client, 0)
	check(msgs, "conversation")
	if !slices.Equal(msgs, shown) {
		t.Errorf("conversation %+v, the event stream showed %+v", msgs, shown)
	}
	if pending, err := tg.G.Store().ListOutbox(context.Background(), true, 0); err != nil || len(pending) != 0 {
		t.Errorf("pending = %+v, %v; want every announce delivered", pending, err)
	}
	tg.Stop()
	tg = newTestGatewayIn(t, dir, webE2EConfig, nil)
	webPost(t, tg.URL, client, "thanks")
	waitWeb(t, tg, client, 5, "assistant", func(string) bool { return true })
	if got := roles(webMessages(t, tg.URL, client, 0)); got != roles(msgs)+" user assistant" {
		t.Errorf("conversation after a restart %q; want nothing shown again", got)
	}
}
