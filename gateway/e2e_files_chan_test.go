package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/gateway"
)

// fileChan is a chat platform in the test process: it hands the gateway
// messages with files and records what the gateway posts, text parts and
// files in order, with a 100-byte upload limit.
type fileChan struct {
	mu    sync.Mutex
	sink  channels.Sink
	sent  []string // "text:<text>" or "file:<name>:<size>:<caption>"
	bytes map[string][]byte
}

func (f *fileChan) Name() channels.Name { return "filefake" }
func (f *fileChan) Start(ctx context.Context, sink channels.Sink) error {
	f.mu.Lock()
	f.sink = sink
	f.mu.Unlock()
	return nil
}
func (f *fileChan) Stop(context.Context) error { return nil }
func (f *fileChan) Send(ctx context.Context, to channels.Origin, msg channels.Message) error {
	_, err := f.SendPart(ctx, to, msg)
	return err
}
func (f *fileChan) PartLimit() int { return 4000 }
func (f *fileChan) SendPart(_ context.Context, _ channels.Origin, msg channels.Message) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, "text:"+msg.Text)
	return fmt.Sprint(len(f.sent)), nil
}
func (f *fileChan) FileLimit() int64 { return 100 }
func (f *fileChan) SendFile(ctx context.Context, _ channels.Origin, msg channels.Message) (string, error) {
	rc, err := msg.File.Open(ctx)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, fmt.Sprintf("file:%s:%d:%s", msg.File.Name, len(b), msg.Text))
	if f.bytes == nil {
		f.bytes = map[string][]byte{}
	}
	f.bytes[msg.File.Name] = b
	return fmt.Sprint(len(f.sent)), nil
}
func (f *fileChan) posts() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.sent...)
}

func (f *fileChan) deliver(t *testing.T, id, text string, atts ...channels.Attachment) error {
	t.Helper()
	f.mu.Lock()
	sink := f.sink
	f.mu.Unlock()
	return sink(context.Background(), channels.Inbound{
		Origin: channels.Origin{Channel: "filefake", ChatID: "room1", ChatType: channels.ChatGroup, ThreadID: "t1", SenderID: "u1", MessageID: id},
		Text:   text, Mentioned: true, At: time.Now(), Attachments: atts,
	})
}

func bytesAttachment(name, mime, kind string, data []byte, opens *int) channels.Attachment {
	return channels.Attachment{Name: name, MIME: mime, Kind: kind, Size: int64(len(data)), Open: func(context.Context) (io.ReadCloser, error) {
		if opens != nil {
			*opens++
		}
		return io.NopCloser(bytes.NewReader(data)), nil
	}}
}

// failingReader fails after its first bytes: a download cut midway.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n > 0 {
		return 0, errors.New("connection reset by peer")
	}
	r.n = len(p)
	return len(p), nil
}

const fileChanConfig = `{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "claude-sonnet-4-5" }] } } },
  agents: { defaults: { model: "anthropic/claude-sonnet-4-5" }, list: [{ id: "main" }] },
}`

func newFileChanGateway(t *testing.T, cfg string, h llmtest.Handler) (*testGW, *fileChan) {
	t.Helper()
	fc := &fileChan{}
	testChannels = []channels.Channel{fc}
	defer func() { testChannels = nil }()
	return newTestGateway(t, cfg, h), fc
}

// TestE2EFilesBadDownloads: a download that fails midway and one that
// stalls past the deadline are each answered with the 📎 line, while the
// message and its good file are answered; a platform re-delivery of the
// message (its ack was lost) downloads again but runs no second turn.
func TestE2EFilesBadDownloads(t *testing.T) {
	old := gateway.AttachmentDeadline
	// The stalled file is cut at the deadline; the good one must be
	// stored within it, on a loaded machine too (300 ms left little room
	// for a file write and its store row under -race on 2 busy cores).
	gateway.AttachmentDeadline = 2 * time.Second
	defer func() { gateway.AttachmentDeadline = old }()
	tg, fc := newFileChanGateway(t, fileChanConfig, llmtest.Text("read it"))
	opens := 0
	good := bytesAttachment("notes.txt", "text/plain", channels.KindFile, []byte("meeting at 10"), &opens)
	cut := channels.Attachment{Name: "cut.pdf", Size: -1, Kind: channels.KindFile, Open: func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(&failingReader{}), nil
	}}
	stall := channels.Attachment{Name: "slow.zip", Size: -1, Kind: channels.KindFile, Open: func(ctx context.Context) (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { <-ctx.Done(); pw.CloseWithError(ctx.Err()) }()
		return pr, nil
	}}
	if err := fc.deliver(t, "m1", "see attached", good, cut, stall); err != nil {
		t.Fatalf("sink: %v", err)
	}
	if !waitFor(e2eWait, func() bool { return len(fc.posts()) >= 2 }) {
		t.Fatalf("posts %q", fc.posts())
	}
	posts := strings.Join(fc.posts(), "\n")
	for _, want := range []string{"📎 cut.pdf was not read: the download failed (connection reset by peer).",
		"📎 slow.zip was not read: the download did not finish within 2s.", "text:read it"} {
		if !strings.Contains(posts, want) {
			t.Errorf("posts lack %q:\n%s", want, posts)
		}
	}
	if u := tg.LLM.Requests()[0].LastUser(); !strings.Contains(u, "see attached\n[file: attachments/notes.txt · text/plain · 13 B]") {
		t.Errorf("model text %q", u)
	}
	// The platform delivers the message again (its ack was lost): the
	// good file is read again into the same place, no second turn runs.
	if err := fc.deliver(t, "m1", "see attached", good); err != nil {
		t.Fatalf("re-delivery: %v", err)
	}
	if opens != 2 {
		t.Errorf("the good file was opened %d times, want 2 (once per delivery)", opens)
	}
	if n := tg.LLM.Count(); n != 1 {
		t.Errorf("%d model calls, want 1: a re-delivered message runs no second turn", n)
	}
}

// TestE2EFilesOutAfterTextWithLimit: send_file's files go after the
// reply's text, in order; one over the platform's upload limit is not sent
// and the person is told why.
func TestE2EFilesOutAfterTextWithLimit(t *testing.T) {
	tg, fc := newFileChanGateway(t, fileChanConfig, llmtest.Script(
		llmtest.Reply{ToolCalls: []agent.ToolCall{
			{Name: "write_file", Args: []byte(`{"path": "small.csv", "content": "a,b\n1,2\n"}`)},
			{Name: "write_file", Args: []byte(`{"path": "big.txt", "content": "` + strings.Repeat("x", 150) + `"}`)},
		}},
		llmtest.Reply{ToolCalls: []agent.ToolCall{
			{Name: "send_file", Args: []byte(`{"path": "small.csv", "caption": "the table"}`)},
			{Name: "send_file", Args: []byte(`{"path": "big.txt"}`)},
		}},
		llmtest.Reply{Text: "Both files are attached."},
	))
	_ = tg
	if err := fc.deliver(t, "m2", "make me two files"); err != nil {
		t.Fatal(err)
	}
	want := []string{"text:Both files are attached.", "file:small.csv:8:the table",
		"text:📎 big.txt was not sent: it is 150 B, over filefake's upload limit of 100 B."}
	if !waitFor(e2eWait, func() bool { return len(fc.posts()) >= 3 }) {
		t.Fatalf("posts %q, want %q", fc.posts(), want)
	}
	if got := fc.posts(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("posts %q, want %q", got, want)
	}
}

// TestE2EVoiceTranscribed: a voice message is transcribed by the
// configured OpenAI-compatible server (through the OpenAI SDK) and the
// transcript is what the model reads; without the setting the person
// gets the 🎙️ line.
// transcriber is a fake OpenAI-compatible transcription server
// (/v1/audio/transcriptions): it answers every file with one text and
// records the last request.
type transcriber struct {
	*httptest.Server
	mu          sync.Mutex
	model, name string
	audio       []byte
	calls       int
}

func newTranscriber(t *testing.T, text string) *transcriber {
	t.Helper()
	s := &transcriber{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/audio/transcriptions" {
			http.NotFound(w, r)
			return
		}
		f, fh, err := r.FormFile("file")
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		b, _ := io.ReadAll(f)
		s.mu.Lock()
		s.model, s.name, s.audio = r.FormValue("model"), fh.Filename, b
		s.calls++
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		// One minute of audio, as OpenAI reports it.
		_ = json.NewEncoder(w).Encode(map[string]any{"text": text, "usage": map[string]any{"type": "duration", "seconds": 60}})
	}))
	t.Cleanup(s.Close)
	return s
}

// count is how many files it transcribed.
func (s *transcriber) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// got is the last request: the model, the file's name and its bytes.
func (s *transcriber) got() (model, name string, audio []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.model, s.name, s.audio
}

// config adds attachments.transcription through this server (provider
// "whisper", model "whisper-large-v3") to a test config.
func (s *transcriber) config(cfg string) string {
	tr := `transcription: { provider: "whisper", model: "whisper-large-v3" }`
	if strings.Contains(cfg, "attachments: { ") {
		cfg = strings.Replace(cfg, "attachments: { ", "attachments: { "+tr+", ", 1)
	} else {
		cfg = strings.Replace(cfg, "models: { providers: {", "attachments: { "+tr+" },\n  models: { providers: {", 1)
	}
	return strings.Replace(cfg, "models: { providers: {",
		`models: { providers: { whisper: { api: "openai-compatible", baseUrl: "`+s.URL+`/v1", models: [{ id: "whisper-large-v3" }] },`, 1)
}

func TestE2EVoiceTranscribed(t *testing.T) {
	stt := newTranscriber(t, "remind me to call Ana at five")
	tg, fc := newFileChanGateway(t, stt.config(fileChanConfig), llmtest.Text("noted"))
	voice := append([]byte("OggS\x00\x02"), bytes.Repeat([]byte{1}, 200)...)
	if err := fc.deliver(t, "v1", "", bytesAttachment("voice.ogg", "audio/ogg", channels.KindVoice, voice, nil)); err != nil {
		t.Fatal(err)
	}
	if !waitFor(e2eWait, func() bool { return tg.LLM.Count() > 0 }) {
		t.Fatal("no model call")
	}
	u := tg.LLM.Requests()[0].LastUser()
	if !strings.HasPrefix(u, "remind me to call Ana at five\n[file: attachments/voice.ogg · audio/ogg · ") {
		t.Errorf("model text %q, want the transcript then the file's line", u)
	}
	if model, name, audio := stt.got(); model != "whisper-large-v3" || name != "voice.ogg" || !bytes.Equal(audio, voice) {
		t.Errorf("transcription server got model %q, file %q, %d bytes", model, name, len(audio))
	}
}

func TestE2EVoiceWithoutTranscription(t *testing.T) {
	_, fc := newFileChanGateway(t, fileChanConfig, llmtest.Text("I cannot hear it"))
	voice := append([]byte("OggS\x00\x02"), bytes.Repeat([]byte{1}, 200)...)
	if err := fc.deliver(t, "v2", "", bytesAttachment("voice.ogg", "audio/ogg", channels.KindVoice, voice, nil)); err != nil {
		t.Fatal(err)
	}
	if !waitFor(e2eWait, func() bool {
		return strings.Contains(strings.Join(fc.posts(), "\n"), "🎙️ Voice messages need attachments.transcription in the config.")
	}) {
		t.Fatalf("posts %q lack the 🎙️ line", fc.posts())
	}
}

// TestE2EFilesPastMaxFiles: a message with more files than
// attachments.maxFiles is still answered with the first maxFiles files; each
// one past the limit gets the 📎 line and is never downloaded.
func TestE2EFilesPastMaxFiles(t *testing.T) {
	cfg := strings.Replace(fileChanConfig, "agents:", "attachments: { maxFiles: 2 },\n  agents:", 1)
	tg, fc := newFileChanGateway(t, cfg, llmtest.Text("read them"))
	opens := map[string]*int{}
	var atts []channels.Attachment
	for _, name := range []string{"a.txt", "b.txt", "c.txt", "d.txt"} {
		opens[name] = new(int)
		atts = append(atts, bytesAttachment(name, "text/plain", channels.KindFile, []byte("notes of "+name), opens[name]))
	}
	if err := fc.deliver(t, "mf", "four notes", atts...); err != nil {
		t.Fatalf("sink: %v", err)
	}
	if !waitFor(e2eWait, func() bool { return len(fc.posts()) >= 2 }) {
		t.Fatalf("posts %q", fc.posts())
	}
	posts := strings.Join(fc.posts(), "\n")
	for _, want := range []string{"text:read them",
		"📎 c.txt was not read: a message takes at most 2 files (attachments.maxFiles).",
		"📎 d.txt was not read: a message takes at most 2 files (attachments.maxFiles)."} {
		if !strings.Contains(posts, want) {
			t.Errorf("posts lack %q:\n%s", want, posts)
		}
	}
	if strings.Contains(posts, "a.txt was not read") || strings.Contains(posts, "b.txt was not read") {
		t.Errorf("a file within the limit was refused:\n%s", posts)
	}
	u := tg.LLM.Requests()[0].LastUser()
	if !strings.Contains(u, "[file: attachments/a.txt ") || !strings.Contains(u, "[file: attachments/b.txt ") || strings.Contains(u, "c.txt") || strings.Contains(u, "d.txt") {
		t.Errorf("model text %q, want a.txt and b.txt named and nothing of c.txt, d.txt", u)
	}
	if *opens["c.txt"]+*opens["d.txt"] != 0 {
		t.Errorf("files past the limit were downloaded (c.txt %d times, d.txt %d)", *opens["c.txt"], *opens["d.txt"])
	}
}

// TestE2ETruncatedImageIsNotRead: a PNG cut short behind a sound header
// (a download the platform ended early) gets the 📎 line and never reaches
// the model as an image; the message and its sound picture are answered.
func TestE2ETruncatedImageIsNotRead(t *testing.T) {
	tg, fc := newFileChanGateway(t, fileChanConfig, llmtest.Text("one picture"))
	whole := filePNG(t, 80, 60)
	cut := filePNG(t, 90, 70)
	cut = cut[:len(cut)*3/4]
	if err := fc.deliver(t, "ti", "two pictures",
		bytesAttachment("whole.png", "image/png", channels.KindImage, whole, nil),
		bytesAttachment("cut.png", "image/png", channels.KindImage, cut, nil)); err != nil {
		t.Fatalf("sink: %v", err)
	}
	if !waitFor(e2eWait, func() bool { return len(fc.posts()) >= 2 }) {
		t.Fatalf("posts %q", fc.posts())
	}
	posts := strings.Join(fc.posts(), "\n")
	for _, want := range []string{"text:one picture", "📎 cut.png was not read: it is not a readable image (the file is damaged or not what its type says)."} {
		if !strings.Contains(posts, want) {
			t.Errorf("posts lack %q:\n%s", want, posts)
		}
	}
	req := tg.LLM.Requests()[0]
	var images int
	for _, b := range req.Blocks() {
		if b.Type == "image" {
			images++
			if sha(b.Data) != sha(whole) {
				t.Errorf("the model got an image that is not whole.png (sha %s)", sha(b.Data)[:12])
			}
		}
	}
	if images != 1 || strings.Contains(req.LastUser(), "cut.png") {
		t.Errorf("the model got %d images and text %q; want whole.png alone", images, req.LastUser())
	}
}
