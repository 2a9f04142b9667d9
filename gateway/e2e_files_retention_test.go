package gateway_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/devtools/pgtest"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent/subagenttest"
)

// TestE2EFileRetentionSweep: a gateway started when a file was last named
// more than attachments.retentionDays ago removes it (its bytes leave the
// state dir, its URL answers 404), and keeps a file named inside the window.
// The gateway's clock is set two days ahead instead of waiting them out.
func TestE2EFileRetentionSweep(t *testing.T) {
	dir := t.TempDir()
	cfg := strings.Replace(filesE2EConfig, "attachments: { maxBytes: 200000 }", "attachments: { maxBytes: 200000, retentionDays: 2 }", 1)
	const client = "files-retention"
	tg := newTestGatewayIn(t, dir, cfg, llmtest.Text("kept"))
	postFiles(t, tg.URL, client, "the old plan", map[string][]byte{"old.png": testPNGSized(t, 5, 4)})
	waitWeb(t, tg, client, 0, "assistant", func(s string) bool { return s == "kept" })
	// Every reference to old.png is older than mid, every one to new.png newer.
	mid := time.Now()
	for deadline := mid.Add(time.Second); time.Now().UnixMilli() <= mid.UnixMilli(); {
		if time.Now().After(deadline) {
			t.Fatal("the clock did not move")
		}
	}
	postFiles(t, tg.URL, client, "the new plan", map[string][]byte{"new.png": testPNGSized(t, 6, 4)})
	if !waitFor(e2eWait, func() bool { return countRole(webFileMessages(t, tg.URL, client), "assistant") == 2 }) {
		t.Fatalf("the second message was not answered: %+v", webFileMessages(t, tg.URL, client))
	}
	ids := map[string]string{} // name → file id
	for _, m := range webFileMessages(t, tg.URL, client) {
		for _, f := range m.Files {
			ids[f.Name] = f.ID
		}
	}
	if ids["old.png"] == "" || ids["new.png"] == "" {
		t.Fatalf("stored files %v, want old.png and new.png", ids)
	}
	for name, code := range map[string]int{"old.png": 200, "new.png": 200} {
		if got := fileStatus(t, tg.URL, client, ids[name]); got != code {
			t.Fatalf("GET %s before the sweep = %d, want %d", name, got, code)
		}
	}
	tg.Stop()

	// Two days later, by the gateway's clock: old.png's last reference is
	// past the two retention days, new.png's is not.
	core, logs := observer.New(zapcore.InfoLevel)
	testLogger, testClock = zap.New(core), subagenttest.FixedClock(mid.Add(2*24*time.Hour))
	defer func() { testLogger, testClock = nil, nil }()
	tg = newTestGatewayIn(t, dir, cfg, llmtest.Text("kept"))
	if !waitFor(e2eWait, func() bool {
		return logs.FilterMessage("removed files past attachments.retentionDays").Len() > 0
	}) {
		t.Fatal("the gateway did not sweep old files at start")
	}
	if e := logs.FilterMessage("removed files past attachments.retentionDays").All()[0]; e.ContextMap()["files"] != int64(1) {
		t.Errorf("the sweep removed %v files, want 1 (old.png)", e.ContextMap()["files"])
	}
	if got := fileStatus(t, tg.URL, client, ids["old.png"]); got != http.StatusNotFound {
		t.Errorf("GET old.png after the sweep = %d, want 404", got)
	}
	if got := fileStatus(t, tg.URL, client, ids["new.png"]); got != http.StatusOK {
		t.Errorf("GET new.png after the sweep = %d, want 200", got)
	}
	if !pgtest.OnPostgres() { // on PostgreSQL the bytes live in the database
		for name, want := range map[string]bool{"old.png": false, "new.png": true} {
			id := ids[name]
			_, err := os.Stat(filepath.Join(dir, store.FilesDir, id[:2], id))
			if exists := err == nil; exists != want {
				t.Errorf("%s in %s/%s: %v, want %v", name, dir, store.FilesDir, exists, want)
			}
		}
	}
}

func countRole(ms []webFileEntry, role string) (n int) {
	for _, m := range ms {
		if m.Role == role {
			n++
		}
	}
	return n
}

// fileStatus is the HTTP status of GET /api/files/<id> for client.
func fileStatus(t *testing.T, base, client, id string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/files/"+id+"?client="+client, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}
