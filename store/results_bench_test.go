package store

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
)

// BenchmarkRunEnd measures what SPEC §23 adds to a child's end: "announce"
// is the end as before (run row + outbox row, FinishRun), "result" adds
// the parent's result row (EndRun), "result+wake" a child with announce
// parent that is the last of its group (result row + the group check +
// the wake's intake row), "fold" the parent turn's start write that takes
// one result in (FoldResults with the intake's start, which replaces
// StartIntake). Each op is one run's end (or one fold) on SQLite.
func BenchmarkRunEnd(b *testing.B) {
	for _, mode := range []string{"announce", "result", "result+wake", "fold"} {
		b.Run(mode, func(b *testing.B) {
			db := newTestDB(b)
			ctx := context.Background()
			now := time.Now()
			runs := make([]*Run, b.N)
			for i := range runs {
				r, child := newRun("bench-" + strconv.Itoa(i))
				r.RequesterSessionID = "s1"
				if mode == "result+wake" {
					r.Announce, r.SpawnGroup = AnnounceParent, "g-"+strconv.Itoa(i)
				}
				if err := db.CreateRun(ctx, r, child); err != nil {
					b.Fatal(err)
				}
				r.Status, r.Outcome, r.Result, r.EndedAt = StatusDone, OutcomeSuccess, "done", now
				runs[i] = r
				if mode == "fold" {
					if err := db.EndRun(ctx, r, RunEnd{Result: &Result{Text: "[sub-agent result] x"}}); err != nil {
						b.Fatal(err)
					}
				}
			}
			var intakes []int64
			if mode == "fold" {
				for i := 0; i < b.N; i++ {
					it := &Intake{SessionKey: "agent:main:slack:group:C1", AgentID: "main", Text: "next", CreatedAt: now,
						Origin: channels.Origin{Channel: "slack", ChatID: "C1", ChatType: channels.ChatGroup}}
					if _, err := db.AddIntake(ctx, it); err != nil {
						b.Fatal(err)
					}
					intakes = append(intakes, it.ID)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r := runs[i]
				ann := &OutboxItem{Origin: r.Origin, Kind: channels.KindAnnounce, Text: "✅ summary finished"}
				var err error
				switch mode {
				case "announce":
					err = db.FinishRun(ctx, r, ann)
				case "result":
					err = db.EndRun(ctx, r, RunEnd{Announce: ann, Result: &Result{Text: "[sub-agent result] x"}})
				case "result+wake":
					w := &Intake{SessionKey: r.RequesterKey, AgentID: "main", Origin: r.Origin, Text: "[sub-agent result] x",
						PlatformID: "wake:" + r.SpawnGroup, ClaimedBy: "local"}
					err = db.EndRun(ctx, r, RunEnd{Result: &Result{Text: "[sub-agent result] x"}, Wake: w})
				case "fold":
					_, err = db.FoldResults(ctx, Fold{SessionKey: r.RequesterKey, SessionID: "s1",
						By: fmt.Sprintf("intake:%d", intakes[i]), IntakeID: intakes[i], At: now})
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
