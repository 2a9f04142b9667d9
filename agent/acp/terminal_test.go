package acp

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTailBuffer: a terminal's output keeps its last outputByteLimit
// bytes, from a character boundary, whatever the sizes of the writes.
func TestTailBuffer(t *testing.T) {
	text := strings.Repeat("abcdéfghij€", 400) // 1- and multi-byte characters
	for _, tc := range []struct {
		name         string
		limit, chunk int
	}{
		{"fits", len(text), 7},
		{"small writes", 100, 7},
		{"writes of the limit", 64, 64},
		{"writes above the limit", 50, 173},
		{"one byte at a time", 33, 1},
		{"limit 1", 1, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &tailBuffer{limit: tc.limit}
			for s := text; s != ""; {
				n := min(tc.chunk, len(s))
				if w, err := b.Write([]byte(s[:n])); w != n || err != nil {
					t.Fatalf("Write = %d, %v", w, err)
				}
				s = s[n:]
				// What a terminal/output asked now would get.
				got, cut := b.String()
				written := len(text) - len(s)
				checkTail(t, text[:written], got, cut, tc.limit)
			}
		})
	}
}

func checkTail(t *testing.T, written, got string, cut bool, limit int) {
	t.Helper()
	if cut != (len(written) > limit) {
		t.Fatalf("after %d bytes (limit %d) truncated = %v", len(written), limit, cut)
	}
	want := written
	if len(want) > limit {
		want = want[len(want)-limit:]
		for want != "" && !utf8.RuneStart(want[0]) {
			want = want[1:]
		}
	}
	if got != want {
		t.Fatalf("after %d bytes (limit %d) output = %q, want %q", len(written), limit, got, want)
	}
}

// BenchmarkTailBuffer: a command writing far more than its terminal
// keeps (os/exec copies its pipe in 32 KiB writes) into the largest
// limit. Before the buffer held up to 1.5× its limit, each write moved
// the whole 8 MiB.
func BenchmarkTailBuffer(b *testing.B) {
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	buf := &tailBuffer{limit: maxTerminalOutput}
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		_, _ = buf.Write(chunk)
	}
}
