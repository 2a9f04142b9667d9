package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/heraldhq/herald/channels/discord/discordfake"
)

// discordE2EConfig: Discord against the fake; the guild channel general is
// served (a mention required), DMs are open.
const discordE2EConfig = `{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [{ id: "main" }] },
  channels: {
    discord: { enabled: true, botToken: %q, apiUrl: %q, groups: { %q: { requireMention: true } } },
    web: { enabled: false },
  },
}`

const (
	dcGuild   = "810000000000000001"
	dcGeneral = "810000000000000010"
	dcDM      = "810000000000000020"
)

var (
	dcAlice = discordfake.User{ID: "710000000000000001", Username: "alice", GlobalName: "Alice"}
	dcBob   = discordfake.User{ID: "710000000000000002", Username: "bob"}
)

func newDiscordFake(t *testing.T) *discordfake.Server {
	f := discordfake.New(t)
	f.AddGuildChannel(dcGuild, dcGeneral, "general")
	f.AddDM(dcDM)
	return f
}

func discordConfig(f *discordfake.Server) string {
	return fmt.Sprintf(discordE2EConfig, f.Token, f.URL(), dcGeneral)
}

// dcConnected waits until the gateway's Discord connection is up: /readyz
// says ready on PostgreSQL before an exclusive channel is elected, and
// Discord delivers nothing to a bot that has not connected yet.
func dcConnected(t *testing.T, f *discordfake.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	if err := f.Wait(ctx, "the gateway's Discord connection", f.Connected); err != nil {
		t.Fatal(err)
	}
}

func dcMention(f *discordfake.Server, text string) string { return "<@" + f.Bot.ID + "> " + text }

// dcCount counts the bot's messages in a channel whose text is exactly text.
func dcCount(f *discordfake.Server, channel, text string) int {
	n := 0
	for _, m := range f.BotMessages(channel) {
		if m.Content == text {
			n++
		}
	}
	return n
}

// TestE2EDiscordMentionOpensThreadAndAnnouncesThere: a mention in a guild
// channel opens a thread from that message and the reply goes there; the
// two sub-agents it spawns announce in that thread, once each, with the
// stats line last; nothing is posted in the channel itself.
func TestE2EDiscordMentionOpensThreadAndAnnouncesThere(t *testing.T) {
	t.Parallel()
	f := newDiscordFake(t)
	work := newGate(t)
	tg := newTestGateway(t, discordConfig(f), researchModel(map[string]*gate{"alpha": work, "beta": work}))
	dcConnected(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()

	m := f.Say(dcGeneral, dcAlice, dcMention(f, "please research Go generics"), "")
	if err := f.Wait(ctx, "the reply in the thread", func() bool {
		return dcCount(f, m.ID, "Started alpha and beta; their results will follow here.") == 1
	}); err != nil {
		t.Fatalf("%v; thread messages %+v, channel messages %+v", err, f.BotMessages(m.ID), f.BotMessages(dcGeneral))
	}
	th, ok := f.Channel(m.ID)
	if !ok || th.ParentID != dcGeneral || th.Type != discordfake.TypePublicThread {
		t.Fatalf("thread %+v (found %v): want a public thread of general started from the mention", th, ok)
	}
	work.open()
	tg.waitDelivered(t, 3) // the reply and two announces, nothing else
	key := "agent:main:discord:group:" + dcGeneral + ":thread:" + m.ID
	runs := tg.runsOf(t, key)
	if len(runs) != 2 {
		t.Fatalf("%s has %d runs, want 2 (alpha, beta)", key, len(runs))
	}
	msgs := f.BotMessages(m.ID)
	for _, r := range runs {
		var found []string
		for _, bm := range msgs {
			if strings.Contains(bm.Content, "sessionKey "+r.ChildKey+" •") {
				found = append(found, bm.Content)
			}
		}
		if len(found) != 1 {
			t.Errorf("run %s announced %d times in the thread, want once", r.Label, len(found))
			continue
		}
		checkAnnounce(t, found[0], r.Label)
	}
	if got := f.BotMessages(dcGeneral); len(got) != 0 {
		t.Errorf("the bot posted in the channel itself: %+v", got)
	}
	if keys := tg.sessionKeys(t); len(keys) != 1 || keys[0] != key {
		t.Errorf("requester sessions %q, want [%s]", keys, key)
	}
}

// TestE2EDiscordResumeAndRestartMissNothingAndRepeatNothing: a message sent
// while the gateway connection is down arrives with the RESUME and is
// answered once; messages sent while Herald is stopped are caught up after
// the restart (GET …/messages?after= from the stored cursor) and answered
// once; nothing answered before is answered again.
func TestE2EDiscordResumeAndRestartMissNothingAndRepeatNothing(t *testing.T) {
	t.Parallel()
	f := newDiscordFake(t)
	dir := t.TempDir()
	cfg := discordConfig(f)
	model := researchModel(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*e2eWait)
	defer cancel()
	answered := func(channel, text string) func() bool {
		return func() bool { return dcCount(f, channel, "plain answer to: "+text) >= 1 }
	}

	tg := newTestGatewayIn(t, dir, cfg, model)
	dcConnected(t, f)
	f.Say(dcDM, dcAlice, "first", "")
	if err := f.Wait(ctx, "the first answer", answered(dcDM, "first")); err != nil {
		t.Fatal(err)
	}

	f.Drop()
	f.Say(dcDM, dcAlice, "sent while the connection was down", "")
	if err := f.Wait(ctx, "the answer after the resume", answered(dcDM, "sent while the connection was down")); err != nil {
		t.Fatal(err)
	}
	if _, _, resumed, _, _ := f.Counts(); resumed != 1 {
		t.Errorf("%d resumes, want the dropped session resumed once", resumed)
	}
	tg.waitDelivered(t, 2)
	tg.Stop()

	m := f.Say(dcGeneral, dcBob, dcMention(f, "sent while Herald was stopped"), "")
	f.Say(dcGeneral, dcBob, "chatter, not for the bot", "")
	f.Say(dcDM, dcAlice, "a DM while Herald was stopped", "")

	tg2 := newTestGatewayIn(t, dir, cfg, model)
	if err := f.Wait(ctx, "the caught-up answers", func() bool {
		return answered(m.ID, "sent while Herald was stopped")() && answered(dcDM, "a DM while Herald was stopped")()
	}); err != nil {
		t.Fatalf("%v; DM %+v", err, f.BotMessages(dcDM))
	}
	tg2.waitDelivered(t, 4) // two before the restart, two after: nothing twice
	for ch, texts := range map[string][]string{
		dcDM: {"first", "sent while the connection was down", "a DM while Herald was stopped"},
		m.ID: {"sent while Herald was stopped"},
	} {
		for _, text := range texts {
			if n := dcCount(f, ch, "plain answer to: "+text); n != 1 {
				t.Errorf("%q answered %d times, want once", text, n)
			}
		}
	}
	if got := f.BotMessages(dcGeneral); len(got) != 0 {
		t.Errorf("the bot posted in the channel itself: %+v", got)
	}
	var caughtUp bool
	for _, r := range f.Requests() {
		caughtUp = caughtUp || r.Path == "/api/v10/channels/"+dcGeneral+"/messages" && strings.Contains(r.Query, "after=")
	}
	if !caughtUp {
		t.Error("no GET channels/<general>/messages?after= after the restart")
	}
	if identify, _, _, _, _ := f.Counts(); identify != 2 {
		t.Errorf("%d IDENTIFYs, want 2 (one per gateway start)", identify)
	}
}

// TestE2EDiscordFilesRoundTrip: a mention with a PNG in a guild channel:
// the model gets it as an image block and names attachments/<name>; the
// file it sends back with send_file arrives in the thread the mention
// opened, with the same bytes and its caption, after the reply.
func TestE2EDiscordFilesRoundTrip(t *testing.T) {
	t.Parallel()
	f := newDiscordFake(t)
	model := &fileEcho{}
	newTestGateway(t, fmt.Sprintf(platformFilesConfig, fmt.Sprintf(`discord: { enabled: true, botToken: %q, apiUrl: %q, groups: { %q: {} } }`,
		f.Token, f.URL(), dcGeneral)), model.handle)
	dcConnected(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	photo := filePNG(t, 64, 48)
	m := f.SayWithFile(dcGeneral, dcAlice, dcMention(f, "what is in this picture?"), "screen.png", "image/png", photo)
	var msgs []discordfake.Message
	if err := f.Wait(ctx, "the reply and the file in the thread", func() bool {
		msgs = f.BotMessages(m.ID)
		return len(msgs) >= 2
	}); err != nil {
		t.Fatalf("%v: %+v", err, msgs)
	}
	checkImageReached(t, model, photo, "screen.png")
	if msgs[0].Content != "sent it back" {
		t.Errorf("first message in the thread %q, want the reply", msgs[0].Content)
	}
	if len(msgs[1].Attachments) != 1 || msgs[1].Content != "back to you" ||
		sha(f.AttachmentData(m.ID, msgs[1].Attachments[0].ID)) != sha(photo) {
		t.Errorf("file message %+v: want the photo back with its caption", msgs[1])
	}
}

// TestE2EDiscordApplicationCommand: /subagents used as a Discord
// application command in a guild channel is answered with the command line
// once the gateway took it, and the gateway's reply follows in the channel;
// /new in the thread of a conversation answers there.
func TestE2EDiscordApplicationCommand(t *testing.T) {
	t.Parallel()
	f := newDiscordFake(t)
	newTestGateway(t, discordConfig(f), researchModel(nil))
	dcConnected(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	if err := f.Wait(ctx, "the commands registered", func() bool { return f.Commands() != nil }); err != nil {
		t.Fatal(err)
	}
	in := f.Interact(dcGeneral, dcAlice, "subagents", "")
	if err := f.Wait(ctx, "the command's reply", func() bool {
		return dcCount(f, dcGeneral, "🧭 Subagents: none for this session.") == 1
	}); err != nil {
		t.Fatalf("%v: %+v", err, f.BotMessages(dcGeneral))
	}
	if err := f.Wait(ctx, "the interaction's answer", func() bool { return f.InteractionAnswer(in.ID) != nil }); err != nil {
		t.Fatal(err)
	}
	if ans := f.InteractionAnswer(in.ID); ans.Type != 4 || ans.Data.Content != "/subagents" {
		t.Errorf("interaction answer %+v, want the command line", ans)
	}

	m := f.Say(dcGeneral, dcAlice, dcMention(f, "hello"), "")
	if err := f.Wait(ctx, "the reply in the thread", func() bool { return dcCount(f, m.ID, "plain answer to: hello") == 1 }); err != nil {
		t.Fatal(err)
	}
	f.Interact(m.ID, dcAlice, "new", "")
	if err := f.Wait(ctx, "/new answered in the thread", func() bool { return dcCount(f, m.ID, "🆕 New session started.") == 1 }); err != nil {
		t.Fatalf("%v: %+v", err, f.BotMessages(m.ID))
	}
}

// TestE2EDiscordThreadContext (SPEC §21 thread context): Bob posts in
// general, Alice opens a thread from it and they talk there without the
// bot; Alice's first mention of the bot in that thread gives the model
// their earlier messages with their names, oldest first. Her second
// mention in the thread is not given them again, and the thread's history
// is not read again for it.
func TestE2EDiscordThreadContext(t *testing.T) {
	t.Parallel()
	f := newDiscordFake(t)
	tg := newTestGateway(t, discordConfig(f), researchModel(nil))
	dcConnected(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()

	root := f.Say(dcGeneral, dcBob, "the staging database is out of disk again", "")
	f.StartThread(dcGeneral, root.ID, "staging disk", dcAlice)
	f.Say(root.ID, dcAlice, "the WAL archive has not been pruned since Monday", "")
	f.Say(root.ID, dcBob, "then the retention job is broken", "")
	f.Say(root.ID, dcAlice, dcMention(f, "what should we check first?"), "")
	if err := f.Wait(ctx, "the reply in the thread", func() bool { return len(f.BotMessages(root.ID)) >= 1 }); err != nil {
		t.Fatalf("%v; bot messages in general %+v", err, f.BotMessages(dcGeneral))
	}
	first := tg.LLM.Requests()[0].LastUser()
	at := 0
	for _, w := range []string{
		dcBob.ID + " (bob): the staging database is out of disk again",
		dcAlice.ID + " (Alice): the WAL archive has not been pruned since Monday",
		dcBob.ID + " (bob): then the retention job is broken",
		"what should we check first?",
	} {
		i := strings.Index(first[at:], w)
		if i < 0 {
			t.Fatalf("the model's first message lacks %q (in order) — it was:\n%s", w, first)
		}
		at += i + len(w)
	}

	threadReads := func() int { // GET channels/<thread>/messages?before=
		n := 0
		for _, r := range f.Requests() {
			if r.Method == "GET" && r.Path == "/api/v10/channels/"+root.ID+"/messages" && strings.Contains(r.Query, "before=") {
				n++
			}
		}
		return n
	}
	firstReads := threadReads()
	if firstReads == 0 {
		t.Fatal("the first turn did not read the thread's history (GET channels/<thread>/messages?before=)")
	}

	f.Say(root.ID, dcAlice, dcMention(f, "and after that?"), "")
	if err := f.Wait(ctx, "the second reply", func() bool { return len(f.BotMessages(root.ID)) >= 2 }); err != nil {
		t.Fatal(err)
	}
	if n := threadReads(); n != firstReads {
		t.Errorf("the second turn read the thread's history again (%d requests, %d after the first turn); want it never re-fetched", n, firstReads)
	}
	reqs := tg.LLM.Requests()
	if second := reqs[len(reqs)-1].LastUser(); strings.Contains(second, "Quoted context") || !strings.Contains(second, "and after that?") {
		t.Errorf("the second turn's message = %q, want the mention alone", second)
	}
}
