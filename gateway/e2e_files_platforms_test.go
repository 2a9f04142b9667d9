package gateway_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"
	"sync"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/matrix/matrixtest"
	"github.com/heraldhq/herald/channels/slack/slackfake"
	"github.com/heraldhq/herald/channels/telegram/tgfake"
	"github.com/heraldhq/herald/store"
)

// Files in and out of Slack, Telegram and Matrix, end to end (SPEC §18,
// issue 26): a photo or file from a person reaches the model (an image
// block with the same bytes, and the workspace path in the text), the model
// sends a file back with send_file, and it arrives in the same thread with
// the same bytes; a corrupt image and one over attachments.maxBytes are
// answered with the 📎 line; a file part whose outcome was unknown when the
// gateway died is posted once.

// platformFilesConfig: one channel (the %s member), a model that takes
// images, attachments.maxBytes 200 KB.
const platformFilesConfig = `{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "claude-sonnet-4-5" }] } } },
  agents: { defaults: { model: "anthropic/claude-sonnet-4-5" }, list: [{ id: "main" }] },
  attachments: { maxBytes: 200000 },
  channels: {
    %s,
    web: { enabled: false },
  },
}`

func filePNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		img.Set(x, x%h, color.RGBA{R: 200, G: uint8(x), A: 255})
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// brokenPNG has a PNG signature and nothing an image decoder can read.
var brokenPNG = append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{0}, 64)...)

// fileEcho is the fake model of these tests: asked with a file, it sends
// the first file named in the message back with send_file, then answers
// "sent it back". It records the image blocks of the first request.
type fileEcho struct {
	mu     sync.Mutex
	blocks []llmtest.Block
	text   string
}

func (m *fileEcho) handle(c llmtest.Call) llmtest.Reply {
	if n := len(c.Messages); n > 0 && c.Messages[n-1].Role == agent.RoleTool {
		return llmtest.Reply{Text: "sent it back"}
	}
	last := c.LastUser()
	m.mu.Lock()
	if m.text == "" {
		m.text, m.blocks = last, c.Blocks()
	}
	m.mu.Unlock()
	i := strings.Index(last, "[file: attachments/")
	if i < 0 {
		return llmtest.Reply{Text: "no file here"}
	}
	path, _, _ := strings.Cut(last[i+len("[file: "):], " · ")
	args, _ := json.Marshal(map[string]string{"path": path, "caption": "back to you"})
	return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "send_file", Args: args}}}
}

func (m *fileEcho) first() (string, []llmtest.Block) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.text, m.blocks
}

// checkImageReached: the model's first request carried exactly one image
// block with img's bytes, and named the file as attachments/<name>.
func checkImageReached(t *testing.T, m *fileEcho, img []byte, name string) {
	t.Helper()
	text, blocks := m.first()
	var images []llmtest.Block
	for _, b := range blocks {
		if b.Type == "image" {
			images = append(images, b)
		}
	}
	if len(images) != 1 || sha(images[0].Data) != sha(img) {
		t.Errorf("model got %d image blocks, want 1 with the person's bytes (sha %s)", len(images), sha(img)[:12])
	}
	if !strings.Contains(text, "[file: attachments/"+name) {
		t.Errorf("model text %q does not name attachments/%s", text, name)
	}
}

// TestE2ESlackFilesRoundTrip: in a Slack thread, a mention with a
// screenshot, a corrupt PNG and a file over maxBytes: the model gets the
// screenshot as an image block; the person gets the 📎 lines for the other
// two, the reply, and the screenshot back as a Slack upload in the thread.
func TestE2ESlackFilesRoundTrip(t *testing.T) {
	t.Parallel()
	sf := slackfake.New(t)
	model := &fileEcho{}
	tg := newTestGateway(t, fmt.Sprintf(platformFilesConfig, fmt.Sprintf(`slack: { enabled: true, botToken: %q, appToken: %q, apiUrl: %q, groups: { C1: {} } }`,
		slackfake.BotToken, slackfake.AppToken, sf.URL())), model.handle)
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("the gateway's Slack channel did not connect")
	}
	shot := filePNG(t, 40, 30)
	ts := sf.SendMentionFiles("C1", slackfake.UserID, "what is wrong here?", slackT1,
		sf.AddFile("screen.png", "image/png", shot),
		sf.AddFile("broken.png", "image/png", brokenPNG),
		sf.AddFile("huge.bin", "application/octet-stream", bytes.Repeat([]byte("x"), 300_000)))
	_ = ts
	ups := sf.WaitUploads(1, e2eWait)
	if t.Failed() {
		t.FailNow()
	}
	checkImageReached(t, model, shot, "screen.png")
	if u := ups[0]; u.Channel != "C1" || u.ThreadTS != slackT1 || u.SHA256 != sha(shot) || !strings.Contains(u.Blocks, "back to you") {
		t.Errorf("upload = %s in %s/%s sha %s blocks %s; want the screenshot back in C1 thread %s with its caption", u.Name, u.Channel, u.ThreadTS, u.SHA256[:12], u.Blocks, slackT1)
	}
	tg.waitDelivered(t, 2)
	var texts []string
	for _, p := range sf.Posted() {
		if p.Channel != "C1" || p.ThreadTS != slackT1 {
			t.Errorf("post outside the thread: %+v", p)
		}
		texts = append(texts, p.Text)
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"sent it back", "📎 broken.png was not read:", "📎 huge.bin was not read: it is over the 200 KB limit (attachments.maxBytes)."} {
		if !strings.Contains(all, want) {
			t.Errorf("thread lacks %q:\n%s", want, all)
		}
	}
	// The reply's text came before its file.
	if served, denied := sf.Downloads(); served < 1 || denied != 0 {
		t.Errorf("Slack downloads served %d, denied %d", served, denied)
	}
}

// TestE2ETelegramFilesRoundTrip: a photo with a question in forum topic 42
// reaches the model as an image block with the largest size's bytes and
// comes back by sendPhoto in topic 42; a corrupt photo is answered with the
// 📎 line.
func TestE2ETelegramFilesRoundTrip(t *testing.T) {
	t.Parallel()
	tf := tgfake.New(t, tgToken)
	model := &fileEcho{}
	tg := newTestGateway(t, fmt.Sprintf(platformFilesConfig, fmt.Sprintf(`telegram: { enabled: true, botToken: %q, apiUrl: %q, groups: { "-100123": { requireMention: false } } }`,
		tgToken, tf.URL())), model.handle)
	photo := filePNG(t, 64, 48)
	tf.Queue(tgfake.In{ChatID: tgGroup, ChatType: "supergroup", ThreadID: 42, FromID: tgAlice, Text: "what is in this picture?", Photo: &tgfake.FileIn{Data: photo}})
	files := tf.WaitSentFiles(1, e2eWait)
	checkImageReached(t, model, photo, "photo-")
	if f := files[0]; f.Method != "sendPhoto" || f.ChatID != tgGroup || f.ThreadID != 42 || f.SHA256 != sha(photo) || f.Caption != "back to you" {
		t.Errorf("sent file = %s to %d/%d sha %s caption %q; want the photo back by sendPhoto in topic 42", f.Method, f.ChatID, f.ThreadID, f.SHA256[:12], f.Caption)
	}
	sent := waitTelegram(t, tf, 1)
	if s := sent[0]; s.ThreadID != 42 || s.Text != "sent it back" {
		t.Errorf("reply = %+v, want 'sent it back' in topic 42", s)
	}
	tg.waitDelivered(t, 1)

	tf.Queue(tgfake.In{ChatID: tgGroup, ChatType: "supergroup", ThreadID: 43, FromID: tgAlice, Text: "and this one?", Photo: &tgfake.FileIn{Data: brokenPNG}})
	var found bool
	waitFor(e2eWait, func() bool {
		for _, s := range tf.Sent() {
			if s.ThreadID == 43 && strings.Contains(s.Text, "📎 photo-") && strings.Contains(s.Text, "was not read:") {
				found = true
			}
		}
		return found
	})
	if !found {
		t.Errorf("no 📎 line for the corrupt photo in topic 43: %+v", tf.Sent())
	}
}

// TestE2ETelegramVoiceTranscribed: a voice note in forum topic 42 (no
// text, no file name, as Telegram sends one) is fetched by getFile,
// transcribed through attachments.transcription, and the transcript is
// the message the model answers, in topic 42.
func TestE2ETelegramVoiceTranscribed(t *testing.T) {
	t.Parallel()
	tf := tgfake.New(t, tgToken)
	stt := newTranscriber(t, "what is on my calendar tomorrow")
	tg := newTestGateway(t, stt.config(fmt.Sprintf(platformFilesConfig, fmt.Sprintf(`telegram: { enabled: true, botToken: %q, apiUrl: %q, groups: { "-100123": { requireMention: false } } }`,
		tgToken, tf.URL()))), llmtest.Text("two meetings"))
	voice := append([]byte("OggS\x00\x02"), bytes.Repeat([]byte{7}, 300)...)
	tf.Queue(tgfake.In{ChatID: tgGroup, ChatType: "supergroup", ThreadID: 42, FromID: tgAlice, Voice: &tgfake.FileIn{MIME: "audio/ogg", Data: voice}})
	sent := waitTelegram(t, tf, 1)
	if s := sent[0]; s.ThreadID != 42 || s.Text != "two meetings" {
		t.Errorf("reply = %+v, want 'two meetings' in topic 42", s)
	}
	if n := tg.LLM.Count(); n != 1 {
		t.Fatalf("%d model calls, want 1", n)
	}
	if u := tg.LLM.Requests()[0].LastUser(); !strings.HasPrefix(u, "what is on my calendar tomorrow\n[file: attachments/voice-") {
		t.Errorf("model text %q, want the transcript, then the voice note's file line", u)
	}
	if model, name, audio := stt.got(); model != "whisper-large-v3" || !strings.HasPrefix(name, "voice-") || !bytes.Equal(audio, voice) {
		t.Errorf("transcription server got model %q, file %q, %d bytes; want the voice note's %d bytes", model, name, len(audio), len(voice))
	}
}

// seedFileOutbox queues, in a fresh state dir, a reply with text and one
// stored file to origin to, as a crashed gateway left it: the text part
// posted, the file part's send begun with no outcome.
func seedFileOutbox(t *testing.T, to channels.Origin, data []byte, name, mime string) string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db := openTestStore(t, dir)
	defer db.Close()
	ref, err := db.PutFile(ctx, bytes.NewReader(data), 1<<20, func([]byte) (string, error) { return mime, nil })
	if err != nil {
		t.Fatal(err)
	}
	ref.Name, ref.Caption = name, "the chart"
	it := &store.OutboxItem{Origin: to, Kind: channels.KindReply, Text: "here is the chart", Files: []store.FileRef{ref}}
	if _, err := db.EnqueueOutbox(ctx, it); err != nil {
		t.Fatal(err)
	}
	if err := db.EndPart(ctx, it.ID, 0, "1"); err != nil {
		t.Fatal(err)
	}
	if err := db.BeginPart(ctx, it.ID, 1); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestE2EUncertainFileOnSlackIsLookedUp: the gateway died after Slack
// shared a file but before the outbox recorded it. After the restart the
// share is found by its block's marker and not uploaded again; a file Slack
// never got is uploaded once.
func TestE2EUncertainFileOnSlackIsLookedUp(t *testing.T) {
	t.Parallel()
	chart := filePNG(t, 20, 20)
	for _, tc := range []struct {
		name       string
		onSlack    bool
		wantAction string
	}{{"shared before the crash", true, "found"}, {"never reached Slack", false, "resend"}} {
		t.Run(tc.name, func(t *testing.T) {
			sf := slackfake.New(t)
			to := channels.Origin{Channel: "slack", ChatID: "C1", ChatType: channels.ChatGroup, ThreadID: slackT1}
			dir := seedFileOutbox(t, to, chart, "chart.png", "image/png")
			if tc.onSlack {
				sf.RememberUpload(slackfake.Upload{Name: "chart.png", Size: int64(len(chart)), SHA256: sha(chart), Channel: "C1", ThreadTS: slackT1,
					Blocks: `[{"type":"rich_text","block_id":"herald-1-2","elements":[{"type":"rich_text_section","elements":[{"type":"text","text":"the chart"}]}]}]`})
			}
			tg := newTestGatewayIn(t, dir, fmt.Sprintf(platformFilesConfig, fmt.Sprintf(`slack: { enabled: true, botToken: %q, appToken: %q, apiUrl: %q, groups: { C1: {} } }`,
				slackfake.BotToken, slackfake.AppToken, sf.URL())), llmtest.Text("unused"))
			tg.waitDelivered(t, 1)
			ups := sf.Uploads()
			if len(ups) != 1 || ups[0].SHA256 != sha(chart) || ups[0].ThreadTS != slackT1 {
				t.Errorf("Slack holds %d shares of the chart, want exactly 1 in the thread: %+v", len(ups), ups)
			}
			if getURL, _ := sf.UploadCalls(); (getURL == 0) != tc.onSlack {
				t.Errorf("upload URL asked %d times (shared before the crash: %v)", getURL, tc.onSlack)
			}
			if len(sf.Posted()) != 0 {
				t.Errorf("the text part, posted before the crash, was posted again: %+v", sf.Posted())
			}
			if v := tg.metric(t, fmt.Sprintf(`herald_outbox_uncertain_total{action=%q,channel="slack"}`, tc.wantAction)); v != 1 {
				t.Errorf("uncertain metric (%s) = %v, want 1", tc.wantAction, v)
			}
		})
	}
}

// TestE2EUncertainFileOnTelegram: Telegram has no lookup, so a file part
// whose outcome is unknown follows uncertainDelivery: "resend" sends it
// again, "skip" does not.
func TestE2EUncertainFileOnTelegram(t *testing.T) {
	t.Parallel()
	chart := filePNG(t, 20, 20)
	for _, tc := range []struct {
		setting string
		want    int
	}{{"resend", 1}, {"skip", 0}} {
		t.Run(tc.setting, func(t *testing.T) {
			tf := tgfake.New(t, tgToken)
			dir := seedFileOutbox(t, channels.Origin{Channel: "telegram", ChatID: "555", ChatType: channels.ChatDM}, chart, "chart.png", "image/png")
			tg := newTestGatewayIn(t, dir, fmt.Sprintf(platformFilesConfig, fmt.Sprintf(`telegram: { enabled: true, botToken: %q, apiUrl: %q, uncertainDelivery: %q }`,
				tgToken, tf.URL(), tc.setting)), llmtest.Text("unused"))
			tg.waitDelivered(t, 1)
			if n := len(tf.SentFiles()); n != tc.want {
				t.Errorf("%d files sent after the restart, want %d", n, tc.want)
			}
			if v := tg.metric(t, fmt.Sprintf(`herald_outbox_uncertain_total{action=%q,channel="telegram"}`, tc.setting)); v != 1 {
				t.Errorf("uncertain metric = %v, want 1", v)
			}
		})
	}
}

// matrixFileMessages are the bot's file messages (m.image, m.file, …) in
// the thread.
func matrixFileMessages(t *testing.T, c *mautrix.Client, room id.RoomID, root id.EventID, bot id.UserID) []*event.Event {
	t.Helper()
	evts, err := matrixtest.RoomMessages(t.Context(), c, room)
	if err != nil {
		t.Fatal(err)
	}
	var out []*event.Event
	for _, e := range evts {
		if e.Sender == bot && matrixtest.ThreadRoot(e) == root && e.Content.AsMessage().URL != "" {
			out = append(out, e)
		}
	}
	return out
}

// TestE2EMatrixFilesRoundTrip: on Dendrite, an m.image in a thread reaches
// the model as an image block with its bytes and comes back as an m.image
// in the thread (uploaded to the media repository); a corrupt image gets
// the 📎 line.
func TestE2EMatrixFilesRoundTrip(t *testing.T) {
	hs := matrixtest.Start(t)
	alice := hs.RegisterUser(t, "alice")
	carol := hs.RegisterUser(t, "carol")
	bot := hs.RegisterUser(t, "herald")
	model := &fileEcho{}
	newTestGateway(t, fmt.Sprintf(platformFilesConfig, fmt.Sprintf(`matrix: { enabled: true, homeserver: %q, userId: %q, accessToken: %q, autoJoin: true, groupPolicy: "open" }`,
		hs.URL, bot.UserID, bot.AccessToken)), model.handle)
	room := groupRoom(t, alice, carol, bot.UserID)

	shot := filePNG(t, 50, 40)
	root := matrixtest.Post(t, alice, room, "the dashboard looks off")
	matrixtest.PostFile(t, alice, room, root, event.MsgImage, "dash.png", "image/png", shot, "herald: what is wrong here?", bot.UserID)
	replies := matrixtest.WaitThreadMessages(t, alice, room, root, bot.UserID, 2)
	checkImageReached(t, model, shot, "dash.png")
	files := matrixFileMessages(t, alice, room, root, bot.UserID)
	if len(files) != 1 {
		t.Fatalf("%d file messages of the bot in the thread, want 1 (messages: %d)", len(files), len(replies))
	}
	c := files[0].Content.AsMessage()
	if c.MsgType != event.MsgImage || c.Body != "back to you" || c.FileName != "dash.png" {
		t.Errorf("file message %s body %q filename %q; want m.image 'back to you' dash.png", c.MsgType, c.Body, c.FileName)
	}
	if got := matrixtest.Download(t, alice, c.URL); sha(got) != sha(shot) {
		t.Errorf("the file posted back has %d bytes (sha %s), want the screenshot's", len(got), sha(got)[:12])
	}

	matrixtest.PostFile(t, alice, room, root, event.MsgImage, "broken.png", "image/png", brokenPNG, "and this?")
	var found bool
	waitFor(e2eWait, func() bool {
		evts, _ := matrixtest.RoomMessages(t.Context(), alice, room)
		for _, e := range evts {
			if e.Sender == bot.UserID && strings.Contains(e.Content.AsMessage().Body, "📎 broken.png was not read:") {
				found = true
			}
		}
		return found
	})
	if !found {
		t.Error("no 📎 line for the corrupt image in the room")
	}
}

// TestE2EUncertainFileOnMatrixIsOneEvent: the gateway died after the
// homeserver took a file message but before the outbox recorded it. After
// the restart the message is sent again with the same transaction id, and
// the thread shows the file once.
func TestE2EUncertainFileOnMatrixIsOneEvent(t *testing.T) {
	hs := matrixtest.Start(t)
	alice := hs.RegisterUser(t, "alice")
	carol := hs.RegisterUser(t, "carol")
	bot := hs.RegisterUser(t, "herald")
	room := matrixtest.CreateRoomWith(t, alice, bot.UserID, carol.UserID)
	for _, c := range []*mautrix.Client{bot, carol} {
		if _, err := c.JoinRoomByID(t.Context(), room); err != nil {
			t.Fatal(err)
		}
	}
	root := matrixtest.Post(t, alice, room, "make me a chart")
	chart := filePNG(t, 20, 20)
	to := channels.Origin{Channel: "matrix", ChatID: string(room), ChatType: channels.ChatGroup, ThreadID: string(root)}
	dir := seedFileOutbox(t, to, chart, "chart.png", "image/png")

	// What the gateway got onto the homeserver before it died: the file,
	// posted with the transaction id of outbox item 1, part 2.
	up, err := bot.UploadMedia(t.Context(), mautrix.ReqUploadMedia{ContentBytes: chart, ContentType: "image/png", FileName: "chart.png"})
	if err != nil {
		t.Fatal(err)
	}
	before, err := bot.SendMessageEvent(t.Context(), room, event.EventMessage, &event.MessageEventContent{MsgType: event.MsgImage, Body: "the chart",
		FileName: "chart.png", URL: up.ContentURI.CUString(), Info: &event.FileInfo{MimeType: "image/png", Size: len(chart)},
		RelatesTo: &event.RelatesTo{Type: event.RelThread, EventID: root, IsFallingBack: true, InReplyTo: &event.InReplyTo{EventID: root}}},
		mautrix.ReqSendEvent{TransactionID: "herald-1-file-2"})
	if err != nil {
		t.Fatal(err)
	}

	tg := newTestGatewayIn(t, dir, fmt.Sprintf(platformFilesConfig, fmt.Sprintf(`matrix: { enabled: true, homeserver: %q, userId: %q, accessToken: %q, autoJoin: true, groupPolicy: "open" }`,
		hs.URL, bot.UserID, bot.AccessToken)), llmtest.Text("unused"))
	tg.waitDelivered(t, 1)
	files := matrixFileMessages(t, alice, room, root, bot.UserID)
	if len(files) != 1 || files[0].ID != before.EventID {
		var ids []id.EventID
		for _, f := range files {
			ids = append(ids, f.ID)
		}
		t.Errorf("the thread shows the bot's file as %v, want once, as %s", ids, before.EventID)
	}
}

// spawnFileModel is the fake model of the sub-agent file tests: asked to
// "look at this" with a file, the main agent spawns a child with it; the
// child sends the file back with send_file and answers; its announce step
// gives a result.
func spawnFileModel(c llmtest.Call) llmtest.Reply {
	u := c.LastUser()
	var last agent.Message
	if n := len(c.Messages); n > 0 {
		last = c.Messages[n-1]
	}
	child := strings.Contains(c.System, "Sub-agent context")
	switch {
	case child && last.Role == agent.RoleUser && strings.Contains(u, "Announce step"):
		return llmtest.Reply{Text: "Result:\nthe chart, annotated\n\nNotes:\n(none)"}
	case child && last.Role == agent.RoleTool:
		return llmtest.Reply{Text: "annotated the chart"}
	case child:
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "send_file", Args: json.RawMessage(`{"path": "attachments/chart.png", "caption": "annotated"}`)}}}
	case last.Role == agent.RoleUser && strings.Contains(u, "look at this"):
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn", Args: json.RawMessage(`{"task": "annotate the chart", "label": "annotator", "attachments": ["attachments/chart.png"]}`)}}}
	}
	return llmtest.Reply{Text: "a sub-agent is on it"}
}

// TestE2ESubagentFileAfterAnnounceOnSlack: a sub-agent's send_file is
// posted with its announce, in the Slack thread the person asked in, after
// the announce's text.
func TestE2ESubagentFileAfterAnnounceOnSlack(t *testing.T) {
	t.Parallel()
	sf := slackfake.New(t)
	tg := newTestGateway(t, fmt.Sprintf(platformFilesConfig, fmt.Sprintf(`slack: { enabled: true, botToken: %q, appToken: %q, apiUrl: %q, groups: { C1: {} } }`,
		slackfake.BotToken, slackfake.AppToken, sf.URL())), spawnFileModel)
	if !sf.WaitConnected(e2eWait) {
		t.Fatal("the gateway's Slack channel did not connect")
	}
	chart := filePNG(t, 30, 20)
	sf.SendMentionFiles("C1", slackfake.UserID, "look at this", slackT1, sf.AddFile("chart.png", "image/png", chart))
	ups := sf.WaitUploads(1, e2eWait)
	if t.Failed() {
		t.FailNow()
	}
	tg.waitDelivered(t, 2)
	up := ups[0]
	if up.Channel != "C1" || up.ThreadTS != slackT1 || up.SHA256 != sha(chart) || !strings.Contains(up.Blocks, "annotated") {
		t.Errorf("the child's file went to %s/%s (sha %s, blocks %s); want the chart in C1 thread %s with its caption", up.Channel, up.ThreadTS, up.SHA256[:12], up.Blocks, slackT1)
	}
	var announce *slackfake.Post
	for _, p := range sf.Posted() {
		if p.Channel != "C1" || p.ThreadTS != slackT1 {
			t.Errorf("post outside the thread: %+v", p)
		}
		if strings.HasPrefix(p.Text, "Status: success") {
			announce = &p
		}
	}
	switch {
	case announce == nil:
		t.Errorf("no announce in the thread: %+v", sf.Posted())
	case !strings.Contains(announce.Text, "the chart, annotated"):
		t.Errorf("announce %q lacks the child's result", announce.Text)
	case !slackfake.TSLess(announce.TS, up.TS):
		t.Errorf("the child's file (ts %s) came before its announce (ts %s)", up.TS, announce.TS)
	}
}

// TestE2ESubagentFileAfterAnnounceOnTelegram: the same in a forum topic:
// the announce text, then the child's file, both in the topic.
func TestE2ESubagentFileAfterAnnounceOnTelegram(t *testing.T) {
	t.Parallel()
	tf := tgfake.New(t, tgToken)
	tg := newTestGateway(t, fmt.Sprintf(platformFilesConfig, fmt.Sprintf(`telegram: { enabled: true, botToken: %q, apiUrl: %q, groups: { "-100123": { requireMention: false } } }`,
		tgToken, tf.URL())), spawnFileModel)
	chart := filePNG(t, 30, 20)
	tf.Queue(tgfake.In{ChatID: tgGroup, ChatType: "supergroup", ThreadID: 42, FromID: tgAlice, Text: "look at this", Document: &tgfake.FileIn{Name: "chart.png", MIME: "image/png", Data: chart}})
	files := tf.WaitSentFiles(1, e2eWait)
	if t.Failed() {
		t.FailNow()
	}
	tg.waitDelivered(t, 2)
	f := files[0]
	if f.ChatID != tgGroup || f.ThreadID != 42 || f.SHA256 != sha(chart) || f.Caption != "annotated" {
		t.Errorf("the child's file = %s to %d/%d (sha %s, caption %q); want the chart in topic 42 with its caption", f.Method, f.ChatID, f.ThreadID, f.SHA256[:12], f.Caption)
	}
	var announce *tgfake.Sent
	for _, s := range tf.Sent() {
		if s.ChatID != tgGroup || s.ThreadID != 42 {
			t.Errorf("message outside topic 42: %+v", s)
		}
		if strings.HasPrefix(s.Text, "Status: success") {
			announce = &s
		}
	}
	switch {
	case announce == nil:
		t.Errorf("no announce in the topic: %+v", tf.Sent())
	case !strings.Contains(announce.Text, "the chart, annotated"):
		t.Errorf("announce %q lacks the child's result", announce.Text)
	case announce.MessageID > f.MessageID:
		t.Errorf("the child's file (message %d) came before its announce (message %d)", f.MessageID, announce.MessageID)
	}
}
