package store

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// The Transcripts contract, on files (SQLite) and rows (PostgreSQL).
func TestTranscriptsContract(t *testing.T) {
	db := newTestDB(t)
	path := db.TranscriptPath("main", "sess-r1")
	if _, _, err := db.ReadTranscript(context.Background(), path); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read before open: %v, want ErrNotFound", err)
	}
	tr, err := db.OpenTranscript(context.Background(), path, testHeader())
	if err != nil {
		t.Fatal(err)
	}
	if tr.Path() != path {
		t.Errorf("Path = %q, want %q", tr.Path(), path)
	}
	want := []string{"first", "second with\nnewline", `third "quoted"`}
	for _, c := range want {
		if err := tr.Append(context.Background(), TranscriptEntry{Role: "user", Content: c, Timestamp: t0.UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	// Appended lines are readable before Close (a crash loses nothing).
	h, entries, err := db.ReadTranscript(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if h.SessionKey != testHeader().SessionKey || h.Type != "session" || h.Version != TranscriptVersion {
		t.Errorf("header = %+v", h)
	}
	if len(entries) != 3 || entries[1].Content != want[1] || entries[2].Content != want[2] || entries[0].Type != "message" {
		t.Fatalf("entries = %+v", entries)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopened: appends go on, no second header.
	tr, err = db.OpenTranscript(context.Background(), path, TranscriptHeader{SessionKey: "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Append(context.Background(), TranscriptEntry{Role: "assistant", Content: "fourth"}); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	h, entries, err = db.ReadTranscript(context.Background(), path)
	if err != nil || h.SessionKey != testHeader().SessionKey || len(entries) != 4 || entries[3].Content != "fourth" {
		t.Fatalf("after reopen: %+v %d entries, %v", h, len(entries), err)
	}

	// Tail without follow prints the JSONL lines: header + 4.
	var out bytes.Buffer
	if err := db.TailTranscript(context.Background(), path, false, &out); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); len(lines) != 5 || !strings.Contains(lines[4], `"fourth"`) {
		t.Errorf("tail = %q", out.String())
	}
	if err := db.TailTranscript(context.Background(), db.TranscriptPath("main", "none"), false, &out); !errors.Is(err, ErrNotFound) {
		t.Errorf("tail of no transcript: %v, want ErrNotFound", err)
	}

	// Archive renames; Find follows the archive; the old name is free.
	at := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	archived, err := db.ArchiveTranscript(context.Background(), path, at)
	if err != nil || archived != path+".deleted.2026-11-24T10-00-00Z" {
		t.Fatalf("archive = %q, %v", archived, err)
	}
	if got := db.FindTranscript(context.Background(), path); got != archived {
		t.Errorf("FindTranscript = %q, want %q", got, archived)
	}
	if _, entries, err := db.ReadTranscript(context.Background(), archived); err != nil || len(entries) != 4 {
		t.Errorf("read archive: %d entries, %v", len(entries), err)
	}
	if _, _, err := db.ReadTranscript(context.Background(), path); !errors.Is(err, ErrNotFound) {
		t.Errorf("read after archive: %v, want ErrNotFound", err)
	}
	// A second archive at the same second does not overwrite the first.
	tr, _ = db.OpenTranscript(context.Background(), path, testHeader())
	tr.Append(context.Background(), TranscriptEntry{Role: "user", Content: "again"})
	tr.Close()
	second, err := db.ArchiveTranscriptAs(context.Background(), path, "deleted", at)
	if err != nil || second != archived+".1" {
		t.Errorf("second archive = %q, %v", second, err)
	}
	if got, err := db.ArchiveTranscript(context.Background(), path, at); got != "" || err != nil {
		t.Errorf("archive of nothing = %q, %v; want \"\", nil", got, err)
	}
	if got := db.FindTranscript(context.Background(), db.TranscriptPath("main", "none")); got != "" {
		t.Errorf("FindTranscript of nothing = %q", got)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tail -f prints lines appended after it started, until cancelled.
func TestTailTranscriptFollows(t *testing.T) {
	db := newTestDB(t)
	path := db.TranscriptPath("main", "sess-tail")
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- db.TailTranscript(ctx, path, true, &out) }()
	tr, err := db.OpenTranscript(context.Background(), path, testHeader())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for i, c := range []string{"one", "two", "three"} {
		if err := tr.Append(context.Background(), TranscriptEntry{Role: "user", Content: c}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for strings.Count(out.String(), "\n") < i+2 {
			if time.Now().After(deadline) {
				t.Fatalf("tail -f printed %q after %d appends", out.String(), i+1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("tail -f ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tail -f did not end after cancel")
	}
	if !strings.Contains(out.String(), `"three"`) {
		t.Errorf("out = %q", out.String())
	}
}

// A database URL's password never shows in an error or a message.
func TestPostgresURLPasswordIsNeverShown(t *testing.T) {
	for _, u := range []string{
		"postgres://herald:s3cr3t-pw@127.0.0.1:1/herald?sslmode=disable&connect_timeout=1",
		"host=127.0.0.1 port=1 user=herald password=s3cr3t-pw dbname=herald connect_timeout=1",
		"postgres://herald:s3cr3t-pw@127.0.0.1:notaport/herald",
	} {
		_, err := OpenPostgres(context.Background(), u, t.TempDir())
		if err == nil {
			t.Fatalf("OpenPostgres(%q) succeeded", u)
		}
		if strings.Contains(err.Error(), "s3cr3t-pw") {
			t.Errorf("error shows the password: %v", err)
		}
		if got := redactURL(u); strings.Contains(got, "s3cr3t-pw") {
			t.Errorf("redactURL = %q", got)
		}
	}
}
