package gateway

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// rssFile is this process's RssFile in bytes.
func rssFile(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// TestReleaseStartPages: giving back the binary's read-only pages lowers
// the process's RssFile, and the process goes on running code from them.
// Under -race (make test) the test binary has a RELRO mapping (read-only,
// written by the loader): dropping it crashes the process at exit, so the
// suite fails if releaseStartPages stops leaving written pages alone.
func TestReleaseStartPages(t *testing.T) {
	before := rssFile(t)
	n, err := releaseStartPages()
	if err != nil {
		t.Fatal(err)
	}
	after := rssFile(t)
	if n == 0 || after >= before {
		t.Fatalf("released %d bytes of mappings; RssFile %d → %d bytes, want it lower", n, before, after)
	}
	t.Logf("released %d MB of mappings; RssFile %.1f → %.1f MiB", n>>20, float64(before)/(1<<20), float64(after)/(1<<20))
	if _, err := releaseStartPages(); err != nil { // code runs again from the dropped pages
		t.Fatal(err)
	}
}
