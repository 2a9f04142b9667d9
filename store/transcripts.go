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

// Transcripts is where conversation transcripts live: JSONL files under the
// state dir with SQLite, rows of transcript_lines with PostgreSQL (so every
// replica reads every conversation). A transcript is named by its path
// (TranscriptPath); on PostgreSQL that name is relative and no file exists.
type Transcripts interface {
	TranscriptPath(agentID, sessionID string) string
	OpenTranscript(path string, h TranscriptHeader) (*Transcript, error)
	ReadTranscript(path string) (TranscriptHeader, []TranscriptEntry, error)
	ArchiveTranscript(path string, at time.Time) (newPath string, err error)
	ArchiveTranscriptAs(path, reason string, at time.Time) (newPath string, err error)
	FindTranscript(path string) string
	TailTranscript(ctx context.Context, path string, follow bool, w io.Writer) error
}

var _ Transcripts = (*DB)(nil)

// OpenTranscript opens the transcript at path for appending (see the
// package function OpenTranscript for files).
func (d *DB) OpenTranscript(path string, h TranscriptHeader) (*Transcript, error) {
	if d.pg == nil {
		return OpenTranscript(path, h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgOpTimeout)
	defer cancel()
	var last int64
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return rows.Scan(&last) },
		`SELECT COALESCE(MAX(line), 0) FROM transcript_lines WHERE name = ?`, path)
	if err != nil {
		return nil, d.wrap("open transcript "+path, err)
	}
	return newTranscript(path, &rowSink{d: d, name: path, next: last + 1}, last == 0, h)
}

// rowSink appends a transcript's lines as rows, one committed INSERT each.
type rowSink struct {
	d    *DB
	name string
	next int64
}

func (s *rowSink) write(line []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), pgOpTimeout)
	defer cancel()
	_, err := s.d.writer(ctx).exec(`INSERT INTO transcript_lines (name, line, body) VALUES (?, ?, ?)`,
		s.name, s.next, string(bytes.TrimSuffix(line, []byte("\n"))))
	if err != nil {
		return s.d.wrap("append", err)
	}
	s.next++
	return nil
}

func (s *rowSink) sync() error  { return nil } // committed on write
func (s *rowSink) close() error { return nil }

// ReadTranscript reads a whole transcript (see the package function for
// files): ErrNotFound when there is none.
func (d *DB) ReadTranscript(path string) (TranscriptHeader, []TranscriptEntry, error) {
	if d.pg == nil {
		return ReadTranscript(path)
	}
	var h TranscriptHeader
	var entries []TranscriptEntry
	ctx, cancel := context.WithTimeout(context.Background(), pgOpTimeout)
	defer cancel()
	rows, err := d.reader(ctx).query(`SELECT line, body FROM transcript_lines WHERE name = ? ORDER BY line`, path)
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

// ArchiveTranscript renames the transcript to <path>.deleted.<timestamp>.
func (d *DB) ArchiveTranscript(path string, at time.Time) (string, error) {
	return d.ArchiveTranscriptAs(path, "deleted", at)
}

// ArchiveTranscriptAs renames the transcript to <path>.<reason>.<timestamp>
// (".1", ".2", … when taken); "" when there is no transcript.
func (d *DB) ArchiveTranscriptAs(path, reason string, at time.Time) (string, error) {
	if d.pg == nil {
		return ArchiveTranscriptAs(path, reason, at)
	}
	if at.IsZero() {
		at = time.Now()
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgOpTimeout)
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
				`SELECT EXISTS (SELECT 1 FROM transcript_lines WHERE name = ?)`, name); err != nil {
				return err
			}
			if taken {
				continue
			}
			n, err := c.execN(`UPDATE transcript_lines SET name = ? WHERE name = ?`, name, path)
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

// FindTranscript returns where the transcript of path is now: path, else
// its newest .deleted. archive, else "".
func (d *DB) FindTranscript(path string) string {
	if d.pg == nil {
		return FindTranscript(path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgOpTimeout)
	defer cancel()
	var name string
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return rows.Scan(&name) },
		`SELECT name FROM transcript_lines WHERE line = 1 AND (name = ? OR name LIKE ?)
		ORDER BY name = ? DESC, name DESC LIMIT 1`, path, likePrefix(path)+".deleted.%", path)
	if err != nil {
		return ""
	}
	return name
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

// TailTranscript writes the transcript's complete lines to w, each with its
// newline; with follow it then goes on writing lines as they are appended
// until ctx ends (nil then). No transcript → ErrNotFound (when following, it
// waits for one instead).
func (d *DB) TailTranscript(ctx context.Context, path string, follow bool, w io.Writer) error {
	if d.pg == nil {
		return tail(ctx, path, follow, w, fileLines(path))
	}
	return tail(ctx, path, follow, w, d.rowLines(ctx, path))
}

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
func (d *DB) rowLines(ctx context.Context, path string) func() ([][]byte, error) {
	var last int64
	return func() ([][]byte, error) {
		rows, err := d.reader(ctx).query(`SELECT line, body FROM transcript_lines WHERE name = ? AND line > ? ORDER BY line`, path, last)
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

// FileTranscripts keeps transcripts as JSONL files named by their paths,
// without a database: what tools and tests that work on files use.
type FileTranscripts struct{}

var _ Transcripts = FileTranscripts{}

// TranscriptPath is <agentId>/<sessionId>.jsonl under transcripts/ in the
// working dir; callers with a state dir use DB.TranscriptPath.
func (FileTranscripts) TranscriptPath(agentID, sessionID string) string {
	return filepath.Join("transcripts", safeName(agentID), safeName(sessionID)+".jsonl")
}

func (FileTranscripts) OpenTranscript(path string, h TranscriptHeader) (*Transcript, error) {
	return OpenTranscript(path, h)
}

func (FileTranscripts) ReadTranscript(path string) (TranscriptHeader, []TranscriptEntry, error) {
	return ReadTranscript(path)
}

func (FileTranscripts) ArchiveTranscript(path string, at time.Time) (string, error) {
	return ArchiveTranscript(path, at)
}

func (FileTranscripts) ArchiveTranscriptAs(path, reason string, at time.Time) (string, error) {
	return ArchiveTranscriptAs(path, reason, at)
}

func (FileTranscripts) FindTranscript(path string) string { return FindTranscript(path) }

func (FileTranscripts) TailTranscript(ctx context.Context, path string, follow bool, w io.Writer) error {
	return tail(ctx, path, follow, w, fileLines(path))
}

// UnarchiveTranscript moves an archived transcript back to path (undoing
// ArchiveTranscriptAs when what it was archived for failed).
func (d *DB) UnarchiveTranscript(archived, path string) error {
	if d.pg == nil {
		return os.Rename(archived, path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgOpTimeout)
	defer cancel()
	_, err := d.writer(ctx).exec(`UPDATE transcript_lines SET name = ? WHERE name = ?`, path, archived)
	return d.wrap("unarchive transcript "+archived, err)
}
