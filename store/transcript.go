package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"
)

// TranscriptVersion is the version written in new transcript headers.
const TranscriptVersion = 1

// Transcript is an open JSONL transcript: a header line, then one line per
// message. Every Append is one write(2) of one whole line straight to the
// file (or one committed row on PostgreSQL), so a line is stored when
// Append returns and a killed process loses nothing it appended. Safe for
// concurrent use.
type Transcript struct {
	path string
	mu   sync.Mutex
	out  lineSink // nil once closed
}

// lineSink is where a transcript's lines go: a file or database rows.
type lineSink interface {
	write(ctx context.Context, lines []byte) error // whole lines, each with its newline, stored together
	sync(ctx context.Context) error
	close() error
}

// fileSink appends to a transcript file: each line opens the file, writes
// and closes it, so a transcript holds no file descriptor between lines —
// 10,000 runs in flight do not hold 10,000 open files (issue 30) — except
// while a burst of lines is being written (Hold).
//
// A new transcript's file is made by its first lines, which go out with
// the header in one write (header holds it until then, encoded only
// then): a sub-agent run opens a new transcript and writes its first
// lines with its first answer, and each open of a file cost as much as
// its write (docs/performance.md). The fields are guarded by the
// Transcript's mu.
type fileSink struct {
	path   string
	header *TranscriptHeader // a new file's header, not written yet
	held   *os.File          // open while the Transcript is held (Hold)
}

func (s *fileSink) write(_ context.Context, lines []byte) error {
	if s.held != nil {
		_, err := s.held.Write(lines)
		return descriptorError(err, false)
	}
	if s.header == nil {
		return descriptorError(appendFile(s.path, lines, false), false)
	}
	err := s.create(lines)
	if err == nil {
		s.header = nil
	}
	return err
}

// create makes the file with the header and lines, its folders (0700) as
// needed. A file someone made meanwhile is opened as openFileTranscript
// opens an existing one, and lines go after its lines (its own header,
// when it had none).
func (s *fileSink) create(lines []byte) error {
	header, err := headerLine(*s.header)
	if err != nil {
		return err
	}
	b := append(header, lines...)
	err = appendFile(s.path, b, true)
	if errors.Is(err, fs.ErrNotExist) { // its folder is missing
		if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
			return err
		}
		err = appendFile(s.path, b, true)
	}
	if !errors.Is(err, fs.ErrExist) {
		return descriptorError(err, false)
	}
	if err := openTranscriptFile(s.path, *s.header); err != nil {
		return err
	}
	if len(lines) == 0 {
		return nil
	}
	return descriptorError(appendFile(s.path, lines, false), false)
}

// headerLine is h encoded as a transcript's first line.
func headerLine(h TranscriptHeader) ([]byte, error) {
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode header: %w", err)
	}
	return append(b, '\n'), nil
}

func (s *fileSink) sync(context.Context) error {
	if s.header != nil {
		return nil // nothing written yet
	}
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return descriptorError(err, false)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// close writes the header of a new transcript no line was written to, so
// an opened transcript always has its file.
func (s *fileSink) close() error {
	if s.held != nil {
		s.held.Close()
		s.held = nil
	}
	if s.header == nil {
		return nil
	}
	err := s.create(nil)
	s.header = nil
	return err
}

// openFileTranscript opens the transcript file at path for appending. A
// missing file is made by the first line written (or by Close), its
// folders (0700) as needed, with the header line first (Type "session"
// and Version 1 unless set; CreatedAt now unless set). An existing file
// gets the header when it is empty, and a torn last line left by a crash
// is cut off first, so new lines never run into it (with h.Fresh, by the
// first write rather than now). The file is not held open between lines.
func openFileTranscript(ctx context.Context, path string, h TranscriptHeader) (*Transcript, error) {
	h = h.withDefaults()
	sink := &fileSink{path: path}
	var err error
	if !h.Fresh {
		err = openTranscriptFile(path, h)
	}
	if h.Fresh || errors.Is(err, fs.ErrNotExist) {
		sink.header, err = &h, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open transcript %s: %w", path, err)
	}
	return newTranscript(ctx, path, sink, false, h)
}

// openTranscriptFile readies the existing transcript file at path for
// appending: a torn last line is cut off, and an empty file gets the
// header h. A missing file is an error wrapping fs.ErrNotExist.
func openTranscriptFile(path string, h TranscriptHeader) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return descriptorError(err, false)
	}
	size, err := cutTornLine(f)
	if err == nil && size == 0 {
		var header []byte
		if header, err = headerLine(h); err == nil {
			_, err = f.Write(header)
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// newTranscript wraps out, writing the header h (with its defaults) first
// when the transcript is empty.
func newTranscript(ctx context.Context, path string, out lineSink, empty bool, h TranscriptHeader) (*Transcript, error) {
	t := &Transcript{path: path, out: out}
	if empty {
		b, err := headerLine(h.withDefaults())
		if err == nil {
			err = t.write(ctx, b)
		}
		if err != nil {
			out.close()
			return nil, fmt.Errorf("transcript %s: %w", path, err)
		}
	}
	return t, nil
}

// withDefaults is h with Type "session", Version TranscriptVersion and
// CreatedAt now where they are unset.
func (h TranscriptHeader) withDefaults() TranscriptHeader {
	if h.Type == "" {
		h.Type = "session"
	}
	if h.Version == 0 {
		h.Version = TranscriptVersion
	}
	if h.CreatedAt.IsZero() {
		h.CreatedAt = time.Now().UTC()
	}
	return h
}

// cutTornLine truncates f after its last newline when it does not end with
// one, and returns the resulting size.
func cutTornLine(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := fi.Size()
	if size == 0 {
		return 0, nil
	}
	// The usual transcript ends with a newline: one byte tells. (A 64 KB
	// buffer here lived on the stack and grew the goroutine of every run
	// opening its transcript to 128 KB, which it kept while its model
	// call was in flight: docs/performance.md.)
	var last [1]byte
	if _, err := f.ReadAt(last[:], size-1); err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	if last[0] == '\n' {
		return size, nil
	}
	buf := make([]byte, min(size, 64<<10)) // on the heap: its size is not constant
	end := size
	for end > 0 {
		n := int64(len(buf))
		if n > end {
			n = end
		}
		if _, err := f.ReadAt(buf[:n], end-n); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			end = end - n + int64(i) + 1
			break
		}
		end -= n
	}
	if err := f.Truncate(end); err != nil {
		return 0, err
	}
	return end, nil
}

// Path returns the transcript's file path.
func (t *Transcript) Path() string { return t.path }

// Append writes e as one JSON line (Type defaults to "message", Timestamp
// to now). A line whose write started is finished even if ctx is cancelled
// meanwhile (a stopped turn still records how far it got); ctx bounds the
// wait and carries the caller's values.
func (t *Transcript) Append(ctx context.Context, e TranscriptEntry) error {
	return t.AppendLines(ctx, e)
}

// AppendLines writes es as consecutive lines, as Append writes one, in
// one write(2) (one committed statement on PostgreSQL): all are stored
// when it returns, or none.
func (t *Transcript) AppendLines(ctx context.Context, es ...TranscriptEntry) error {
	if len(es) == 0 {
		return nil
	}
	var b []byte
	for _, e := range es {
		if e.Type == "" {
			e.Type = "message"
		}
		if e.Timestamp.IsZero() {
			e.Timestamp = time.Now().UTC()
		}
		line, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("transcript %s: encode line: %w", t.path, err)
		}
		if b == nil {
			b = line // one line (the usual case): no copy
		} else {
			b = append(b, line...)
		}
		b = append(b, '\n')
	}
	return t.write(ctx, b)
}

// write stores b, whole lines.
func (t *Transcript) write(ctx context.Context, b []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.out == nil {
		return fmt.Errorf("transcript %s: %w", t.path, os.ErrClosed)
	}
	if err := t.out.write(ctx, b); err != nil {
		return fmt.Errorf("transcript %s: append: %w", t.path, err)
	}
	return nil
}

// Hold keeps the transcript's file open until release is called: the
// lines appended meanwhile (the results of a response's prepared tool
// calls, each still written when its call ends) cost a write(2) each,
// not an open, a write and a close. Each is stored when its Append
// returns, as always. A transcript whose file is not made yet, or that
// is kept as rows, is not held (release does nothing); nor is one held
// already.
func (t *Transcript) Hold() (release func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.out.(*fileSink)
	if !ok || s.header != nil || s.held != nil {
		return func() {}
	}
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return func() {} // each line opens the file, and says why it cannot
	}
	s.held = f
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if s.held == f {
			s.held = nil
			f.Close()
		}
	}
}

// Sync flushes the file to stable storage (for shutdown; Append does not
// need it to survive a process crash).
func (t *Transcript) Sync(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.out == nil {
		return nil
	}
	if err := t.out.sync(ctx); err != nil {
		return fmt.Errorf("transcript %s: sync: %w", t.path, err)
	}
	return nil
}

// Close closes the file; closing twice is not an error.
func (t *Transcript) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.out == nil {
		return nil
	}
	err := t.out.close()
	t.out = nil
	if err != nil {
		return fmt.Errorf("transcript %s: close: %w", t.path, err)
	}
	return nil
}

// readFileTranscript reads a whole transcript file. A last line without its newline
// (torn by a crash) is ignored; any other line that is not valid JSON is an
// error naming the file and line. A missing file gives an error wrapping
// ErrNotFound; a file without a complete header one wrapping ErrCorrupt.
func readFileTranscript(path string) (TranscriptHeader, []TranscriptEntry, error) {
	var h TranscriptHeader
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return h, nil, fmt.Errorf("read transcript %s: %w: %w", path, ErrNotFound, err)
	}
	if err != nil {
		return h, nil, fmt.Errorf("read transcript %s: %w", path, err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	var entries []TranscriptEntry
	for lineNo := 1; ; lineNo++ {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			break // a torn (unterminated) last line, or nothing, is left out
		}
		if err != nil {
			return h, nil, fmt.Errorf("read transcript %s: %w", path, err)
		}
		if entries, err = decodeLine(path, lineNo, line, &h, entries); err != nil {
			return h, nil, err
		}
	}
	return endRead(path, h, entries)
}

// decodeLine decodes line lineNo of the transcript path: the header into
// h, an entry appended to entries.
func decodeLine(path string, lineNo int, line []byte, h *TranscriptHeader, entries []TranscriptEntry) ([]TranscriptEntry, error) {
	if lineNo == 1 {
		if err := json.Unmarshal(line, h); err != nil {
			return entries, fmt.Errorf("read transcript %s: line 1: header: %w: %w", path, ErrCorrupt, err)
		}
		return entries, nil
	}
	if len(bytes.TrimSpace(line)) == 0 {
		return entries, nil
	}
	var e TranscriptEntry
	if err := json.Unmarshal(line, &e); err != nil {
		return entries, fmt.Errorf("read transcript %s: line %d: %w: %w", path, lineNo, ErrCorrupt, err)
	}
	return append(entries, e), nil
}

// endRead checks that a header was read.
func endRead(path string, h TranscriptHeader, entries []TranscriptEntry) (TranscriptHeader, []TranscriptEntry, error) {
	if h.Type == "" {
		// Not one complete line: the file was created and the process died
		// before its header was written. Nothing was ever recorded in it.
		return h, nil, fmt.Errorf("read transcript %s: no complete line yet: %w", path, ErrNotFound)
	}
	return h, entries, nil
}

// archiveStamp is the filesystem-safe UTC timestamp in archived names.
const archiveStamp = "2006-01-02T15-04-05Z"

// archiveFileTranscript renames the transcript file to
// <path>.<reason>.<timestamp> (UTC, like 2026-11-21T20-41-26Z) in the same
// folder and returns the new path. A missing file is not an error: newPath
// is "" then. An existing archive of the same name is never overwritten:
// ".1", ".2", ... is added.
func archiveFileTranscript(path, reason string, at time.Time) (newPath string, err error) {
	if at.IsZero() {
		at = time.Now()
	}
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", fmt.Errorf("archive transcript %s: %w", path, err)
	}
	base := path + "." + reason + "." + at.UTC().Format(archiveStamp)
	for i := 0; i < 1000; i++ {
		newPath = base
		if i > 0 {
			newPath = base + "." + strconv.Itoa(i)
		}
		if _, err := os.Lstat(newPath); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("archive transcript %s: %w", path, err)
		}
		if err := os.Rename(path, newPath); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", nil // archived by someone else meanwhile
			}
			return "", fmt.Errorf("archive transcript %s: %w", path, err)
		}
		return newPath, nil
	}
	return "", fmt.Errorf("archive transcript %s: too many archives named %s.*", path, base)
}

// findFileTranscript returns where the transcript file of path is now:
// path itself, else its newest archive (<path>.deleted.<timestamp>[.n])
// after a cleanup or archive renamed it; "" when neither exists.
func findFileTranscript(path string) string {
	if _, err := os.Stat(path); err == nil {
		return path
	}
	matches, _ := filepath.Glob(path + ".deleted.*")
	if len(matches) == 0 {
		return ""
	}
	slices.Sort(matches)
	return matches[len(matches)-1]
}
