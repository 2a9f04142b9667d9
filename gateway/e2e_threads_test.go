package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels/matrix/matrixtest"
	"github.com/heraldhq/herald/channels/slack/slackfake"
	"github.com/heraldhq/herald/channels/telegram/tgfake"
)

// shiftClock is the wall clock moved forward by what a test adds.
type shiftClock struct{ off atomic.Int64 }

func (c *shiftClock) Now() time.Time      { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *shiftClock) Add(d time.Duration) { c.off.Add(int64(d)) }

// threadModel is researchModel, and a sub-agent asked a follow-up ("again:
// …") answers with what its own session holds: its task and how many
// messages it sees, so a test knows which session answered.
func threadModel() llmtest.Handler {
	research := researchModel(nil)
	return func(c llmtest.Call) llmtest.Reply {
		last := c.LastUser()
		if strings.Contains(c.System, "Sub-agent context") && strings.HasPrefix(last, "again:") {
			first := ""
			for _, m := range c.Messages {
				if m.Role == agent.RoleUser {
					first = m.Text
					break
				}
			}
			return llmtest.Reply{Text: fmt.Sprintf("child (task %q, %d messages) heard %q", first, len(c.Messages), last)}
		}
		if strings.Contains(last, "in its own thread") && !strings.Contains(c.System, "Sub-agent context") {
			if n := len(c.Messages); n > 0 && c.Messages[n-1].Role == agent.RoleTool {
				return llmtest.Reply{Text: "spawned: " + c.Messages[n-1].ToolResults[0].Content}
			}
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn",
				Args: json.RawMessage(`{"task":"alpha: dig into the release notes","label":"alpha","thread":true}`)}}}
		}
		return research(c)
	}
}

// TestE2ESlackFocusThread: after alpha and beta were announced in thread
// T1, "/focus alpha" in thread T2 binds T2 to alpha's child session; a
// message in T2 (no mention: a bound thread is one the bot is in) is
// answered in T2 by alpha's session, which sees its own history — nothing
// is announced again and nothing reaches T1 or the T2 conversation's own
// session; /subagents list in T1 marks alpha 🧵. After a restart the
// binding holds; threadIdleMinutes (90 here) after the last message it
// ends and T2 talks to its own agent again.
func TestE2ESlackFocusThread(t *testing.T) {
	clock := &shiftClock{}
	testClock = clock
	defer func() { testClock = nil }()
	sf := slackfake.New(t)
	cfg := strings.Replace(fmt.Sprintf(slackE2EConfig, slackfake.BotToken, slackfake.AppToken, sf.URL()),
		`defaults: { model: "anthropic/m" }`, `defaults: { model: "anthropic/m", subagents: { threadIdleMinutes: 90 } }`, 1)
	stateDir := t.TempDir()
	tg := newTestGatewayIn(t, stateDir, cfg, threadModel())
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("Slack did not connect")
	}
	sf.SendMention("C1", slackfake.UserID, "please research Go generics", slackT1)
	tg.waitDelivered(t, 3) // the reply and two announces in T1

	sf.SendMention("C1", slackfake.UserID, "/focus alpha", slackT2)
	posts := sf.WaitPosts(4, e2eWait)
	if p := posts[len(posts)-1]; p.ThreadTS != slackT2 || p.Text != "🎯 This thread now talks to alpha." {
		t.Fatalf("/focus reply = %+v", p)
	}
	sf.SendMessage("C1", slackfake.UserID, "again: what did you find?", slackT2)
	posts = sf.WaitPosts(5, e2eWait)
	want := `child (task "alpha: read the first half", `
	if p := posts[4]; p.ThreadTS != slackT2 || !strings.HasPrefix(p.Text, want) || !strings.HasSuffix(p.Text, `heard "again: what did you find?"`) {
		t.Fatalf("answer in the bound thread = %+v, want alpha's session answering in T2", p)
	}
	if keys := tg.sessionKeys(t); len(keys) != 1 || keys[0] != slackK1 {
		t.Errorf("requester sessions %q: the bound thread's message must not open a conversation of its own", keys)
	}
	sf.SendMention("C1", slackfake.UserID, "/subagents list", slackT1)
	posts = sf.WaitPosts(6, e2eWait)
	if p := posts[5]; p.ThreadTS != slackT1 || !strings.Contains(p.Text, "success · 🧵 alpha · ") || strings.Contains(p.Text, "🧵 beta") {
		t.Errorf("/subagents list in T1 = %+v, want alpha marked 🧵", p)
	}
	tg.waitDelivered(t, 6) // nothing announced again

	// A restart keeps the binding.
	tg.Stop()
	tg = newTestGatewayIn(t, stateDir, cfg, threadModel())
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("Slack did not reconnect")
	}
	// No mention: the adapter's memory of T2 is gone, the binding is not.
	sf.SendMessage("C1", slackfake.UserID, "again: still there?", slackT2)
	posts = sf.WaitPosts(7, e2eWait)
	if p := posts[6]; p.ThreadTS != slackT2 || !strings.HasPrefix(p.Text, want) {
		t.Fatalf("after a restart: %+v, want alpha's session answering", p)
	}

	// threadIdleMinutes after the last message the binding ends; a
	// message before that keeps it.
	clock.Add(80 * time.Minute)
	sf.SendMention("C1", slackfake.UserID, "again: still?", slackT2)
	posts = sf.WaitPosts(8, e2eWait)
	if p := posts[7]; p.ThreadTS != slackT2 || !strings.HasPrefix(p.Text, want) {
		t.Fatalf("80 minutes later: %+v, want alpha's session answering", p)
	}
	clock.Add(91 * time.Minute)
	sf.SendMention("C1", slackfake.UserID, "again: anyone?", slackT2)
	posts = sf.WaitPosts(9, e2eWait)
	if p := posts[8]; p.ThreadTS != slackT2 || !strings.HasPrefix(p.Text, "plain answer to: again: anyone?") {
		t.Fatalf("after the binding ended: %+v, want the agent's own answer", p)
	}
	if keys := tg.sessionKeys(t); len(keys) != 2 || keys[1] != slackK2 {
		t.Errorf("requester sessions %q, want T2's own conversation now", keys)
	}
}

// TestE2ESlackSpawnThread: sessions_spawn {thread: true} in thread T1
// opens the child's own thread — a starter message in C1 naming the task
// and the person — and T1 gets one line linking to it (the starter's
// permalink) and the agent's reply, nothing else; the child's announce
// goes to its thread; a message there without a mention reaches the
// child's session and is answered there, not announced again.
func TestE2ESlackSpawnThread(t *testing.T) {
	t.Parallel()
	sf := slackfake.New(t)
	tg := newTestGateway(t, fmt.Sprintf(slackE2EConfig, slackfake.BotToken, slackfake.AppToken, sf.URL()), threadModel())
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("Slack did not connect")
	}
	sf.SendMention("C1", slackfake.UserID, "look at this in its own thread please", slackT1)
	tg.waitDelivered(t, 3) // the link line, the reply, the announce (the starter is no outbox item)
	posts := sf.Posted()
	if len(posts) != 4 {
		t.Fatalf("%d posts, want the starter, the link, the reply and the announce: %+v", len(posts), posts)
	}
	starter := posts[0]
	if starter.Channel != "C1" || starter.ThreadTS != "" || !strings.HasPrefix(starter.Text, "🧵 alpha\nA sub-agent (main) working for ") ||
		!strings.Contains(starter.Text, "alpha: dig into the release notes") {
		t.Fatalf("first post = %+v, want the starter of alpha's thread, top level in C1", starter)
	}
	runs := tg.runsOf(t, slackK1)
	if len(runs) != 1 || runs[0].Origin.ThreadID != starter.TS {
		t.Fatalf("runs of T1 = %+v, want alpha with its thread %s as origin", runs, starter.TS)
	}
	var inT1, inChild []slackfake.Post
	for _, p := range posts[1:] {
		switch p.ThreadTS {
		case slackT1:
			inT1 = append(inT1, p)
		case starter.TS:
			inChild = append(inChild, p)
		default:
			t.Errorf("post outside T1 and alpha's thread: %+v", p)
		}
	}
	link := "🧵 alpha works in its own thread: https://" + slackfake.Workspace + ".slack.com/archives/C1/p" + strings.ReplaceAll(starter.TS, ".", "")
	if len(inT1) != 2 || inT1[0].Text != link || !strings.HasPrefix(inT1[1].Text, `spawned: {"status":"accepted"`) || strings.Contains(inT1[1].Text, "warning") {
		t.Errorf("T1 = %+v, want the link line %q then the reply", inT1, link)
	}
	if len(inChild) != 1 || !strings.HasPrefix(inChild[0].Text, "Status: success\nTask: alpha") {
		t.Errorf("alpha's thread = %+v, want its announce", inChild)
	}
	sf.SendMessage("C1", slackfake.UserID, "again: and the changelog?", starter.TS)
	posts = sf.WaitPosts(5, e2eWait)
	if p := posts[4]; p.ThreadTS != starter.TS || !strings.HasPrefix(p.Text, `child (task "alpha: dig into the release notes", `) {
		t.Fatalf("answer in alpha's thread = %+v", p)
	}
	tg.waitDelivered(t, 4)
}

// TestE2ESlackSpawnThreadLostStarter: Slack posts the starter of alpha's
// thread but its answer is lost (a 500): the thread stays pending, and the
// run, starting, finds that starter (its metadata) and works in its thread
// — one starter in C1, the link line and the reply (no warning) in T1, the
// announce in alpha's thread. A refusal here used to run alpha in T1 and
// leave the starter of a thread nobody used in the channel.
func TestE2ESlackSpawnThreadLostStarter(t *testing.T) {
	t.Parallel()
	sf := slackfake.New(t)
	tg := newTestGateway(t, fmt.Sprintf(slackE2EConfig, slackfake.BotToken, slackfake.AppToken, sf.URL()), threadModel())
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("Slack did not connect")
	}
	sf.LoseNextPost(500)
	sf.SendMention("C1", slackfake.UserID, "look at this in its own thread please", slackT1)
	tg.waitDelivered(t, 3) // the link line, the reply, the announce
	posts := sf.Posted()
	var starters, inT1, inChild []slackfake.Post
	for _, p := range posts {
		switch {
		case p.ThreadTS == "":
			starters = append(starters, p)
		case p.ThreadTS == slackT1:
			inT1 = append(inT1, p)
		default:
			inChild = append(inChild, p)
		}
	}
	if len(starters) != 1 || !strings.HasPrefix(starters[0].Text, "🧵 alpha\n") {
		t.Fatalf("top-level posts in C1 = %+v, want alpha's one starter", starters)
	}
	starter := starters[0]
	runs := tg.runsOf(t, slackK1)
	if len(runs) != 1 || runs[0].Origin.ThreadID != starter.TS {
		t.Fatalf("runs of T1 = %+v, want alpha with its thread %s as origin", runs, starter.TS)
	}
	// The reply and the link line (the run's start opened the thread) in
	// either order.
	link := "🧵 alpha works in its own thread: https://" + slackfake.Workspace + ".slack.com/archives/C1/p" + strings.ReplaceAll(starter.TS, ".", "")
	texts := make([]string, 0, len(inT1))
	for _, p := range inT1 {
		texts = append(texts, p.Text)
	}
	slices.Sort(texts)
	if len(texts) != 2 || !strings.HasPrefix(texts[0], `spawned: {"status":"accepted"`) || strings.Contains(texts[0], "warning") || texts[1] != link {
		t.Errorf("T1 = %q, want the reply (no warning) and the link line %q", texts, link)
	}
	if len(inChild) != 1 || inChild[0].ThreadTS != starter.TS || !strings.HasPrefix(inChild[0].Text, "Status: success\nTask: alpha") {
		t.Errorf("posts in threads other than T1 = %+v, want alpha's announce in its thread", inChild)
	}
}

// telegramThreadConfig: the forum supergroup -100123 and the plain group
// -100777, both needing a mention.
const telegramThreadConfig = `{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [{ id: "main" }] },
  channels: {
    telegram: { enabled: true, botToken: %q, apiUrl: %q, groups: { "-100123": {}, "-100777": {}, "-100888": {} } },
    web: { enabled: false },
  },
}`

// TestE2ETelegramSpawnTopic: in a forum supergroup, sessions_spawn
// {thread: true} opens a forum topic named after the label whose first
// message is the starter; topic 42 gets one link line and the reply, the
// new topic the announce; a message in the new topic without a mention (a
// topic the bot opened is one it is in) reaches the child's session and
// is answered there. In a group without topics, and in a forum where the
// bot may not open topics, the spawn runs in the requester's chat and its
// result carries a warning.
func TestE2ETelegramSpawnTopic(t *testing.T) {
	t.Parallel()
	tf := tgfake.New(t, tgToken)
	tf.SetForum(tgGroup, "")
	tf.SetForum(-100888, "Bad Request: not enough rights to create a topic")
	tg := newTestGateway(t, fmt.Sprintf(telegramThreadConfig, tgToken, tf.URL()), threadModel())

	tf.SendText(tgGroup, "supergroup", 42, tgAlice, "@herald_bot look at this in its own thread")
	tg.waitDelivered(t, 3) // link, reply, announce; the starter is sent with the topic
	topics := tf.Topics()
	if len(topics) != 1 || topics[0].ChatID != tgGroup || topics[0].Name != "alpha" {
		t.Fatalf("topics = %+v, want one named alpha in %d", topics, tgGroup)
	}
	topic := topics[0].ThreadID
	sent := tf.Sent()
	if len(sent) != 4 {
		t.Fatalf("%d messages, want the starter, the link, the reply, the announce: %+v", len(sent), sent)
	}
	if s := sent[0]; s.ThreadID != topic || !strings.HasPrefix(s.Text, "🧵 alpha\nA sub-agent (main) working for User on:") {
		t.Errorf("first message = %+v, want the starter in the new topic", s)
	}
	link := fmt.Sprintf("🧵 alpha works in its own thread: https://t.me/c/123/%d", topic)
	// Two destinations: the order within each is fixed, not across them.
	var in42, inTopic []tgfake.Sent
	for _, s := range sent[1:] {
		switch s.ThreadID {
		case 42:
			in42 = append(in42, s)
		case topic:
			inTopic = append(inTopic, s)
		}
	}
	if len(in42) != 2 || in42[0].Text != link || !strings.HasPrefix(in42[1].Text, `spawned: {"status":"accepted"`) || strings.Contains(in42[1].Text, "warning") {
		t.Errorf("topic 42 = %+v, want %q then the reply", in42, link)
	}
	if len(inTopic) != 1 || !strings.HasPrefix(inTopic[0].Text, "Status: success\nTask: alpha") {
		t.Errorf("new topic = %+v, want the announce", inTopic)
	}
	tf.SendText(tgGroup, "supergroup", topic, tgAlice, "again: anything else?")
	sent = waitTelegram(t, tf, 5)
	if s := sent[4]; s.ThreadID != topic || !strings.HasPrefix(s.Text, `child (task "alpha: dig into the release notes", `) {
		t.Fatalf("answer in the topic = %+v", s)
	}
	// /focus in another topic: a bound topic needs no mention either.
	tf.SendText(tgGroup, "supergroup", 43, tgBob, "@herald_bot /focus alpha")
	sent = waitTelegram(t, tf, 6)
	if s := sent[5]; s.ThreadID != 43 || s.Text != "🎯 This thread now talks to alpha." {
		t.Fatalf("/focus in topic 43 = %+v", s)
	}
	tf.SendText(tgGroup, "supergroup", 43, tgBob, "again: from 43")
	sent = waitTelegram(t, tf, 7)
	if s := sent[6]; s.ThreadID != 43 || !strings.HasPrefix(s.Text, `child (task "alpha: dig into the release notes", `) {
		t.Fatalf("answer in topic 43 = %+v", s)
	}

	// No topics here: the child runs in the requester's chat, with a warning.
	for i, c := range []struct {
		chat int64
		why  string
	}{{-100777, "the chat is not a forum"}, {-100888, "not enough rights to create a topic"}} {
		tf.SendText(c.chat, "supergroup", 0, tgAlice, "@herald_bot look at this in its own thread")
		tg.waitDelivered(t, 6+2*(i+1)) // the reply and the announce
		var reply, announce bool
		for _, s := range tf.Sent() {
			if s.ChatID != c.chat {
				continue
			}
			reply = reply || strings.Contains(s.Text, `"warning":"thread ignored: telegram: open a topic in `+fmt.Sprint(c.chat)) && strings.Contains(s.Text, c.why)
			announce = announce || s.ThreadID == 0 && strings.HasPrefix(s.Text, "Status: success\nTask: alpha")
		}
		if !reply || !announce {
			t.Errorf("chat %d: reply with the warning %v, announce in the chat %v: %+v", c.chat, reply, announce, tf.Sent())
		}
	}
	if n := len(tf.Topics()); n != 1 {
		t.Errorf("%d topics, want 1", n)
	}
}

// TestE2EDiscordSpawnThread: in a thread of a guild channel,
// sessions_spawn {thread: true} posts a starter in the channel and starts a
// thread from it named after the label; the requester's thread gets the
// link line (the thread's mention) and the reply, the new thread the
// announce; a message there without a mention is answered by the child.
// Where Discord refuses to start the thread (403), the spawn runs in the
// requester's thread with a warning, and the starter it posted is deleted.
func TestE2EDiscordSpawnThread(t *testing.T) {
	f := newDiscordFake(t)
	tg := newTestGateway(t, discordConfig(f), threadModel())
	dcConnected(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 2*e2eWait)
	defer cancel()
	root := f.Say(dcGeneral, dcBob, "a topic", "")
	f.StartThread(dcGeneral, root.ID, "a topic", dcBob)
	f.Say(root.ID, dcAlice, dcMention(f, "look at this in its own thread"), "")
	tg.waitDelivered(t, 3) // link, reply, announce
	threads := f.Threads(dcGeneral)
	if len(threads) != 2 || threads[1].Name != "alpha" {
		t.Fatalf("threads of general = %+v, want the person's and alpha's", threads)
	}
	child := threads[1].ID
	if starter := f.BotMessages(dcGeneral); len(starter) != 1 || starter[0].ID != child || !strings.HasPrefix(starter[0].Content, "🧵 alpha\n") {
		t.Errorf("messages of the bot in general = %+v, want alpha's starter, the thread's root", starter)
	}
	inReq := f.BotMessages(root.ID)
	if len(inReq) != 2 || inReq[0].Content != "🧵 alpha works in its own thread: <#"+child+">" ||
		!strings.HasPrefix(inReq[1].Content, `spawned: {"status":"accepted"`) || strings.Contains(inReq[1].Content, "warning") {
		t.Errorf("requester's thread = %+v, want the link line and the reply", inReq)
	}
	if in := f.BotMessages(child); len(in) != 1 || !strings.HasPrefix(in[0].Content, "Status: success\nTask: alpha") {
		t.Errorf("alpha's thread = %+v, want its announce", in)
	}
	f.Say(child, dcAlice, "again: and then?", "")
	if err := f.Wait(ctx, "the child's answer in its thread", func() bool {
		in := f.BotMessages(child)
		return len(in) == 2 && strings.HasPrefix(in[1].Content, `child (task "alpha: dig into the release notes", `)
	}); err != nil {
		t.Fatalf("%v: %+v", err, f.BotMessages(child))
	}

	f.FailNext("POST", "/channels/"+dcGeneral+"/messages/", 403)
	f.Say(root.ID, dcAlice, dcMention(f, "look at this in its own thread again"), "")
	tg.waitDelivered(t, 6) // the reply and the announce, in the requester's thread
	inReq = f.BotMessages(root.ID)
	if len(inReq) != 4 || !strings.Contains(inReq[2].Content+inReq[3].Content, `"warning":"thread ignored: discord: start a thread in `) {
		t.Errorf("requester's thread = %+v, want the reply with a warning and the announce", inReq)
	}
	// The starter of the thread Discord refused is not left in the channel.
	if starters := f.BotMessages(dcGeneral); len(starters) != 1 || starters[0].ID != child {
		t.Errorf("messages of the bot in general = %+v, want only alpha's starter", starters)
	}

	// Discord starts the thread but its answer is lost (a 500): the starter
	// stays, and the run, starting, finds it (its nonce) and its thread.
	f.LoseNext("POST", "/channels/"+dcGeneral+"/messages/", 500)
	f.Say(root.ID, dcAlice, dcMention(f, "look at this in its own thread once more"), "")
	tg.waitDelivered(t, 9) // link, reply, announce
	threads = f.Threads(dcGeneral)
	if len(threads) != 3 {
		t.Fatalf("threads of general = %+v, want the person's and two of alpha's", threads)
	}
	third := threads[2].ID
	if starters := f.BotMessages(dcGeneral); len(starters) != 2 || starters[1].ID != third {
		t.Errorf("messages of the bot in general = %+v, want alpha's two starters", starters)
	}
	if in := f.BotMessages(third); len(in) != 1 || !strings.HasPrefix(in[0].Content, "Status: success\nTask: alpha") {
		t.Errorf("the third thread = %+v, want its announce", in)
	}
	// The reply and the link line (the run's start opened the thread) in
	// either order.
	inReq = f.BotMessages(root.ID)
	last := make([]string, 0, 2)
	for _, m := range inReq[min(4, len(inReq)):] {
		last = append(last, m.Content)
	}
	slices.Sort(last)
	if len(last) != 2 || !strings.HasPrefix(last[0], `spawned: {"status":"accepted"`) || strings.Contains(last[0], "warning") ||
		last[1] != "🧵 alpha works in its own thread: <#"+third+">" {
		t.Errorf("requester's thread ends %q, want the reply and the link line to the third thread", last)
	}
}

// TestE2EMatrixSpawnThread drives a real Dendrite: sessions_spawn
// {thread: true} in a thread posts a starter in the room as the root of
// the child's thread; the requester's thread gets the link line (a
// matrix.to link to the root) and the reply; the child's announce goes to
// its thread; a message there without a mention reaches the child's
// session and is answered there. After a restart whose first /sync no
// longer shows the bot's posts in that thread (50 newer messages in the
// room), a message there without a mention still reaches the child: the
// adapter asks the stored binding (channels.Deps.Bound).
func TestE2EMatrixSpawnThread(t *testing.T) {
	hs := matrixtest.Start(t)
	alice := hs.RegisterUser(t, "alice")
	carol := hs.RegisterUser(t, "carol")
	bot := hs.RegisterUser(t, "herald")
	llm := llmtest.NewAnthropic(t, threadModel())
	src, dir := fmt.Sprintf(matrixGatewayConfig, llm.URL, hs.URL, bot.UserID, bot.AccessToken), t.TempDir()
	_, stop := runMatrixGateway(t, src, dir)
	room := groupRoom(t, alice, carol, bot.UserID)

	root := matrixtest.Post(t, alice, room, "planning")
	matrixtest.PostInThread(t, alice, room, root, "herald: look at this in its own thread", bot.UserID)
	got := matrixtest.WaitThreadMessages(t, alice, room, root, bot.UserID, 2)
	link, reply := matrixBody(got[0]), matrixBody(got[1])
	childRoot, ok := strings.CutPrefix(link, "🧵 alpha works in its own thread: https://matrix.to/#/"+url.PathEscape(string(room))+"/")
	if !ok || !strings.HasPrefix(reply, `spawned: {"status":"accepted"`) {
		t.Fatalf("requester's thread = %q, %q; want the link line and the reply", link, reply)
	}
	childRoot, _ = url.PathUnescape(childRoot)
	ann := matrixtest.WaitThreadMessages(t, alice, room, id.EventID(childRoot), bot.UserID, 1)
	if b := matrixBody(ann[0]); !strings.HasPrefix(b, "Status: success\nTask: alpha") {
		t.Fatalf("alpha's thread = %q, want its announce", b)
	}
	matrixtest.PostInThread(t, alice, room, id.EventID(childRoot), "again: more?")
	ans := matrixtest.WaitThreadMessages(t, alice, room, id.EventID(childRoot), bot.UserID, 2)
	if b := matrixBody(ans[1]); !strings.HasPrefix(b, `child (task "alpha: dig into the release notes", `) {
		t.Fatalf("answer in alpha's thread = %q", b)
	}

	stop()
	for i := range 50 { // more than the first /sync's timeline (limit 50) holds
		matrixtest.Post(t, carol, room, fmt.Sprintf("chatter %d", i))
	}
	runMatrixGateway(t, src, dir)
	matrixtest.PostInThread(t, alice, room, id.EventID(childRoot), "again: after the restart?")
	ans = matrixtest.WaitThreadMessages(t, alice, room, id.EventID(childRoot), bot.UserID, 3)
	if b := matrixBody(ans[2]); !strings.HasPrefix(b, `child (task "alpha: dig into the release notes", `) || !strings.HasSuffix(b, `heard "again: after the restart?"`) {
		t.Fatalf("answer in alpha's thread after the restart = %q", b)
	}
}

// TestE2ESlackThreadApproval: a child in its own thread asks for approval
// there (not in the requester's thread); the person who asked answers
// /approve in the child's thread, the tool runs, and the announce follows
// in that thread.
func TestE2ESlackThreadApproval(t *testing.T) {
	sf := slackfake.New(t)
	cfg := strings.Replace(fmt.Sprintf(slackE2EConfig, slackfake.BotToken, slackfake.AppToken, sf.URL()),
		`channels: {`, `security: { toolPolicy: { default: "allow", tools: { write_file: "supervised" } } },
  channels: {`, 1)
	model := threadModel()
	tg := newTestGateway(t, cfg, func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "Sub-agent context") && !strings.Contains(c.LastUser(), "Announce step") {
			if n := len(c.Messages); n > 0 && c.Messages[n-1].Role == agent.RoleTool {
				return llmtest.Reply{Text: "wrote: " + c.Messages[n-1].ToolResults[0].Content}
			}
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "write_file", Args: json.RawMessage(`{"path":"notes.txt","content":"release notes"}`)}}}
		}
		return model(c)
	})
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("Slack did not connect")
	}
	sf.SendMention("C1", slackfake.UserID, "look at this in its own thread please", slackT1)
	var starter, request slackfake.Post
	if !waitFor(e2eWait, func() bool {
		for _, p := range sf.Posted() {
			if strings.HasPrefix(p.Text, "🧵 alpha\n") {
				starter = p
			}
			if strings.HasPrefix(p.Text, "🔐 Approval needed") {
				request = p
			}
		}
		return request.TS != ""
	}) {
		t.Fatalf("no approval request; posts %+v", sf.Posted())
	}
	if request.ThreadTS != starter.TS || starter.TS == "" {
		t.Fatalf("approval request in thread %q, want alpha's thread %q", request.ThreadTS, starter.TS)
	}
	m := approvalCode.FindStringSubmatch(request.Text)
	if m == nil {
		t.Fatalf("approval request without a code: %q", request.Text)
	}
	sf.SendMessage("C1", slackfake.UserID, "/approve "+m[1], starter.TS)
	tg.waitDelivered(t, 5) // link, reply, request, the /approve answer, the announce
	var announce string
	for _, p := range sf.Posted() {
		if strings.HasPrefix(p.Text, "Status: ") {
			if p.ThreadTS != starter.TS {
				t.Errorf("announce in thread %q, want alpha's", p.ThreadTS)
			}
			announce = p.Text
		}
		if p.ThreadTS == slackT1 && (strings.Contains(p.Text, "Approval") || strings.Contains(p.Text, "Approved")) {
			t.Errorf("approval traffic in the requester's thread: %+v", p)
		}
	}
	if !strings.HasPrefix(announce, "Status: success\nTask: alpha") {
		t.Errorf("announce = %q", announce)
	}
	approved := false
	for _, p := range sf.Posted() {
		approved = approved || p.ThreadTS == starter.TS && strings.HasPrefix(p.Text, "✅ Approved "+m[1]+": write_file will run.")
	}
	if !approved {
		t.Errorf("no '✅ Approved' in alpha's thread: %+v", sf.Posted())
	}
}

// TestE2ESlackThreadWakesParentInItsThread: a child with its own thread
// spawned with announce "parent" posts no announce; the parent, woken by
// its result, answers in the requester's thread T1, not in the child's.
func TestE2ESlackThreadWakesParentInItsThread(t *testing.T) {
	sf := slackfake.New(t)
	model := threadModel()
	tg := newTestGateway(t, fmt.Sprintf(slackE2EConfig, slackfake.BotToken, slackfake.AppToken, sf.URL()), func(c llmtest.Call) llmtest.Reply {
		last := c.LastUser()
		if strings.Contains(last, "quietly in its own thread") && !strings.Contains(c.System, "Sub-agent context") {
			if n := len(c.Messages); n > 0 && c.Messages[n-1].Role == agent.RoleTool {
				return llmtest.Reply{Text: "started"}
			}
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn",
				Args: json.RawMessage(`{"task":"alpha: dig","label":"alpha","thread":true,"announce":"parent"}`)}}}
		}
		if strings.HasPrefix(last, "[sub-agent result]") {
			return llmtest.Reply{Text: "woken with alpha's result"}
		}
		return model(c)
	})
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("Slack did not connect")
	}
	sf.SendMention("C1", slackfake.UserID, "work quietly in its own thread", slackT1)
	tg.waitDelivered(t, 3) // the link line, "started", the woken answer
	var woken *slackfake.Post
	for _, p := range sf.Posted() {
		if strings.HasPrefix(p.Text, "Status: ") {
			t.Errorf("announce posted with announce parent: %+v", p)
		}
		if p.Text == "woken with alpha's result" {
			woken = &p
		}
	}
	if woken == nil || woken.ThreadTS != slackT1 {
		t.Fatalf("woken answer = %+v, want it in T1; posts %+v", woken, sf.Posted())
	}
}
