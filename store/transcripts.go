package store

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Transcripts is where conversation transcripts live, one sink per engine:
// JSONL files under the state dir with SQLite (FileTranscripts), rows of
// transcript_lines with PostgreSQL (rowTranscripts, so every replica reads
// every conversation). A transcript is named by its path (TranscriptPath);
// on PostgreSQL that name is relative and no file exists.
type Transcripts interface {
	TranscriptPath(agentID, sessionID string) string
	OpenTranscript(ctx context.Context, path string, h TranscriptHeader) (*Transcript, error)
	ReadTranscript(ctx context.Context, path string) (TranscriptHeader, []TranscriptEntry, error) // ErrNotFound
	// ArchiveTranscript is ArchiveTranscriptAs with reason "deleted".
	ArchiveTranscript(ctx context.Context, path string, at time.Time) (newPath string, err error)
	// ArchiveTranscriptAs renames the transcript to <path>.<reason>.<UTC
	// timestamp> (".1", ".2", … when taken); "" when there is none.
	ArchiveTranscriptAs(ctx context.Context, path, reason string, at time.Time) (newPath string, err error)
	// UnarchiveTranscript moves an archived transcript back to path
	// (undoing ArchiveTranscriptAs when what it was archived for failed).
	UnarchiveTranscript(ctx context.Context, archived, path string) error
	// FindTranscript returns where the transcript of path is now: path,
	// else its newest .deleted. archive, else "".
	FindTranscript(ctx context.Context, path string) string
	// TailTranscript writes the transcript's complete lines to w, each with
	// its newline; with follow it then goes on writing lines as they are
	// appended until ctx ends (nil then). No transcript → ErrNotFound (when
	// following, it waits for one instead).
	TailTranscript(ctx context.Context, path string, follow bool, w io.Writer) error
	// TranscriptTorn reports whether the transcript ends mid-line: a
	// crash cut its last write (ReadTranscript leaves that line out; the
	// next OpenTranscript cuts it). Rows are whole lines: never torn.
	TranscriptTorn(ctx context.Context, path string) bool
}

var (
	_ Transcripts = FileTranscripts{}
	_ Transcripts = rowTranscripts{}
)

// FileTranscripts keeps transcripts as JSONL files under
// <Dir>/transcripts/<agentId>/<sessionId>.jsonl (Dir "" = the working dir):
// the SQLite engine's sink, and what tools and tests that work on files
// use. Every Append is one write(2) of one whole line, so a killed process
// loses nothing it appended.
type FileTranscripts struct{ Dir string }

// TranscriptPath returns <Dir>/transcripts/<agentId>/<sessionId>.jsonl. Path
// separators and ".." in the ids are replaced so the result stays inside
// Dir.
func (f FileTranscripts) TranscriptPath(agentID, sessionID string) string {
	return filepath.Join(f.Dir, "transcripts", safeName(agentID), safeName(sessionID)+".jsonl")
}

func (FileTranscripts) OpenTranscript(ctx context.Context, path string, h TranscriptHeader) (*Transcript, error) {
	return openFileTranscript(ctx, path, h)
}

func (FileTranscripts) ReadTranscript(_ context.Context, path string) (TranscriptHeader, []TranscriptEntry, error) {
	return readFileTranscript(path)
}

func (FileTranscripts) ArchiveTranscript(_ context.Context, path string, at time.Time) (string, error) {
	return archiveFileTranscript(path, "deleted", at)
}

func (FileTranscripts) ArchiveTranscriptAs(_ context.Context, path, reason string, at time.Time) (string, error) {
	return archiveFileTranscript(path, reason, at)
}

func (FileTranscripts) UnarchiveTranscript(_ context.Context, archived, path string) error {
	if err := os.Rename(archived, path); err != nil {
		return fmt.Errorf("unarchive transcript %s: %w", archived, err)
	}
	return nil
}

func (FileTranscripts) FindTranscript(_ context.Context, path string) string {
	return findFileTranscript(path)
}

func (FileTranscripts) TailTranscript(ctx context.Context, path string, follow bool, w io.Writer) error {
	return tail(ctx, path, follow, w, fileLines(path))
}

func (FileTranscripts) TranscriptTorn(_ context.Context, path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return false
	}
	last := make([]byte, 1)
	_, err = f.ReadAt(last, fi.Size()-1)
	return err == nil && last[0] != '\n'
}

// rowTranscripts keeps transcripts as rows of transcript_lines (name, line,
// body): the PostgreSQL engine's sink. Names are TranscriptPath's relative
// paths; each line is one committed INSERT.
type rowTranscripts struct{ d *DB }

func (rowTranscripts) TranscriptPath(agentID, sessionID string) string {
	return FileTranscripts{}.TranscriptPath(agentID, sessionID)
}

// rowCtx bounds one transcript statement: a line whose write started is
// finished even when the caller's ctx is cancelled meanwhile (a stopped
// turn still records how far it got).
func rowCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), pgOpTimeout)
}

func (ts rowTranscripts) OpenTranscript(ctx context.Context, path string, h TranscriptHeader) (*Transcript, error) {
	d := ts.d
	if h.Fresh {
		// No rows are looked for: the first write inserts the header with
		// its lines as rows 1…, and finds rows made meanwhile by their
		// key, as the file sink's create finds a file.
		h = h.withDefaults()
		return &Transcript{path: path, out: &rowSink{d: d, name: path, next: 1, header: &h}}, nil
	}
	ctx, cancel := rowCtx(ctx)
	defer cancel()
	var last int64
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return rows.Scan(&last) },
		`SELECT COALESCE(MAX(line), 0) FROM transcript_lines WHERE name = $1`, path)
	if err != nil {
		return nil, d.wrap("open transcript "+path, err)
	}
	return newTranscript(ctx, path, &rowSink{d: d, name: path, next: last + 1}, last == 0, h)
}

// rowSink appends a transcript's lines as rows, one committed INSERT per
// write.
type rowSink struct {
	d      *DB
	name   string
	next   int64
	header *TranscriptHeader // a new transcript's header, not written yet
}

func (s *rowSink) write(ctx context.Context, lines []byte) error {
	ctx, cancel := rowCtx(ctx)
	defer cancel()
	if s.header == nil {
		return s.insert(ctx, lines)
	}
	header, err := headerLine(*s.header)
	if err != nil {
		return err
	}
	err = s.insert(ctx, append(header, lines...))
	if errors.Is(err, ErrExists) {
		// Rows made meanwhile: the lines go after them, and after the
		// header only when there are none any more.
		var last int64
		if err := s.d.writer(ctx).queryRow(func(rows *sql.Rows) error { return rows.Scan(&last) },
			`SELECT COALESCE(MAX(line), 0) FROM transcript_lines WHERE name = $1`, s.name); err != nil {
			return s.d.wrap("append", err)
		}
		s.next = last + 1
		if last > 0 {
			header = header[:0]
		}
		if len(header)+len(lines) == 0 {
			err = nil
		} else {
			err = s.insert(ctx, append(header, lines...))
		}
	}
	if err == nil {
		s.header = nil
	}
	return err
}

// insert stores lines (whole lines) as the rows from s.next on.
func (s *rowSink) insert(ctx context.Context, lines []byte) error {
	rows := bytes.SplitAfter(lines, []byte("\n"))
	if len(rows[len(rows)-1]) == 0 {
		rows = rows[:len(rows)-1]
	}
	q := `INSERT INTO transcript_lines (name, line, body) VALUES ($1, $2, $3)`
	args := []any{s.name, s.next, string(bytes.TrimSuffix(rows[0], []byte("\n")))}
	for i, row := range rows[1:] {
		q += fmt.Sprintf(", ($1, $%d, $%d)", len(args)+1, len(args)+2)
		args = append(args, s.next+int64(i)+1, string(bytes.TrimSuffix(row, []byte("\n"))))
	}
	if _, err := s.d.writer(ctx).exec(q, args...); err != nil {
		return s.d.wrap("append", err)
	}
	s.next += int64(len(rows))
	return nil
}

func (s *rowSink) sync(context.Context) error { return nil } // committed on write

// close writes the header of a new transcript no line was written to, so
// an opened transcript always has its rows.
func (s *rowSink) close() error {
	if s.header == nil {
		return nil
	}
	err := s.write(context.Background(), nil)
	s.header = nil
	return err
}

func (rowTranscripts) TranscriptTorn(context.Context, string) bool { return false }

func (ts rowTranscripts) ReadTranscript(ctx context.Context, path string) (TranscriptHeader, []TranscriptEntry, error) {
	d := ts.d
	var h TranscriptHeader
	var entries []TranscriptEntry
	ctx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	rows, err := d.reader(ctx).query(`SELECT line, body FROM transcript_lines WHERE name = $1 ORDER BY line`, path)
	if err != nil {
		return h, nil, d.wrap("read transcript "+path, err)
	}
	defer rows.Close()
	for rows.Next() {
		var n int64
		var body string
		if err := rows.Scan(&n, &body); err != nil {
			return h, nil, d.wrap("read transcript "+path, err)
		}
		if entries, err = decodeLine(path, int(n), []byte(body), &h, entries); err != nil {
			return h, nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return h, nil, d.wrap("read transcript "+path, err)
	}
	return endRead(path, h, entries)
}

func (ts rowTranscripts) ArchiveTranscript(ctx context.Context, path string, at time.Time) (string, error) {
	return ts.ArchiveTranscriptAs(ctx, path, "deleted", at)
}

func (ts rowTranscripts) ArchiveTranscriptAs(ctx context.Context, path, reason string, at time.Time) (string, error) {
	d := ts.d
	if at.IsZero() {
		at = time.Now()
	}
	ctx, cancel := rowCtx(ctx)
	defer cancel()
	base := path + "." + reason + "." + at.UTC().Format(archiveStamp)
	var newPath string
	err := d.tx(ctx, func(c conn) error {
		if err := c.lock("transcript:" + path); err != nil {
			return err
		}
		for i := 0; i < 1000; i++ {
			name := base
			if i > 0 {
				name = base + "." + strconv.Itoa(i)
			}
			var taken bool
			if err := c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&taken) },
				`SELECT EXISTS (SELECT 1 FROM transcript_lines WHERE name = $1)`, name); err != nil {
				return err
			}
			if taken {
				continue
			}
			n, err := c.execN(`UPDATE transcript_lines SET name = $1 WHERE name = $2`, name, path)
			if err == nil && n > 0 {
				newPath = name
			}
			return err
		}
		return fmt.Errorf("too many archives named %s.*", base)
	})
	if err != nil {
		return "", d.wrap("archive transcript "+path, err)
	}
	return newPath, nil
}

func (ts rowTranscripts) UnarchiveTranscript(ctx context.Context, archived, path string) error {
	ctx, cancel := rowCtx(ctx)
	defer cancel()
	_, err := ts.d.writer(ctx).exec(`UPDATE transcript_lines SET name = $1 WHERE name = $2`, path, archived)
	return ts.d.wrap("unarchive transcript "+archived, err)
}

func (ts rowTranscripts) FindTranscript(ctx context.Context, path string) string {
	ctx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	var name string
	err := ts.d.reader(ctx).queryRow(func(rows *sql.Rows) error { return rows.Scan(&name) },
		`SELECT name FROM transcript_lines WHERE line = 1 AND (name = $1 OR name LIKE $2)
		ORDER BY name = $1 DESC, name DESC LIMIT 1`, path, likePrefix(path)+".deleted.%")
	if err != nil {
		return ""
	}
	return name
}

func (ts rowTranscripts) TailTranscript(ctx context.Context, path string, follow bool, w io.Writer) error {
	return tail(ctx, path, follow, w, ts.rowLines(ctx, path))
}

// likePrefix escapes LIKE's wildcards in s (PostgreSQL's default escape is
// the backslash).
func likePrefix(s string) string {
	var b bytes.Buffer
	for _, r := range s {
		if r == '%' || r == '_' || r == '\\' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// tailPoll is how often TailTranscript looks for new lines when following.
const tailPoll = 250 * time.Millisecond

// tail writes what next gives to w, and with follow goes on polling.
func tail(ctx context.Context, path string, follow bool, w io.Writer, next func() ([][]byte, error)) error {
	seen := false
	for {
		lines, err := next()
		if errors.Is(err, ErrNotFound) && follow || err != nil && ctx.Err() != nil {
			err = nil
		}
		if err != nil {
			return fmt.Errorf("tail transcript %s: %w", path, err)
		}
		for _, l := range lines {
			seen = true
			if _, err := w.Write(l); err != nil {
				return err
			}
		}
		if !follow {
			if !seen {
				return fmt.Errorf("tail transcript %s: %w", path, ErrNotFound)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(tailPoll):
		}
	}
}

// fileLines returns a function giving the complete lines appended to the
// file since its last call.
func fileLines(path string) func() ([][]byte, error) {
	var off int64
	var partial []byte
	return func() ([][]byte, error) {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil, ErrNotFound
		}
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return nil, err
		}
		var out [][]byte
		r := bufio.NewReader(f)
		for {
			chunk, err := r.ReadBytes('\n')
			off += int64(len(chunk))
			if errors.Is(err, io.EOF) {
				partial = append(partial, chunk...)
				return out, nil
			}
			if err != nil {
				return out, err
			}
			out = append(out, append(partial, chunk...))
			partial = nil
		}
	}
}

// rowLines returns a function giving the rows appended since its last call.
func (ts rowTranscripts) rowLines(ctx context.Context, path string) func() ([][]byte, error) {
	var last int64
	return func() ([][]byte, error) {
		rows, err := ts.d.reader(ctx).query(`SELECT line, body FROM transcript_lines WHERE name = $1 AND line > $2 ORDER BY line`, path, last)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out [][]byte
		for rows.Next() {
			var body string
			if err := rows.Scan(&last, &body); err != nil {
				return nil, err
			}
			out = append(out, []byte(body+"\n"))
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if last == 0 {
			return nil, ErrNotFound
		}
		return out, nil
	}
}
