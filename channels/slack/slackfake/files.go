package slackfake

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Files: the fake speaks Slack's file endpoints as slack-go calls them.
//
//   - A person's file (AddFile) has url_private and url_private_download on
//     the fake's own host (the API URL's host, which slack-go and Herald
//     allow the bot token to go to). A download with the bot token as a
//     Bearer header gets the bytes; without it, Slack's answer: a redirect
//     to the sign-in page (an HTML page with the file's path in redir).
//   - Upload is Slack's three steps (files.uploadV2 in the SDKs):
//     files.getUploadURLExternal (filename, length) → an upload URL and a
//     file id; a multipart POST of the bytes to that URL; then
//     files.completeUploadExternal (files, channel_id, thread_ts,
//     initial_comment or blocks) shares the file as a message of the bot in
//     the channel or thread. conversations.replies and .history list those
//     messages with their files and blocks, so a client can find a share
//     whose answer it never heard.

// maxKept is how many bytes of an uploaded file the fake keeps for tests to
// compare; larger uploads keep only their size and SHA-256.
const maxKept = 8 << 20

// File is a file a person shared (AddFile): its id and what a message
// event says of it.
type File struct {
	ID       string
	Name     string
	Mimetype string
	Size     int64
	// Mode is Slack's file mode: "hosted" (default), or "hidden_by_limit",
	// "tombstone", "external" for files the bot cannot download.
	Mode string
	data []byte
	gen  func() io.Reader
}

// Upload is one file the bot uploaded and completed: where it was shared
// and what arrived at the upload URL.
type Upload struct {
	FileID   string
	Name     string // the filename given to files.getUploadURLExternal
	Title    string
	Length   int64 // the length announced to files.getUploadURLExternal
	Size     int64 // the bytes that arrived
	SHA256   string
	Data     []byte // the bytes, when at most 8 MiB
	Channel  string // "" when completed without a channel (a private file)
	ThreadTS string
	Comment  string // initial_comment
	Blocks   string // the blocks form field (JSON), "" if none
	TS       string // the ts of the share message
}

// pendingUpload is a file id handed out by files.getUploadURLExternal.
type pendingUpload struct {
	name     string
	length   int64
	uploaded bool
	size     int64
	sum      string
	data     []byte
}

// fileState is the fake's file bookkeeping (guarded by Server.mu).
type fileState struct {
	files         map[string]*File
	pending       map[string]*pendingUpload // file id → upload
	uploads       []Upload
	downloads     int // downloads answered with the bytes
	deniedDL      int // downloads without the bot token
	failDL        []int
	stallDL       int
	stalled       int // downloads stalled so far
	getURLCalls   int
	completeCalls int
	failComplete  []string // Slack error codes for the next completes
	holdComplete  int
}

func (s *Server) fileRoutes(c interface {
	Handle(string, http.HandlerFunc)
}) {
	c.Handle("/files.getUploadURLExternal", s.getUploadURL)
	c.Handle("/files.completeUploadExternal", s.completeUpload)
	c.Handle("/upload/", s.uploadBytes)
	c.Handle("/files-pri/", s.download)
	c.Handle("/signin", s.signin)
}

// AddFile registers a file a person shares, with its bytes; send it with
// SendMentionFiles, SendDMFiles or SendMessageFiles.
func (s *Server) AddFile(name, mimetype string, data []byte) *File {
	f := &File{Name: name, Mimetype: mimetype, Size: int64(len(data)), data: data}
	s.addFile(f)
	return f
}

// AddFileFunc registers a file of size bytes whose content gen makes anew
// for each download (large files without holding them in memory).
func (s *Server) AddFileFunc(name, mimetype string, size int64, gen func() io.Reader) *File {
	f := &File{Name: name, Mimetype: mimetype, Size: size, gen: gen}
	s.addFile(f)
	return f
}

func (s *Server) addFile(f *File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	f.ID = fmt.Sprintf("F%08d", s.seq)
	if f.Mode == "" {
		f.Mode = "hosted"
	}
	if s.fs.files == nil {
		s.fs.files = map[string]*File{}
	}
	s.fs.files[f.ID] = f
}

// FileObject is the file as Slack shows it in a message event.
func (s *Server) FileObject(f *File) map[string]any {
	base := strings.TrimSuffix(s.URL(), "/")
	path := "/files-pri/" + TeamID + "-" + f.ID + "/"
	name := url.PathEscape(f.Name)
	o := map[string]any{
		"id": f.ID, "created": s.tsBase, "timestamp": s.tsBase, "name": f.Name, "title": f.Name,
		"mimetype": f.Mimetype, "filetype": strings.TrimPrefix(extOf(f.Name), "."), "pretty_type": f.Mimetype,
		"user": UserID, "mode": f.Mode, "editable": false, "is_external": f.Mode == "external",
		"size": f.Size, "is_public": true,
	}
	if f.Mode != "hidden_by_limit" && f.Mode != "tombstone" {
		o["url_private"] = base + path + name
		o["url_private_download"] = base + path + "download/" + name
	}
	return o
}

// SendMentionFiles sends a message mentioning the bot with files attached,
// as Slack does: an app_mention carrying the files and a message event of
// subtype file_share for the same ts. It returns the message's ts.
func (s *Server) SendMentionFiles(channel, user, text, threadTS string, files ...*File) string {
	if !strings.Contains(text, "<@"+BotUserID) {
		text = strings.TrimSpace("<@" + BotUserID + "> " + text)
	}
	ts := s.NextTS()
	m := MentionEvent(channel, user, text, ts, threadTS)
	m["files"], m["upload"] = s.fileObjects(files), true
	s.SendEvent(m)
	s.SendEvent(s.fileShareEvent(channelType(channel), channel, user, text, ts, threadTS, files))
	return ts
}

// SendDMFiles sends a direct message with files (a file_share message
// event, channel_type im) and returns its ts.
func (s *Server) SendDMFiles(channel, user, text, threadTS string, files ...*File) string {
	ts := s.NextTS()
	s.SendEvent(s.fileShareEvent("im", channel, user, text, ts, threadTS, files))
	return ts
}

// SendMessageFiles sends a channel message (or thread reply) with files and
// no mention, as one file_share message event, and returns its ts.
func (s *Server) SendMessageFiles(channel, user, text, threadTS string, files ...*File) string {
	ts := s.NextTS()
	s.SendEvent(s.fileShareEvent(channelType(channel), channel, user, text, ts, threadTS, files))
	return ts
}

func (s *Server) fileShareEvent(chType, channel, user, text, ts, threadTS string, files []*File) map[string]any {
	m := MessageEvent(chType, channel, user, text, ts, threadTS)
	m["subtype"], m["files"], m["upload"], m["display_as_bot"] = "file_share", s.fileObjects(files), true, false
	return m
}

func (s *Server) fileObjects(files []*File) []map[string]any {
	out := make([]map[string]any, 0, len(files))
	for _, f := range files {
		out = append(out, s.FileObject(f))
	}
	return out
}

// FailDownloads makes the next n file downloads answer HTTP status.
func (s *Server) FailDownloads(n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.fs.failDL = append(s.fs.failDL, status)
	}
}

// StallDownloads makes the next n file downloads send the headers and a
// first few bytes, then nothing until the client hangs up (a stalled
// download the client's deadline must end).
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

// Downloads counts the downloads answered with the file's bytes, and those
// refused for want of the bot token.
func (s *Server) Downloads() (served, denied int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fs.downloads, s.fs.deniedDL
}

// download serves /files-pri/<team>-<id>/[download/]<name> to the bot token.
func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/files-pri/")
	dir, _, _ := strings.Cut(rest, "/")
	fileID := strings.TrimPrefix(dir, TeamID+"-")
	if r.Header.Get("Authorization") != "Bearer "+BotToken {
		// Slack sends a browser (or a client without the token) to the
		// workspace's sign-in page.
		s.mu.Lock()
		s.fs.deniedDL++
		s.mu.Unlock()
		http.Redirect(w, r, "/signin?redir="+url.QueryEscape(r.URL.Path), http.StatusFound)
		return
	}
	s.mu.Lock()
	f := s.fs.files[fileID]
	fail := 0
	if len(s.fs.failDL) > 0 {
		fail, s.fs.failDL = s.fs.failDL[0], s.fs.failDL[1:]
	}
	stall := s.fs.stallDL > 0
	if stall {
		s.fs.stallDL--
		s.fs.stalled++
	}
	if f != nil && fail == 0 && !stall {
		s.fs.downloads++
	}
	s.mu.Unlock()
	switch {
	case f == nil || f.Mode == "hidden_by_limit" || f.Mode == "tombstone":
		http.Error(w, "file not found", http.StatusNotFound)
		return
	case fail != 0:
		http.Error(w, http.StatusText(fail), fail)
		return
	}
	w.Header().Set("Content-Type", f.Mimetype)
	w.Header().Set("Content-Length", strconv.FormatInt(f.Size, 10))
	if stall {
		w.WriteHeader(http.StatusOK)
		_, _ = io.CopyN(w, f.reader(), min(f.Size-1, 16))
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
		return
	}
	_, _ = io.Copy(w, f.reader())
}

func (f *File) reader() io.Reader {
	if f.gen != nil {
		return io.LimitReader(f.gen(), f.Size)
	}
	return bytes.NewReader(f.data)
}

// signin is the page Slack shows a client without access to a file.
func (s *Server) signin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = io.WriteString(w, "<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to Herald Test</body></html>")
}

// botAuthorized checks the token of an API call (form field or Bearer).
func botAuthorized(r *http.Request) bool {
	return r.Header.Get("Authorization") == "Bearer "+BotToken || r.Form.Get("token") == BotToken
}

// botCall parses the form of an API call and checks its bot token; when
// either fails it answers as Slack does and reports false.
func botCall(w http.ResponseWriter, r *http.Request) bool {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return false
	}
	if !botAuthorized(r) {
		writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": "not_authed"})
		return false
	}
	return true
}

func (s *Server) getUploadURL(w http.ResponseWriter, r *http.Request) {
	if !botCall(w, r) {
		return
	}
	name := r.Form.Get("filename")
	length, err := strconv.ParseInt(r.Form.Get("length"), 10, 64)
	if name == "" || err != nil || length <= 0 {
		writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": "invalid_arguments"})
		return
	}
	s.mu.Lock()
	s.fs.getURLCalls++
	s.seq++
	id := fmt.Sprintf("F0UP%06d", s.seq)
	if s.fs.pending == nil {
		s.fs.pending = map[string]*pendingUpload{}
	}
	s.fs.pending[id] = &pendingUpload{name: name, length: length}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "upload_url": s.URL() + "upload/v1/" + id, "file_id": id})
}

// uploadBytes takes the multipart POST of a file's bytes to its upload URL.
func (s *Server) uploadBytes(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/upload/v1/")
	s.mu.Lock()
	p := s.fs.pending[id]
	s.mu.Unlock()
	if p == nil {
		http.Error(w, "unknown upload", http.StatusNotFound)
		return
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		// Slack also takes the raw bytes as the body.
		s.takeUpload(w, p, r.Body)
		return
	}
	mr, err := r.MultipartReader()
	if err != nil || params["boundary"] == "" {
		http.Error(w, "bad multipart body", http.StatusBadRequest)
		return
	}
	for {
		part, err := mr.NextPart()
		if err != nil {
			http.Error(w, "no file part", http.StatusBadRequest)
			return
		}
		if part.FormName() == "file" {
			s.takeUpload(w, p, part)
			return
		}
	}
}

func (s *Server) takeUpload(w http.ResponseWriter, p *pendingUpload, body io.Reader) {
	h := sha256.New()
	var kept bytes.Buffer
	n, err := io.Copy(io.MultiWriter(h, &limitedWriter{w: &kept, n: maxKept}), body)
	if err != nil {
		http.Error(w, "upload cut short", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	p.uploaded, p.size, p.sum = true, n, hex.EncodeToString(h.Sum(nil))
	if n <= maxKept {
		p.data = kept.Bytes()
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "OK - %d", n)
}

type limitedWriter struct {
	w io.Writer
	n int64
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	if l.n > 0 {
		k := min(int64(len(b)), l.n)
		_, _ = l.w.Write(b[:k])
		l.n -= k
	}
	return len(b), nil
}

// FailNextCompletes makes the next files.completeUploadExternal calls
// answer {"ok":false,"error":code}, one code per call ("ratelimited"
// answers HTTP 429 with Retry-After 1).
func (s *Server) FailNextCompletes(codes ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fs.failComplete = append(s.fs.failComplete, codes...)
}

// HoldNextCompletes makes the next n files.completeUploadExternal calls
// share the file (it shows in the channel) without answering the caller
// until it hangs up: a crash between Slack sharing a file and the gateway
// hearing so.
func (s *Server) HoldNextCompletes(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fs.holdComplete = n
}

// UploadCalls counts files.getUploadURLExternal and
// files.completeUploadExternal calls.
func (s *Server) UploadCalls() (getURL, complete int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fs.getURLCalls, s.fs.completeCalls
}

// Uploads returns the completed uploads, in order.
func (s *Server) Uploads() []Upload {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Upload(nil), s.fs.uploads...)
}

// WaitUploads waits until at least n uploads were completed and returns
// them; on timeout it reports a test error and returns what it has.
func (s *Server) WaitUploads(n int, timeout time.Duration) []Upload {
	var got []Upload
	if !s.waitFor(timeout, func() bool { got = s.Uploads(); return len(got) >= n }) {
		s.t.Errorf("slackfake: waited %s for %d uploads, got %d: %+v", timeout, n, len(got), got)
	}
	return got
}

func (s *Server) completeUpload(w http.ResponseWriter, r *http.Request) {
	if !botCall(w, r) {
		return
	}
	var files []struct {
		ID    string `json:"id"`
		Title string `json:"title"`
	}
	if err := json.Unmarshal([]byte(r.Form.Get("files")), &files); err != nil || len(files) == 0 {
		writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": "invalid_arguments"})
		return
	}
	s.mu.Lock()
	s.fs.completeCalls++
	if len(s.fs.failComplete) > 0 {
		code := s.fs.failComplete[0]
		s.fs.failComplete = s.fs.failComplete[1:]
		s.mu.Unlock()
		if code == "ratelimited" {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "ratelimited", http.StatusTooManyRequests)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": code})
		return
	}
	channel, thread := r.Form.Get("channel_id"), r.Form.Get("thread_ts")
	if channel == "" {
		if chs := r.Form.Get("channels"); chs != "" {
			channel, _, _ = strings.Cut(chs, ",")
		}
	}
	var done []Upload
	var out []map[string]any
	for _, f := range files {
		p := s.fs.pending[f.ID]
		if p == nil || !p.uploaded {
			s.mu.Unlock()
			writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": "file_not_found"})
			return
		}
		if p.size != p.length {
			s.mu.Unlock()
			writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": "file_upload_size_mismatch"})
			return
		}
		title := f.Title
		if title == "" {
			title = p.name
		}
		done = append(done, Upload{FileID: f.ID, Name: p.name, Title: title, Length: p.length, Size: p.size,
			SHA256: p.sum, Data: p.data, Channel: channel, ThreadTS: thread,
			Comment: r.Form.Get("initial_comment"), Blocks: r.Form.Get("blocks")})
		out = append(out, map[string]any{"id": f.ID, "title": title})
		delete(s.fs.pending, f.ID)
	}
	if channel != "" {
		s.seq++
		ts := fmt.Sprintf("%d.%06d", s.tsBase, s.seq)
		for i := range done {
			done[i].TS = ts
		}
	}
	s.fs.uploads = append(s.fs.uploads, done...)
	hold := s.fs.holdComplete > 0
	if hold {
		s.fs.holdComplete--
	}
	s.mu.Unlock()
	if hold {
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "files": out})
}

// shareMessages are the bot's file shares in channel kept by keep, as
// conversations.replies/history show them. s.mu must be held.
func (s *Server) shareMessages(channel string, keep func(threadTS string) bool) []tsMessage {
	byTS := map[string][]Upload{}
	var order []string
	for _, u := range s.fs.uploads {
		if u.Channel != channel || u.TS == "" || !keep(u.ThreadTS) {
			continue
		}
		if _, ok := byTS[u.TS]; !ok {
			order = append(order, u.TS)
		}
		byTS[u.TS] = append(byTS[u.TS], u)
	}
	var out []tsMessage
	base := strings.TrimSuffix(s.URL(), "/")
	for _, ts := range order {
		ups := byTS[ts]
		var files []map[string]any
		for _, u := range ups {
			files = append(files, map[string]any{"id": u.FileID, "name": u.Name, "title": u.Title, "size": u.Size,
				"user": BotUserID, "mode": "hosted",
				"url_private": base + "/files-pri/" + TeamID + "-" + u.FileID + "/" + url.PathEscape(u.Name)})
		}
		m := map[string]any{"type": "message", "user": BotUserID, "bot_id": BotID, "text": ups[0].Comment, "ts": ts,
			"thread_ts": ups[0].ThreadTS, "files": files, "upload": true, "display_as_bot": false}
		if b := ups[0].Blocks; b != "" {
			var blocks any
			if json.Unmarshal([]byte(b), &blocks) == nil {
				m["blocks"] = blocks
			}
		}
		out = append(out, tsMessage{ts: ts, msg: m})
	}
	return out
}

type tsMessage struct {
	ts  string
	msg map[string]any
}

func sortByTS(ms []tsMessage) {
	sort.SliceStable(ms, func(i, j int) bool { return TSLess(ms[i].ts, ms[j].ts) })
}

// TSLess orders Slack timestamps "<seconds>.<micro>" numerically: a
// message posted before another has the lesser ts.
func TSLess(a, b string) bool {
	as, af, _ := strings.Cut(a, ".")
	bs, bf, _ := strings.Cut(b, ".")
	if len(as) != len(bs) {
		return len(as) < len(bs)
	}
	if as != bs {
		return as < bs
	}
	return af < bf
}

func extOf(name string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return name[i:]
	}
	return ""
}

// RememberUpload records a file share as if the bot had completed it (a
// share Slack made just before the gateway died, so the gateway never heard
// the answer). FileID and TS are filled in when empty; it returns the
// upload as recorded.
func (s *Server) RememberUpload(u Upload) Upload {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	if u.FileID == "" {
		u.FileID = fmt.Sprintf("F0UP%06d", s.seq)
	}
	if u.TS == "" && u.Channel != "" {
		u.TS = fmt.Sprintf("%d.%06d", s.tsBase, s.seq)
	}
	if u.Title == "" {
		u.Title = u.Name
	}
	s.fs.uploads = append(s.fs.uploads, u)
	return u
}
