package web

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/media"
)

// File is a file on a web chat message (SPEC §18): its id (the SHA-256 of
// its bytes), name, type sniffed from the content, size, and the address
// that serves it to the conversation's client.
type File struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	MIME string `json:"mime"`
	Size int64  `json:"size"`
	URL  string `json:"url,omitempty"`
}

// FileStore serves the stored files of the conversations.
type FileStore interface {
	// OpenFile streams file id when the conversation of client names it
	// (a message of it or a reply to it holds the file); an error wrapping
	// ErrNoFile otherwise.
	OpenFile(ctx context.Context, client, id string) (io.ReadCloser, File, error)
}

// ErrNoFile: no such file in the client's conversation.
var ErrNoFile = errors.New("no such file in this conversation")

// fileURL is the address of a conversation's file.
func fileURL(client, id string) string {
	return "api/files/" + id + "?client=" + url.QueryEscape(client)
}

// withURLs gives an entry's files their addresses.
func withURLs(client string, e Entry) Entry {
	if len(e.Files) == 0 {
		return e
	}
	files := make([]File, len(e.Files))
	for i, f := range e.Files {
		f.URL = fileURL(client, f.ID)
		files[i] = f
	}
	e.Files = files
	return e
}

// upload is one file of a post, spooled to a temp file while it is read.
type upload struct {
	name, claimed string
	path          string
	size          int64
	id            string
	mime          string
	tooBig        bool
}

// spool copies r into a temp file in dir, hashing it and keeping its head
// for sniffing; past limit it stops reading and marks the upload too big.
func spool(dir string, r io.Reader, limit int64, name, claimed string) (*upload, error) {
	f, err := os.CreateTemp(dir, "web-*")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	u := &upload{name: name, claimed: claimed, path: f.Name()}
	h := sha256.New()
	head := make([]byte, 0, 64<<10)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if u.size+int64(n) > limit {
				u.tooBig = true
				u.size += int64(n)
				_, _ = io.Copy(io.Discard, r) // the rest of the part is skipped, not stored
				break
			}
			if room := cap(head) - len(head); room > 0 {
				head = append(head, buf[:min(room, n)]...)
			}
			h.Write(buf[:n])
			if _, err := f.Write(buf[:n]); err != nil {
				return u, err
			}
			u.size += int64(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return u, rerr
		}
	}
	u.id = hex.EncodeToString(h.Sum(nil))
	u.mime, _ = media.Sniff(head, claimed)
	return u, nil
}

// attachment hands the spooled upload to the gateway's intake.
func (u *upload) attachment() channels.Attachment {
	kind := channels.KindFile
	switch {
	case media.IsImage(u.mime):
		kind = channels.KindImage
	case media.IsAudio(u.mime):
		kind = channels.KindAudio
	}
	a := channels.Attachment{Name: u.name, MIME: u.claimed, Size: u.size, Kind: kind}
	if u.tooBig {
		a.Size = u.size // over the limit: intake says so without reading
		return a
	}
	path := u.path
	a.Open = func(ctx context.Context) (io.ReadCloser, error) { return os.Open(path) }
	return a
}

// postForm is a post's client, text and files, read from multipart/form-data
// or JSON with base64 files.
type postForm struct {
	Client  string
	Text    string
	uploads []*upload
}

func (p *postForm) cleanup() {
	for _, u := range p.uploads {
		os.Remove(u.path)
	}
}

// jsonFile is a file of a JSON post: {"name", "mime", "data": base64}.
type jsonFile struct {
	Name string `json:"name"`
	MIME string `json:"mime"`
	Data string `json:"data"`
}

// readMultipart reads a multipart/form-data post, spooling each "file" part
// (never whole in memory). The client field must come before the files:
// admit checks it before the first file is read (errRefused when it
// refused the post).
func (a *Adapter) readMultipart(r *http.Request, mr *multipart.Reader, admit func(client string) bool) (*postForm, int, error) {
	p := &postForm{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return p, 0, nil
		}
		if err != nil {
			return p, http.StatusBadRequest, fmt.Errorf("multipart body: %w", err)
		}
		switch part.FormName() {
		case "client", "text":
			b, err := io.ReadAll(io.LimitReader(part, MaxTextBytes+1))
			if err != nil {
				return p, http.StatusBadRequest, fmt.Errorf("multipart field %s: %w", part.FormName(), err)
			}
			if part.FormName() == "client" {
				p.Client = string(b)
			} else {
				p.Text = string(b)
			}
		case "file":
			if p.Client == "" {
				return p, http.StatusBadRequest, errors.New("multipart body: the client field must come before the file parts")
			}
			if !admit(p.Client) {
				return p, 0, errRefused
			}
			if len(p.uploads) >= a.maxFiles()+1 { // one over the limit is told; more are not read
				_, _ = io.Copy(io.Discard, part)
				continue
			}
			u, err := spool(a.spoolDir(), part, a.maxFileBytes(), part.FileName(), part.Header.Get("Content-Type"))
			if u != nil {
				p.uploads = append(p.uploads, u)
			}
			if err != nil {
				return p, http.StatusBadRequest, fmt.Errorf("file %q: %w", part.FileName(), err)
			}
		default:
			_, _ = io.Copy(io.Discard, part)
		}
	}
}

// readJSONFiles spools the base64 files of a JSON post.
func (a *Adapter) readJSONFiles(p *postForm, files []jsonFile) (int, error) {
	for i, f := range files {
		if i > a.maxFiles() {
			break
		}
		u, err := spool(a.spoolDir(), base64.NewDecoder(base64.StdEncoding, strings.NewReader(f.Data)), a.maxFileBytes(), f.Name, f.MIME)
		if u != nil {
			p.uploads = append(p.uploads, u)
		}
		if err != nil {
			return http.StatusBadRequest, fmt.Errorf("files[%d] (%q): data is not base64: %w", i, f.Name, err)
		}
	}
	return 0, nil
}

func (a *Adapter) maxFiles() int {
	_, n := a.fileLimits()
	return n
}

// fileLimits are the post's limits: attachments.maxBytes and maxFiles.
func (a *Adapter) fileLimits() (int64, int) {
	b, n := a.opts.MaxFileBytes, a.opts.MaxFiles
	if a.opts.FileLimits != nil {
		b, n = a.opts.FileLimits()
	}
	if n <= 0 {
		n = 10
	}
	if b <= 0 {
		b = 20_000_000
	}
	return b, n
}

func (a *Adapter) spoolDir() string {
	if a.opts.SpoolDir != "" {
		_ = os.MkdirAll(a.opts.SpoolDir, 0o700)
		return a.opts.SpoolDir
	}
	return os.TempDir()
}

// isMultipart reports whether r posts multipart/form-data.
func isMultipart(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "multipart/form-data"
}

// handleFile serves GET /api/files/{id}?client=: a file of the client's
// conversation, under the same guard as its messages. The bytes go as
// their sniffed type with nosniff and a sandboxing CSP, as an attachment
// unless they are an image: nothing from a file runs or renders as HTML.
func (a *Adapter) handleFile(w http.ResponseWriter, r *http.Request) {
	client := r.URL.Query().Get("client")
	if !ValidClient(client) {
		writeError(w, http.StatusBadRequest, "client: "+ErrInvalidClient.Error())
		return
	}
	o, ok := a.ownershipFor(w, r, client, "the file could not be read; try again")
	if !ok || a.refuseClient(w, r, o, client) {
		return
	}
	if o == unclaimed && a.offLoopback(r) {
		// Like its messages: a client with no secret yet (a conversation
		// from before client secrets) is shown to no one off loopback.
		writeError(w, http.StatusForbidden, "client "+client+" has no clientSecret yet: its files are served only to the browser that owns it")
		return
	}
	if a.opts.Files == nil {
		writeError(w, http.StatusNotFound, ErrNoFile.Error())
		return
	}
	id := r.PathValue("id")
	rc, f, err := a.opts.Files.OpenFile(r.Context(), client, id)
	if errors.Is(err, ErrNoFile) {
		writeError(w, http.StatusNotFound, ErrNoFile.Error())
		return
	}
	if err != nil {
		a.log.Error("web file not read", zap.String("client", client), zap.Error(err))
		w.Header().Set("Retry-After", strconv.Itoa(int(unavailableRetry.Seconds())))
		writeError(w, http.StatusServiceUnavailable, "the file could not be read; try again")
		return
	}
	defer rc.Close()
	h := w.Header()
	ct := f.MIME
	if !media.IsImage(ct) && ct != "application/pdf" && !strings.HasPrefix(ct, "audio/") {
		ct = "application/octet-stream"
	}
	h.Set("Content-Type", ct)
	h.Set("Content-Length", strconv.FormatInt(f.Size, 10))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("Cache-Control", "private, max-age=86400, immutable")
	disp := "attachment"
	if media.IsImage(f.MIME) {
		disp = "inline"
	}
	name := f.Name
	if name == "" {
		name = id
	}
	h.Set("Content-Disposition", mime.FormatMediaType(disp, map[string]string{"filename": name}))
	_, _ = io.Copy(w, rc)
}

// SendFile implements channels.FileSender: the file shows in the client's
// conversation as a message of its own (the caption its text), once even
// when the outbox sends it again.
func (a *Adapter) SendFile(ctx context.Context, to channels.Origin, msg channels.Message) (string, error) {
	if msg.File == nil {
		return "", fmt.Errorf("web: send file: no file: %w", channels.ErrPermanent)
	}
	f := msg.File
	m := msg
	m.File = nil
	e, err := a.entry(to, m)
	if err != nil {
		return "", err
	}
	e.Files = []File{{ID: f.ID, Name: f.Name, MIME: f.MIME, Size: f.Size}}
	if msg.ID != "" {
		e.Key = fmt.Sprintf("outbox:%s:%d", msg.ID, msg.Part)
	}
	e.RunID = "" // the announce's text holds the run id; its files are further entries
	seq, err := a.append(ctx, to.ChatID, e)
	if err != nil {
		return "", fmt.Errorf("web: send file to %s: %w", to.ChatID, err)
	}
	return strconv.FormatInt(seq, 10), nil
}

// FileLimit implements channels.FileSender: the web chat has no limit of
// its own (attachments.maxBytes bounds what is stored).
func (a *Adapter) FileLimit() int64 { return 0 }

func (a *Adapter) maxFileBytes() int64 {
	b, _ := a.fileLimits()
	return b
}
