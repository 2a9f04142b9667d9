package subagent

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if got != string(want) {
		t.Errorf("%s mismatch:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestAnnounceGolden(t *testing.T) {
	base := Announce{
		Label: "", Task: "Research the latest Rust async runtime benchmarks and summarize the findings for the team",
		Runtime: 5*time.Minute + 12*time.Second, TokensIn: 10100, TokensOut: 2200, CostUSD: 0.0123, HasCost: true,
		SessionKey: "agent:main:subagent:3f2a9c1b-0000-4000-8000-000000000001",
		SessionID:  "0b7e5d1c-1111-4222-8333-444455556666",
		Transcript: "/var/lib/herald/transcripts/main/0b7e5d1c-1111-4222-8333-444455556666.jsonl",
	}
	cases := map[string]func(a *Announce){
		"success": func(a *Announce) { a.Status = "success"; a.Result = "Tokio leads on throughput."; a.Notes = "" },
		"error": func(a *Announce) {
			a.Status = "error"
			a.Label = "bench research"
			a.Result = ""
			a.Notes = "anthropic: HTTP 400: prompt is too long"
			a.HasCost = false
		},
		"timeout": func(a *Announce) {
			a.Status = "timeout"
			a.Result = "Partial: smol and tokio compared."
			a.Notes = "Run timed out after 300s."
			a.Runtime = 5 * time.Minute
			a.CostUSD = 0.5
		},
		"unknown": func(a *Announce) {
			a.Status = "unknown"
			a.Notes = "The gateway stopped while this run was in progress; its outcome is unknown."
			a.Runtime = 2*time.Hour + 3*time.Minute
			a.TokensIn, a.TokensOut = 999, 0
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			a := base
			mutate(&a)
			golden(t, "announce_"+name, a.Render())
		})
	}
}

func TestFormatters(t *testing.T) {
	tokens := map[int64]string{0: "0", 999: "999", 1000: "1.0k", 12345: "12.3k", 999_949: "999.9k", 999_950: "1.0m", 3_400_000: "3.4m"}
	for n, want := range tokens {
		if got := FormatTokens(n); got != want {
			t.Errorf("FormatTokens(%d) = %q, want %q", n, got, want)
		}
	}
	runtimes := map[time.Duration]string{0: "0s", 59 * time.Second: "59s", 60 * time.Second: "1m0s", 312 * time.Second: "5m12s", 3725 * time.Second: "1h2m"}
	for d, want := range runtimes {
		if got := FormatRuntime(d); got != want {
			t.Errorf("FormatRuntime(%s) = %q, want %q", d, got, want)
		}
	}
	costs := map[float64]string{0.0123: "$0.01", 0.5: "$0.50", 0.0042: "$0.0042", 0: "$0.0000", 12.345: "$12.35"}
	for c, want := range costs {
		if got := FormatCost(c); got != want {
			t.Errorf("FormatCost(%v) = %q, want %q", c, got, want)
		}
	}
	long := "abcdefghij abcdefghij abcdefghij abcdefghij abcdefghij abcdefghij abcdefghij"
	if got := TaskTitle("", long); len([]rune(got)) != 72 || got[len(got)-3:] != "…" {
		t.Errorf("TaskTitle cut = %q (%d runes)", got, len([]rune(got)))
	}
	if got := TaskTitle("my label", long); got != "my label" {
		t.Errorf("TaskTitle with label = %q", got)
	}
}

func TestParseAnnounce(t *testing.T) {
	cases := []struct{ in, result, notes string }{
		{"Result:\nfound it\n\nNotes:\n(none)", "found it", "(none)"},
		{"**Result:** found it\n**Notes:** careful", "found it", "careful"},
		{"just text", "just text", ""},
		{"Result: a\nNotes: b\nmore", "a", "b\nmore"},
		{"Intro\nResult: r", "r", ""},
	}
	for _, c := range cases {
		r, n := ParseAnnounce(c.in)
		if r != c.result || n != c.notes {
			t.Errorf("ParseAnnounce(%q) = %q, %q; want %q, %q", c.in, r, n, c.result, c.notes)
		}
	}
}
