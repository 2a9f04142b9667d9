package gateway_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/llmtest"
)

// openTranscripts counts this process's open files under dir/transcripts.
func openTranscripts(t *testing.T, dir string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(target, filepath.Join(dir, "transcripts")) {
			n++
		}
	}
	return n
}

// TestE2EIdleSessionsLeaveMemory: conversations idle for session.idleMinutes
// leave memory (their transcripts are not held open at all); the next message loads the
// history again from the transcript, so the model still sees it.
func TestE2EIdleSessionsLeaveMemory(t *testing.T) {
	t.Parallel()
	sqliteOnly(t) // counts open transcript files
	tg := newTestGateway(t, strings.Replace(sessionCmdConfig, "gateway: {", "session: { idleMinutes: 1 },\n  gateway: {", 1),
		func(c llmtest.Call) llmtest.Reply { return llmtest.Reply{Text: "answer to " + c.LastUser()} })
	for _, client := range []string{"ann", "bob"} {
		seq := webPost(t, tg.URL, client, "remember "+client)
		waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return s == "answer to remember "+client })
	}
	// A transcript is opened for each line and closed again, not held
	// open by its loaded session (issue 30: a descriptor budget).
	if n := openTranscripts(t, tg.StateDir); n != 0 {
		t.Fatalf("%d transcripts open with two conversations loaded, want 0 (opened per line)", n)
	}
	if got := tg.metric(t, "herald_sessions_loaded"); got != 2 {
		t.Errorf("herald_sessions_loaded = %v, want 2", got)
	}
	if n := tg.G.EvictIdle(time.Now()); n != 0 {
		t.Errorf("evicted %d sessions that were just used", n)
	}
	if n := tg.G.EvictIdle(time.Now().Add(61 * time.Second)); n != 2 {
		t.Fatalf("evicted %d idle sessions, want 2", n)
	}
	if n := openTranscripts(t, tg.StateDir); n != 0 {
		t.Errorf("%d transcripts still open after eviction", n)
	}
	if got := tg.metric(t, "herald_sessions_loaded"); got != 0 {
		t.Errorf("herald_sessions_loaded = %v after eviction, want 0", got)
	}
	n := tg.LLM.Count()
	seq := webPost(t, tg.URL, "ann", "what did I ask you to remember?")
	waitWeb(t, tg, "ann", seq, "assistant", func(s string) bool { return strings.HasPrefix(s, "answer to what did") })
	call := tg.LLM.Requests()[n]
	if len(call.Messages) != 3 || call.Messages[0].Text != "remember ann" {
		t.Errorf("after reloading, the model got %d messages starting %q; want the history back", len(call.Messages), call.Messages[0].Text)
	}
	if got := tg.metric(t, "herald_sessions_loaded"); got != 1 {
		t.Errorf("herald_sessions_loaded = %v after one conversation came back, want 1", got)
	}
}
