package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/admin"
	"github.com/heraldhq/herald/channels"
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

	herald := func(args ...string) (string, string, int) {
		var out, errb strings.Builder
		code := run(append(args, "--state-dir", dir), &out, &errb)
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
