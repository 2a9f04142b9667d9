package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels/telegram/tgfake"
	"github.com/heraldhq/herald/devtools/harness"
	"github.com/heraldhq/herald/devtools/pgtest"
	"github.com/heraldhq/herald/store"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// replica is one `herald gateway` process of a PostgreSQL state.
type replica struct {
	*harness.Gateway
	web *harness.Web
}

// failoverToken is the fake Telegram bot's token.
const failoverToken = "123456:failover"

func startReplica(t *testing.T, bin, dbURL, modelURL, tgURL, name string) *replica {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cfg := harness.Config{Listen: addr, ModelURL: modelURL, MainConcurrent: 8, Subagents: 8, Children: 8, GraceSeconds: 5,
		Channels: fmt.Sprintf("telegram: { enabled: true, botToken: %q, apiUrl: %q }", failoverToken, tgURL),
		Extra:    fmt.Sprintf("state: { driver: \"postgres\", url: %q, leaseSeconds: 2 },", dbURL)}
	cfgPath := filepath.Join(dir, "herald.json5")
	if err := cfg.Write(cfgPath); err != nil {
		t.Fatal(err)
	}
	g, err := harness.StartGateway(bin, cfgPath, filepath.Join(dir, "state"), filepath.Join(dir, "gateway.log"), "http://"+addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = g.Kill()
		if t.Failed() {
			t.Logf("%s log:\n%s", name, g.Tail(40))
		}
	})
	return &replica{Gateway: g, web: harness.NewWeb(g.Base, 16)}
}

// logSays waits until the replica's log has a line containing s.
func (r *replica) logSays(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(r.Log)
		if strings.Contains(string(b), s) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("log of %s never said %q:\n%s", r.Base, s, r.Tail(20))
		}
		select {
		case <-r.Exited():
			t.Fatalf("%s exited before its log said %q:\n%s", r.Base, s, r.Tail(20))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestFailoverToStandby: two gateway processes on one PostgreSQL state. One
// takes the gateway role, the other stands by; web and Telegram messages are
// acknowledged by the first, which is SIGKILLed while their turns and
// sub-agent runs are in flight. The standby takes over once the lease
// expires and every acknowledged message is answered exactly once, every
// run announced exactly once, in the conversation the person sees from the
// new replica; Telegram is polled by one process at a time throughout.
func TestFailoverToStandby(t *testing.T) {
	dbURL := pgtest.URL(t)
	bin := buildHerald(t)
	model, err := harness.StartModel(harness.ModelOptions{Latency: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	tf := tgfake.New(t, failoverToken)
	a := startReplica(t, bin, dbURL, model.URL, tf.URL(), "a")
	if err := a.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	a.logSays(t, "took the gateway role")
	b := startReplica(t, bin, dbURL, model.URL, tf.URL(), "b")
	b.logSays(t, "standby: another replica has the gateway role")

	const clients = 6
	for i := range clients {
		if _, err := a.web.Post(ctx, fmt.Sprintf("c%d", i), fmt.Sprintf("SAY m%d", i)); err != nil {
			t.Fatalf("message %d not acknowledged: %v", i, err)
		}
	}
	if _, err := a.web.Post(ctx, "spawner", "SPAWN 3 job"); err != nil {
		t.Fatal(err)
	}
	tf.SendText(777, "private", 0, 42, "SAY tg1")
	// Kill the holder once the sub-agents are running: their runs, and
	// the turns still waiting for the model, are in flight.
	db, err := store.OpenPostgres(ctx, dbURL, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		runs, err := db.ListRuns(ctx, store.RunFilter{Statuses: []string{store.StatusRunning}})
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no sub-agent run started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := b.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("takeover: the standby was ready %v after the SIGKILL (leaseSeconds 2)", time.Since(killed).Round(time.Millisecond))
	tf.SendText(777, "private", 0, 42, "SAY tg2")

	// Every acknowledged message answered once, seen from the new replica.
	for i := range clients {
		client, want := fmt.Sprintf("c%d", i), fmt.Sprintf("ack m%d", i)
		msgs := waitMessages(t, ctx, b.web, client, func(ms []harness.Message) bool { return count(ms, "assistant", want) > 0 })
		if n := count(msgs, "assistant", want); n != 1 {
			t.Errorf("%s: %q answered %d times, want once: %+v", client, want, n, msgs)
		}
	}
	// Every sub-agent run announced once.
	msgs := waitMessages(t, ctx, b.web, "spawner", func(ms []harness.Message) bool {
		seen := map[string]bool{}
		for _, m := range ms {
			if l := harness.AnnouncedLabel(m.Text); l != "" {
				seen[l] = true
			}
		}
		return len(seen) == 3
	})
	announced := map[string]int{}
	for _, m := range msgs {
		if l := harness.AnnouncedLabel(m.Text); l != "" {
			announced[l]++
		}
	}
	for _, l := range []string{"job.1", "job.2", "job.3"} {
		if announced[l] != 1 {
			t.Errorf("run %s announced %d times, want once (all: %v)", l, announced[l], announced)
		}
	}
	runs, err := db.ListRuns(ctx, store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 {
		t.Errorf("%d runs stored, want 3", len(runs))
	}
	for _, r := range runs {
		t.Logf("run %s: %s, outcome %s", r.Label, r.Status, r.Outcome)
		if r.Status != store.StatusDone {
			t.Errorf("run %s ended %s after the takeover", r.Label, r.Status)
		}
	}
	// Telegram: each message answered once, by whichever replica held the
	// role, and never two pollers at once.
	deadline = time.Now().Add(60 * time.Second)
	for tgAnswers(tf, "ack tg1") == 0 || tgAnswers(tf, "ack tg2") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Telegram messages not answered: %+v", tf.Sent())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A clean stop hands the role over at once: the lease is released.
	c := startReplica(t, bin, dbURL, model.URL, tf.URL(), "c")
	c.logSays(t, "standby: another replica has the gateway role")
	if err := b.Term(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("switchover: the standby was ready %v after the holder stopped cleanly", time.Since(stopped).Round(time.Millisecond))
	if n := count(waitMessages(t, ctx, c.web, "c0", func([]harness.Message) bool { return true }), "assistant", "ack m0"); n != 1 {
		t.Errorf("after the switchover c0 shows %d answers, want 1", n)
	}
	tf.SendText(777, "private", 0, 42, "SAY tg3")
	deadline = time.Now().Add(60 * time.Second)
	for tgAnswers(tf, "ack tg3") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Telegram message after the switchover not answered: %+v", tf.Sent())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, w := range []string{"ack tg1", "ack tg2", "ack tg3"} {
		if n := tgAnswers(tf, w); n != 1 {
			t.Errorf("Telegram got %q %d times, want once", w, n)
		}
	}
	if n := tf.Conflicts(); n != 0 {
		t.Errorf("%d getUpdates conflicts: two replicas polled Telegram at once", n)
	}
}

// tgAnswers counts the messages the fake Telegram got with text.
func tgAnswers(tf *tgfake.Server, text string) int {
	n := 0
	for _, s := range tf.Sent() {
		if s.Text == text {
			n++
		}
	}
	return n
}

func count(ms []harness.Message, role, text string) int {
	n := 0
	for _, m := range ms {
		if m.Role == role && m.Text == text {
			n++
		}
	}
	return n
}

// waitMessages polls a conversation until done says it is complete and
// returns it.
func waitMessages(t *testing.T, ctx context.Context, w *harness.Web, client string, done func([]harness.Message) bool) []harness.Message {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ms, err := w.Messages(ctx, client, 0)
		if err == nil && done(ms) {
			return ms
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: conversation incomplete after 60s: %+v (%v)", client, ms, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
