package matrix

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/crypto/attachment"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels"
)

var _ channels.FileSender = (*Adapter)(nil)

// mediaState is what the adapter knows of the homeserver's media
// repository.
type mediaState struct {
	// uploadSize is m.upload.size from /_matrix/client/v1/media/config
	// (0 until known, or when the server names no limit).
	uploadSize atomic.Int64
}

// loadMediaConfig asks the homeserver for its upload limit. A failure is
// logged and leaves the limit unknown: the upload then finds out.
func (a *Adapter) loadMediaConfig(ctx context.Context) {
	cfg, err := a.client.GetMediaConfig(ctx)
	if err != nil {
		a.log.Warn("matrix: could not read the media repository's config; the upload limit is unknown", zap.Error(err))
		return
	}
	if cfg != nil && cfg.UploadSize > 0 {
		a.media.uploadSize.Store(cfg.UploadSize)
	}
}

// isMedia reports the message types that carry a file.
func isMedia(t event.MessageType) bool {
	switch t {
	case event.MsgImage, event.MsgFile, event.MsgAudio, event.MsgVideo:
		return true
	}
	return false
}

// mediaInbound splits a media message into the text the person wrote (its
// caption, "" when the body is only the file name) and its attachment.
func (a *Adapter) mediaInbound(content *event.MessageEventContent) (caption string, files []channels.Attachment) {
	at := channels.Attachment{Name: content.GetFileName(), Size: -1, Kind: channels.KindFile}
	if content.Info != nil {
		at.MIME = content.Info.MimeType
		if content.Info.Size > 0 {
			at.Size = int64(content.Info.Size)
		}
	}
	switch content.MsgType {
	case event.MsgImage:
		at.Kind = channels.KindImage
	case event.MsgAudio:
		at.Kind = channels.KindAudio
		if content.MSC3245Voice != nil {
			at.Kind = channels.KindVoice
		}
	case event.MsgVideo:
		at.Kind = channels.KindVideo
	}
	uriString, enc := content.URL, (*event.EncryptedFileInfo)(nil)
	if content.File != nil {
		uriString, enc = content.File.URL, content.File
	}
	uri, err := uriString.Parse()
	switch {
	case err != nil || uri.IsEmpty():
		at.Err = errors.New("the message names no valid mxc:// URL")
	default:
		if enc != nil {
			if err := enc.PrepareForDecryption(); err != nil {
				at.Err = fmt.Errorf("its encryption is not one Herald can read (%v)", err)
				break
			}
		}
		at.Open = a.mediaOpener(uri, enc)
	}
	return content.GetCaption(), []channels.Attachment{at}
}

// mediaOpener downloads a file through the authenticated media API
// (/_matrix/client/v1/media/download, the bot's access token), streamed;
// an encrypted file is decrypted as it streams and its hash checked at the
// end.
func (a *Adapter) mediaOpener(uri id.ContentURI, enc *event.EncryptedFileInfo) func(ctx context.Context) (io.ReadCloser, error) {
	return func(ctx context.Context) (io.ReadCloser, error) {
		resp, err := a.client.Download(ctx, uri)
		if err != nil {
			var he mautrix.HTTPError
			if errors.As(err, &he) && he.Response != nil {
				return nil, fmt.Errorf("the homeserver refused the download (HTTP %d %s)", he.Response.StatusCode, he.RespError.ErrCode)
			}
			return nil, fmt.Errorf("download from the homeserver: %w", err)
		}
		if enc == nil {
			return resp.Body, nil
		}
		return &decrypting{body: resp.Body, r: enc.DecryptStream(resp.Body)}, nil
	}
}

// decrypting checks an encrypted file's hash when its last byte is read,
// so a damaged file fails the read instead of a Close nobody checks.
type decrypting struct {
	body io.Closer
	r    io.ReadCloser
	done bool
}

func (d *decrypting) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if errors.Is(err, io.EOF) && !d.done {
		d.done = true
		if cerr := d.r.Close(); cerr != nil {
			return n, fmt.Errorf("the encrypted file does not match its hash: %w", cerr)
		}
	}
	return n, err
}

func (d *decrypting) Close() error {
	if !d.done {
		d.done = true
		_ = d.r.Close()
	}
	return d.body.Close()
}

// FileLimit implements channels.FileSender: the homeserver's m.upload.size
// (read at Start; 0 when it names none).
func (a *Adapter) FileLimit() int64 { return a.media.uploadSize.Load() }

// SendFile implements channels.FileSender: the file is uploaded to the
// media repository (streamed; encrypted first in an encrypted room), then
// posted as m.image, m.audio, m.video or m.file in the origin's thread,
// the caption as its body and the file name in filename. The event's
// transaction id is derived from the outbox item and part, so a re-send
// after a crash between the post and the outbox's mark gives back the event
// already posted (the second upload is then an unreferenced blob). The
// platform id is the event id.
func (a *Adapter) SendFile(ctx context.Context, to channels.Origin, msg channels.Message) (string, error) {
	a.mu.Lock()
	running := a.running
	a.mu.Unlock()
	f := msg.File
	switch {
	case !running:
		return "", fmt.Errorf("matrix: send file to %s: %w", to, ErrNotStarted)
	case f == nil || f.Open == nil:
		return "", fmt.Errorf("matrix: send file to %s: no file: %w", to, channels.ErrPermanent)
	}
	to, err := a.inRoom(ctx, to, true)
	if err != nil {
		return "", fmt.Errorf("matrix: send file: %w", err)
	}
	if limit := a.FileLimit(); limit > 0 && f.Size > limit {
		return "", fmt.Errorf("matrix: send file %q: %d bytes is over the homeserver's upload limit of %d: %w", f.Name, f.Size, limit, channels.ErrPermanent)
	}
	roomID := id.RoomID(to.ChatID)
	name := f.Name
	if name == "" {
		name = "file"
	}
	mimeType := f.MIME
	if mimeType == "" {
		mimeType = "application/octet-stream"
	}
	rc, err := f.Open(ctx)
	if err != nil {
		return "", fmt.Errorf("matrix: send file %q: open: %w", name, err)
	}
	defer rc.Close()

	content := &event.MessageEventContent{
		MsgType:  mediaType(mimeType),
		Body:     name,
		FileName: name,
		Info:     &event.FileInfo{MimeType: mimeType, Size: int(f.Size)},
		Mentions: &event.Mentions{},
	}
	if caption := strings.TrimSpace(msg.Text); caption != "" {
		content.Body = caption
	}
	var src io.Reader = rc
	var enc *attachment.EncryptedFile
	if a.roomEncrypted(ctx, roomID) {
		enc = attachment.NewEncryptedFile()
		src = enc.EncryptStream(rc)
	}
	up := mautrix.ReqUploadMedia{Content: src, ContentLength: f.Size, ContentType: mimeType, FileName: name}
	if enc != nil {
		up.ContentType, up.FileName = "application/octet-stream", ""
	}
	resp, err := a.client.UploadMedia(ctx, up)
	if err != nil {
		if errors.Is(err, mautrix.MTooLarge) {
			a.loadMediaConfig(ctx)
			return "", fmt.Errorf("matrix: send file %q: the homeserver says it is too large: %w", name, channels.ErrPermanent)
		}
		return "", classifySendError("matrix: upload "+name, err)
	}
	if enc != nil {
		if c, ok := src.(io.Closer); ok {
			_ = c.Close() // fills in the ciphertext's hash
		}
		content.File = &event.EncryptedFileInfo{EncryptedFile: *enc, URL: resp.ContentURI.CUString()}
	} else {
		content.URL = resp.ContentURI.CUString()
	}
	root := id.EventID(to.ThreadID)
	if root != "" {
		content.RelatesTo = a.inThread(roomID, root)
	}
	var req []mautrix.ReqSendEvent
	if msg.ID != "" {
		req = append(req, mautrix.ReqSendEvent{TransactionID: fmt.Sprintf("herald-%s-file-%d", msg.ID, msg.Part)})
	}
	sent, err := a.client.SendMessageEvent(ctx, roomID, event.EventMessage, content, req...)
	if err != nil {
		return "", classifySendError("matrix: send file to "+to.String(), err)
	}
	a.noteOwnEvent(roomID, root, sent.EventID)
	return string(sent.EventID), nil
}

// mediaType picks the message type for a file's MIME type.
func mediaType(mimeType string) event.MessageType {
	switch channels.KindOf(mimeType) {
	case channels.KindImage:
		return event.MsgImage
	case channels.KindAudio:
		return event.MsgAudio
	case channels.KindVideo:
		return event.MsgVideo
	}
	return event.MsgFile
}

// roomEncrypted reports whether the room has encryption on, as far as the
// client's state store knows (no store: not encrypted).
func (a *Adapter) roomEncrypted(ctx context.Context, roomID id.RoomID) bool {
	if a.client.StateStore == nil {
		return false
	}
	enc, err := a.client.StateStore.IsEncrypted(ctx, roomID)
	return err == nil && enc
}
