package store

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
)

// BenchmarkEndRunBurst is the store's part of the 10,000 case's run ends
// (docs/performance.md): each op is a burst of 1,000 sub-agent runs of 10
// web chats ending at once, each from its own goroutine, as the runs whose
// announce calls are answered in the same moment do. An end is what the
// gateway writes for such a run: the run row, its child session's tokens,
// its result for the requester (SPEC §23), its announce, claimed for this
// replica and delivered to the web chat in the same transaction (with the
// claim of the chat's next item). It reports the process's CPU per end
// (getrusage: steadier than ns/op on a shared machine), the group commits
// per end, and the wall time of a burst: SQLite has one writer, so a
// burst's ends are written one after another.
func BenchmarkEndRunBurst(b *testing.B) {
	const chats, perChat = 10, 100
	db := newTestDB(b)
	var commits atomic.Int64
	if db.pg == nil {
		testHookGroupCommit = func(int) { commits.Add(1) }
		b.Cleanup(func() { testHookGroupCommit = nil })
	}
	now := time.Now()
	spawn := func(op int) []*Run {
		var all []*Run
		for c := range chats {
			all = append(all, spawnWebRuns(b, db, strconv.Itoa(op)+"-"+strconv.Itoa(c), "c"+strconv.Itoa(c), perChat, now)...)
		}
		return all
	}
	end := func(r *Run) error { return endWebRun(b, db, r) }
	b.ReportAllocs()
	var cpu, wall time.Duration
	var groups int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		runs := spawn(i)
		c0, n0 := processCPU(b), commits.Load()
		b.StartTimer()
		t0 := time.Now()
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, r := range runs {
			wg.Go(func() {
				<-start
				if err := end(r); err != nil {
					b.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
		b.StopTimer()
		wall += time.Since(t0)
		cpu += processCPU(b) - c0
		groups += commits.Load() - n0
		b.StartTimer()
	}
	ends := float64(b.N * chats * perChat)
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/ends, "cpu-µs/end")
	b.ReportMetric(float64(wall.Milliseconds())/float64(b.N), "ms/burst")
	if db.pg == nil {
		b.ReportMetric(float64(groups)/ends, "commits/end")
	}
}

// spawnWebRuns records n running runs of the web chat client, ids
// "end-<prefix>-<j>", with one SpawnEach: one model response's spawns.
func spawnWebRuns(b *testing.B, db *DB, prefix, client string, n int, now time.Time) []*Run {
	origin := channels.Origin{Channel: "web", ChatID: client, ChatType: channels.ChatDM}
	req := "agent:main:web:dm:" + client
	runs, children := make([]*Run, n), make([]*Session, n)
	for j := range n {
		runs[j], children[j] = spawnedRun("end", prefix+"-"+strconv.Itoa(j), req, "s-"+client, now)
		runs[j].Origin = origin
	}
	errs, err := db.SpawnEach(context.Background(), runs, children, SpawnLimits{MaxChildren: 1 << 20, MaxTotal: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range errs {
		if e != nil {
			b.Fatal(e)
		}
	}
	return runs
}

// endWebRun ends r as the gateway ends a run of a web chat: the run row,
// its child session's tokens, its result for the requester (SPEC §23),
// its announce, claimed for this replica and delivered to the web chat
// in the same transaction (with the claim of the chat's next item).
func endWebRun(b *testing.B, db *DB, r *Run) error {
	r.Status, r.Outcome, r.Result, r.TokensIn, r.TokensOut = StatusDone, OutcomeSuccess, "done", 1200, 300
	r.EndedAt, r.ArchiveAt = time.Now(), time.Now().Add(time.Hour)
	ann := &OutboxItem{RunID: r.ID, Origin: r.Origin, Kind: channels.KindAnnounce, Text: "✅ summary finished\n\ndone",
		SessionKey: r.RequesterKey, AgentID: r.AgentID}
	at := time.Now()
	e := RunEnd{
		Announce:      ann,
		Result:        &Result{Text: "[sub-agent result] done"},
		ClaimAnnounce: "local",
		Web: &WebDelivery{Client: r.Origin.ChatID, Msg: WebMessage{Role: "announce", Text: ann.Text, RunID: r.ID, At: at,
			Next: &NextClaim{Holder: "local", Limits: OutboxLimits{}, Now: at}}},
	}
	if err := db.EndRun(context.Background(), r, e); err != nil {
		return err
	}
	if e.Web.Msg.Delivers == 0 {
		b.Errorf("run %s: the announce was not delivered with its end", r.ID)
	}
	return nil
}
