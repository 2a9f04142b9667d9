package matrix

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/matrix/matrixtest"
)

func readAttachment(t *testing.T, at channels.Attachment) ([]byte, error) {
	t.Helper()
	if at.Open == nil {
		return nil, at.Err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rc, err := at.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func memFile(name, mimeType string, data []byte) *channels.OutFile {
	return &channels.OutFile{Name: name, MIME: mimeType, Size: int64(len(data)),
		Open: func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}
}

// TestDendriteFilesIn: on a real homeserver, an m.image with a caption
// naming the bot in a thread and an m.file without a caption in the same
// thread reach the gateway with their attachments; Open streams the bytes
// through the authenticated media API.
func TestDendriteFilesIn(t *testing.T) {
	hs := requireHS(t)
	alice := hs.RegisterUser(t, "alicef")
	bot := hs.RegisterUser(t, "heraldf")
	carol := hs.RegisterUser(t, "carolf")
	_, in := startBot(t, hs, bot, ThreadsInbound)
	room := matrixtest.CreateRoomWith(t, alice, bot.UserID, carol.UserID)
	matrixtest.WaitJoined(t, alice, room, bot.UserID)
	if _, err := carol.JoinRoomByID(context.Background(), room); err != nil {
		t.Fatalf("carol joins: %v", err)
	}
	matrixtest.WaitJoined(t, alice, room, carol.UserID)

	img := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, 3000)...)
	root := matrixtest.Post(t, alice, room, "screenshots of the bug")
	// The bot's own localpart ("heraldf", with a suffix on a homeserver
	// that already has one: -count=2, HERALD_DENDRITE_URL).
	evt, _ := matrixtest.PostFile(t, alice, room, root, event.MsgImage, "bug.png", "image/png", img, bot.UserID.Localpart()+": what is wrong here?")
	got := in.next(t)
	if got.Origin.MessageID != string(evt) || got.Origin.ThreadID != string(root) || got.Text != "what is wrong here?" || !got.Mentioned {
		t.Fatalf("inbound = %+v text %q mentioned %v; want the caption without the mention, in the thread", got.Origin, got.Text, got.Mentioned)
	}
	if len(got.Attachments) != 1 {
		t.Fatalf("%d attachments, want 1", len(got.Attachments))
	}
	at := got.Attachments[0]
	if at.Name != "bug.png" || at.MIME != "image/png" || at.Kind != channels.KindImage || at.Size != int64(len(img)) {
		t.Errorf("attachment = %s %s %s %d, want bug.png image/png image %d", at.Name, at.MIME, at.Kind, at.Size, len(img))
	}
	if b, err := readAttachment(t, at); err != nil || !bytes.Equal(b, img) {
		t.Errorf("downloaded %d bytes, %v; want the %d bytes posted", len(b), err, len(img))
	}

	// The bot has not posted in the thread, so a file without a caption
	// there is not for it; in a DM it is.
	dm := matrixtest.CreateRoomWith(t, alice, bot.UserID)
	matrixtest.WaitJoined(t, alice, dm, bot.UserID)
	csv := []byte("a,b\n1,2\n")
	matrixtest.PostFile(t, alice, dm, "", event.MsgFile, "data.csv", "text/csv", csv, "")
	got = in.next(t)
	if got.Origin.ChatType != channels.ChatDM || got.Text != "" || len(got.Attachments) != 1 || got.Attachments[0].Kind != channels.KindFile {
		t.Fatalf("DM file = %+v text %q, %d attachments; want a DM with no text and one file", got.Origin, got.Text, len(got.Attachments))
	}
	if b, err := readAttachment(t, got.Attachments[0]); err != nil || !bytes.Equal(b, csv) {
		t.Errorf("downloaded %q, %v; want %q", b, err, csv)
	}
}

// TestDendriteSendFile: SendFile uploads and posts an m.image in the thread
// with its caption; a second SendFile of the same outbox item and part (a
// re-send after a crash before the mark) gives back the same event, so the
// thread has one file message; FileLimit is the server's m.upload.size, and
// a file over it is refused before any upload.
func TestDendriteSendFile(t *testing.T) {
	hs := requireHS(t)
	alice := hs.RegisterUser(t, "alicesf")
	bot := hs.RegisterUser(t, "heraldsf")
	a, _ := startBot(t, hs, bot, ThreadsInbound)
	room := matrixtest.CreateRoomWith(t, alice, bot.UserID)
	matrixtest.WaitJoined(t, alice, room, bot.UserID)
	root := matrixtest.Post(t, alice, room, "make me a chart")
	to := channels.Origin{Channel: Name, ChatID: string(room), ChatType: channels.ChatDM, ThreadID: string(root)}

	limit := a.FileLimit()
	if limit <= 0 {
		t.Fatalf("FileLimit = %d, want the homeserver's m.upload.size", limit)
	}
	chart := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{1, 2, 3}, 20_000)...)
	msg := channels.Message{Kind: channels.KindReply, ID: "item-9", Part: 2, Parts: 2, Text: "the chart", File: memFile("chart.png", "image/png", chart)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := a.SendFile(ctx, to, msg)
	if err != nil {
		t.Fatalf("SendFile: %v", err)
	}
	again, err := a.SendFile(ctx, to, msg)
	if err != nil || again != first {
		t.Errorf("re-send of the same part = %q, %v; want the first event %s back", again, err, first)
	}
	evts := matrixtest.WaitThreadMessages(t, alice, room, root, bot.UserID, 1)
	if len(evts) != 1 {
		t.Fatalf("%d bot messages in the thread, want 1", len(evts))
	}
	c := evts[0].Content.AsMessage()
	if evts[0].ID != id.EventID(first) || c.MsgType != event.MsgImage || c.Body != "the chart" || c.FileName != "chart.png" ||
		c.Info == nil || c.Info.MimeType != "image/png" || c.Info.Size != len(chart) {
		t.Errorf("posted %s %s body %q filename %q info %+v; want m.image 'the chart' chart.png", evts[0].ID, c.MsgType, c.Body, c.FileName, c.Info)
	}
	if b := matrixtest.Download(t, alice, c.URL); !bytes.Equal(b, chart) {
		t.Errorf("the posted file has %d bytes, want the %d sent", len(b), len(chart))
	}

	opened := false
	huge := &channels.OutFile{Name: "huge.bin", MIME: "application/octet-stream", Size: limit + 1,
		Open: func(context.Context) (io.ReadCloser, error) { opened = true; return nil, errors.New("not this") }}
	_, err = a.SendFile(ctx, to, channels.Message{ID: "item-10", Part: 1, File: huge})
	if !errors.Is(err, channels.ErrPermanent) || opened {
		t.Errorf("a file over m.upload.size: %v (opened %v), want ErrPermanent before any upload", err, opened)
	}
}
