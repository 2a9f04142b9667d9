package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/devtools/harness"
	"github.com/heraldhq/herald/devtools/pgtest"
)

// TestBatchLastEndsOnTwoReplicas (SPEC §23 batch spawn with §14 and §25):
// two gateway processes on one PostgreSQL state; batches of three with
// announce "chat", whose last two children end at the same moment.
//   - Killed mid-batch: b1 ends on gw-a; gw-a is SIGKILLed while b2 and b3
//     are in their model calls; gw-b adopts both, and their announce steps
//     are released together, so their two ends race in one process.
//   - On two replicas: c1 ends on gw-a; gw-a is SIGKILLed while c2 and c3
//     are in their model calls. Ownership is then split the way an
//     adoption by another replica leaves it — c3 to gw-b, c2 kept by gw-a
//     (whose lease the test holds alive, so gw-b cannot adopt c2) — and both
//     replicas restart and resume one each; their announce steps are
//     released together, so the two ends race on two replicas.
//
// To make the two ends' transactions overlap, not merely their calls,
// the test holds a lock on the results table when it releases the two
// announce steps: each end has marked its run done and waits to insert
// its result; then the lock goes and both go on at once. (With the
// batch's lock taken out of the end, each can see the other still live
// and the batch is never announced: the test failed so in 1 of 3 runs —
// which end reaches its live count first after the release is up to the
// scheduler.)
//
// Each batch gets exactly one announce row and one posted announce
// (✅ 3 success, three sections), and the parent's next turn holds the
// three results once.
func TestBatchLastEndsOnTwoReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: runs real gateway processes")
	}
	dbURL := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := harness.BuildOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	model := newOrchModel(map[string]int{"work:b2": 1, "work:b3": 1, "work:c2": 1, "work:c3": 1},
		"announce:b2", "announce:b3", "announce:c2", "announce:c3")
	llm := llmtest.NewOpenAI(t, model.handle)
	set := &replicaSet{t: t, ctx: ctx, bin: bin, db: dbURL, model: llm.URL, dir: t.TempDir(), mainConcurrent: 2}
	p := postgresProbe(t, dbURL)
	wait := func(what string, cond func() bool) { t.Helper(); waitFor(t, what, cond) }
	owner := func(label string) string { return p.s(fmt.Sprintf(`SELECT owner FROM runs WHERE label = '%s'`, label)) }
	// batchAnnounces is how many announce rows the batches of client's
	// conversation wrote to the outbox (run_id "batch:<id>").
	batchAnnounces := func(client string) int {
		return p.n(fmt.Sprintf(`SELECT count(*) FROM outbox WHERE run_id LIKE 'batch:%%' AND session_key = '%s'`, webKey(client)))
	}
	// releaseTogether lets the announce steps of the labels answer while
	// the results table is locked, waits until the ends of both are
	// blocked inside their transactions, and unlocks it.
	releaseTogether := func(labels ...string) {
		t.Helper()
		tx, err := p.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.Exec(`LOCK TABLE results IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		for _, l := range labels {
			model.open("announce:" + l)
		}
		wait("both ends waiting inside their transactions", func() bool {
			return p.n(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO results%'`) == len(labels)
		})
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// check waits for the batch's ends and its one announce, then asks
	// the parent what it found.
	check := func(web *harness.Web, client string, labels ...string) {
		t.Helper()
		wait("every child's result stored", func() bool {
			for _, l := range labels {
				if p.results(l, false) != 1 {
					return false
				}
			}
			return true
		})
		t.Logf("%s: the last two ends were %s ms apart", client, p.s(fmt.Sprintf(
			`SELECT abs(max(ended_at) - min(ended_at))::text FROM runs WHERE label IN ('%s', '%s')`, labels[1], labels[2])))
		// Both racing ends have committed: the outbox holds what they wrote.
		if n := batchAnnounces(client); n != 1 {
			t.Errorf("%s: %d batch announce rows in the outbox, want exactly 1", client, n)
		}
		wait(client+": the batch's announce", func() bool { return len(webAnswers(ctx, web, client, "announce", "")) > 0 })
		anns := webAnswers(ctx, web, client, "announce", "")
		if len(anns) != 1 || !strings.HasPrefix(anns[0], "Status: ✅ 3 success\n") {
			t.Fatalf("%s: announces %q; want one for the batch, ✅ 3 success", client, anns)
		}
		for i, l := range labels {
			if !strings.Contains(anns[0], fmt.Sprintf("— %d/3 · %s —\nStatus: success\n", i+1, l)) {
				t.Errorf("%s: the batch announce lacks %s's section:\n%s", client, l, anns[0])
			}
		}
		if _, err := web.Post(ctx, client, "what did "+client+" find?"); err != nil {
			t.Fatal(err)
		}
		wait(client+": the parent's answer", func() bool { return len(webAnswers(ctx, web, client, "assistant", "seen:")) > 0 })
		if got, want := webAnswers(ctx, web, client, "assistant", "seen:"), "seen: "+strings.Join(labels, ","); len(got) != 1 || got[0] != want {
			t.Errorf("%s: the parent answered %q; want %q (each result once)", client, got, want)
		}
	}

	// Killed mid-batch; the survivor ends the last two together.
	a, b := set.start("gw-a"), set.start("gw-b")
	if _, err := a.web.Post(ctx, "one", "batch b1 b2 b3"); err != nil {
		t.Fatal(err)
	}
	wait("b1 ended, b2 and b3 in their model calls on gw-a", func() bool {
		return p.results("b1", false) == 1 && model.count("work:b2") == 1 && model.count("work:b3") == 1
	})
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	wait("b2 and b3 adopted by gw-b, both in their announce steps", func() bool {
		return model.count("announce:b2") == 1 && model.count("announce:b3") == 1 && owner("b2") == "gw-b" && owner("b3") == "gw-b"
	})
	if n := batchAnnounces("one"); n != 0 {
		t.Fatalf("%d batch announce rows while b2 and b3 run; a batch posts once, when its last child ends", n)
	}
	releaseTogether("b2", "b3")
	check(b.web, "one", "b1", "b2", "b3")

	// The last two end on two replicas at once.
	a = set.start("gw-a")
	if _, err := a.web.Post(ctx, "two", "batch c1 c2 c3"); err != nil {
		t.Fatal(err)
	}
	wait("c1 ended, c2 and c3 in their model calls on gw-a", func() bool {
		return p.results("c1", false) == 1 && model.count("work:c2") == 1 && model.count("work:c3") == 1
	})
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	// Before gw-a's lease lapses (2 s): hold it alive, so c2 stays gw-a's,
	// and give c3 to gw-b, which takes it back on its restart.
	if _, err := p.db.Exec(`UPDATE leases SET expires_at = (extract(epoch FROM now()) * 1000)::bigint + 120000 WHERE name = 'replica:gw-a'`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.db.Exec(`UPDATE runs SET owner = 'gw-b' WHERE label = 'c3'`); err != nil {
		t.Fatal(err)
	}
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	b = set.start("gw-b")
	a = set.start("gw-a")
	wait("c2 resumed on gw-a and c3 on gw-b, both in their announce steps", func() bool {
		return model.count("announce:c2") == 1 && model.count("announce:c3") == 1
	})
	if oa, ob := owner("c2"), owner("c3"); oa != "gw-a" || ob != "gw-b" {
		t.Fatalf("c2 is owned by %q and c3 by %q; the test needs them on gw-a and gw-b", oa, ob)
	}
	releaseTogether("c2", "c3")
	check(a.web, "two", "c1", "c2", "c3")
}
