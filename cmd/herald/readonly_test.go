package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
)

// seedState makes a state dir with one requester session, one finished
// sub-agent run (and its child session) and one pending outbox item.
func seedState(t *testing.T) (dir string, run store.Run) {
	t.Helper()
	dir = t.TempDir()
	ctx := context.Background()
	db, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	origin := channels.Origin{Channel: "web", ChatID: "ops", ChatType: channels.ChatDM}
	parent := &store.Session{Key: "agent:main:web:dm:ops", ID: "11111111-1111-4111-8111-111111111111", AgentID: "main", Kind: store.KindMain, Origin: origin}
	if _, err := db.EnsureSession(ctx, parent); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	run = store.Run{ID: "a6e90b3a-af72-4034-9654-39296ffc2c52", ChildKey: "agent:main:subagent:a6e90b3a-af72-4034-9654-39296ffc2c52",
		ChildSessionID: "22222222-2222-4222-8222-222222222222", RequesterKey: parent.Key, RootKey: parent.Key, Depth: 1, AgentID: "main",
		Task: "research the market", Label: "market", Model: "demo/demo", Cleanup: "keep", Origin: origin, Status: store.StatusQueued,
		CreatedAt: now, CostUSD: -1}
	child := &store.Session{Key: run.ChildKey, ID: run.ChildSessionID, AgentID: "main", Kind: store.KindSubagent, ParentKey: parent.Key,
		RootKey: parent.Key, Depth: 1, Origin: origin}
	if err := db.CreateRun(ctx, &run, child); err != nil {
		t.Fatal(err)
	}
	if err := db.StartRun(ctx, run.ID, now); err != nil {
		t.Fatal(err)
	}
	run.Status, run.Outcome, run.EndedAt, run.Result = store.StatusDone, store.OutcomeSuccess, now.Add(time.Second), "done"
	if err := db.FinishRun(ctx, &run, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EnqueueOutbox(ctx, &store.OutboxItem{Origin: origin, Kind: channels.KindReply, Text: "hello", SessionKey: parent.Key, AgentID: "main"}); err != nil {
		t.Fatal(err)
	}
	return dir, run
}

// TestReadOnlyCommandsNeedOnlyState: the commands that only read the state
// work with a config whose channel and provider secrets are not in the
// operator's shell (config validate still names them), and still report a
// problem in the state section itself.
func TestReadOnlyCommandsNeedOnlyState(t *testing.T) {
	dir, seeded := seedState(t)
	cfgPath := filepath.Join(t.TempDir(), "herald.json5")
	cfgText := `{
  models: { providers: { anthropic: { api: "anthropic", apiKey: "${HERALD_TEST_NO_ANTHROPIC}", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" } },
  channels: {
    slack: { enabled: true, botToken: "${HERALD_TEST_NO_SLACK_BOT}", appToken: "${HERALD_TEST_NO_SLACK_APP}" },
    telegram: { enabled: true, botToken: "${HERALD_TEST_NO_TELEGRAM}" },
  },
}`
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "copy.db")
	for _, args := range [][]string{
		{"runs", "list"}, {"runs", "list", "--json"}, {"runs", "info", seeded.ID[:8]}, {"sessions", "list"}, {"outbox", "list"},
		{"transcripts", "tail", "agent:main:web:dm:ops"}, {"backup", backup},
	} {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append(args, "--config", cfgPath, "--state-dir", dir), &out, &errb)
			if code != 0 && !(args[0] == "transcripts" && !strings.Contains(errb.String(), "config")) {
				t.Errorf("exit %d; stderr:\n%s", code, errb.String())
			}
			if strings.Contains(errb.String(), "HERALD_TEST_NO_") {
				t.Errorf("a read-only command asks for a channel or provider secret:\n%s", errb.String())
			}
		})
	}
	var out, errb bytes.Buffer
	if code := run([]string{"config", "validate", "--config", cfgPath}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "HERALD_TEST_NO_SLACK_BOT") || !strings.Contains(errb.String(), "HERALD_TEST_NO_ANTHROPIC") {
		t.Errorf("config validate: exit %d, stderr:\n%s\nwant every missing variable named", code, errb.String())
	}
	// The state section is theirs to read: its problems are reported.
	badState := filepath.Join(t.TempDir(), "state.json5")
	if err := os.WriteFile(badState, []byte(`{ state: { driver: "postgres", url: "${HERALD_TEST_NO_DATABASE_URL}" }, channels: { telegram: { enabled: true, botToken: "${HERALD_TEST_NO_TELEGRAM}" } } }`), 0o600); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := run([]string{"runs", "list", "--config", badState, "--state-dir", dir}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "state.url: environment variable HERALD_TEST_NO_DATABASE_URL is not set") || strings.Contains(errb.String(), "HERALD_TEST_NO_TELEGRAM") {
		t.Errorf("runs list with a missing state.url variable: exit %d, stderr:\n%s", code, errb.String())
	}
}

// TestListJSONUsesTheAPINames: the --json lists speak the web API's
// camelCase names (runId, sessionKey, …) and the same status word as the
// table, /subagents and the web chat's panel.
func TestListJSONUsesTheAPINames(t *testing.T) {
	dir, want := seedState(t)
	list := func(args ...string) []map[string]any {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(append(args, "--json", "--state-dir", dir), &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		var rows []map[string]any
		if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out.String())
		}
		return rows
	}
	keysOf := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	runs := list("runs", "list")
	if len(runs) != 1 {
		t.Fatalf("runs list --json: %d rows, want 1", len(runs))
	}
	r := runs[0]
	for k, v := range map[string]any{"runId": want.ID, "sessionKey": want.ChildKey, "sessionId": want.ChildSessionID,
		"requester": want.RequesterKey, "agentId": "main", "label": "market", "task": "research the market",
		"status": "success", "state": "done", "outcome": "success", "model": "demo/demo"} {
		if r[k] != v {
			t.Errorf("runs list --json: %s = %v, want %v (keys %v)", k, r[k], v, keysOf(r))
		}
	}
	// The console API's run (admin.Run), flat: no children.
	for _, k := range []string{"createdAt", "startedAt", "endedAt", "runtimeMs", "tokens", "costUSD", "origin", "depth"} {
		if _, ok := r[k]; !ok {
			t.Errorf("runs list --json lacks %q (keys %v)", k, keysOf(r))
		}
	}
	if _, ok := r["children"]; ok {
		t.Errorf("runs list --json has children (keys %v), want a flat list", keysOf(r))
	}
	checkCamel := func(what string, rows []map[string]any) {
		for _, row := range rows {
			for k := range row {
				if k[0] >= 'A' && k[0] <= 'Z' {
					t.Errorf("%s --json has the Go field name %q (keys %v)", what, k, keysOf(row))
				}
			}
		}
	}
	checkCamel("runs list", runs)
	sessions := list("sessions", "list")
	checkCamel("sessions list", sessions)
	if len(sessions) != 2 || sessions[0]["sessionKey"] == nil || sessions[0]["agentId"] != "main" {
		t.Errorf("sessions list --json = %v", sessions)
	}
	outbox := list("outbox", "list")
	checkCamel("outbox list", outbox)
	if len(outbox) != 1 || outbox[0]["state"] != "pending" || outbox[0]["text"] != "hello" || outbox[0]["sessionKey"] != "agent:main:web:dm:ops" {
		t.Errorf("outbox list --json = %v", outbox)
	}
}

// TestTranscriptsTailWithoutKeyPrintsUsage: a missing argument is a usage
// error that says what the command takes, not "unknown command".
func TestTranscriptsTailWithoutKeyPrintsUsage(t *testing.T) {
	for _, args := range [][]string{{"transcripts", "tail"}, {"runs", "info"}, {"backup"}} {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		if code != 2 || strings.Contains(errb.String(), "unknown command") || !strings.Contains(errb.String(), "usage: herald "+strings.Join(args, " ")) {
			t.Errorf("herald %s: exit %d, stderr:\n%s", strings.Join(args, " "), code, errb.String())
		}
	}
}
