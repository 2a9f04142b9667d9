package storetest

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/store"
)

func testHeader() store.TranscriptHeader {
	return store.TranscriptHeader{SessionKey: "agent:main:subagent:r1", SessionID: "sess-r1", AgentID: "main",
		ParentKey: convKey, CreatedAt: time.Date(2026, 11, 21, 20, 0, 0, 0, time.UTC)}
}

// A transcript keeps its header and every line as appended (readable
// before Close), reopens without a second header, takes several lines in
// one AppendLines, tails as JSONL, and an archive takes a free name.
func testTranscriptLines(t *testing.T, s Store) {
	ctx := context.Background()
	path := s.TranscriptPath("main", "sess-r1")
	tr, err := s.OpenTranscript(ctx, path, testHeader())
	if err != nil {
		t.Fatal(err)
	}
	if tr.Path() != path {
		t.Errorf("Path = %q, want %q", tr.Path(), path)
	}
	want := []string{"first", "second with\nnewline", `third "quoted"`}
	for _, c := range want {
		if err := tr.Append(ctx, store.TranscriptEntry{Role: "user", Content: c, Timestamp: t0}); err != nil {
			t.Fatal(err)
		}
	}
	h, entries, err := s.ReadTranscript(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if h.SessionKey != testHeader().SessionKey || h.Type != "session" || h.Version != store.TranscriptVersion {
		t.Errorf("header = %+v", h)
	}
	if len(entries) != 3 || entries[1].Content != want[1] || entries[2].Content != want[2] || entries[0].Type != "message" {
		t.Fatalf("entries = %+v", entries)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	tr, err = s.OpenTranscript(ctx, path, store.TranscriptHeader{SessionKey: "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Append(ctx, store.TranscriptEntry{Role: "assistant", Content: "fourth"}); err != nil {
		t.Fatal(err)
	}
	if err := tr.AppendLines(ctx, store.TranscriptEntry{Role: "user", Content: "fifth"}, store.TranscriptEntry{Role: "assistant", Content: "sixth\n"}); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	h, entries, err = s.ReadTranscript(ctx, path)
	if err != nil || h.SessionKey != testHeader().SessionKey || len(entries) != 6 || entries[3].Content != "fourth" ||
		entries[4].Content != "fifth" || entries[5].Content != "sixth\n" || entries[5].Type != "message" || entries[5].Timestamp.IsZero() {
		t.Fatalf("after reopen: %+v %+v, %v", h, entries, err)
	}
	var out bytes.Buffer
	if err := s.TailTranscript(ctx, path, false, &out); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); len(lines) != 7 || !strings.Contains(lines[4], `"fourth"`) || !strings.Contains(lines[6], `"sixth\n"`) {
		t.Errorf("tail = %q", out.String())
	}
	if err := s.TailTranscript(ctx, s.TranscriptPath("main", "none"), false, &out); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("tail of no transcript: %v, want ErrNotFound", err)
	}

	at := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	archived, err := s.ArchiveTranscript(ctx, path, at)
	if err != nil || archived != path+".deleted.2026-11-24T10-00-00Z" {
		t.Fatalf("archive = %q, %v", archived, err)
	}
	if got := s.FindTranscript(ctx, path); got != archived {
		t.Errorf("FindTranscript = %q, want %q", got, archived)
	}
	if _, entries, err := s.ReadTranscript(ctx, archived); err != nil || len(entries) != 6 {
		t.Errorf("read archive: %d entries, %v", len(entries), err)
	}
	// A second archive at the same second does not overwrite the first.
	tr, _ = s.OpenTranscript(ctx, path, testHeader())
	tr.Append(ctx, store.TranscriptEntry{Role: "user", Content: "again"})
	tr.Close()
	second, err := s.ArchiveTranscriptAs(ctx, path, "deleted", at)
	if err != nil || second != archived+".1" {
		t.Errorf("second archive = %q, %v", second, err)
	}
	if got, err := s.ArchiveTranscript(ctx, path, at); got != "" || err != nil {
		t.Errorf("archive of nothing = %q, %v; want \"\", nil", got, err)
	}
	if got := s.FindTranscript(ctx, s.TranscriptPath("main", "none")); got != "" {
		t.Errorf("FindTranscript of nothing = %q", got)
	}
}

// lineWriter collects what is written and signals each write.
type lineWriter struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.b.Write(p)
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return n, err
}

func (w *lineWriter) lines() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Count(w.b.String(), "\n")
}

// tail -f waits for the transcript, prints lines appended after it
// started, and ends (nil) when cancelled.
func testTailTranscriptFollows(t *testing.T, s Store) {
	path := s.TranscriptPath("main", "sess-tail")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &lineWriter{wrote: make(chan struct{}, 1)}
	done := make(chan error, 1)
	go func() { done <- s.TailTranscript(ctx, path, true, out) }()
	tr, err := s.OpenTranscript(context.Background(), path, testHeader())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	timeout := time.After(busWait)
	for i, c := range []string{"one", "two", "three"} {
		if err := tr.Append(context.Background(), store.TranscriptEntry{Role: "user", Content: c}); err != nil {
			t.Fatal(err)
		}
		for out.lines() < i+2 { // the header and i+1 lines
			select {
			case <-out.wrote:
			case err := <-done:
				t.Fatalf("tail -f ended early: %v", err)
			case <-timeout:
				t.Fatalf("tail -f printed %d lines after %d appends", out.lines(), i+1)
			}
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("tail -f ended with %v", err)
		}
	case <-time.After(busWait):
		t.Fatal("tail -f did not end after cancel")
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if !strings.Contains(out.b.String(), `"three"`) {
		t.Errorf("out = %q", out.b.String())
	}
}

// A transcript opened Fresh (its caller found no lines) is made by its
// first write, header and lines together; one made meanwhile keeps its
// own header and gets the lines after its own; one closed unwritten has
// its header.
func testTranscriptFresh(t *testing.T, s Store) {
	ctx := context.Background()
	fresh := testHeader()
	fresh.Fresh = true
	texts := func(path string) (string, []string) {
		t.Helper()
		h, entries, err := s.ReadTranscript(ctx, path)
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		var got []string
		for _, e := range entries {
			got = append(got, e.Content)
		}
		return h.SessionKey, got
	}

	path := s.TranscriptPath("main", "fresh-new")
	tr, err := s.OpenTranscript(ctx, path, fresh)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.AppendLines(ctx, store.TranscriptEntry{Role: "user", Content: "task"}, store.TranscriptEntry{Role: "assistant", Content: "answer"}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Append(ctx, store.TranscriptEntry{Role: "user", Content: "more"}); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	if key, got := texts(path); key != fresh.SessionKey || !slices.Equal(got, []string{"task", "answer", "more"}) {
		t.Errorf("new: header %q, lines %q", key, got)
	}

	meanwhile := s.TranscriptPath("main", "fresh-meanwhile")
	late, err := s.OpenTranscript(ctx, meanwhile, fresh)
	if err != nil {
		t.Fatal(err)
	}
	other := testHeader()
	other.SessionKey = "made meanwhile"
	first, err := s.OpenTranscript(ctx, meanwhile, other)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Append(ctx, store.TranscriptEntry{Role: "user", Content: "theirs"}); err != nil {
		t.Fatal(err)
	}
	first.Close()
	if err := late.AppendLines(ctx, store.TranscriptEntry{Role: "user", Content: "a"}, store.TranscriptEntry{Role: "assistant", Content: "b"}); err != nil {
		t.Fatal(err)
	}
	late.Close()
	if key, got := texts(meanwhile); key != "made meanwhile" || !slices.Equal(got, []string{"theirs", "a", "b"}) {
		t.Errorf("made meanwhile: header %q, lines %q", key, got)
	}

	unwritten := s.TranscriptPath("main", "fresh-unwritten")
	tr, err = s.OpenTranscript(ctx, unwritten, fresh)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if key, got := texts(unwritten); key != fresh.SessionKey || len(got) != 0 {
		t.Errorf("closed unwritten: header %q, lines %q", key, got)
	}
}
