package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// fileStore is where the bytes of stored files live, one sink per engine
// as with transcripts: files under <state>/files with SQLite (diskFiles),
// rows of file_chunks with PostgreSQL (chunkFiles, so every replica serves
// every file). The files row, the references and retention are the same on
// both (files.go); a sink only moves bytes, inside the write transaction
// that writes or deletes the row.
type fileStore interface {
	// ready readies the spooled bytes of file id before the transaction
	// that places them (the spool is complete and flushed).
	ready(spool *os.File, id string) error
	// place stores the spooled bytes of file id in c, the transaction that
	// writes its row; known says the row was there already.
	place(c conn, id string, spool *os.File, known bool) error
	// open streams file id; ErrNotFound when its bytes are not stored.
	open(ctx context.Context, id string) (io.ReadCloser, error)
	// remove deletes the bytes of file id in c, the transaction that
	// deletes its row.
	remove(c conn, id string) error
}

var (
	_ fileStore = diskFiles{}
	_ fileStore = chunkFiles{}
)

// diskFiles keeps each file as <dir>/files/<first two hex digits>/<sha256>.
type diskFiles struct{ dir string }

func (f diskFiles) path(id string) string {
	return filepath.Join(f.dir, FilesDir, id[:2], id)
}

func (f diskFiles) ready(spool *os.File, id string) error {
	if err := spool.Sync(); err != nil {
		return err
	}
	return os.MkdirAll(filepath.Dir(f.path(id)), 0o700)
}

// place renames the spool into place, replacing what is there: the spool
// holds the bytes just hashed to id, while a file found at the place may
// have been planted or damaged since it was stored (and would then be
// served to everyone who sends that content). A row whose bytes were lost
// gets them back. The rename is atomic: a reader of the old file reads it
// whole.
func (f diskFiles) place(_ conn, id string, spool *os.File, _ bool) error {
	return os.Rename(spool.Name(), f.path(id))
}

func (f diskFiles) open(_ context.Context, id string) (io.ReadCloser, error) {
	rc, err := os.Open(f.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	return rc, err
}

func (f diskFiles) remove(_ conn, id string) error {
	if err := os.Remove(f.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// fileChunk is the size of one PostgreSQL file_chunks row. Every pool
// connection keeps read and write buffers grown to the largest row it
// moved, so the chunk bounds what files add to the gateway's memory: with
// 1 MiB rows 20 concurrent 20 MB Telegram uploads added ~100 MiB of RSS,
// with 256 KiB rows ~55 MiB and with 64 KiB rows ~28 MiB; 20 web uploads
// add +36–42 MiB with 256 KiB rows and +25–26 MiB with 64 KiB rows, in
// about the same time
// (docs/performance.md). Files written with other chunk sizes read the
// same (rows are read by seq).
const fileChunk = 64 << 10

// chunkFiles keeps each file as file_chunks rows of fileChunk bytes.
type chunkFiles struct{ d *DB }

func (chunkFiles) ready(spool *os.File, _ string) error {
	_, err := spool.Seek(0, io.SeekStart)
	return err
}

// place writes the chunks of a new file; a known file has them.
func (chunkFiles) place(c conn, id string, spool *os.File, known bool) error {
	if known {
		return nil
	}
	buf := make([]byte, fileChunk)
	for seq := 0; ; seq++ {
		k, rerr := io.ReadFull(spool, buf)
		if k > 0 {
			if _, err := c.exec(`INSERT INTO file_chunks (file_id, seq, data) VALUES ($1, $2, $3)`, id, seq, buf[:k]); err != nil {
				return err
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

func (s chunkFiles) open(ctx context.Context, id string) (io.ReadCloser, error) {
	return &chunkReader{ctx: ctx, d: s.d, id: id}, nil
}

func (chunkFiles) remove(c conn, id string) error {
	_, err := c.exec(`DELETE FROM file_chunks WHERE file_id = $1`, id)
	return err
}

// chunkReader streams a PostgreSQL file one chunk row at a time.
type chunkReader struct {
	ctx context.Context
	d   *DB
	id  string
	seq int
	buf []byte
	eof bool
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.eof {
			return 0, io.EOF
		}
		var data []byte
		err := r.d.reader(r.ctx).queryRow(func(rows *sql.Rows) error { return rows.Scan(&data) },
			`SELECT data FROM file_chunks WHERE file_id = $1 AND seq = $2`, r.id, r.seq)
		if errors.Is(err, ErrNotFound) {
			r.eof = true
			continue
		}
		if err != nil {
			return 0, r.d.wrap(fmt.Sprintf("read file %s", r.id), err)
		}
		r.seq++
		r.buf = data
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *chunkReader) Close() error { return nil }
