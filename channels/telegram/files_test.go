package telegram

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"image"
	"image/color"
	"image/png"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/telegram/tgfake"
)

var groupOpen = channels.Access{GroupPolicy: channels.GroupAllowlist, Groups: map[string]channels.GroupRule{"-100123": {}}}

func readAttachment(t *testing.T, at channels.Attachment, timeout time.Duration) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rc, err := at.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func pngBytes(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		img.Set(x, x%h, color.RGBA{200, 10, 10, 255})
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestPhotoInTopicLargestSize: a photo with a caption mentioning the bot
// in a forum topic is one Inbound with one image attachment, and Open
// downloads the largest size (the photo's own bytes, not a thumbnail).
func TestPhotoInTopicLargestSize(t *testing.T) {
	_, fake, rec := newAdapter(t, groupOpen, nil)
	photo := pngBytes(t, 64, 48)
	fake.Queue(tgfake.In{ChatID: -100123, ChatType: "supergroup", ThreadID: 42, FromID: 555,
		Text: "@herald_bot what is in this picture?", Photo: &tgfake.FileIn{Data: photo}})
	in := rec.next(t)
	if in.Origin.ThreadID != "42" || in.Text != "what is in this picture?" || !in.Mentioned {
		t.Errorf("inbound = %+v, want the caption without the mention in topic 42", in)
	}
	if len(in.Attachments) != 1 {
		t.Fatalf("%d attachments, want 1", len(in.Attachments))
	}
	at := in.Attachments[0]
	if at.Kind != channels.KindImage || at.Size != int64(len(photo)) || !strings.HasSuffix(at.Name, ".jpg") {
		t.Errorf("attachment = %s %s %d, want an image of %d bytes", at.Name, at.Kind, at.Size, len(photo))
	}
	b, err := readAttachment(t, at, 5*time.Second)
	if err != nil || !bytes.Equal(b, photo) {
		t.Errorf("downloaded %d bytes, %v; want the photo's %d bytes", len(b), err, len(photo))
	}
	if getFile, served := fake.Downloads(); getFile != 1 || served != 1 {
		t.Errorf("getFile %d, downloads %d; want 1 and 1", getFile, served)
	}
}

// TestFileKinds: document, audio, voice and video messages each carry one
// attachment of their kind with the platform's name and type; a file
// without a caption in a private chat is still a message.
func TestFileKinds(t *testing.T) {
	_, fake, rec := newAdapter(t, channels.Access{}, nil)
	cases := []struct {
		in   tgfake.In
		kind string
		name string
	}{
		{tgfake.In{Document: &tgfake.FileIn{Name: "report.pdf", MIME: "application/pdf", Data: []byte("%PDF-1.4 x")}}, channels.KindFile, "report.pdf"},
		{tgfake.In{Audio: &tgfake.FileIn{Name: "song.mp3", MIME: "audio/mpeg", Data: []byte("ID3 audio")}}, channels.KindAudio, "song.mp3"},
		{tgfake.In{Voice: &tgfake.FileIn{MIME: "audio/ogg", Data: []byte("OggS voice")}}, channels.KindVoice, "voice-"},
		{tgfake.In{Video: &tgfake.FileIn{Name: "clip.mp4", MIME: "video/mp4", Data: []byte("....ftypmp42")}}, channels.KindVideo, "clip.mp4"},
	}
	for _, c := range cases {
		c.in.ChatID, c.in.FromID = 555, 555
		fake.Queue(c.in)
		in := rec.next(t)
		if in.Text != "" || len(in.Attachments) != 1 {
			t.Errorf("%s: inbound text %q with %d attachments, want no text and 1", c.kind, in.Text, len(in.Attachments))
			continue
		}
		at := in.Attachments[0]
		if at.Kind != c.kind || !strings.HasPrefix(at.Name, c.name) {
			t.Errorf("attachment %s/%s, want %s/%s…", at.Kind, at.Name, c.kind, c.name)
		}
		var want []byte
		for _, f := range []*tgfake.FileIn{c.in.Document, c.in.Audio, c.in.Voice, c.in.Video} {
			if f != nil {
				want = f.Data
			}
		}
		if b, err := readAttachment(t, at, 5*time.Second); err != nil || !bytes.Equal(b, want) {
			t.Errorf("%s: read %q, %v; want %q", c.kind, b, err, want)
		}
	}
}

// TestAlbumIsOneMessage: three photos sent at once (one media_group_id,
// the caption on the first) reach the gateway as one message with three
// attachments, in order.
func TestAlbumIsOneMessage(t *testing.T) {
	_, fake, rec := newAdapter(t, channels.Access{}, nil)
	var photos [][]byte
	var ins []tgfake.In
	for i := range 3 {
		p := pngBytes(t, 10+i, 10)
		photos = append(photos, p)
		in := tgfake.In{ChatID: 555, FromID: 555, Photo: &tgfake.FileIn{Data: p}}
		if i == 0 {
			in.Text = "compare these"
		}
		ins = append(ins, in)
	}
	fake.QueueAlbum(ins...)
	in := rec.next(t)
	if in.Text != "compare these" || len(in.Attachments) != 3 {
		t.Fatalf("inbound %q with %d attachments, want the caption and 3", in.Text, len(in.Attachments))
	}
	for i, at := range in.Attachments {
		if b, err := readAttachment(t, at, 5*time.Second); err != nil || !bytes.Equal(b, photos[i]) {
			t.Errorf("attachment %d: %d bytes, %v; want photo %d", i, len(b), err, i)
		}
	}
	select {
	case extra := <-rec:
		t.Errorf("the album gave a second inbound: %+v", extra)
	case <-time.After(300 * time.Millisecond):
	}
	if fake.Pending() != 0 {
		// Confirmed by the next poll's offset.
		deadline := time.Now().Add(5 * time.Second)
		for fake.Pending() != 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if fake.Pending() != 0 {
			t.Errorf("%d album updates left unconfirmed", fake.Pending())
		}
	}
}

// TestFileDownloadRefusals: what Telegram refuses reaches Open as a reason:
// a file over getFile's 20 MB, a failed download; a stalled one ends at
// the caller's deadline; the token never shows in an error.
func TestFileDownloadRefusals(t *testing.T) {
	_, fake, rec := newAdapter(t, channels.Access{}, nil)
	fake.Queue(tgfake.In{ChatID: 555, FromID: 555, Document: &tgfake.FileIn{Name: "big.bin", Size: tgfake.DownloadLimit + 1, Gen: tgfake.Pattern(1)}})
	big := rec.next(t).Attachments[0]
	if big.Size != tgfake.DownloadLimit+1 {
		t.Errorf("size %d, want the announced %d", big.Size, tgfake.DownloadLimit+1)
	}
	if _, err := readAttachment(t, big, 5*time.Second); err == nil || !strings.Contains(err.Error(), "file is too big") {
		t.Errorf("a 20 MB+ file: %v, want Telegram's 'file is too big'", err)
	}

	fake.Queue(tgfake.In{ChatID: 555, FromID: 555, Document: &tgfake.FileIn{Name: "a.txt", Data: []byte("some text here")}})
	small := rec.next(t).Attachments[0]
	fake.FailDownloads(1, 502)
	_, err := readAttachment(t, small, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "HTTP 502") {
		t.Errorf("download during a 502: %v, want HTTP 502 named", err)
	}
	fake.StallDownloads(1)
	_, err = readAttachment(t, small, 300*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("stalled download: %v, want the deadline", err)
	}
	if err != nil && strings.Contains(err.Error(), token) {
		t.Errorf("the error shows the bot token: %v", err)
	}
	if b, err := readAttachment(t, small, 5*time.Second); err != nil || string(b) != "some text here" {
		t.Errorf("after the faults: %q, %v", b, err)
	}
}

func outFile(name, mime string, data []byte) *channels.OutFile {
	return &channels.OutFile{Name: name, MIME: mime, Size: int64(len(data)),
		Open: func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}
}

// TestSendPhotoAndDocumentInTopic: a PNG goes by sendPhoto, a PDF by
// sendDocument, both in topic 42 with their captions and the same bytes;
// a PNG Telegram cannot process goes as a document instead.
func TestSendPhotoAndDocumentInTopic(t *testing.T) {
	a, fake, _ := newAdapter(t, groupOpen, nil)
	to := channels.Origin{Channel: Name, ChatID: "-100123", ChatType: channels.ChatGroup, ThreadID: "42"}
	photo := pngBytes(t, 32, 32)
	pdf := bytes.Repeat([]byte("%PDF-1.4 page\n"), 50_000)
	broken := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{0}, 100)...)

	for _, m := range []channels.Message{
		{Text: "the chart", File: outFile("chart.png", "image/png", photo)},
		{Text: "the report", File: outFile("report.pdf", "application/pdf", pdf)},
		{File: outFile("broken.png", "image/png", broken)},
	} {
		if id, err := a.SendFile(context.Background(), to, m); err != nil || id == "" {
			t.Fatalf("SendFile %s: %q, %v", m.File.Name, id, err)
		}
	}
	sent := fake.SentFiles()
	if len(sent) != 3 {
		t.Fatalf("%d files sent, want 3", len(sent))
	}
	for i, want := range []struct {
		method, caption string
		data            []byte
	}{{"sendPhoto", "the chart", photo}, {"sendDocument", "the report", pdf}, {"sendDocument", "", broken}} {
		s := sent[i]
		sum := sha256.Sum256(want.data)
		if s.Method != want.method || s.ChatID != -100123 || s.ThreadID != 42 || s.Caption != want.caption || s.SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("sent %d = %s chat %d topic %d caption %q size %d; want %s in -100123/42 %q with the same %d bytes",
				i, s.Method, s.ChatID, s.ThreadID, s.Caption, s.Size, want.method, want.caption, len(want.data))
		}
	}
	if a.FileLimit() != 50<<20 {
		t.Errorf("FileLimit = %d, want 50 MB", a.FileLimit())
	}
}

// TestSendFileErrors: 429 is a RetryAfterError, a chat Telegram refuses is
// permanent, and a file over 50 MB is refused before any upload.
func TestSendFileErrors(t *testing.T) {
	a, fake, _ := newAdapter(t, channels.Access{}, nil)
	to := channels.Origin{Channel: Name, ChatID: "555", ChatType: channels.ChatDM}
	fake.FailNextFiles(1, 429, 3)
	_, err := a.SendFile(context.Background(), to, channels.Message{File: outFile("a.txt", "text/plain", []byte("a"))})
	var ra *channels.RetryAfterError
	if !errors.As(err, &ra) || ra.After != 3*time.Second {
		t.Errorf("429: %v, want a RetryAfterError of 3s", err)
	}
	fake.FailChat(555, 403, "Forbidden: bot was blocked by the user")
	if _, err := a.SendFile(context.Background(), to, channels.Message{File: outFile("a.txt", "text/plain", []byte("a"))}); !errors.Is(err, channels.ErrPermanent) {
		t.Errorf("blocked: %v, want ErrPermanent", err)
	}
	calls := fake.FileSendCalls()
	huge := &channels.OutFile{Name: "huge.bin", Size: 50<<20 + 1, Open: func(context.Context) (io.ReadCloser, error) {
		t.Error("a file over the limit was opened")
		return nil, errors.New("no")
	}}
	if _, err := a.SendFile(context.Background(), to, channels.Message{File: huge}); !errors.Is(err, channels.ErrPermanent) || !strings.Contains(err.Error(), "50 MB") {
		t.Errorf("over 50 MB: %v, want ErrPermanent naming the limit", err)
	}
	if fake.FileSendCalls() != calls {
		t.Error("a file over the limit reached Telegram")
	}
}
