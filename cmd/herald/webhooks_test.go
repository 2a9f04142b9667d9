package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/channels/slack/slackfake"
	"github.com/heraldhq/herald/channels/telegram/tgfake"
	"github.com/heraldhq/herald/devtools/harness"
	"github.com/heraldhq/herald/devtools/pgtest"
	"github.com/heraldhq/herald/store"
)

// The load of TestReplicasWebhooksUnderLoad: a tick every loadEvery for
// loadTicks ticks; the victim is SIGKILLed killAfter into it.
const (
	loadTicks    = 50
	loadEvery    = 150 * time.Millisecond
	killAfter    = 2500 * time.Millisecond
	slackSecret  = "slack-signing-secret"
	tgSecret     = "tg-webhook-secret"
	slackChannel = "C0LOAD"
)

// webhookChannels is the channels config of a replica taking Telegram and
// Slack by webhook (the same on every replica, as behind a load balancer).
func webhookChannels(tgURL, slackURL string) string {
	return fmt.Sprintf(`telegram: { enabled: true, botToken: %q, apiUrl: %q, webhookUrl: "https://herald.example/telegram/webhook", webhookSecret: %q },
    slack: { enabled: true, mode: "http", botToken: %q, signingSecret: %q, apiUrl: %q, groups: { %s: {} } }`,
		failoverToken, tgURL, tgSecret, slackfake.BotToken, slackSecret, slackURL, slackChannel)
}

// TestReplicasWebhooksUnderLoad: three gateway processes on one
// PostgreSQL state behind a (simulated) load balancer, with Telegram and
// Slack by webhook and a model taking 1 s per call. Web clients, Telegram
// chats and a Slack channel talk to them continuously; Telegram updates
// and Slack events are often delivered to two replicas at once (Slack
// sends app_mention and message for one mention; Telegram and Slack retry
// on another replica when one fails). One replica is SIGKILLed mid-load.
// Every acknowledged message is answered exactly once and in order per
// chat, every sub-agent run announced exactly once in its own Slack
// thread, and the survivors take the victim's work over within
// leaseSeconds (2 s) and change.
func TestReplicasWebhooksUnderLoad(t *testing.T) {
	dbURL := pgtest.URL(t)
	bin := buildHerald(t)
	model, err := harness.StartModel(harness.ModelOptions{Latency: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db, err := store.OpenPostgres(ctx, dbURL, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

	tf := tgfake.New(t, failoverToken)
	sf := slackfake.New(t)
	order := []string{"gw-a", "gw-b", "gw-c"}
	reps := startReplicas(t, ctx, bin, dbURL, model.URL, webhookChannels(tf.URL(), sf.URL()), order...)
	const victimID = "gw-b"
	victim := reps[victimID]

	// deliver posts a webhook to the replicas from the first on, as a load
	// balancer with retries does, until one acknowledges it with 200.
	deliver := func(first int, post func(base string) (int, error)) {
		for i := range 2 * len(order) {
			r := reps[order[(first+i)%len(order)]]
			status, err := post(r.Base)
			if err == nil && status == http.StatusOK {
				return
			}
		}
		t.Errorf("no replica acknowledged a webhook")
	}
	twice := func(first int, post func(base string) (int, error)) {
		var wg sync.WaitGroup
		for _, f := range []int{first, first + 1} {
			wg.Add(1)
			go func() { defer wg.Done(); deliver(f, post) }()
		}
		wg.Wait()
	}
	tgPost := func(raw []byte) func(string) (int, error) {
		return func(base string) (int, error) {
			return tgfake.PostWebhook(ctx, base+"/telegram/webhook", tgSecret, raw)
		}
	}
	slackPost := func(payload []byte) func(string) (int, error) {
		return func(base string) (int, error) {
			resp, err := slackfake.PostEvent(base+"/slack/events", slackSecret, payload)
			if err != nil {
				return 0, err
			}
			resp.Body.Close()
			return resp.StatusCode, nil
		}
	}

	// The victim is killed mid-load; a watcher measures how long until
	// the survivors hold everything it held.
	killed := make(chan time.Time, 1)
	var heldAtKill int
	var takeover time.Duration
	watched := make(chan struct{})
	killer := time.AfterFunc(killAfter, func() {
		defer close(watched)
		if err := victim.Kill(); err != nil {
			t.Error(err)
			return
		}
		at := time.Now()
		killed <- at
		heldAtKill = held(ctx, conn, victimID)
		for held(ctx, conn, victimID) != 0 {
			if time.Since(at) > 30*time.Second {
				t.Errorf("%s's work not taken over 30s after the kill", victimID)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		takeover = time.Since(at)
	})
	defer killer.Stop()

	webAcked := map[string][]string{}  // client → tags acknowledged, in order
	webPosted := map[string][]string{} // client → every tag posted, in order
	tgPosted := map[int64][]string{}   // chat → tags, in order
	slackSays := map[string]string{}   // tag → ts of its mention (the reply's thread)
	spawns := map[string]string{}      // tag → ts of its mention
	for i := range loadTicks {
		// A web client tries the next replica when one refuses the
		// connection; a message cut on the way is not retried (it may or
		// may not have been stored).
		client, tag := fmt.Sprintf("w%d", i%6), fmt.Sprintf("w%d", i)
		webPosted[client] = append(webPosted[client], tag)
		for k := range order {
			_, err := reps[order[(i+k)%len(order)]].web.Post(ctx, client, "SAY "+tag)
			if err == nil {
				webAcked[client] = append(webAcked[client], tag)
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				break
			}
		}
		// A Telegram chat; every fourth update reaches two replicas.
		chat, tag := int64(500+i%4), fmt.Sprintf("t%d", i)
		tgPosted[chat] = append(tgPosted[chat], tag)
		raw := tf.NewUpdate(tgfake.In{ChatID: chat, FromID: chat, Text: "SAY " + tag})
		if i%4 == 0 {
			twice(i, tgPost(raw))
		} else {
			deliver(i, tgPost(raw))
		}
		// Slack: a mention every third tick, sent as app_mention and as
		// message to two replicas; a spawn every tenth.
		switch {
		case i%10 == 5:
			tag, ts := fmt.Sprintf("p%d", i), sf.NextTS()
			spawns[tag] = ts
			deliver(i, slackPost(slackfake.EventCallback(slackfake.MentionEvent(slackChannel, slackfake.UserID, "<@"+slackfake.BotUserID+"> SPAWN 2 "+tag, ts, ""))))
		case i%3 == 0:
			tag, ts := fmt.Sprintf("s%d", i), sf.NextTS()
			slackSays[tag] = ts
			text := "<@" + slackfake.BotUserID + "> SAY " + tag
			var wg sync.WaitGroup
			for k, ev := range []map[string]any{
				slackfake.MentionEvent(slackChannel, slackfake.UserID, text, ts, ""),
				slackfake.MessageEvent("channel", slackChannel, slackfake.UserID, text, ts, ""),
			} {
				wg.Add(1)
				go func() { defer wg.Done(); deliver(i+k, slackPost(slackfake.EventCallback(ev))) }()
			}
			wg.Wait()
		}
		time.Sleep(loadEvery) // the load's pace, not a synchronisation
	}
	select {
	case <-killed:
	default:
		t.Fatal("the load ended before the kill")
	}
	<-watched
	if takeover == 0 {
		t.FailNow()
	}
	t.Logf("takeover: the survivors hold the %d owed turns, runs and outbox items %s held %v after its SIGKILL (leaseSeconds 2)",
		heldAtKill, victimID, takeover.Round(10*time.Millisecond))
	if heldAtKill == 0 {
		t.Errorf("%s held nothing when it was killed: the kill was not mid-load", victimID)
	}
	x := reps["gw-a"]

	// Web: every acknowledged message answered once, in order.
	for client, acked := range webAcked {
		last := "ack " + acked[len(acked)-1]
		msgs := waitMessages(t, ctx, x.web, client, func(ms []harness.Message) bool { return count(ms, "assistant", last) > 0 })
		var got []string
		for _, m := range msgs {
			if m.Role == "assistant" {
				got = append(got, strings.TrimPrefix(m.Text, "ack "))
			}
		}
		checkOrder(t, "web "+client, webPosted[client], acked, got)
	}
	// Telegram: every update answered once, in order (a send cut by the
	// kill after Telegram took it is sent again right after, and logged:
	// the documented uncertainDelivery "resend").
	resent := 0
	waitUntil(t, 60*time.Second, "every Telegram update answered", func() bool {
		for chat, tags := range tgPosted {
			if !slices.Contains(tgTexts(tf, chat), tags[len(tags)-1]) {
				return false
			}
		}
		return true
	})
	for chat, tags := range tgPosted {
		got := tgTexts(tf, chat)
		compact := slices.Compact(slices.Clone(got))
		resent += len(got) - len(compact)
		checkOrder(t, "telegram chat "+strconv.FormatInt(chat, 10), tags, tags, compact)
	}
	uncertain := 0
	for _, id := range order {
		if id != victimID {
			uncertain += strings.Count(reps[id].Tail(1<<20), "part whose delivery is uncertain sent again")
		}
	}
	if resent > uncertain {
		t.Errorf("%d Telegram answers sent twice; only %d sends were cut by the kill and sent again", resent, uncertain)
	}
	// Slack: every mention answered once in its thread; every run
	// announced once in the thread of the mention that spawned it.
	waitUntil(t, 60*time.Second, "every Slack mention answered and every run announced", func() bool {
		posts := sf.Posted()
		for tag, ts := range slackSays {
			if slackCount(posts, ts, "ack "+tag) == 0 {
				return false
			}
		}
		for tag, ts := range spawns {
			for _, l := range []string{tag + ".1", tag + ".2"} {
				if slackAnnounces(posts, ts, l) == 0 {
					return false
				}
			}
		}
		return true
	})
	posts := sf.Posted()
	for tag, ts := range slackSays {
		if n := slackCount(posts, "", "ack "+tag); n != 1 || slackCount(posts, ts, "ack "+tag) != 1 {
			t.Errorf("Slack mention %s answered %d times, want once in its thread %s", tag, n, ts)
		}
	}
	for tag, ts := range spawns {
		for _, l := range []string{tag + ".1", tag + ".2"} {
			if n := slackAnnounces(posts, "", l); n != 1 || slackAnnounces(posts, ts, l) != 1 {
				t.Errorf("run %s announced %d times, want once in thread %s", l, n, ts)
			}
		}
	}
	runs, err := db.ListRuns(ctx, store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * len(spawns); len(runs) != want {
		t.Errorf("%d runs stored, want %d", len(runs), want)
	}
	owners := map[string]int{}
	for _, r := range runs {
		owners[r.Owner]++
		if r.Status != store.StatusDone || r.Owner == victimID {
			t.Errorf("run %s ended %s, owned by %s", r.Label, r.Status, r.Owner)
		}
	}
	acked := 0
	for _, a := range webAcked {
		acked += len(a)
	}
	t.Logf("load: %d web messages acknowledged of %d, %d Telegram updates, %d Slack mentions, %d runs (owners %v); %d Telegram answers re-sent after the kill; %d model calls",
		acked, loadTicks, loadTicks, len(slackSays)+len(spawns), len(runs), owners, resent, model.Calls())
}

// held counts what replica still holds: owed turns, unfinished runs and
// outbox items.
func held(ctx context.Context, conn *pgx.Conn, replica string) int {
	var n int
	err := conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM intake WHERE claimed_by = $1 AND done_at IS NULL) +
		(SELECT count(*) FROM runs WHERE owner = $1 AND status <> $2) +
		(SELECT count(*) FROM outbox WHERE claimed_by = $1)`, replica, store.StatusDone).Scan(&n)
	if err != nil {
		return -1 // counted as held: the wait goes on until it can read
	}
	return n
}

// checkOrder checks the answers got (tags) of one chat: each tag of must
// is answered exactly once, any other posted tag at most once, all in the
// order posted.
func checkOrder(t *testing.T, chat string, posted, must, got []string) {
	t.Helper()
	seen := map[string]int{}
	last := -1
	for _, g := range got {
		seen[g]++
		i := slices.Index(posted, g)
		if i < 0 {
			t.Errorf("%s: answer %q to nothing posted", chat, g)
			continue
		}
		if i < last {
			t.Errorf("%s: %q answered after %q, out of order (answers %v)", chat, g, posted[last], got)
		}
		last = max(last, i)
	}
	for _, p := range posted {
		if seen[p] > 1 {
			t.Errorf("%s: %q answered %d times", chat, p, seen[p])
		}
	}
	for _, m := range must {
		if seen[m] != 1 {
			t.Errorf("%s: acknowledged %q answered %d times, want once (answers %v)", chat, m, seen[m], got)
		}
	}
}

// tgTexts returns the tags answered ("ack <tag>") in a Telegram chat, in
// order.
func tgTexts(tf *tgfake.Server, chat int64) []string {
	var out []string
	for _, s := range tf.Sent() {
		if s.ChatID == chat && strings.HasPrefix(s.Text, "ack ") {
			out = append(out, strings.TrimPrefix(s.Text, "ack "))
		}
	}
	return out
}

// slackCount counts posts with text in thread ts ("" = anywhere).
func slackCount(posts []slackfake.Post, ts, text string) int {
	n := 0
	for _, p := range posts {
		if p.Text == text && (ts == "" || p.ThreadTS == ts) {
			n++
		}
	}
	return n
}

// slackAnnounces counts the announces of run label in thread ts ("" =
// anywhere).
func slackAnnounces(posts []slackfake.Post, ts, label string) int {
	n := 0
	for _, p := range posts {
		if harness.AnnouncedLabel(p.Text) == label && (ts == "" || p.ThreadTS == ts) {
			n++
		}
	}
	return n
}
