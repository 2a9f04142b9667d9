package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/admin"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

// TestDeadLettersAndIntakeCommands: `herald outbox list --dead` lists a
// dead letter in the console API's JSON, `outbox retry` makes it pending
// again, `outbox drop` removes it; `intake list --owed` shows what is
// owed; an unknown id is a one-line error.
func TestDeadLettersAndIntakeCommands(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	to := channels.Origin{Channel: "telegram", ChatID: "42", ChatType: channels.ChatDM}
	it := &store.OutboxItem{Origin: to, Kind: channels.KindReply, Text: "never arrives", CreatedAt: time.Now().Add(-25 * time.Hour)}
	if _, err := db.EnqueueOutbox(ctx, it); err != nil {
		t.Fatal(err)
	}
	if dead, err := db.BuryOutbox(ctx, store.Claim{Holder: "cli-test"}, store.OutboxLimits{MaxAttempts: 20, MaxAge: 24 * time.Hour}, time.Now()); err != nil || len(dead) != 1 {
		t.Fatalf("bury = %v, %v", dead, err)
	}
	owed := &store.Intake{SessionKey: "agent:main:telegram:dm:42", AgentID: "main", Origin: to, Text: "are you there?", CreatedAt: time.Now()}
	if _, err := db.AddIntake(ctx, owed); err != nil {
		t.Fatal(err)
	}
	db.Close()

	// No gateway to reach (port 0): retry and drop go through the store.
	cfgPath := filepath.Join(dir, "herald.json5")
	if err := os.WriteFile(cfgPath, []byte(`{ gateway: { http: { listen: "127.0.0.1:0" } } }`), 0o600); err != nil {
		t.Fatal(err)
	}
	herald := func(args ...string) (string, string, int) {
		var out, errb strings.Builder
		code := run(append(args, "--state-dir", dir, "--config", cfgPath), &out, &errb)
		return out.String(), errb.String(), code
	}
	list := func(args ...string) []admin.OutboxItem {
		t.Helper()
		out, errs, code := herald(append([]string{"outbox", "list", "--json"}, args...)...)
		var items []admin.OutboxItem
		if err := json.Unmarshal([]byte(out), &items); code != 0 || err != nil {
			t.Fatalf("outbox list %v: %d %s %v", args, code, errs, err)
		}
		return items
	}
	dead := list("--dead")
	if out, errs, code := herald("outbox", "list", "--dead", "--failed"); code != 2 || out != "" || !strings.Contains(errs, "one of --pending, --failed and --dead") {
		t.Errorf("outbox list --dead --failed = %d %q %q, want a usage error", code, out, errs)
	}
	if len(dead) != 1 || dead[0].State != "dead" || dead[0].Destination != "telegram:dm:42" || dead[0].Channel != "telegram" {
		t.Fatalf("outbox list --dead = %+v", dead)
	}
	if out, _, _ := herald("outbox", "list", "--dead"); !strings.Contains(out, "dead") || !strings.Contains(out, "never arrives") {
		t.Errorf("outbox list --dead table:\n%s", out)
	}
	id := strconv.FormatInt(dead[0].ID, 10)
	if out, errs, code := herald("outbox", "retry", id); code != 0 || !strings.Contains(out, "queued again") {
		t.Fatalf("outbox retry: %d %s %s", code, out, errs)
	}
	if p := list("--pending"); len(p) != 1 || p[0].Attempts != 0 || len(list("--dead")) != 0 {
		t.Errorf("after retry: pending %+v", p)
	}
	if _, _, code := herald("outbox", "drop", id); code != 0 {
		t.Fatalf("outbox drop: %d", code)
	}
	if all := list(); len(all) != 0 {
		t.Errorf("after drop: %+v", all)
	}
	if _, errs, code := herald("outbox", "drop", id); code == 0 || !strings.Contains(errs, "no undelivered outbox item "+id) || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Errorf("drop of an unknown id: %d %q; want a one-line error", code, errs)
	}
	out, errs, code := herald("intake", "list", "--owed", "--json")
	var in []admin.IntakeItem
	if err := json.Unmarshal([]byte(out), &in); code != 0 || err != nil || len(in) != 1 || !in[0].Owed || in[0].Text != "are you there?" {
		t.Errorf("intake list --owed --json = %d %s %s %v", code, out, errs, err)
	}
}

// TestRunsStopAsksTheGateway: `herald runs stop <id>` posts to the running
// gateway's console API with gateway.admin.token and prints how many runs
// stopped; the API's 404 reason comes back as the error; with no gateway
// answering it says so.
func TestRunsStopAsksTheGateway(t *testing.T) {
	var auth, path string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth, path = r.Header.Get("Authorization"), r.URL.Path
		if strings.Contains(r.URL.Path, "/runs/gone/") {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":"no run \"gone\""}`))
			return
		}
		w.Write([]byte(`{"status":"ok","stopped":3}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "herald.json5")
	os.WriteFile(cfgPath, []byte(`{ gateway: { http: { listen: "`+strings.TrimPrefix(srv.URL, "http://")+`" }, admin: { token: "tok-1" } } }`), 0o600)
	var out, errb strings.Builder
	if code := run([]string{"runs", "stop", "abc-123", "--config", cfgPath, "--state-dir", dir}, &out, &errb); code != 0 || !strings.Contains(out.String(), "3 live runs stopped") {
		t.Errorf("runs stop: %d %q %q", code, out.String(), errb.String())
	}
	if auth != "Bearer tok-1" || path != "/admin/api/runs/abc-123/stop" {
		t.Errorf("the gateway got %q %q", auth, path)
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"runs", "stop", "gone", "--config", cfgPath, "--state-dir", dir}, &out, &errb); code != 1 || !strings.Contains(errb.String(), `no run "gone"`) {
		t.Errorf("runs stop of an unknown run: %d %q", code, errb.String())
	}
	srv.Close()
	errb.Reset()
	if code := run([]string{"runs", "stop", "abc", "--config", cfgPath, "--state-dir", dir}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "no gateway answered") {
		t.Errorf("runs stop with no gateway: %d %q", code, errb.String())
	}
}

// TestGatewayURL: where the CLI (runs stop, mcp list, doctor) reaches the
// running gateway.
func TestGatewayURL(t *testing.T) {
	for listen, want := range map[string]string{
		"127.0.0.1:8790": "http://127.0.0.1:8790",
		"0.0.0.0:8790":   "http://127.0.0.1:8790",
		":8790":          "http://127.0.0.1:8790",
		"[::]:8790":      "http://127.0.0.1:8790",
		"[::1]:8790":     "http://[::1]:8790",
		"chat.lan:80":    "http://chat.lan:80",
		"127.0.0.1:0":    "",
		"nonsense":       "",
	} {
		cfg := &config.Config{}
		cfg.Gateway.HTTP.Listen = listen
		got, err := gatewayURL(cfg)
		if got != want || (err == nil) != (want != "") {
			t.Errorf("gatewayURL(%q) = %q, %v; want %q", listen, got, err, want)
		}
	}
}
