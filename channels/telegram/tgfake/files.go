package tgfake

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"image"
	_ "image/gif" // sendPhoto checks that a photo decodes
	_ "image/jpeg"
	_ "image/png"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Files, as the Bot API serves them:
//
//   - A person's photo, document, audio, voice or video (In.Photo, …) is a
//     message with a file_id per file (a photo comes in three sizes, the
//     largest last); getFile gives its file_path, and
//     GET /file/bot<token>/<file_path> the bytes. getFile refuses files over
//     20 MB ("Bad Request: file is too big") as the public Bot API does,
//     unless LocalServer(true) (a self-hosted Bot API server).
//   - sendPhoto, sendDocument, sendAudio, sendVideo and sendVoice take a
//     multipart upload (chat_id, message_thread_id, caption and the file),
//     streamed; the fake records the bytes' size and SHA-256. Limits: 50 MB
//     per upload (413 Request Entity Too Large), 10 MB per photo, and a photo
//     must decode (400 IMAGE_PROCESS_FAILED otherwise).

// Upload limits of the public Bot API.
const (
	DownloadLimit = 20 << 20 // getFile
	UploadLimit   = 50 << 20 // send*
	PhotoLimit    = 10 << 20 // sendPhoto
)

// maxKept is how many bytes of an uploaded file the fake keeps for tests
// to compare (and to check a photo); larger ones keep their size and
// SHA-256 only.
const maxKept = PhotoLimit

// FileIn is a file a person sends: Data, or Size bytes that Gen makes anew
// for each download (large files without holding them in memory).
type FileIn struct {
	Name string // file_name (documents, audio, video)
	MIME string // mime_type
	Data []byte
	Size int64
	Gen  func() io.Reader
}

func (f *FileIn) size() int64 {
	if f.Gen != nil {
		return f.Size
	}
	return int64(len(f.Data))
}

func (f *FileIn) reader() io.Reader {
	if f.Gen != nil {
		return io.LimitReader(f.Gen(), f.Size)
	}
	return bytes.NewReader(f.Data)
}

// Pattern returns a Gen for FileIn: size bytes of deterministic noise from
// seed, made as they are read.
func Pattern(seed uint64) func() io.Reader {
	return func() io.Reader { return &noise{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))} }
}

type noise struct{ r *rand.Rand }

func (n *noise) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(n.r.Uint32())
	}
	return len(p), nil
}

// SentFile is one file the bot sent (sendPhoto, sendDocument, …) that the
// fake accepted.
type SentFile struct {
	Method    string // "sendPhoto", "sendDocument", …
	ChatID    int64
	ThreadID  int
	Caption   string
	Name      string // the multipart file name
	MIME      string // the part's Content-Type
	Size      int64
	SHA256    string
	Data      []byte // the bytes when at most 10 MiB
	MessageID int
}

// Wire types of files, with the Bot API's field names.
type photoSize struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	Width        int    `json:"width"`
	Height       int    `json:"height"`
	FileSize     int64  `json:"file_size,omitempty"`
}

type fileObj struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	FileName     string `json:"file_name,omitempty"`
	MimeType     string `json:"mime_type,omitempty"`
	FileSize     int64  `json:"file_size,omitempty"`
	Duration     int    `json:"duration,omitempty"`
	Width        int    `json:"width,omitempty"`
	Height       int    `json:"height,omitempty"`
}

// storedFile is a file the fake serves by file_id.
type storedFile struct {
	id, unique, path string
	f                *FileIn
}

// fileState is the fake's file bookkeeping (guarded by Server.mu).
type fileState struct {
	byID        map[string]*storedFile
	byPath      map[string]*storedFile
	seq         int
	local       bool
	getFiles    int
	downloads   int
	failGetFile []failure
	failDL      []int
	stallDL     int
	stalled     int // downloads stalled so far
	sentFiles   []SentFile
	failSend    []failure
	holdSend    int
	sendCalls   int
}

// addFileLocked registers f under a new file_id in folder ("photos",
// "documents", …). s.mu must be held.
func (s *Server) addFileLocked(folder, ext string, f *FileIn) *storedFile {
	if s.fs.byID == nil {
		s.fs.byID, s.fs.byPath = map[string]*storedFile{}, map[string]*storedFile{}
	}
	s.fs.seq++
	n := s.fs.seq
	sf := &storedFile{
		id:     fmt.Sprintf("AgAC%08dfile", n),
		unique: fmt.Sprintf("AQAD%04d", n),
		path:   fmt.Sprintf("%s/file_%d%s", folder, n, ext),
		f:      f,
	}
	s.fs.byID[sf.id], s.fs.byPath[sf.path] = sf, sf
	return sf
}

func (s *Server) fileObjLocked(folder, defExt string, f *FileIn) *fileObj {
	ext := defExt
	if i := strings.LastIndexByte(f.Name, '.'); i >= 0 {
		ext = f.Name[i:]
	}
	sf := s.addFileLocked(folder, ext, f)
	return &fileObj{FileID: sf.id, FileUniqueID: sf.unique, FileName: f.Name, MimeType: f.MIME, FileSize: f.size()}
}

// photoSizesLocked registers a photo as Telegram does: two smaller
// renditions (their own bytes) and the photo itself, largest last.
func (s *Server) photoSizesLocked(f *FileIn) []photoSize {
	var out []photoSize
	for i, w := range []int{90, 320} {
		thumb := &FileIn{MIME: "image/jpeg", Data: []byte(fmt.Sprintf("thumbnail %d of a photo", i))}
		sf := s.addFileLocked("photos", ".jpg", thumb)
		out = append(out, photoSize{FileID: sf.id, FileUniqueID: sf.unique, Width: w, Height: w * 3 / 4, FileSize: thumb.size()})
	}
	sf := s.addFileLocked("photos", ".jpg", f)
	out = append(out, photoSize{FileID: sf.id, FileUniqueID: sf.unique, Width: 1280, Height: 960, FileSize: f.size()})
	return out
}

// QueueAlbum queues several messages as one album (the same media_group_id),
// in one batch of updates, as Telegram sends a person's several photos or
// files at once; the caption is usually on the first. It returns their
// message_ids.
func (s *Server) QueueAlbum(ins ...In) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fs.seq++
	group := fmt.Sprintf("1357%09d", s.fs.seq)
	var ids []int
	for _, in := range ins {
		in.MediaGroup = group
		id, raw := s.updateLocked(in)
		s.updates = append(s.updates, raw)
		s.updateIDs = append(s.updateIDs, id)
		ids = append(ids, s.nextMsg-1)
	}
	s.notifyLocked()
	return ids
}

// LocalServer makes the fake act as a self-hosted Bot API server: getFile
// serves files of any size.
func (s *Server) LocalServer(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fs.local = on
}

// FailGetFile makes the next n getFile calls fail with status.
func (s *Server) FailGetFile(n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.fs.failGetFile = append(s.fs.failGetFile, failure{status: status, description: describe(status, 0)})
	}
}

// FailDownloads makes the next n file downloads answer HTTP status.
func (s *Server) FailDownloads(n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.fs.failDL = append(s.fs.failDL, status)
	}
}

// StallDownloads makes the next n downloads send a few bytes, then nothing
// until the client hangs up.
func (s *Server) StallDownloads(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fs.stallDL = n
}

// StalledDownloads counts the downloads StallDownloads has stalled so far
// (each is under way, its client waiting, until the client hangs up).
func (s *Server) StalledDownloads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fs.stalled
}

// Downloads counts getFile calls and downloads served whole.
func (s *Server) Downloads() (getFile, served int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fs.getFiles, s.fs.downloads
}

// FailNextFiles makes the next n file sends (sendPhoto, sendDocument, …)
// fail as FailNext does for sendMessage.
func (s *Server) FailNextFiles(n, status, retryAfter int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.fs.failSend = append(s.fs.failSend, failure{status: status, retryAfter: retryAfter, description: describe(status, retryAfter)})
	}
}

// HoldNextFiles makes the next n file sends succeed on the fake's side
// (recorded in SentFiles) without answering until the caller hangs up: a
// crash between Telegram posting a file and the gateway hearing so.
func (s *Server) HoldNextFiles(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fs.holdSend = n
}

// FileSendCalls counts file send calls, failed ones included.
func (s *Server) FileSendCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fs.sendCalls
}

// SentFiles returns the files the bot sent, in order.
func (s *Server) SentFiles() []SentFile {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SentFile(nil), s.fs.sentFiles...)
}

// WaitSentFiles waits until at least n files were sent and returns them; it
// fails the test after timeout (call it from the test goroutine).
func (s *Server) WaitSentFiles(n int, timeout time.Duration) []SentFile {
	s.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		got := append([]SentFile(nil), s.fs.sentFiles...)
		ch := s.changed
		s.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-ch:
		case <-deadline.C:
			s.t.Fatalf("tgfake: waited %s for %d sent files, got %d: %+v", timeout, n, len(got), got)
			return got
		}
	}
}

func (s *Server) getFile(w http.ResponseWriter, p map[string][]string) {
	id := ""
	if v := p["file_id"]; len(v) > 0 {
		id = v[0]
	}
	s.mu.Lock()
	s.fs.getFiles++
	if len(s.fs.failGetFile) > 0 {
		f := s.fs.failGetFile[0]
		s.fs.failGetFile = s.fs.failGetFile[1:]
		s.mu.Unlock()
		writeError(w, f)
		return
	}
	sf, local := s.fs.byID[id], s.fs.local
	s.mu.Unlock()
	switch {
	case sf == nil:
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: invalid file_id"})
	case !local && sf.f.size() > DownloadLimit:
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: file is too big"})
	default:
		writeResult(w, map[string]any{"file_id": sf.id, "file_unique_id": sf.unique, "file_size": sf.f.size(), "file_path": sf.path})
	}
}

// serveFile answers GET /file/bot<token>/<file_path>.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/file/bot")
	token, path, ok := strings.Cut(rest, "/")
	if !ok || token != s.token {
		http.Error(w, `{"ok":false,"error_code":404,"description":"Not Found"}`, http.StatusNotFound)
		return
	}
	s.mu.Lock()
	sf := s.fs.byPath[path]
	fail := 0
	if len(s.fs.failDL) > 0 {
		fail, s.fs.failDL = s.fs.failDL[0], s.fs.failDL[1:]
	}
	stall := s.fs.stallDL > 0
	if stall {
		s.fs.stallDL--
		s.fs.stalled++
	}
	s.mu.Unlock()
	switch {
	case sf == nil:
		http.Error(w, `{"ok":false,"error_code":404,"description":"Not Found"}`, http.StatusNotFound)
		return
	case fail != 0:
		http.Error(w, http.StatusText(fail), fail)
		return
	}
	size := sf.f.size()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	if stall {
		w.WriteHeader(http.StatusOK)
		_, _ = io.CopyN(w, sf.f.reader(), min(size-1, 16))
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		<-r.Context().Done()
		return
	}
	if n, err := io.Copy(w, sf.f.reader()); err == nil && n == size {
		s.mu.Lock()
		s.fs.downloads++
		s.mu.Unlock()
	}
}

// fileMethods are the send methods that take a file, and the field that
// carries it.
var fileMethods = map[string]string{
	"sendPhoto": "photo", "sendDocument": "document", "sendAudio": "audio", "sendVideo": "video", "sendVoice": "voice",
}

// sendFile takes a multipart send* call, streaming the file part.
func (s *Server) sendFile(w http.ResponseWriter, r *http.Request, method string) {
	field := fileMethods[method]
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: there is no " + field + " in the request"})
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: can't parse multipart: " + err.Error()})
		return
	}
	vals := map[string]string{}
	var sf SentFile
	var kept bytes.Buffer
	var got bool
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: can't parse multipart: " + err.Error()})
			return
		}
		if part.FormName() == field && part.FileName() != "" {
			h := sha256.New()
			n, err := io.Copy(io.MultiWriter(h, &capped{w: &kept, n: maxKept}), io.LimitReader(part, UploadLimit+1))
			if err != nil {
				writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: upload cut short"})
				return
			}
			got = true
			sf.Name, sf.MIME, sf.Size, sf.SHA256 = part.FileName(), part.Header.Get("Content-Type"), n, hex.EncodeToString(h.Sum(nil))
			if n <= maxKept {
				sf.Data = bytes.Clone(kept.Bytes())
			}
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(part, 1<<16))
		vals[part.FormName()] = string(b)
	}
	s.mu.Lock()
	s.fs.sendCalls++
	var fail *failure
	if len(s.fs.failSend) > 0 {
		f := s.fs.failSend[0]
		s.fs.failSend = s.fs.failSend[1:]
		fail = &f
	}
	s.mu.Unlock()
	chatID, err := strconv.ParseInt(vals["chat_id"], 10, 64)
	switch {
	case fail != nil:
		writeError(w, *fail)
		return
	case err != nil:
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: chat not found"})
		return
	case !got:
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: there is no " + field + " in the request"})
		return
	case sf.Size > UploadLimit:
		writeError(w, failure{status: http.StatusRequestEntityTooLarge, description: "Request Entity Too Large"})
		return
	case sf.Size == 0:
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: file must be non-empty"})
		return
	case len([]rune(vals["caption"])) > 1024:
		writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: message caption is too long"})
		return
	}
	if method == "sendPhoto" {
		if sf.Size > PhotoLimit {
			writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: PHOTO_SAVE_FILE_INVALID"})
			return
		}
		if sf.Data == nil {
			writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: IMAGE_PROCESS_FAILED"})
			return
		}
		if _, _, err := image.DecodeConfig(bytes.NewReader(sf.Data)); err != nil {
			writeError(w, failure{status: http.StatusBadRequest, description: "Bad Request: IMAGE_PROCESS_FAILED"})
			return
		}
	}
	thread, _ := strconv.Atoi(vals["message_thread_id"])
	sf.Method, sf.ChatID, sf.ThreadID, sf.Caption = method, chatID, thread, vals["caption"]

	s.mu.Lock()
	if f, ok := s.failChats[chatID]; ok {
		s.mu.Unlock()
		writeError(w, f)
		return
	}
	chatType := "private"
	if chatID < 0 {
		chatType = "supergroup"
	}
	m := message{
		MessageID: s.nextMsg, MessageThreadID: thread, IsTopicMessage: thread > 0, From: botUser(),
		Chat: chat{ID: chatID, Type: chatType, IsForum: thread > 0}, Date: time.Now().Unix(), Caption: sf.Caption,
	}
	s.nextMsg++
	stored := &FileIn{Name: sf.Name, MIME: sf.MIME, Data: sf.Data}
	if method == "sendPhoto" {
		m.Photo = s.photoSizesLocked(stored)
	} else {
		m.Document = s.fileObjLocked("documents", "", stored)
	}
	s.messages[msgKey{chatID, m.MessageID}] = m
	sf.MessageID = m.MessageID
	s.fs.sentFiles = append(s.fs.sentFiles, sf)
	hold := s.fs.holdSend > 0
	if hold {
		s.fs.holdSend--
	}
	s.notifyLocked()
	s.mu.Unlock()
	if hold {
		// Read the body to its end first: only then does net/http watch
		// the connection and end the request's context when the caller
		// hangs up (or Close cuts it).
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
		return
	}
	writeResult(w, m)
}

type capped struct {
	w io.Writer
	n int64
}

func (c *capped) Write(b []byte) (int, error) {
	if c.n > 0 {
		k := min(int64(len(b)), c.n)
		_, _ = c.w.Write(b[:k])
		c.n -= k
	}
	return len(b), nil
}
