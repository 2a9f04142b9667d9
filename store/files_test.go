package store

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func plainSniff(head []byte) (string, error) { return "application/octet-stream", nil }

// On SQLite a stored file is a file under <state>/files named by its
// SHA-256; the spool holds nothing once PutFile returns, and a sweep
// removes the bytes with the row. (What a caller sees of files, on both
// engines, is in storetest.)
func TestFilesOnDisk(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	db := newTestDB(t)
	data := []byte("bytes on disk")
	ref, err := db.PutFile(ctx, bytes.NewReader(data), 100, plainSniff)
	if err != nil {
		t.Fatal(err)
	}
	onDisk := filepath.Join(db.StateDir(), FilesDir, ref.ID[:2], ref.ID)
	if got, err := os.ReadFile(onDisk); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("content-addressed file: %q, %v", got, err)
	}
	if ents, err := os.ReadDir(filepath.Join(db.StateDir(), FilesDir, "tmp")); err != nil || len(ents) != 0 {
		t.Errorf("spool after PutFile: %d entries, %v", len(ents), err)
	}
	if n, err := db.SweepFiles(ctx, time.Now().Add(time.Minute)); err != nil || n != 1 {
		t.Fatalf("SweepFiles = %d, %v", n, err)
	}
	if _, err := os.Stat(onDisk); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the swept file's bytes are still on disk: %v", err)
	}
}
