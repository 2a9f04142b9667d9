package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func plainSniff(head []byte) (string, error) { return "application/octet-stream", nil }

// A file is stored once by its content, with the message that holds it,
// read back whole, and named only by that message's conversation.
func TestFileStoredOnceWithItsMessage(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	data := bytes.Repeat([]byte("herald file "), 300_000) // 3.6 MB: several PostgreSQL chunks
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:])
	a, err := db.PutFile(ctx, bytes.NewReader(data), 10<<20, plainSniff)
	if err != nil {
		t.Fatal(err)
	}
	b, err := db.PutFile(ctx, bytes.NewReader(data), 10<<20, plainSniff)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != want || b.ID != want || a.Size != int64(len(data)) {
		t.Fatalf("ids %s %s size %d, want %s %d", a.ID, b.ID, a.Size, want, len(data))
	}
	if !onPostgres() {
		if _, err := os.Stat(filepath.Join(db.StateDir(), FilesDir, want[:2], want)); err != nil {
			t.Fatalf("content-addressed file: %v", err)
		}
	}
	a.Name = "report.txt"
	in := &Intake{SessionKey: "agent:main:web:dm:c1", AgentID: "main", Origin: slackOrigin, Text: "see file", Files: []FileRef{a}}
	if _, err := db.AddIntake(ctx, in); err != nil {
		t.Fatal(err)
	}
	files, err := db.IntakeFiles(ctx, in.ID)
	if err != nil || len(files) != 1 || files[0].Name != "report.txt" || files[0].ID != want {
		t.Fatalf("intake files %+v, %v", files, err)
	}
	rc, ref, err := db.OpenFile(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, data) || ref.Size != int64(len(data)) {
		t.Fatalf("read back %d bytes (size %d), want %d", len(got), ref.Size, len(data))
	}
	if ok, err := db.FileNamed(ctx, want, in.SessionKey); err != nil || !ok {
		t.Fatalf("named by its conversation: %v %v", ok, err)
	}
	if ok, _ := db.FileNamed(ctx, want, "agent:main:web:dm:other"); ok {
		t.Fatal("file is named by a conversation that never had it")
	}
}

func TestFileOverLimitIsNotStored(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	_, err := db.PutFile(ctx, bytes.NewReader(make([]byte, 1001)), 1000, plainSniff)
	if !errors.Is(err, ErrFileTooLarge) {
		t.Fatalf("err %v, want ErrFileTooLarge", err)
	}
	if _, err := db.PutFile(ctx, bytes.NewReader(make([]byte, 1000)), 1000, plainSniff); err != nil {
		t.Fatalf("a file of exactly the limit: %v", err)
	}
}

// Retention: a file no conversation named since the cut is removed; one
// named again is kept.
func TestSweepFilesRemovesUnreferenced(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	old, err := db.PutFile(ctx, bytes.NewReader([]byte("old file")), 100, plainSniff)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := db.PutFile(ctx, bytes.NewReader([]byte("kept file")), 100, plainSniff)
	if err != nil {
		t.Fatal(err)
	}
	cut := time.Now().Add(time.Second)
	if err := db.RefFiles(ctx, "agent:main:main", []FileRef{kept}); err != nil {
		t.Fatal(err)
	}
	// kept's reference is newer than the cut only if made after it.
	if err := db.tx(ctx, func(c conn) error {
		_, err := c.exec(`UPDATE files SET last_ref_at = $1 WHERE id = $2`, cut.Add(time.Hour).UnixMilli(), kept.ID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	n, err := db.SweepFiles(ctx, cut)
	if err != nil || n != 1 {
		t.Fatalf("swept %d, %v; want 1", n, err)
	}
	if _, _, err := db.OpenFile(ctx, old.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old file still there: %v", err)
	}
	if !onPostgres() {
		if _, err := os.Stat(db.filePath(old.ID)); !os.IsNotExist(err) {
			t.Fatalf("old file's bytes still on disk: %v", err)
		}
	}
	rc, _, err := db.OpenFile(ctx, kept.ID)
	if err != nil {
		t.Fatalf("kept file: %v", err)
	}
	rc.Close()
}
