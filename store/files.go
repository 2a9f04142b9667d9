package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// FilesDir is the folder of the state dir that holds the stored files
// (SQLite), each named by the SHA-256 of its bytes, and the spool of
// files being received (both drivers).
const FilesDir = "files"

// sniffLen is how much of a file's start PutFile gives its sniff func.
const sniffLen = 64 << 10

// FileRef is a stored file as a message names it: the SHA-256 of its
// bytes (hex), the name the person gave, its type sniffed from the
// content, and its size. Transcripts keep these, never the bytes.
type FileRef struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	MIME string `json:"mime"`
	Size int64  `json:"size"`
	// Kind is what the platform said the file is (image, file, audio,
	// voice, video); "" when not from a platform.
	Kind string `json:"kind,omitempty"`
	// Caption (outbound files) is the line posted with the file.
	Caption string `json:"caption,omitempty"`
}

// ErrFileTooLarge: a file is larger than the limit given to PutFile.
var ErrFileTooLarge = errors.New("file is larger than the limit")

// ValidFileID reports whether id is a stored file's id (64 hex digits).
func ValidFileID(id string) bool {
	if len(id) != 64 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil && strings.ToLower(id) == id
}

// PutFile streams r into the store and returns the file's id, size and
// the MIME type sniff gave it from its first 64 KiB (sniff's error
// refuses the file). At most limit bytes are read: a longer file is
// ErrFileTooLarge. The bytes go to a spool file first (never whole in
// memory), then to their content-addressed place: a file already stored
// is kept once. The file is named by no conversation until a message or a
// reply that holds it is stored (AddIntake, EnqueueOutbox), so an upload
// that never got its message is removed by SweepFiles.
func (d *DB) PutFile(ctx context.Context, r io.Reader, limit int64, sniff func(head []byte) (string, error)) (FileRef, error) {
	var ref FileRef
	spool := filepath.Join(d.dir, FilesDir, "tmp")
	if err := os.MkdirAll(spool, 0o700); err != nil {
		return ref, fmt.Errorf("store file: %w", err)
	}
	tmp, err := os.CreateTemp(spool, "in-*")
	if err != nil {
		return ref, fmt.Errorf("store file: %w", err)
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}()
	h := sha256.New()
	head := &headWriter{max: sniffLen}
	n, err := io.Copy(io.MultiWriter(tmp, h, head), ctxReader{ctx, io.LimitReader(r, limit+1)})
	if err != nil {
		return ref, err
	}
	if n > limit {
		return ref, fmt.Errorf("%w (%d bytes)", ErrFileTooLarge, limit)
	}
	mime, err := sniff(head.b)
	if err != nil {
		return ref, err
	}
	ref = FileRef{ID: hex.EncodeToString(h.Sum(nil)), MIME: mime, Size: n}
	if err := d.files.ready(tmp, ref.ID); err != nil {
		return ref, fmt.Errorf("store file: %w", err)
	}
	// The bytes take their place and the row is written in one write
	// transaction, so SweepFiles (which removes both in one too) never
	// takes a file away from under a row.
	now := time.Now().UnixMilli()
	err = d.tx(ctx, func(c conn) error {
		if err := c.lock("file:" + ref.ID); err != nil {
			return err
		}
		n, err := c.execN(`UPDATE files SET last_ref_at = $1 WHERE id = $2`, now, ref.ID)
		if err != nil {
			return err
		}
		if n == 0 {
			if _, err := c.exec(`INSERT INTO files (id, size, mime, created_at, last_ref_at) VALUES ($1, $2, $3, $4, $5)`,
				ref.ID, ref.Size, ref.MIME, now, now); err != nil {
				return err
			}
		}
		return d.files.place(c, ref.ID, tmp, n == 1)
	})
	return ref, d.wrap("store file", err)
}

// statFile returns the stored file's size and type; ErrNotFound when it
// is not (or no longer) stored.
func (d *DB) statFile(ctx context.Context, id string) (FileRef, error) {
	ref := FileRef{ID: id}
	if !ValidFileID(id) {
		return ref, ErrNotFound
	}
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return rows.Scan(&ref.Size, &ref.MIME) },
		`SELECT size, mime FROM files WHERE id = $1`, id)
	return ref, d.wrap("stat file", err)
}

// OpenFile streams a stored file; ErrNotFound when it is not stored.
func (d *DB) OpenFile(ctx context.Context, id string) (io.ReadCloser, FileRef, error) {
	ref, err := d.statFile(ctx, id)
	if err != nil {
		return nil, ref, err
	}
	rc, err := d.files.open(ctx, id)
	if err != nil {
		return nil, ref, fmt.Errorf("open file %s: %w", id, err)
	}
	return rc, ref, nil
}

// FileNamed reports whether the conversation scope (a session key) names
// file id: a message or a reply of it holds the file.
func (d *DB) FileNamed(ctx context.Context, id, scope string) (bool, error) {
	var one int
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return rows.Scan(&one) },
		`SELECT 1 FROM file_refs WHERE file_id = $1 AND scope = $2`, id, scope)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, d.wrap("file named", err)
}

// FileHold is what an inbound file being stored holds against the
// attachment quotas until its message is stored (upgrade 33): Conv bytes
// against its conversation (attachments.maxStoredMB) until the message
// names the file, Total against all files (maxTotalMB) until the file's row
// is written. A hold past Until counts no more: its replica died.
type FileHold struct {
	ID          string
	Scope       string
	Conv, Total int64
	Until       time.Time
}

// FileQuota is what HoldFileBytes holds against, in bytes: what the files
// a conversation names may reach, and what all stored files may.
type FileQuota struct{ Conversation, Total int64 }

// The quota HoldFileBytes names when it granted less than asked.
const (
	QuotaConversation = "conversation"
	QuotaTotal        = "total"
)

// HoldFileBytes holds up to h.Conv bytes (against both quotas) for a file
// of conversation h.Scope, counting the stored files and every replica's
// holds in one transaction with the other holds, so parallel uploads —
// on this process or another replica — cannot each pass a quota on the
// same reading of the store. granted is what fits (0: nothing is held);
// limit names the quota that cut it ("" when all of it fits). Expired
// holds are removed.
func (d *DB) HoldFileBytes(ctx context.Context, h FileHold, q FileQuota) (granted int64, limit string, err error) {
	err = d.tx(ctx, func(c conn) error {
		granted, limit = 0, ""
		if err := c.lock("file_holds"); err != nil {
			return err
		}
		if _, err := c.exec(`DELETE FROM file_holds WHERE until_ms < $1`, time.Now().UnixMilli()); err != nil {
			return err
		}
		var conv, total int64
		if err := c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&conv, &total) },
			`SELECT (SELECT COALESCE(SUM(f.size), 0) FROM file_refs r JOIN files f ON f.id = r.file_id WHERE r.scope = $1)
				+ (SELECT COALESCE(SUM(conv), 0) FROM file_holds WHERE scope = $1),
			(SELECT COALESCE(SUM(size), 0) FROM files) + (SELECT COALESCE(SUM(total), 0) FROM file_holds)`, h.Scope); err != nil {
			return err
		}
		granted = h.Conv
		if r := q.Conversation - conv; r < granted {
			granted, limit = max(r, 0), QuotaConversation
		}
		if r := q.Total - total; r < granted {
			granted, limit = max(r, 0), QuotaTotal
		}
		if granted == 0 {
			return nil
		}
		_, err := c.exec(`INSERT INTO file_holds (id, scope, conv, total, until_ms) VALUES ($1, $2, $3, $3, $4)
			ON CONFLICT (id) DO UPDATE SET scope = excluded.scope, conv = excluded.conv, total = excluded.total, until_ms = excluded.until_ms`,
			h.ID, h.Scope, granted, h.Until.UnixMilli())
		return err
	})
	return granted, limit, d.wrap("hold file bytes", err)
}

// SetFileHold changes what hold id holds and until when; conv = total = 0
// removes it. An unknown id is no error (it expired).
func (d *DB) SetFileHold(ctx context.Context, id string, conv, total int64, until time.Time) error {
	var err error
	if conv == 0 && total == 0 {
		_, err = d.writer(ctx).exec(`DELETE FROM file_holds WHERE id = $1`, id)
	} else {
		_, err = d.writer(ctx).exec(`UPDATE file_holds SET conv = $2, total = $3, until_ms = $4 WHERE id = $1`, id, conv, total, until.UnixMilli())
	}
	return d.wrap("set file hold", err)
}

// RefFiles records that the conversation scope names the files now: they
// are kept attachments.retentionDays from now. Only tests call it (it is in
// storetest.Store, not in Files): production names files with the message
// or reply that holds them (AddIntake, EnqueueOutbox).
func (d *DB) RefFiles(ctx context.Context, scope string, files []FileRef) error {
	if len(files) == 0 {
		return nil
	}
	err := d.tx(ctx, func(c conn) error { return refFiles(c, scope, files, time.Now().UnixMilli()) })
	return d.wrap("reference files", err)
}

func refFiles(c conn, scope string, files []FileRef, at int64) error {
	for _, f := range files {
		if _, err := c.exec(`INSERT INTO file_refs (file_id, scope, at) VALUES ($1, $2, $3)
			ON CONFLICT (file_id, scope) DO UPDATE SET at = excluded.at`, f.ID, scope, at); err != nil {
			return err
		}
		if _, err := c.exec(`UPDATE files SET last_ref_at = $1 WHERE id = $2 AND last_ref_at < $3`, at, f.ID, at); err != nil {
			return err
		}
	}
	return nil
}

// insertFiles writes the files of a new intake, outbox or result row
// (table intake_files, outbox_files or result_files) and references them
// for scope.
func insertFiles(c conn, table, key string, id any, scope string, files []FileRef, at int64) error {
	for i, f := range files {
		if _, err := c.exec(`INSERT INTO `+table+` (`+key+`, seq, file_id, name, mime, size, kind, caption) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			id, i, f.ID, f.Name, f.MIME, f.Size, f.Kind, f.Caption); err != nil {
			return err
		}
	}
	return refFiles(c, scope, files, at)
}

func (d *DB) listFiles(ctx context.Context, table, key string, id int64) ([]FileRef, error) {
	return listFiles(d.reader(ctx), table, key, id)
}

// listFiles returns the files of one row of table (its key = id), in order.
func listFiles(c conn, table, key string, id any) ([]FileRef, error) {
	rows, err := c.query(`SELECT file_id, name, mime, size, kind, caption FROM `+table+` WHERE `+key+` = $1 ORDER BY seq`, id)
	if err != nil {
		return nil, err
	}
	return scanFileRefs(rows)
}

// scanFileRefs reads rows of (file_id, name, mime, size, kind, caption).
func scanFileRefs(rows *sql.Rows) ([]FileRef, error) {
	defer rows.Close()
	var out []FileRef
	for rows.Next() {
		var f FileRef
		if err := rows.Scan(&f.ID, &f.Name, &f.MIME, &f.Size, &f.Kind, &f.Caption); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// IntakeFiles returns the files of an owed message, in its order.
func (d *DB) IntakeFiles(ctx context.Context, intakeID int64) ([]FileRef, error) {
	out, err := d.listFiles(ctx, "intake_files", "intake_id", intakeID)
	return out, d.wrap("intake files", err)
}

// OutboxFiles returns the files of an outbox item, in its order.
func (d *DB) OutboxFiles(ctx context.Context, outboxID int64) ([]FileRef, error) {
	out, err := d.listFiles(ctx, "outbox_files", "outbox_id", outboxID)
	return out, d.wrap("outbox files", err)
}

// sweepBatch is how many files one pass of SweepFiles selects.
var sweepBatch = 1000

// SweepFiles removes the files no conversation named since before, with
// their references, and spool files older than an hour (a receive the
// process died in). It goes by batches of sweepBatch until none is left
// (an hourly sweep of a fixed batch fell behind an upload storm), and
// returns how many files it removed.
func (d *DB) SweepFiles(ctx context.Context, before time.Time) (int, error) {
	removed := 0
	for {
		n, selected, err := d.sweepFilesBatch(ctx, before)
		removed += n
		if err != nil || selected < sweepBatch {
			d.sweepSpool()
			return removed, err
		}
		if err := ctx.Err(); err != nil {
			return removed, err
		}
	}
}

// sweepFilesBatch removes one batch of SweepFiles: it returns how many it
// removed and how many it selected.
func (d *DB) sweepFilesBatch(ctx context.Context, before time.Time) (int, int, error) {
	cut := before.UnixMilli()
	var ids []string
	rows, err := d.reader(ctx).query(`SELECT id FROM files WHERE last_ref_at < $1 ORDER BY last_ref_at LIMIT $2`, cut, sweepBatch)
	if err != nil {
		return 0, 0, d.wrap("sweep files", err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, 0, d.wrap("sweep files", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if d.sweepSelected != nil {
		d.sweepSelected(ids)
	}
	removed := 0
	for _, id := range ids {
		var gone bool
		err := d.tx(ctx, func(c conn) error {
			gone = false
			if err := c.lock("file:" + id); err != nil {
				return err
			}
			// Named again since the select: kept.
			n, err := c.execN(`DELETE FROM files WHERE id = $1 AND last_ref_at < $2`, id, cut)
			if err != nil || n == 0 {
				return err
			}
			if _, err := c.exec(`DELETE FROM file_refs WHERE file_id = $1`, id); err != nil {
				return err
			}
			// In the write transaction: PutFile places the bytes and the
			// row in one too, so a file stored again now keeps its bytes.
			if err := d.files.remove(c, id); err != nil {
				return err
			}
			gone = true
			return nil
		})
		if err != nil {
			return removed, len(ids), d.wrap("sweep file "+id, err)
		}
		if gone {
			removed++
		}
	}
	return removed, len(ids), nil
}

// sweepSpool removes spool files older than an hour.
func (d *DB) sweepSpool() {
	spool := filepath.Join(d.dir, FilesDir, "tmp")
	if ents, err := os.ReadDir(spool); err == nil {
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Hour {
				os.Remove(filepath.Join(spool, e.Name()))
			}
		}
	}
}

// headWriter keeps the first max bytes written to it.
type headWriter struct {
	b   []byte
	max int
}

func (h *headWriter) Write(p []byte) (int, error) {
	if room := h.max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// ctxReader ends a read once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
