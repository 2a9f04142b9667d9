package slack_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/slack"
	"github.com/heraldhq/herald/channels/slack/slackfake"
)

func readAll(t *testing.T, at channels.Attachment) ([]byte, error) {
	t.Helper()
	if at.Open == nil {
		return nil, at.Err
	}
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	rc, err := at.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// TestFilesOnMentionAreOneMessage: a mention with a screenshot and a PDF is
// one Inbound carrying both files (app_mention and the file_share message
// event for the same ts deliver it once); each Open streams the bytes with
// the bot token.
func TestFilesOnMentionAreOneMessage(t *testing.T) {
	fake := slackfake.New(t)
	_, in := startSocket(t, fake, slack.Options{Access: openAccess})
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte("px"), 5000)...)
	pdf := []byte("%PDF-1.4\n1 0 obj << >> endobj\n%%EOF\n")
	f1 := fake.AddFile("screen shot.png", "image/png", png)
	f2 := fake.AddFile("report.pdf", "application/pdf", pdf)

	const thread = "1700000000.000100"
	fake.SendMentionFiles("C0GENERAL", alice, "what is wrong here?", thread, f1, f2)
	got := in.next(t)
	if got.Text != "what is wrong here?" || got.Origin.ThreadID != thread {
		t.Errorf("inbound = %q in thread %q, want the text in %s", got.Text, got.Origin.ThreadID, thread)
	}
	if len(got.Attachments) != 2 {
		t.Fatalf("%d attachments, want 2: %+v", len(got.Attachments), got.Attachments)
	}
	for i, want := range []struct {
		name, mime, kind string
		data             []byte
	}{{"screen shot.png", "image/png", channels.KindImage, png}, {"report.pdf", "application/pdf", channels.KindFile, pdf}} {
		at := got.Attachments[i]
		if at.Name != want.name || at.MIME != want.mime || at.Kind != want.kind || at.Size != int64(len(want.data)) {
			t.Errorf("attachment %d = %s %s %s %d, want %s %s %s %d", i, at.Name, at.MIME, at.Kind, at.Size, want.name, want.mime, want.kind, len(want.data))
		}
		b, err := readAll(t, at)
		if err != nil || !bytes.Equal(b, want.data) {
			t.Errorf("attachment %d read %d bytes, err %v; want the %d bytes shared", i, len(b), err, len(want.data))
		}
	}
	fake.WaitAcks(2, wait)
	select {
	case dup := <-in:
		t.Errorf("a second inbound for the same message: %+v", dup)
	case <-time.After(200 * time.Millisecond):
	}
	if served, denied := fake.Downloads(); served != 2 || denied != 0 {
		t.Errorf("downloads served %d, denied %d; want 2 and 0", served, denied)
	}
}

// TestFileShareInDM: a file dropped into a DM without text is a message
// with one attachment and no text.
func TestFileShareInDM(t *testing.T) {
	fake := slackfake.New(t)
	_, in := startSocket(t, fake, slack.Options{})
	csv := []byte("a,b\n1,2\n")
	fake.SendDMFiles("D0ALICE", alice, "", "", fake.AddFile("data.csv", "text/csv", csv))
	got := in.next(t)
	if got.Text != "" || got.Origin.ChatType != channels.ChatDM || len(got.Attachments) != 1 {
		t.Fatalf("inbound = %+v, want a DM with one attachment and no text", got)
	}
	if b, err := readAll(t, got.Attachments[0]); err != nil || !bytes.Equal(b, csv) {
		t.Errorf("read %q, %v; want %q", b, err, csv)
	}
}

// TestFileDownloadFailures: Slack's refusals reach Open as errors that say
// why: a failed download, a file hidden by the plan's limit (no Open at
// all), and a download cut by the intake's deadline.
func TestFileDownloadFailures(t *testing.T) {
	fake := slackfake.New(t)
	_, in := startSocket(t, fake, slack.Options{})
	ok := fake.AddFile("a.txt", "text/plain", []byte("hello"))
	hidden := &slackfake.File{Name: "old.png", Mimetype: "image/png", Size: 10, Mode: "hidden_by_limit"}
	fake.SendDMFiles("D0ALICE", alice, "look", "", ok, hiddenFile(fake, hidden))
	got := in.next(t)
	if len(got.Attachments) != 2 {
		t.Fatalf("%d attachments, want 2", len(got.Attachments))
	}
	if at := got.Attachments[1]; at.Open != nil || at.Err == nil || !strings.Contains(at.Err.Error(), "hides it") {
		t.Errorf("hidden file: Open set %v, Err %v; want no Open and the reason", at.Open != nil, at.Err)
	}

	fake.FailDownloads(1, 500)
	if _, err := readAll(t, got.Attachments[0]); err == nil || !strings.Contains(err.Error(), "HTTP 500") {
		t.Errorf("download during a 500: %v, want an error naming HTTP 500", err)
	}
	if b, err := readAll(t, got.Attachments[0]); err != nil || string(b) != "hello" {
		t.Errorf("second Open = %q, %v; want the bytes (Open may be called again)", b, err)
	}

	fake.StallDownloads(1)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	rc, err := got.Attachments[0].Open(ctx)
	if err == nil {
		_, err = io.ReadAll(rc)
		rc.Close()
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("stalled download ended with %v, want the deadline", err)
	}
}

func hiddenFile(fake *slackfake.Server, f *slackfake.File) *slackfake.File {
	g := fake.AddFile(f.Name, f.Mimetype, nil)
	g.Mode, g.Size = f.Mode, f.Size
	return g
}

// TestFileDownloadNeedsTheBotToken: the fake, like Slack, sends a client
// without the bot token to the sign-in page; an adapter with another token
// says so instead of handing over the HTML as the file.
func TestFileDownloadNeedsTheBotToken(t *testing.T) {
	fake := slackfake.New(t)
	f := fake.AddFile("a.txt", "text/plain", []byte("secret"))
	link := fake.FileObject(f)["url_private_download"].(string)
	other, err := slack.New(slack.Options{BotToken: "xoxb-someone-else", AppToken: slackfake.AppToken, APIURL: fake.URL()})
	if err != nil {
		t.Fatal(err)
	}
	at := channels.Attachment{Name: "a.txt", Open: slack.Opener(other, link)}
	if _, err := readAll(t, at); err == nil || !strings.Contains(err.Error(), "sign-in page") {
		t.Errorf("download with a wrong token: %v, want the sign-in page named", err)
	}
	if _, denied := fake.Downloads(); denied != 1 {
		t.Errorf("denied downloads = %d, want 1", denied)
	}
	// The token never goes to a host that is neither Slack's nor the API URL's.
	at.Open = slack.Opener(other, "http://files.example.com/files-pri/T-F1/a.txt")
	if _, err := readAll(t, at); err == nil || !strings.Contains(err.Error(), "not on a Slack host") {
		t.Errorf("download from a foreign host: %v, want it refused", err)
	}
}

// TestSendFileIntoThread: SendFile runs getUploadURLExternal, the upload
// and completeUploadExternal into the thread; the bytes arrive whole and
// the share carries the caption.
func TestSendFileIntoThread(t *testing.T) {
	fake := slackfake.New(t)
	a, _ := startSocket(t, fake, slack.Options{})
	data := bytes.Repeat([]byte("report line\n"), 100_000)
	const thread = "1700000000.000100"
	to := channels.Origin{Channel: "slack", ChatID: "C0GENERAL", ChatType: channels.ChatGroup, ThreadID: thread}
	id, err := a.SendFile(t.Context(), to, fileMsg("out-1", 2, "report.txt", "the weekly report", data))
	if err != nil {
		t.Fatalf("SendFile: %v", err)
	}
	ups := fake.Uploads()
	if len(ups) != 1 {
		t.Fatalf("%d uploads, want 1", len(ups))
	}
	u := ups[0]
	sum := sha256.Sum256(data)
	if u.FileID != id || u.Channel != "C0GENERAL" || u.ThreadTS != thread || u.Name != "report.txt" ||
		u.Size != int64(len(data)) || u.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("upload = %+v (id %s), want report.txt with the same bytes in C0GENERAL thread %s", u, id, thread)
	}
	if !strings.Contains(u.Blocks, "the weekly report") || !strings.Contains(u.Blocks, "herald-out-1-2") {
		t.Errorf("share blocks = %s, want the caption and the outbox marker", u.Blocks)
	}
	if a.FileLimit() != 1<<30 {
		t.Errorf("FileLimit = %d, want Slack's 1 GB", a.FileLimit())
	}
}

// TestFindFileAfterLostAnswer: completeUploadExternal shares the file but
// its answer never arrives (the gateway died); FindFile finds the share by
// its outbox marker, and does not find another part's.
func TestFindFileAfterLostAnswer(t *testing.T) {
	fake := slackfake.New(t)
	a, _ := startSocket(t, fake, slack.Options{})
	const thread = "1700000000.000100"
	to := channels.Origin{Channel: "slack", ChatID: "C0GENERAL", ChatType: channels.ChatGroup, ThreadID: thread}
	msg := fileMsg("out-7", 3, "chart.png", "", []byte("\x89PNG\r\n\x1a\nchart"))

	fake.HoldNextCompletes(1)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	_, err := a.SendFile(ctx, to, msg)
	cancel()
	if err == nil {
		t.Fatal("SendFile returned nil although the answer never came")
	}
	if n := len(fake.Uploads()); n != 1 {
		t.Fatalf("%d uploads on Slack, want the 1 shared before the answer was lost", n)
	}
	id, found, err := a.FindFile(t.Context(), to, msg)
	if err != nil || !found || id != fake.Uploads()[0].FileID {
		t.Errorf("FindFile = %q, %v, %v; want the shared file %s", id, found, err, fake.Uploads()[0].FileID)
	}
	other := msg
	other.Part = 4
	if _, found, err := a.FindFile(t.Context(), to, other); err != nil || found {
		t.Errorf("FindFile of part 4 = found %v, %v; want not found", found, err)
	}
	top := to
	top.ThreadID = ""
	if _, found, err := a.FindFile(t.Context(), top, msg); err != nil || found {
		t.Errorf("FindFile in the channel's top level = found %v, %v; want not found (it is in the thread)", found, err)
	}
}

// TestSendFileErrors: a rate-limited complete is a RetryAfterError; a
// channel Slack refuses is permanent; an empty file is refused before any
// call.
func TestSendFileErrors(t *testing.T) {
	fake := slackfake.New(t)
	a, _ := startSocket(t, fake, slack.Options{})
	to := channels.Origin{Channel: "slack", ChatID: "C0GENERAL", ChatType: channels.ChatGroup}

	fake.FailNextCompletes("ratelimited")
	_, err := a.SendFile(t.Context(), to, fileMsg("o", 1, "a.txt", "", []byte("a")))
	var ra *channels.RetryAfterError
	if !errors.As(err, &ra) {
		t.Errorf("rate-limited complete: %v, want a RetryAfterError", err)
	}
	fake.FailNextCompletes("channel_not_found")
	if _, err := a.SendFile(t.Context(), to, fileMsg("o", 1, "a.txt", "", []byte("a"))); !errors.Is(err, channels.ErrPermanent) {
		t.Errorf("channel_not_found: %v, want ErrPermanent", err)
	}
	g0, _ := fake.UploadCalls()
	if _, err := a.SendFile(t.Context(), to, fileMsg("o", 1, "empty.txt", "", nil)); !errors.Is(err, channels.ErrPermanent) {
		t.Errorf("empty file: %v, want ErrPermanent", err)
	}
	if g1, _ := fake.UploadCalls(); g1 != g0 {
		t.Errorf("an empty file asked Slack for an upload URL")
	}
}

func fileMsg(id string, part int, name, caption string, data []byte) channels.Message {
	return channels.Message{Kind: channels.KindReply, ID: id, Part: part, Parts: part, Text: caption,
		File: &channels.OutFile{Name: name, Size: int64(len(data)), MIME: "application/octet-stream",
			Open: func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}}
}
