package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func testHeader() TranscriptHeader {
	return TranscriptHeader{SessionKey: "agent:main:subagent:r1", SessionID: "sess-r1", AgentID: "main",
		ParentKey: "agent:main:slack:group:C42", CreatedAt: time.Date(2026, 11, 21, 20, 0, 0, 0, time.UTC)}
}

func TestTranscriptRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "transcripts", "main", "sess-r1.jsonl")
	tr, err := FileTranscripts{}.OpenTranscript(context.Background(), path, testHeader())
	if err != nil {
		t.Fatal(err)
	}
	entries := []TranscriptEntry{
		{Role: "user", Content: "summarise", Timestamp: t0.UTC()},
		{Role: "assistant", ToolCalls: json.RawMessage(`[{"id":"c1","name":"read","input":{"path":"a"}}]`),
			Usage: json.RawMessage(`{"input":10,"output":2}`), Model: "anthropic/claude-haiku", Timestamp: t0.UTC()},
		{Role: "tool", ToolResults: json.RawMessage(`[{"id":"c1","content":"text\nwith newline"}]`), Timestamp: t0.UTC()},
	}
	for _, e := range entries {
		if err := tr.Append(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	// Each Append is on disk before Close: read while still open.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), "\n"); n != 4 {
		t.Errorf("file has %d lines, want header + 3", n)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := tr.Append(context.Background(), entries[0]); err == nil {
		t.Error("Append after Close succeeded")
	}

	// Reopening appends without a second header.
	tr, err = FileTranscripts{}.OpenTranscript(context.Background(), path, TranscriptHeader{SessionKey: "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Append(context.Background(), TranscriptEntry{Role: "assistant", Content: "Here is the summary."}); err != nil {
		t.Fatal(err)
	}
	tr.Close()

	h, got, err := FileTranscripts{}.ReadTranscript(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	wantH := testHeader()
	wantH.Type, wantH.Version = "session", 1
	if !reflect.DeepEqual(h, wantH) {
		t.Errorf("header = %+v, want %+v", h, wantH)
	}
	if len(got) != 4 {
		t.Fatalf("entries = %d, want 4", len(got))
	}
	for i, e := range entries {
		e.Type = "message"
		if !reflect.DeepEqual(got[i], e) {
			t.Errorf("entry %d =\n%+v\nwant\n%+v", i, got[i], e)
		}
	}
	if got[3].Type != "message" || got[3].Timestamp.IsZero() || got[3].Content != "Here is the summary." {
		t.Errorf("defaults not applied: %+v", got[3])
	}
}

func TestTranscriptConcurrentAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	tr, err := FileTranscripts{}.OpenTranscript(context.Background(), path, testHeader())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var wg sync.WaitGroup
	const writers, each = 8, 50
	big := strings.Repeat("x", 8<<10) // lines larger than a pipe buffer
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := tr.Append(context.Background(), TranscriptEntry{Role: "user", Content: fmt.Sprintf("%d-%d %s", w, i, big)}); err != nil {
					t.Error(err)
				}
			}
		}(w)
	}
	wg.Wait()
	_, got, err := FileTranscripts{}.ReadTranscript(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != writers*each {
		t.Errorf("entries = %d, want %d", len(got), writers*each)
	}
}

func TestReadTranscriptTornAndBroken(t *testing.T) {
	header := `{"type":"session","version":1,"sessionKey":"k","sessionId":"s","agentId":"main","createdAt":"2026-11-21T20:00:00Z"}` + "\n"
	line := `{"type":"message","role":"user","content":"hi","timestamp":"2026-11-21T20:00:01Z"}` + "\n"
	tests := []struct {
		name        string
		content     string
		wantEntries int
		wantErr     error
	}{
		{"clean", header + line + line, 2, nil},
		{"torn last line", header + line + `{"type":"message","role":"assis`, 1, nil},
		{"torn header only", `{"type":"sess`, 0, ErrNotFound}, // nothing was ever recorded
		{"empty file", "", 0, ErrNotFound},
		{"broken middle line", header + "not json\n" + line, 0, ErrCorrupt},
		{"blank lines skipped", header + "\n" + line, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "t.jsonl")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, entries, err := FileTranscripts{}.ReadTranscript(context.Background(), path)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ReadTranscript = %v, want %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
			if len(entries) != tt.wantEntries {
				t.Errorf("entries = %d, want %d", len(entries), tt.wantEntries)
			}
		})
	}
	if _, _, err := (FileTranscripts{}).ReadTranscript(context.Background(), filepath.Join(t.TempDir(), "missing.jsonl")); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing file = %v, want ErrNotFound", err)
	}
}

func TestOpenTranscriptCutsTornLine(t *testing.T) {
	header := `{"type":"session","version":1,"sessionKey":"k","sessionId":"s","agentId":"main","createdAt":"2026-11-21T20:00:00Z"}` + "\n"
	line := `{"type":"message","role":"user","content":"hi","timestamp":"2026-11-21T20:00:01Z"}` + "\n"
	tests := []struct {
		name        string
		content     string
		wantEntries int // after one more Append
		wantKey     string
	}{
		{"torn message", header + line + strings.Repeat("y", 100<<10), 2, "k"},
		{"torn header", `{"type":"sess`, 1, "new"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "t.jsonl")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if !(FileTranscripts{}).TranscriptTorn(context.Background(), path) {
				t.Error("TranscriptTorn before the open = false, want true")
			}
			tr, err := FileTranscripts{}.OpenTranscript(context.Background(), path, TranscriptHeader{SessionKey: "new"})
			if err != nil {
				t.Fatal(err)
			}
			if (FileTranscripts{}).TranscriptTorn(context.Background(), path) {
				t.Error("TranscriptTorn after the open cut the line = true, want false")
			}
			if err := tr.Append(context.Background(), TranscriptEntry{Role: "assistant", Content: "after crash"}); err != nil {
				t.Fatal(err)
			}
			tr.Close()
			h, entries, err := FileTranscripts{}.ReadTranscript(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			if h.SessionKey != tt.wantKey || len(entries) != tt.wantEntries ||
				entries[len(entries)-1].Content != "after crash" {
				t.Errorf("header key %q, entries %+v", h.SessionKey, entries)
			}
		})
	}
}

func TestArchiveTranscript(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sess-r1.jsonl")
	at := time.Date(2026, 11, 21, 21, 41, 26, 900_000_000, time.FixedZone("CET", 3600))
	want := path + ".deleted.2026-11-21T20-41-26Z"

	steps := []struct {
		name    string
		create  bool
		want    string
		content string
	}{
		{"renames with a UTC, filesystem-safe stamp", true, want, "one"},
		{"never overwrites an earlier archive", true, want + ".1", "two"},
		{"missing file is not an error", false, "", ""},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.create {
				if err := os.WriteFile(path, []byte(s.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := FileTranscripts{}.ArchiveTranscript(context.Background(), path, at)
			if err != nil {
				t.Fatal(err)
			}
			if got != s.want {
				t.Errorf("new path = %q, want %q", got, s.want)
			}
			if s.want == "" {
				return
			}
			if b, err := os.ReadFile(got); err != nil || string(b) != s.content {
				t.Errorf("archived content = %q, %v; want %q", b, err, s.content)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("original still there: %v", err)
			}
		})
	}
	if b, _ := os.ReadFile(want); string(b) != "one" {
		t.Errorf("first archive overwritten: %q", b)
	}
}

func TestFindTranscriptAfterArchive(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.jsonl")
	if got := (FileTranscripts{}).FindTranscript(context.Background(), path); got != "" {
		t.Errorf("missing transcript found as %q", got)
	}
	if err := os.WriteFile(path, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := (FileTranscripts{}).FindTranscript(context.Background(), path); got != path {
		t.Errorf("live transcript = %q", got)
	}
	archived, err := FileTranscripts{}.ArchiveTranscript(context.Background(), path, time.Date(2026, 11, 21, 20, 41, 26, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if got := (FileTranscripts{}).FindTranscript(context.Background(), path); got != archived {
		t.Errorf("after archive = %q, want %q", got, archived)
	}
}

// A new transcript's file is made by its first line, header first, in one
// write; one closed without a line still gets its header; and two opens
// of the same new transcript (one written after the other made the file)
// leave one header.
func TestNewTranscriptFileMadeByFirstLine(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "transcripts", "main", "new.jsonl")
	tr, err := FileTranscripts{}.OpenTranscript(ctx, path, testHeader())
	if err != nil {
		t.Fatal(err)
	}
	late, err := FileTranscripts{}.OpenTranscript(ctx, path, TranscriptHeader{SessionKey: "late"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("file before the first line: %v, want none yet", err)
	}
	if err := tr.Append(ctx, TranscriptEntry{Role: "user", Content: "first"}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file after the first line: %v, %v", fi, err)
	}
	if err := late.Append(ctx, TranscriptEntry{Role: "assistant", Content: "second"}); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	late.Close()
	raw, _ := os.ReadFile(path)
	if n := strings.Count(string(raw), `"type":"session"`); n != 1 {
		t.Errorf("%d header lines:\n%s", n, raw)
	}
	h, entries, err := FileTranscripts{}.ReadTranscript(ctx, path)
	if err != nil || h.SessionKey != testHeader().SessionKey || len(entries) != 2 || entries[0].Content != "first" || entries[1].Content != "second" {
		t.Errorf("read back: %+v, %+v, %v", h, entries, err)
	}

	empty := filepath.Join(dir, "transcripts", "main", "empty.jsonl")
	tr, err = FileTranscripts{}.OpenTranscript(ctx, empty, testHeader())
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Sync(ctx); err != nil {
		t.Errorf("Sync before any line: %v", err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if h, entries, err := (FileTranscripts{}).ReadTranscript(ctx, empty); err != nil || h.SessionID != "sess-r1" || len(entries) != 0 {
		t.Errorf("closed without a line: %+v, %+v, %v", h, entries, err)
	}
}

// A transcript opened Fresh (its caller found no lines) is not looked at
// until its first write, which still does what the open would have: a
// file made meanwhile keeps its header and loses its torn line, an empty
// one gets the header, a missing one is made with the lines.
func TestFreshTranscriptFirstWrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fresh := testHeader()
	fresh.Fresh = true
	torn := filepath.Join(dir, "torn.jsonl")
	header := `{"type":"session","version":1,"sessionKey":"made meanwhile","sessionId":"x","agentId":"main","createdAt":"2026-11-27T10:00:00Z"}` + "\n"
	os.WriteFile(torn, []byte(header+`{"type":"message","role":"user","content":"kept","timestamp":"2026-11-27T10:00:00Z"}`+"\n"+`{"type":"mess`), 0o600)
	empty := filepath.Join(dir, "empty.jsonl")
	os.WriteFile(empty, nil, 0o600)
	missing := filepath.Join(dir, "sub", "missing.jsonl")
	for _, c := range []struct {
		path, key string
		want      []string
	}{
		{torn, "made meanwhile", []string{"kept", "a", "b"}},
		{empty, fresh.SessionKey, []string{"a", "b"}},
		{missing, fresh.SessionKey, []string{"a", "b"}},
	} {
		before, _ := os.ReadFile(c.path)
		tr, err := FileTranscripts{}.OpenTranscript(ctx, c.path, fresh)
		if err != nil {
			t.Fatal(err)
		}
		if after, _ := os.ReadFile(c.path); !bytes.Equal(before, after) {
			t.Errorf("%s: changed by the open", c.path)
		}
		if err := tr.AppendLines(ctx, TranscriptEntry{Role: "user", Content: "a"}, TranscriptEntry{Role: "assistant", Content: "b"}); err != nil {
			t.Fatal(err)
		}
		tr.Close()
		h, entries, err := FileTranscripts{}.ReadTranscript(ctx, c.path)
		var got []string
		for _, e := range entries {
			got = append(got, e.Content)
		}
		if err != nil || h.SessionKey != c.key || !slices.Equal(got, c.want) || (FileTranscripts{}).TranscriptTorn(ctx, c.path) {
			t.Errorf("%s: header %q, lines %q, %v; want %q, %q", c.path, h.SessionKey, got, err, c.key, c.want)
		}
	}
}

// A held transcript keeps one descriptor on its file until released; each
// line is in the file when its Append returns, held or not.
func TestTranscriptHold(t *testing.T) {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	ctx := context.Background()
	dir, err := filepath.EvalSymlinks(t.TempDir()) // as /proc names it
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "held.jsonl")
	open := func() int { // descriptors on path
		t.Helper()
		fds, _ = os.ReadDir("/proc/self/fd")
		n := 0
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && target == path {
				n++
			}
		}
		return n
	}
	tr, err := FileTranscripts{}.OpenTranscript(ctx, path, testHeader())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tr.Hold()() // no file yet: nothing to hold
	if err := tr.Append(ctx, TranscriptEntry{Role: "user", Content: "first"}); err != nil {
		t.Fatal(err)
	}
	release := tr.Hold()
	if n := open(); n != 1 {
		t.Errorf("%d descriptors on the file while held, want 1", n)
	}
	tr.Hold()() // held already: its release leaves the first hold
	if n := open(); n != 1 {
		t.Errorf("%d descriptors on the file after a nested hold's release, want 1 (the first hold's)", n)
	}
	for i, c := range []string{"a", "b", "c"} {
		if err := tr.Append(ctx, TranscriptEntry{Role: "tool", Content: c}); err != nil {
			t.Fatal(err)
		}
		if _, entries, err := (FileTranscripts{}).ReadTranscript(ctx, path); err != nil || len(entries) != i+2 || entries[i+1].Content != c {
			t.Fatalf("after appending %q while held: %+v, %v", c, entries, err)
		}
	}
	release()
	release()
	if n := open(); n != 0 {
		t.Errorf("%d descriptors on the file after release, want 0", n)
	}
	if err := tr.Append(ctx, TranscriptEntry{Role: "assistant", Content: "last"}); err != nil {
		t.Fatal(err)
	}
	if _, entries, err := (FileTranscripts{}).ReadTranscript(ctx, path); err != nil || len(entries) != 5 || entries[4].Content != "last" {
		t.Errorf("after release: %+v, %v", entries, err)
	}
}

// BenchmarkTranscriptResults: the 100 result lines of a response's
// prepared calls, one Append each, with and without Hold.
func BenchmarkTranscriptResults(b *testing.B) {
	for _, held := range []bool{false, true} {
		b.Run(fmt.Sprintf("held=%v", held), func(b *testing.B) {
			ctx := context.Background()
			tr, err := FileTranscripts{}.OpenTranscript(ctx, filepath.Join(b.TempDir(), "r.jsonl"), testHeader())
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			e := TranscriptEntry{Role: "tool", ToolResults: json.RawMessage(`[{"callId":"c1","name":"sessions_spawn","content":"{\"status\":\"accepted\",\"runId\":\"0b7c\"}"}]`)}
			tr.Append(ctx, e)
			b.ReportAllocs()
			for b.Loop() {
				release := func() {}
				if held {
					release = tr.Hold()
				}
				for range 100 {
					if err := tr.Append(ctx, e); err != nil {
						b.Fatal(err)
					}
				}
				release()
			}
		})
	}
}
