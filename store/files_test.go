package store

import (
	"bytes"
	"context"
	"errors"
	"io"
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

// SweepFiles counts the files it removed, not the ones it selected: a
// file named again between its select and its delete stays and is not
// counted.
func TestSweepFilesCountsOnlyRemoved(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	gone, named := []byte("gone"), []byte("named again")
	var ids []string
	for _, b := range [][]byte{gone, named} {
		ref, err := db.PutFile(ctx, bytes.NewReader(b), 100, plainSniff)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ref.ID)
	}
	cut := time.Now().Add(time.Minute)
	db.sweepSelected = func(selected []string) {
		if len(selected) != 2 {
			t.Errorf("selected %d files, want both", len(selected))
		}
		// A message names the second file now, after the cut.
		if err := db.tx(ctx, func(c conn) error {
			return refFiles(c, "agent:main:main", []FileRef{{ID: ids[1]}}, cut.Add(time.Hour).UnixMilli())
		}); err != nil {
			t.Error(err)
		}
	}
	n, err := db.SweepFiles(ctx, cut)
	if err != nil || n != 1 {
		t.Fatalf("SweepFiles = %d, %v; want 1 (the other was named again)", n, err)
	}
	if _, _, err := db.OpenFile(ctx, ids[0]); !errors.Is(err, ErrNotFound) {
		t.Errorf("the unnamed file: %v, want ErrNotFound", err)
	}
	rc, _, err := db.OpenFile(ctx, ids[1])
	if err != nil {
		t.Fatalf("the file named again: %v", err)
	}
	rc.Close()
}

// A file planted at a stored file's place (a link, or other bytes under
// its hash) is replaced by the next PutFile of that content, never served
// in its stead.
func TestPutFileReplacesPlanted(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	db := newTestDB(t)
	data := []byte("the real bytes")
	ref, err := db.PutFile(ctx, bytes.NewReader(data), 100, plainSniff)
	if err != nil {
		t.Fatal(err)
	}
	onDisk := filepath.Join(db.StateDir(), FilesDir, ref.ID[:2], ref.ID)
	for _, plant := range []func() error{
		func() error { return os.WriteFile(onDisk, []byte("poisoned bytes"), 0o600) },
		func() error {
			decoy := filepath.Join(t.TempDir(), "decoy")
			if err := os.WriteFile(decoy, []byte("poisoned link"), 0o600); err != nil {
				return err
			}
			return os.Symlink(decoy, onDisk)
		},
	} {
		os.Remove(onDisk)
		if err := plant(); err != nil {
			t.Fatal(err)
		}
		if _, err := db.PutFile(ctx, bytes.NewReader(data), 100, plainSniff); err != nil {
			t.Fatal(err)
		}
		rc, _, err := db.OpenFile(ctx, ref.ID)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, data) {
			t.Errorf("served %q after a second PutFile, want the real bytes", got)
		}
	}
}

// SweepFiles goes by batches until none is left: with batches of 2, one
// sweep removes all 5 files past retention (an hourly sweep of one batch
// fell behind an upload storm).
func TestSweepFilesByBatchUntilDone(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	defer func(n int) { sweepBatch = n }(sweepBatch)
	sweepBatch = 2
	for i := range 5 {
		if _, err := db.PutFile(ctx, bytes.NewReader([]byte{byte(i)}), 10, plainSniff); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := db.SweepFiles(ctx, time.Now().Add(time.Minute)); err != nil || n != 5 {
		t.Fatalf("SweepFiles = %d, %v; want all 5 removed in one sweep", n, err)
	}
}
