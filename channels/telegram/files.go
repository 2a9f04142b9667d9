package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/heraldhq/herald/channels"
)

// Bot API file limits: a bot uploads up to 50 MB, a photo up to 10 MB
// (larger images go as documents); getFile serves up to 20 MB on the public
// server (a self-hosted Bot API server has no such limit).
const (
	FileLimitBytes = 50 << 20
	photoLimit     = 10 << 20
	maxCaption     = 1024
)

var _ channels.FileSender = (*Adapter)(nil)

// attachments describes the file of a message for the gateway's intake:
// the largest photo size, a document, audio, voice note, video, video note
// or animation. Nothing is downloaded here; Open calls getFile, then streams
// /file/bot<token>/<file_path>.
func (a *Adapter) attachments(m *tgbotapi.Message) []channels.Attachment {
	id := strconv.Itoa(m.MessageID)
	var at channels.Attachment
	var fileID string
	switch {
	case len(m.Photo) > 0:
		best := m.Photo[0]
		for _, p := range m.Photo[1:] {
			if p.Width*p.Height > best.Width*best.Height || (p.Width*p.Height == best.Width*best.Height && p.FileSize > best.FileSize) {
				best = p
			}
		}
		fileID = best.FileID
		at = channels.Attachment{Name: "photo-" + id + ".jpg", MIME: "image/jpeg", Size: int64(best.FileSize), Kind: channels.KindImage}
	case m.Document != nil:
		fileID = m.Document.FileID
		at = channels.Attachment{Name: m.Document.FileName, MIME: m.Document.MimeType, Size: int64(m.Document.FileSize), Kind: channels.KindFile}
		if at.Name == "" {
			at.Name = "document-" + id
		}
	case m.Audio != nil:
		fileID = m.Audio.FileID
		at = channels.Attachment{Name: m.Audio.FileName, MIME: m.Audio.MimeType, Size: int64(m.Audio.FileSize), Kind: channels.KindAudio}
		if at.Name == "" {
			at.Name = "audio-" + id + ".mp3"
		}
	case m.Voice != nil:
		fileID = m.Voice.FileID
		at = channels.Attachment{Name: "voice-" + id + ".ogg", MIME: m.Voice.MimeType, Size: int64(m.Voice.FileSize), Kind: channels.KindVoice}
	case m.Video != nil:
		fileID = m.Video.FileID
		at = channels.Attachment{Name: m.Video.FileName, MIME: m.Video.MimeType, Size: int64(m.Video.FileSize), Kind: channels.KindVideo}
		if at.Name == "" {
			at.Name = "video-" + id + ".mp4"
		}
	case m.VideoNote != nil:
		fileID = m.VideoNote.FileID
		at = channels.Attachment{Name: "video-note-" + id + ".mp4", MIME: "video/mp4", Size: int64(m.VideoNote.FileSize), Kind: channels.KindVideo}
	case m.Animation != nil:
		fileID = m.Animation.FileID
		at = channels.Attachment{Name: m.Animation.FileName, MIME: m.Animation.MimeType, Size: int64(m.Animation.FileSize), Kind: channels.KindVideo}
		if at.Name == "" {
			at.Name = "animation-" + id + ".mp4"
		}
	default:
		return nil
	}
	if at.Size <= 0 {
		at.Size = -1
	}
	at.Open = a.opener(fileID)
	return []channels.Attachment{at}
}

// opener returns the Open of a file: getFile for its path, then a streamed
// GET of <apiUrl>/file/bot<token>/<path>. A self-hosted Bot API server in
// local mode answers an absolute path on its own disk, which is opened
// directly.
func (a *Adapter) opener(fileID string) func(ctx context.Context) (io.ReadCloser, error) {
	return func(ctx context.Context) (io.ReadCloser, error) {
		f, err := a.bot(ctx).GetFile(tgbotapi.FileConfig{FileID: fileID})
		if err != nil {
			var te *tgbotapi.Error
			if errors.As(err, &te) {
				return nil, fmt.Errorf("Telegram refused it (%s)", te.Message)
			}
			return nil, fmt.Errorf("Telegram getFile: %w", a.redact(err))
		}
		if f.FilePath == "" {
			return nil, errors.New("Telegram gave no file path for it")
		}
		if filepath.IsAbs(f.FilePath) {
			return os.Open(f.FilePath)
		}
		link := strings.TrimRight(a.opts.APIURL, "/") + "/file/bot" + a.opts.BotToken + "/" + strings.TrimLeft(path.Clean("/"+f.FilePath), "/")
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, link, nil)
		if err != nil {
			return nil, a.redact(err)
		}
		resp, err := a.hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("download from Telegram: %w", a.redact(err))
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("Telegram answered the download with HTTP %d", resp.StatusCode)
		}
		return resp.Body, nil
	}
}

// FileLimit implements channels.FileSender: a bot uploads up to 50 MB.
func (a *Adapter) FileLimit() int64 { return FileLimitBytes }

// photoTypes are the images sendPhoto takes (Telegram recompresses them to
// JPEG); anything else, and photos over 10 MB, go by sendDocument.
var photoTypes = map[string]bool{"image/jpeg": true, "image/png": true, "image/webp": true}

// SendFile implements channels.FileSender: sendPhoto for a JPEG, PNG or
// WebP image up to 10 MB, sendDocument otherwise (and when Telegram cannot
// process the photo), into the origin's chat and forum topic, the caption
// cut to Telegram's 1024 characters. The file is streamed as the multipart
// body. The platform id is the message_id. Telegram has no lookup: an
// unknown outcome is the outbox's (uncertainDelivery).
func (a *Adapter) SendFile(ctx context.Context, to channels.Origin, msg channels.Message) (string, error) {
	f := msg.File
	if f == nil || f.Open == nil {
		return "", fmt.Errorf("telegram: send file to %s: no file: %w", to, channels.ErrPermanent)
	}
	chatID, err := strconv.ParseInt(to.ChatID, 10, 64)
	if err != nil {
		return "", fmt.Errorf("telegram: send file to %s: chat id %q is not a number: %w", to, to.ChatID, channels.ErrPermanent)
	}
	if to.ThreadID != "" {
		if _, err := strconv.Atoi(to.ThreadID); err != nil {
			return "", fmt.Errorf("telegram: send file to %s: thread id %q is not a number: %w", to, to.ThreadID, channels.ErrPermanent)
		}
	}
	switch {
	case f.Size == 0:
		return "", fmt.Errorf("telegram: send file %q: Telegram does not take empty files: %w", f.Name, channels.ErrPermanent)
	case f.Size > FileLimitBytes:
		return "", fmt.Errorf("telegram: send file %q: %d bytes is over the 50 MB a bot may upload: %w", f.Name, f.Size, channels.ErrPermanent)
	}
	caption := strings.TrimSpace(msg.Text)
	if r := []rune(caption); len(r) > maxCaption {
		caption = string(r[:maxCaption-1]) + "…"
	}
	if photoTypes[strings.ToLower(f.MIME)] && f.Size <= photoLimit {
		id, err := a.upload(ctx, chatID, to.ThreadID, "sendPhoto", "photo", f, caption)
		if err == nil || !photoRefused(err) {
			return id, wrapSend(to, f, err)
		}
		// Telegram cannot make a photo of it (odd dimensions, a broken
		// image): the file goes as it is.
	}
	id, err := a.upload(ctx, chatID, to.ThreadID, "sendDocument", "document", f, caption)
	return id, wrapSend(to, f, err)
}

func wrapSend(to channels.Origin, f *channels.OutFile, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("telegram: send file %q to %s: %w", f.Name, to, err)
}

// photoRefused reports a sendPhoto error that sendDocument avoids.
func photoRefused(err error) bool {
	var te *tgbotapi.Error
	if !errors.As(err, &te) {
		return false
	}
	if te.Code != http.StatusBadRequest {
		return false
	}
	for _, s := range []string{"IMAGE_PROCESS_FAILED", "PHOTO_INVALID_DIMENSIONS", "PHOTO_SAVE_FILE_INVALID", "PHOTO_EXT_INVALID"} {
		if strings.Contains(te.Message, s) {
			return true
		}
	}
	return false
}

// upload posts one file by method (sendPhoto/sendDocument), streaming it
// as the multipart field: nothing holds the whole file in memory.
func (a *Adapter) upload(ctx context.Context, chatID int64, thread, method, field string, f *channels.OutFile, caption string) (string, error) {
	// Bound the call by the size: 30 s plus 1 s per 256 KiB.
	ctx, cancel := context.WithTimeout(ctx, sendTimeout+time.Duration(f.Size/(256<<10))*time.Second)
	defer cancel()
	rc, err := f.Open(ctx)
	if err != nil {
		return "", fmt.Errorf("open: %w", err)
	}
	defer rc.Close()

	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	written := make(chan error, 1)
	go func() { // owned by upload: it waits on written before returning
		err := writeForm(mw, chatID, thread, caption, field, f, rc)
		pw.CloseWithError(err)
		written <- err
	}()
	url := fmt.Sprintf(a.endpoint, a.opts.BotToken, method)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, pr)
	if err != nil {
		pr.CloseWithError(err)
		<-written
		return "", a.redact(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := a.hc.Do(req)
	pr.CloseWithError(errors.New("request ended")) // unblocks the writer if the server stopped reading
	werr := <-written
	if err != nil {
		return "", fmt.Errorf("%s: %w", method, a.redact(err))
	}
	defer resp.Body.Close()
	var body struct {
		OK          bool            `json:"ok"`
		Result      json.RawMessage `json:"result"`
		ErrorCode   int             `json:"error_code"`
		Description string          `json:"description"`
		Parameters  *struct {
			RetryAfter int `json:"retry_after"`
		} `json:"parameters"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
		if werr != nil && !errors.Is(werr, io.ErrClosedPipe) {
			return "", fmt.Errorf("%s: %w", method, werr)
		}
		return "", fmt.Errorf("%s: HTTP %d with an unreadable answer: %w", method, resp.StatusCode, err)
	}
	if !body.OK {
		te := &tgbotapi.Error{Code: body.ErrorCode, Message: body.Description}
		if te.Code == 0 {
			te.Code = resp.StatusCode
		}
		if body.Parameters != nil {
			te.RetryAfter = body.Parameters.RetryAfter
		}
		if photoRefused(te) {
			return "", te
		}
		return "", classify(te)
	}
	var m struct {
		MessageID int `json:"message_id"`
	}
	if json.Unmarshal(body.Result, &m) != nil || m.MessageID == 0 {
		return "", nil
	}
	return strconv.Itoa(m.MessageID), nil
}

func writeForm(mw *multipart.Writer, chatID int64, thread, caption, field string, f *channels.OutFile, r io.Reader) error {
	fields := [][2]string{{"chat_id", strconv.FormatInt(chatID, 10)}}
	if thread != "" {
		fields = append(fields, [2]string{"message_thread_id", thread})
	}
	if caption != "" {
		fields = append(fields, [2]string{"caption", caption})
	}
	for _, kv := range fields {
		if err := mw.WriteField(kv[0], kv[1]); err != nil {
			return err
		}
	}
	name := f.Name
	if name == "" {
		name = "file"
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="`+field+`"; filename="`+escapeQuotes(name)+`"`)
	ct := f.MIME
	if ct == "" {
		ct = "application/octet-stream"
	}
	h.Set("Content-Type", ct)
	w, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		return err
	}
	return mw.Close()
}

var quoteEscaper = strings.NewReplacer("\\", "\\\\", `"`, "\\\"", "\r", "", "\n", "")

func escapeQuotes(s string) string { return quoteEscaper.Replace(s) }
