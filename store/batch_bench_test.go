package store

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
)

// BenchmarkBatchSpawn is the store work of spawning a batch of 4 (SPEC
// §23): "runs" records them with SpawnRuns in one transaction, "each"
// with one SpawnRun per child as four single spawns would; "end" is the
// batch's four ends, the last one rendering and adding the batch's one
// announce (EndRun with RunEnd.Batch), "end-announce" four ends of
// single spawns, each with its own announce. Each op is one batch. The
// runs name their spawn call as the gateway's do (the batch's one call,
// or one call per single spawn), so the calls' rows are in the figures.
func BenchmarkBatchSpawn(b *testing.B) {
	const n = 4
	lim := SpawnLimits{MaxChildren: 1 << 20, MaxTotal: 1 << 30}
	batch := func(i int) ([]*Run, []*Session) {
		var runs []*Run
		var children []*Session
		for j := range n {
			r, child := newRun(fmt.Sprintf("bench-%d-%d", i, j))
			r.RequesterKey, r.Batch, r.RequesterSessionID = "agent:main:web:dm:b"+strconv.Itoa(i), "batch-"+strconv.Itoa(i), "s1"
			// A batch's runs share its call; single spawns have one each.
			r.SpawnCallID = "call-" + strconv.Itoa(i)
			runs, children = append(runs, r), append(children, child)
		}
		return runs, children
	}
	for _, mode := range []string{"runs", "each", "end", "end-announce"} {
		b.Run(mode, func(b *testing.B) {
			db := newTestDB(b)
			ctx := context.Background()
			var all [][]*Run
			if mode == "end" || mode == "end-announce" {
				for i := range b.N {
					runs, children := batch(i)
					if err := db.SpawnRuns(ctx, runs, children, lim); err != nil {
						b.Fatal(err)
					}
					all = append(all, runs)
				}
			}
			render := func(runs []Run) *OutboxItem {
				return &OutboxItem{Origin: runs[0].Origin, Kind: channels.KindAnnounce, Text: "Status: ✅ 4 success"}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				switch mode {
				case "runs":
					runs, children := batch(i)
					if err := db.SpawnRuns(ctx, runs, children, lim); err != nil {
						b.Fatal(err)
					}
				case "each":
					runs, children := batch(i)
					for j := range runs {
						runs[j].SpawnCallID += "-" + strconv.Itoa(j)
						if err := db.SpawnRun(ctx, runs[j], children[j], lim); err != nil {
							b.Fatal(err)
						}
					}
				case "end", "end-announce":
					for _, r := range all[i] {
						r.Status, r.Outcome, r.Result, r.EndedAt = StatusDone, OutcomeSuccess, "done", time.Now()
						end := RunEnd{Result: &Result{Text: "[sub-agent result] " + r.ID}, Batch: &BatchEnd{Render: render}}
						if mode == "end-announce" {
							end.Batch = nil
							end.Announce = &OutboxItem{Origin: r.Origin, Kind: channels.KindAnnounce, Text: "Status: success"}
						}
						if err := db.EndRun(ctx, r, end); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
		})
	}
}
