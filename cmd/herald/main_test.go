package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
)

// TestStartupErrors: each bad start gives one clear message and a non-zero
// exit, never a panic.
func TestStartupErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.json5", `{ gateway: { http: { listen: "127.0.0.1:0" } } }`)
	badKey := write("bad.json5", "{\n  gateway: { htp: {} },\n}")
	missingEnv := write("env.json5", `{ models: { providers: { anthropic: { api: "anthropic", apiKey: "${HERALD_TEST_NO_SUCH_VAR}", models: [{ id: "m" }] } } } }`)
	corruptState := filepath.Join(dir, "corrupt")
	os.MkdirAll(corruptState, 0o700)
	os.WriteFile(filepath.Join(corruptState, "herald.db"), []byte("this is not a database, just some text that is long enough to look like a file header"), 0o600)
	notADir := write("plainfile", "x")

	cases := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"unknown key", []string{"gateway", "--config", badKey, "--state-dir", filepath.Join(dir, "s1")}, 1,
			[]string{"bad.json5:2:", "gateway.htp", "unknown"}},
		{"missing env var", []string{"gateway", "--config", missingEnv, "--state-dir", filepath.Join(dir, "s2")}, 1,
			[]string{"HERALD_TEST_NO_SUCH_VAR"}},
		{"missing config file", []string{"gateway", "--config", filepath.Join(dir, "nope.json5")}, 1,
			[]string{"nope.json5", "not found"}},
		{"corrupt database", []string{"gateway", "--config", good, "--state-dir", corruptState}, 1,
			[]string{"herald.db", "corrupt"}},
		{"state dir not writable", []string{"gateway", "--config", good, "--state-dir", filepath.Join(notADir, "state")}, 1,
			[]string{"plainfile"}},
		{"validate bad", []string{"config", "validate", "--config", badKey}, 1, []string{"gateway.htp"}},
		{"validate good", []string{"config", "validate", "--config", good}, 0, nil},
		{"unknown command", []string{"frobnicate"}, 2, []string{"unknown command", "Usage: herald"}},
		{"bad log format", []string{"gateway", "--config", good, "--state-dir", filepath.Join(dir, "s3"), "--log-format", "xml"}, 2,
			[]string{"--log-format"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("HOME", dir)
			var out, errb bytes.Buffer
			code := run(c.args, &out, &errb)
			if code != c.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, c.code, errb.String())
			}
			for _, w := range c.want {
				if !strings.Contains(strings.ToLower(errb.String()), strings.ToLower(w)) {
					t.Errorf("stderr lacks %q:\n%s", w, errb.String())
				}
			}
			if strings.Contains(errb.String(), "panic") || strings.Contains(errb.String(), "goroutine ") {
				t.Errorf("stderr shows a panic:\n%s", errb.String())
			}
		})
	}
}

// Without a config file, config validate says that the built-in default
// is what it checked (it printed ": ok").
func TestValidateBuiltInDefault(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("HERALD_CONFIG", "")
	var out, errb strings.Builder
	if code := run([]string{"config", "validate"}, &out, &errb); code != 0 || out.String() != "(built-in default config): ok\n" {
		t.Errorf("exit %d, stdout %q, stderr:\n%s", code, out.String(), errb.String())
	}
}

func TestVersion(t *testing.T) {
	var out, errb strings.Builder
	if code := run([]string{"version"}, &out, &errb); code != 0 {
		t.Fatalf("herald version: exit %d, %s", code, errb.String())
	}
	for _, want := range []string{"herald ", "revision: ", "go:       go1."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("herald version printed %q, want a line with %q", out.String(), want)
		}
	}
}

func TestOutboxListAndJSON(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	to := channels.Origin{Channel: "telegram", ChatID: "42", ChatType: channels.ChatDM}
	sent := &store.OutboxItem{Origin: to, Kind: channels.KindReply, Text: "delivered one"}
	waiting := &store.OutboxItem{Origin: to, Kind: channels.KindAnnounce, Text: "still waiting"}
	for _, it := range []*store.OutboxItem{sent, waiting} {
		if _, err := db.EnqueueOutbox(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.MarkDelivered(ctx, sent.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	db.Close()

	var out, errb strings.Builder
	if code := run([]string{"outbox", "list", "--state-dir", dir}, &out, &errb); code != 0 {
		t.Fatalf("outbox list: %d %s", code, errb.String())
	}
	if s := out.String(); !strings.Contains(s, "delivered") || !strings.Contains(s, "pending") || !strings.Contains(s, "still waiting") {
		t.Errorf("outbox list:\n%s", s)
	}
	out.Reset()
	if code := run([]string{"outbox", "list", "--pending", "--json", "--state-dir", dir}, &out, &errb); code != 0 {
		t.Fatalf("outbox list --pending --json: %d %s", code, errb.String())
	}
	var items []store.OutboxItem
	if err := json.Unmarshal([]byte(out.String()), &items); err != nil || len(items) != 1 || items[0].Text != "still waiting" {
		t.Errorf("--pending --json = %s (%v), want the one pending item", out.String(), err)
	}
	out.Reset()
	if code := run([]string{"runs", "list", "--json", "--state-dir", dir}, &out, &errb); code != 0 || strings.TrimSpace(out.String()) != "[]" {
		t.Errorf("runs list --json with no runs = %d %q, want []", code, out.String())
	}
}

func TestBackup(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.EnqueueOutbox(ctx, &store.OutboxItem{Origin: channels.Origin{Channel: "web", ChatID: "c"}, Kind: channels.KindReply, Text: "kept"}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	dst := filepath.Join(t.TempDir(), "copy.db")
	var out, errb strings.Builder
	if code := run([]string{"backup", dst, "--state-dir", dir}, &out, &errb); code != 0 {
		t.Fatalf("backup: %d %s", code, errb.String())
	}
	// The copy is a working state database with the same content.
	restored := t.TempDir()
	b, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(restored, store.DBFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	rdb, err := store.Open(ctx, restored)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	items, err := rdb.PendingOutbox(ctx, 0)
	if err != nil || len(items) != 1 || items[0].Text != "kept" {
		t.Errorf("restored outbox = %+v, %v", items, err)
	}
	if code := run([]string{"backup", dst, "--state-dir", dir}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "already exists") {
		t.Errorf("a second backup to the same file: %d %q, want a refusal", code, errb.String())
	}
}

func TestSchedulesList(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	next := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	err = db.AddSchedule(ctx, &store.Schedule{ID: "standup", SessionKey: "agent:main:slack:group:C1", AgentID: "main",
		Kind: store.ScheduleCron, Expr: "0 9 * * 1-5", Timezone: "Europe/Berlin", Task: "summarise merged PRs",
		Origin: channels.Origin{Channel: "slack", ChatID: "C1", ChatType: channels.ChatGroup}, NextDue: next}, 0)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	var out, errb strings.Builder
	if code := run([]string{"schedules", "list", "--state-dir", dir}, &out, &errb); code != 0 {
		t.Fatalf("schedules list: %d %s", code, errb.String())
	}
	for _, want := range []string{"standup", "active", `cron "0 9 * * 1-5" (Europe/Berlin)`, "2026-12-01 09:00 Europe/Berlin", "slack:group:C1", "summarise merged PRs"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("schedules list lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"schedules", "list", "--json", "--state-dir", dir}, &out, &errb); code != 0 {
		t.Fatalf("schedules list --json: %d %s", code, errb.String())
	}
	var got []struct {
		ID, State, Conversation string
		NextDue                 time.Time
	}
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil || len(got) != 1 || got[0].ID != "standup" ||
		got[0].State != "active" || !got[0].NextDue.Equal(next) || got[0].Conversation != "agent:main:slack:group:C1" {
		t.Errorf("schedules list --json = %s (%v)", out.String(), err)
	}
}

// pauseGC raises GOGC for start (not when the environment turned the
// collector off, nor above a higher setting) and resume restores it,
// however often it is called.
func TestPauseGCRestoresTheSettings(t *testing.T) {
	for _, c := range []struct{ configured, during int }{{100, startGCPercent}, {50, startGCPercent}, {800, 800}, {-1, -1}} {
		prev := debug.SetGCPercent(c.configured)
		resume := pauseGC()
		if p := debug.SetGCPercent(c.during); p != c.during {
			t.Errorf("GOGC %d: %d while starting, want %d", c.configured, p, c.during)
		}
		resume()
		resume()
		if p := debug.SetGCPercent(prev); p != c.configured {
			t.Errorf("GOGC %d: %d after resume", c.configured, p)
		}
	}
}
