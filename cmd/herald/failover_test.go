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

// replica is one `herald gateway` process of a PostgreSQL state.
type replica struct {
	*harness.Gateway
	web *harness.Web
}

// failoverToken is the fake Telegram bot's token.
const failoverToken = "123456:failover"

// pollTelegram is the channels config of a replica that long-polls the
// fake Telegram at tgURL.
func pollTelegram(tgURL string) string {
	return fmt.Sprintf("telegram: { enabled: true, botToken: %q, apiUrl: %q }", failoverToken, tgURL)
}

// startReplicaID starts a replica named id (gateway.replicaId; "" = the
// default) in its own dir, with chans as more members of "channels".
func startReplicaID(t *testing.T, bin, dbURL, modelURL, chans, name, id string) *replica {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cfg := harness.Config{Listen: addr, ModelURL: modelURL, MainConcurrent: 8, Subagents: 8, Children: 8, GraceSeconds: 5, ReplicaID: id,
		Channels: chans,
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

// startReplicas starts a replica for each id (named after it) with chans
// as more members of "channels", and waits until every one is ready.
func startReplicas(t *testing.T, ctx context.Context, bin, dbURL, modelURL, chans string, ids ...string) map[string]*replica {
	t.Helper()
	reps := map[string]*replica{}
	for _, id := range ids {
		reps[id] = startReplicaID(t, bin, dbURL, modelURL, chans, id, id)
	}
	for _, id := range ids {
		if err := reps[id].WaitReady(ctx); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	return reps
}

// TestReplicasShareWorkAndFailOver: three gateway processes on one
// PostgreSQL state, all serving. Web clients post to all three and read
// their conversations (and live event streams) from another; one
// conversation's messages go to three replicas at once and are answered
// in order; Telegram is long-polled by the one replica elected for it. That
// replica is SIGKILLed while turns and its sub-agent runs are in flight:
// another takes the poll over within leaseSeconds (2 s) and change, and
// the survivors take its owed turns and runs, so every acknowledged
// message is answered exactly once and every run announced exactly once.
// A clean stop then hands the poll over at once; never two pollers.
func TestReplicasShareWorkAndFailOver(t *testing.T) {
	dbURL := pgtest.URL(t)
	bin := buildHerald(t)
	model, err := harness.StartModel(harness.ModelOptions{Latency: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := store.OpenPostgres(ctx, dbURL, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	tf := tgfake.New(t, failoverToken)
	order := []string{"gw-a", "gw-b", "gw-c"}
	reps := startReplicas(t, ctx, bin, dbURL, model.URL, pollTelegram(tf.URL()), order...)
	poller := leaseHolder(t, ctx, db, "channel:telegram", "")
	t.Logf("Telegram is polled by %s", poller)
	var survivors []string
	for _, id := range order {
		if id != poller {
			survivors = append(survivors, id)
		}
	}
	victim, x, y := reps[poller], reps[survivors[0]], reps[survivors[1]]

	// A live event stream on one replica sees a reply to a message posted
	// on another (LISTEN/NOTIFY).
	live := make(chan string, 16)
	streamReady := make(chan struct{})
	go func() {
		_ = y.web.Events(ctx, "watch", streamReady, func(m harness.Message, _ time.Time) {
			if m.Role == "assistant" {
				live <- m.Text
			}
		})
	}()
	<-streamReady

	const clients = 9
	for i := range clients {
		r := reps[order[i%3]]
		if _, err := r.web.Post(ctx, fmt.Sprintf("c%d", i), fmt.Sprintf("SAY m%d", i)); err != nil {
			t.Fatalf("message %d not acknowledged: %v", i, err)
		}
	}
	if _, err := x.web.Post(ctx, "watch", "SAY elsewhere"); err != nil {
		t.Fatal(err)
	}
	// One conversation, three messages to three replicas: one turn at a
	// time, in the order they were acknowledged.
	for i, id := range order {
		if _, err := reps[id].web.Post(ctx, "ordered", fmt.Sprintf("SAY o%d", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := victim.web.Post(ctx, "spawner", "SPAWN 3 job"); err != nil {
		t.Fatal(err)
	}
	tf.SendText(777, "private", 0, 42, "SAY tg1")
	select {
	case got := <-live:
		if got != "ack elsewhere" {
			t.Errorf("the stream on %s got %q, want the reply to the message posted on %s", survivors[1], got, survivors[0])
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the event stream on %s never showed the reply to a message posted on %s", survivors[1], survivors[0])
	}

	// Kill the poller once its sub-agents run: their runs, and its turns
	// still waiting for the model, are in flight.
	cut := map[string]bool{} // runs running on the victim at the kill
	waitUntil(t, 30*time.Second, "a sub-agent run of "+poller+" running", func() bool {
		runs, err := db.ListRuns(ctx, store.RunFilter{Statuses: []string{store.StatusRunning}})
		if err != nil || len(runs) == 0 || runs[0].Owner != poller {
			return false
		}
		for _, r := range runs {
			cut[r.ID] = true
		}
		return true
	})
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	next := leaseHolder(t, ctx, db, "channel:telegram", poller)
	t.Logf("takeover: %s polls Telegram %v after %s was SIGKILLed (leaseSeconds 2)", next, time.Since(killed).Round(time.Millisecond), poller)
	tf.SendText(777, "private", 0, 42, "SAY tg2")

	// Every acknowledged message answered once, seen from a survivor.
	for i := range clients {
		client, want := fmt.Sprintf("c%d", i), fmt.Sprintf("ack m%d", i)
		msgs := waitMessages(t, ctx, x.web, client, func(ms []harness.Message) bool { return count(ms, "assistant", want) > 0 })
		if n := count(msgs, "assistant", want); n != 1 {
			t.Errorf("%s: %q answered %d times, want once: %+v", client, want, n, msgs)
		}
	}
	msgs := waitMessages(t, ctx, y.web, "ordered", func(ms []harness.Message) bool { return count(ms, "assistant", "ack o3") > 0 })
	var answers []string
	for _, m := range msgs {
		if m.Role == "assistant" {
			answers = append(answers, m.Text)
		}
	}
	if fmt.Sprint(answers) != "[ack o1 ack o2 ack o3]" {
		t.Errorf("one conversation over three replicas answered %q, want o1, o2, o3 once each in order", answers)
	}
	// Every sub-agent run announced once.
	msgs = waitMessages(t, ctx, x.web, "spawner", func(ms []harness.Message) bool {
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
	byRun := map[string]string{}
	for _, m := range msgs {
		if m.RunID != "" {
			byRun[m.RunID] = m.Text
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
		t.Logf("run %s: %s, outcome %s, owner %s, resumes %d (running on the victim at the kill: %v)", r.Label, r.Status, r.Outcome, r.Owner, r.Resumes, cut[r.ID])
		if r.Status != store.StatusDone || r.Owner == poller {
			t.Errorf("run %s ended %s, owned by %s, after the takeover", r.Label, r.Status, r.Owner)
		}
		// A run cut on the victim is resumed by a survivor (SPEC §25).
		if cut[r.ID] && (r.Outcome != store.OutcomeSuccess || r.Resumes != 1 ||
			!strings.Contains(byRun[r.ID], "Resumed after the gateway stopped (1×).")) {
			t.Errorf("run %s was running on %s at the kill: outcome %s, resumes %d, announce:\n%s\nwant success, resumed once by a survivor",
				r.Label, poller, r.Outcome, r.Resumes, byRun[r.ID])
		}
	}
	waitUntil(t, 60*time.Second, "Telegram messages answered", func() bool {
		return tgAnswers(tf, "ack tg1") > 0 && tgAnswers(tf, "ack tg2") > 0
	})

	// A clean stop hands the poll over at once: the leases are given up.
	if err := reps[next].Term(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	last := leaseHolder(t, ctx, db, "channel:telegram", next)
	t.Logf("switchover: %s polls Telegram %v after %s stopped cleanly", last, time.Since(stopped).Round(time.Millisecond), next)
	tf.SendText(777, "private", 0, 42, "SAY tg3")
	waitUntil(t, 60*time.Second, "the Telegram message after the switchover answered", func() bool { return tgAnswers(tf, "ack tg3") > 0 })
	// Telegram cannot be asked whether a send went through: a send cut by
	// the kill after Telegram took it is sent again by the survivor that
	// takes the item over (uncertainDelivery "resend", the default), and
	// logged. Every other answer arrives exactly once.
	resent := 0
	for _, id := range survivors {
		resent += strings.Count(reps[id].Tail(1<<20), "part whose delivery is uncertain sent again")
	}
	extra := 0
	for _, w := range []string{"ack tg1", "ack tg2", "ack tg3"} {
		n := tgAnswers(tf, w)
		if n < 1 {
			t.Errorf("Telegram never got %q", w)
		}
		extra += max(0, n-1)
	}
	if extra > resent {
		t.Errorf("Telegram got %d answers more than once; %d sends were uncertain and sent again", extra, resent)
	}
	if n := tf.Conflicts(); n != 0 {
		t.Errorf("%d getUpdates conflicts: two replicas polled Telegram at once", n)
	}
}

// leaseHolder waits until a live replica other than not holds the lease
// name and returns it.
func leaseHolder(t *testing.T, ctx context.Context, db *store.DB, name, not string) string {
	t.Helper()
	var holder string
	waitUntil(t, 30*time.Second, "a holder of "+name, func() bool {
		l, err := db.GetLease(ctx, name)
		if err != nil || l.Holder == not || !l.ExpiresAt.After(time.Now()) {
			return false
		}
		holder = l.Holder
		return true
	})
	return holder
}

// waitUntil polls cond until it holds, failing the test after limit.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
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
