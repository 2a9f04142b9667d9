package gateway_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/agent/tools"
	"github.com/heraldhq/herald/channels/slack/slackfake"
	"github.com/heraldhq/herald/channels/telegram/tgfake"
)

// childThreadPosts are the posts in the thread of the first top-level
// post of C1 (the starter of a child's thread), and the starter.
func childThreadPosts(sf *slackfake.Server) (starter slackfake.Post, in []slackfake.Post) {
	for _, p := range sf.Posted() {
		switch {
		case starter.TS == "" && p.Channel == "C1" && p.ThreadTS == "":
			starter = p
		case starter.TS != "" && p.ThreadTS == starter.TS:
			in = append(in, p)
		}
	}
	return starter, in
}

// TestE2ESlackThreadLive: a child spawned with thread: true shows its
// work live in its own thread (SPEC §16, §24) — its text is posted as a
// draft there while its model writes it and updated as it grows — and its
// announce then replaces that draft: the thread holds one message, the
// announce, with the outbox metadata; the requester's thread sees nothing
// of the child's text.
func TestE2ESlackThreadLive(t *testing.T) {
	t.Parallel()
	sf := slackfake.New(t)
	const work = "alpha at work: reading the release notes, then the changelog, then writing it up."
	base := threadModel()
	tg := newTestGateway(t, fmt.Sprintf(slackE2EConfig, slackfake.BotToken, slackfake.AppToken, sf.URL()), func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "Sub-agent context") && strings.HasPrefix(c.LastUser(), "alpha: dig") {
			return llmtest.Reply{Text: work, BeforePiece: func(i int) {
				switch i {
				case 1:
					if !waitFor(e2eWait, func() bool { _, in := childThreadPosts(sf); return len(in) == 1 }) {
						t.Error("no draft of the child in its thread")
					}
				case 2:
					if !waitFor(e2eWait, func() bool { return len(sf.Updates()) > 0 }) {
						t.Error("the draft was not updated")
					}
				}
			}}
		}
		return base(c)
	})
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("Slack did not connect")
	}
	sf.SendMention("C1", slackfake.UserID, "look at this in its own thread please", slackT1)
	tg.waitDelivered(t, 3) // the link line, the reply, the announce
	starter, in := childThreadPosts(sf)
	if len(in) != 1 || !strings.HasPrefix(in[0].Text, "Status: success\nTask: alpha") || !strings.Contains(in[0].Metadata, "herald_message") {
		t.Fatalf("alpha's thread %s = %+v, want one message: the draft, turned into the announce", starter.TS, in)
	}
	var drafts []string
	for _, u := range sf.Updates() {
		if u.TS == in[0].TS {
			drafts = append(drafts, u.Text)
		}
	}
	if len(drafts) < 2 || drafts[len(drafts)-1] != in[0].Text {
		t.Fatalf("updates of the draft %q: want the child's text, then the announce", drafts)
	}
	for _, d := range drafts[:len(drafts)-1] {
		if !strings.HasPrefix(work, d) || d == "" {
			t.Errorf("draft %q is not the child's text growing to %q", d, work)
		}
	}
	for _, p := range sf.Posted() {
		if p.ThreadTS == slackT1 && strings.Contains(p.Text, "alpha at work") {
			t.Errorf("the child's text reached the requester's thread: %+v", p)
		}
	}
}

// TestE2ESlackThreadLiveSkipped: a child shown live in its own thread
// whose announce step answers ANNOUNCE_SKIP posts no announce; its draft
// is finished instead — edited, once, to its text and the line
// "Status: success" — so it does not look like a child still writing.
func TestE2ESlackThreadLiveSkipped(t *testing.T) {
	t.Parallel()
	sf := slackfake.New(t)
	const work = "alpha at work: reading the release notes, then the changelog, nothing new."
	base := threadModel()
	tg := newTestGateway(t, fmt.Sprintf(slackE2EConfig, slackfake.BotToken, slackfake.AppToken, sf.URL()), func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "Sub-agent context") && strings.Contains(c.LastUser(), "Announce step") {
			return llmtest.Reply{Text: "ANNOUNCE_SKIP"}
		}
		if strings.Contains(c.System, "Sub-agent context") && strings.HasPrefix(c.LastUser(), "alpha: dig") {
			return llmtest.Reply{Text: work, BeforePiece: func(i int) {
				if i == 1 && !waitFor(e2eWait, func() bool { _, in := childThreadPosts(sf); return len(in) == 1 }) {
					t.Error("no draft of the child in its thread")
				}
			}}
		}
		return base(c)
	})
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("Slack did not connect")
	}
	sf.SendMention("C1", slackfake.UserID, "look at this in its own thread please", slackT1)
	tg.waitDelivered(t, 3) // the link line, the reply, the finished draft
	_, in := childThreadPosts(sf)
	if want := work + "\n\nStatus: success"; len(in) != 1 || in[0].Text != want {
		t.Fatalf("alpha's thread = %+v, want one message: the draft, finished as %q", in, want)
	}
	finals := 0
	for _, u := range sf.Updates() {
		if u.TS == in[0].TS && strings.HasSuffix(u.Text, "Status: success") {
			finals++
		}
	}
	if finals != 1 {
		t.Errorf("the draft was finished %d times, want once", finals)
	}
}

// TestE2ESlackFocusLive: a running child (no thread of its own) that
// /focus binds to thread T2 streams its work live into T2 (SPEC §24: its
// live output goes to the bound thread); its announce goes to T1, where it
// was asked for, and its draft in T2 is finished once: its text and
// "Status: success".
func TestE2ESlackFocusLive(t *testing.T) {
	t.Parallel()
	sf := slackfake.New(t)
	const work = "alpha at work: reading the release notes, then the changelog, then writing it up."
	focused := newGate(t)
	inT2 := func() []slackfake.Post {
		var in []slackfake.Post
		for _, p := range sf.Posted() {
			if p.ThreadTS == slackT2 {
				in = append(in, p)
			}
		}
		return in
	}
	tg := newTestGateway(t, fmt.Sprintf(slackE2EConfig, slackfake.BotToken, slackfake.AppToken, sf.URL()), func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "Sub-agent context") {
			if strings.Contains(c.LastUser(), "Announce step") {
				return llmtest.Reply{Text: "Result:\nfound it\n\nNotes:\n(none)"}
			}
			return llmtest.Reply{Text: work, BeforePiece: func(i int) {
				switch i {
				case 0:
					focused.wait()
				case 1:
					if !waitFor(e2eWait, func() bool { return len(inT2()) == 2 }) {
						t.Error("no draft of the child in the focused thread")
					}
				}
			}}
		}
		if n := len(c.Messages); n > 0 && c.Messages[n-1].Role == agent.RoleTool {
			return llmtest.Reply{Text: "Started alpha."}
		}
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn",
			Args: json.RawMessage(`{"task":"alpha: dig into the release notes","label":"alpha"}`)}}}
	})
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("Slack did not connect")
	}
	sf.SendMention("C1", slackfake.UserID, "look at the release notes", slackT1)
	sf.WaitPosts(1, e2eWait)
	sf.SendMention("C1", slackfake.UserID, "/focus alpha", slackT2)
	if !waitFor(e2eWait, func() bool { in := inT2(); return len(in) == 1 && in[0].Text == "🎯 This thread now talks to alpha." }) {
		t.Fatalf("T2 = %+v, want the /focus reply", inT2())
	}
	focused.open()
	tg.waitDelivered(t, 4) // the reply, /focus's reply, the announce in T1, the finished draft in T2
	in := inT2()
	if want := work + "\n\nStatus: success"; len(in) != 2 || in[1].Text != want {
		t.Fatalf("T2 = %+v, want the /focus reply and the child's draft, finished as %q", in, want)
	}
	announced := 0
	for _, p := range sf.Posted() {
		if strings.HasPrefix(p.Text, "Status: success\nTask: alpha") && p.ThreadTS == slackT1 {
			announced++
		}
	}
	if announced != 1 {
		t.Errorf("announces of alpha in T1: %d, want 1", announced)
	}
}

// TestE2ESlackACPThreadLive: an ACP coding agent spawned with thread: true
// shows its session/update stream live in its own thread (SPEC §26, §24):
// its message and the tool call it is in, while that call runs; its
// announce then replaces the draft, once.
func TestE2ESlackACPThreadLive(t *testing.T) {
	t.Parallel()
	sf := slackfake.New(t)
	ws := filepath.Join(t.TempDir(), "main-ws")
	cfg := slackACPConfig(t, ws, sf.URL(), "codex", "live", "allow")
	tg := newTestGateway(t, cfg, func(c llmtest.Call) llmtest.Reply {
		if n := len(c.Messages); n > 0 && c.Messages[n-1].Role == agent.RoleTool {
			return llmtest.Reply{Text: "Started codex in its own thread."}
		}
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn",
			Args: json.RawMessage(`{"agentId":"codex","task":"review main.go","label":"codex","thread":true}`)}}}
	})
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("Slack did not connect")
	}
	sf.SendMention("C1", slackfake.UserID, "review main.go", slackT1)
	const live = "Reading the code.\n\n🔧 Read main.go (in_progress)"
	if !waitFor(e2eWait, func() bool {
		_, in := childThreadPosts(sf)
		return len(in) == 1 && in[0].Text == live
	}) {
		_, in := childThreadPosts(sf)
		t.Fatalf("codex's thread = %+v, want its draft %q while its tool call runs", in, live)
	}
	conv := tools.ConversationWorkspace(ws, slackK1)
	if err := os.WriteFile(filepath.Join(conv, "go.txt"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tg.waitDelivered(t, 3) // the link line, the reply, the announce
	_, in := childThreadPosts(sf)
	if len(in) != 1 || !strings.HasPrefix(in[0].Text, "Status: success\nTask: codex\n\nResult:\nAll done: main.go is fine.\n") {
		t.Errorf("codex's thread = %+v, want one message: the draft, turned into the announce", in)
	}
}

// TestE2ESlackThreadStopBetween: the gateway stops after Slack took the
// starter of a child's thread but before the gateway heard so (the post
// is held, then the gateway shuts down). The next gateway on the same
// state finds that starter by the key in its metadata instead of opening
// a second thread: C1 holds one starter, the requester's thread one link
// line, the child's thread the announce, and the thread is bound (a
// message there reaches the child).
func TestE2ESlackThreadStopBetween(t *testing.T) {
	t.Parallel()
	sf := slackfake.New(t)
	cfg := strings.Replace(fmt.Sprintf(slackE2EConfig, slackfake.BotToken, slackfake.AppToken, sf.URL()),
		"shutdownGraceSeconds: 5", "shutdownGraceSeconds: 1", 1)
	stateDir := t.TempDir()
	tg := newTestGatewayIn(t, stateDir, cfg, threadModel())
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("Slack did not connect")
	}
	sf.HoldNextPosts(1)
	sf.SendMention("C1", slackfake.UserID, "look at this in its own thread please", slackT1)
	if !waitFor(e2eWait, func() bool { return len(sf.Posted()) == 1 }) {
		t.Fatalf("posts %+v, want the starter", sf.Posted())
	}
	tg.Stop()

	tg = newTestGatewayIn(t, stateDir, cfg, threadModel())
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("Slack did not reconnect")
	}
	tg.waitDelivered(t, 3) // the link line, the reply, the announce
	starter, in := childThreadPosts(sf)
	var top, link int
	for _, p := range sf.Posted() {
		switch {
		case p.ThreadTS == "":
			top++
		case p.ThreadTS == slackT1 && strings.HasPrefix(p.Text, "🧵 alpha works in its own thread"):
			link++
		}
	}
	if top != 1 || link != 1 {
		for _, p := range sf.Posted() {
			t.Logf("post %s in %q: %.60q", p.TS, p.ThreadTS, p.Text)
		}
		t.Errorf("%d top-level posts in C1, %d link lines in T1; want one starter and one link line", top, link)
	}
	if len(in) != 1 || !strings.HasPrefix(in[0].Text, "Status: success\nTask: alpha") {
		t.Fatalf("alpha's thread %s = %+v, want its announce", starter.TS, in)
	}
	n := len(sf.Posted())
	sf.SendMessage("C1", slackfake.UserID, "again: and the changelog?", starter.TS)
	posts := sf.WaitPosts(n+1, e2eWait)
	if p := posts[n]; p.ThreadTS != starter.TS || !strings.HasPrefix(p.Text, `child (task "alpha: dig into the release notes", `) {
		t.Fatalf("answer in alpha's thread = %+v, want the child's", p)
	}
}

// TestE2ESlackThreadFiles: a picture sent in a child's thread reaches the
// child like a top-level turn's: it is copied into the child's workspace
// (its requester conversation's) as attachments/<name>, named in the
// message, and given to the child's model as an image block.
func TestE2ESlackThreadFiles(t *testing.T) {
	t.Parallel()
	sf := slackfake.New(t)
	ws := filepath.Join(t.TempDir(), "main-ws")
	cfg := fmt.Sprintf(`{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "claude-sonnet-4-5" }] } } },
  agents: { defaults: { model: "anthropic/claude-sonnet-4-5" }, list: [{ id: "main", workspace: %q }] },
  channels: {
    slack: { enabled: true, botToken: %q, appToken: %q, apiUrl: %q, groups: { C1: {} } },
    web: { enabled: false },
  },
}`, ws, slackfake.BotToken, slackfake.AppToken, sf.URL())
	base := threadModel()
	var mu sync.Mutex
	var blocks []llmtest.Block
	tg := newTestGateway(t, cfg, func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "Sub-agent context") && strings.HasPrefix(c.LastUser(), "again:") {
			mu.Lock()
			blocks = c.Blocks()
			mu.Unlock()
		}
		return base(c)
	})
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("Slack did not connect")
	}
	sf.SendMention("C1", slackfake.UserID, "look at this in its own thread please", slackT1)
	tg.waitDelivered(t, 3)
	starter, _ := childThreadPosts(sf)
	chart := filePNG(t, 40, 20)
	n := len(sf.Posted())
	sf.SendMessageFiles("C1", slackfake.UserID, "again: what is in this chart?", starter.TS, sf.AddFile("chart.png", "image/png", chart))
	posts := sf.WaitPosts(n+1, e2eWait)
	if p := posts[n]; p.ThreadTS != starter.TS || !strings.Contains(p.Text, `heard "again: what is in this chart?\n[file: attachments/chart.png · image/png · `) {
		t.Fatalf("answer in alpha's thread = %+v, want the child's, naming the file", p)
	}
	got, err := os.ReadFile(filepath.Join(tools.ConversationWorkspace(ws, slackK1), "attachments", "chart.png"))
	if err != nil || sha(got) != sha(chart) {
		t.Errorf("the child's workspace has attachments/chart.png = %d bytes, %v; want the person's", len(got), err)
	}
	mu.Lock()
	defer mu.Unlock()
	var images int
	for _, b := range blocks {
		if b.Type == "image" && sha(b.Data) == sha(chart) {
			images++
		}
	}
	if images != 1 {
		t.Errorf("the child's model got %d image blocks with the chart, want 1 (blocks %d)", images, len(blocks))
	}
}

// TestE2ETelegramTopicLive: in a forum supergroup, a child spawned with
// thread: true shows "typing" in its new topic and a draft of its text
// there, edited as it grows; its announce then replaces that draft: the
// topic holds the starter and one message, the announce.
func TestE2ETelegramTopicLive(t *testing.T) {
	t.Parallel()
	tf := tgfake.New(t, tgToken)
	tf.SetForum(tgGroup, "")
	const work = "alpha at work: reading the release notes, then the changelog, then writing it up."
	inTopic := func() []tgfake.Sent {
		var out []tgfake.Sent
		topics := tf.Topics()
		if len(topics) == 0 {
			return nil
		}
		for _, s := range tf.Sent() {
			if s.ThreadID == topics[0].ThreadID {
				out = append(out, s)
			}
		}
		return out
	}
	base := threadModel()
	tg := newTestGateway(t, fmt.Sprintf(telegramThreadConfig, tgToken, tf.URL()), func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "Sub-agent context") && strings.HasPrefix(c.LastUser(), "alpha: dig") {
			return llmtest.Reply{Text: work, BeforePiece: func(i int) {
				switch i {
				case 1:
					if !waitFor(e2eWait, func() bool { return len(inTopic()) == 2 }) {
						t.Error("no draft of the child in its topic")
					}
				case 2:
					if !waitFor(e2eWait, func() bool { return len(tf.Edits()) > 0 }) {
						t.Error("the draft was not edited")
					}
				}
			}}
		}
		return base(c)
	})
	tf.SendText(tgGroup, "supergroup", 42, tgAlice, "@herald_bot look at this in its own thread")
	tg.waitDelivered(t, 3) // link, reply, announce
	in := inTopic()
	if len(in) != 2 || !strings.HasPrefix(in[0].Text, "🧵 alpha\n") || !strings.HasPrefix(in[1].Text, "Status: success\nTask: alpha") {
		t.Fatalf("the topic = %+v, want the starter and the draft turned into the announce", in)
	}
	var drafts []string
	for _, e := range tf.Edits() {
		if e.MessageID == in[1].MessageID {
			drafts = append(drafts, e.Text)
		}
	}
	if len(drafts) < 2 || !strings.HasPrefix(work, drafts[0]) || drafts[len(drafts)-1] != in[1].Text {
		t.Errorf("edits of the draft %q: want the child's text, then the announce", drafts)
	}
	typing := false
	for _, a := range tf.ChatActions() {
		typing = typing || (a.ChatID == tgGroup && a.ThreadID == tf.Topics()[0].ThreadID && a.Action == "typing")
	}
	if !typing {
		t.Errorf("no typing in the child's topic: %+v", tf.ChatActions())
	}
}

// TestE2EDiscordThreadLive: on Discord a child spawned with thread: true
// types in its new thread and shows a draft of its text there, edited as
// it grows; its announce then replaces that draft: the thread holds one
// message of the bot, the announce.
func TestE2EDiscordThreadLive(t *testing.T) {
	t.Parallel()
	f := newDiscordFake(t)
	const work = "alpha at work: reading the release notes, then the changelog, then writing it up."
	child := func() string {
		if th := f.Threads(dcGeneral); len(th) == 2 {
			return th[1].ID
		}
		return ""
	}
	base := threadModel()
	tg := newTestGateway(t, discordConfig(f), func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "Sub-agent context") && strings.HasPrefix(c.LastUser(), "alpha: dig") {
			return llmtest.Reply{Text: work, BeforePiece: func(i int) {
				switch i {
				case 1:
					if !waitFor(e2eWait, func() bool { id := child(); return id != "" && len(f.BotMessages(id)) == 1 }) {
						t.Error("no draft of the child in its thread")
					}
				case 2:
					if !waitFor(e2eWait, func() bool { m := f.BotMessages(child()); return len(m) == 1 && m[0].Edits > 0 }) {
						t.Error("the draft was not edited")
					}
				}
			}}
		}
		return base(c)
	})
	dcConnected(t, f)
	root := f.Say(dcGeneral, dcBob, "a topic", "")
	f.StartThread(dcGeneral, root.ID, "a topic", dcBob)
	f.Say(root.ID, dcAlice, dcMention(f, "look at this in its own thread"), "")
	tg.waitDelivered(t, 3) // link, reply, announce
	in := f.BotMessages(child())
	if len(in) != 1 || !strings.HasPrefix(in[0].Content, "Status: success\nTask: alpha") || in[0].Edits < 2 {
		t.Errorf("alpha's thread = %+v, want one message: the draft, edited, turned into the announce", in)
	}
	if f.Typing(child()) == 0 {
		t.Error("no typing in alpha's thread")
	}
}
