package store

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
)

// walMeter reads how many bytes a database wrote to its log since the
// last read: on SQLite the frames of the WAL (automatic checkpoints off
// on the writer, the log checkpointed and emptied at each read), on
// PostgreSQL how far pg_current_wal_lsn() moved. Unlike CPU time these
// figures are the same on a busy machine: what docs/performance.md ("the
// store's writes per run") compares schemas by.
type walMeter struct {
	tb   testing.TB
	db   *DB
	page int64
	lsn  int64
}

func newWALMeter(tb testing.TB, db *DB) *walMeter {
	m := &walMeter{tb: tb, db: db}
	if db.pg == nil {
		// On the writer's one connection itself, outside any transaction
		// (db.writer's statements join the group commit's).
		if _, err := db.w.Exec(`PRAGMA wal_autocheckpoint = 0`); err != nil {
			tb.Fatal(err)
		}
		if err := db.w.QueryRow(`PRAGMA page_size`).Scan(&m.page); err != nil {
			tb.Fatal(err)
		}
	}
	m.read()
	return m
}

// read returns the bytes written to the log since the previous read.
func (m *walMeter) read() int64 {
	if m.db.pg != nil {
		var lsn int64
		if err := m.db.reader(context.Background()).queryRow(func(rows *sql.Rows) error { return rows.Scan(&lsn) },
			`SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`); err != nil {
			m.tb.Fatal(err)
		}
		n := lsn - m.lsn
		m.lsn = lsn
		return n
	}
	// PASSIVE reports the frames in the log; TRUNCATE then empties it
	// (and reports 0).
	var frames int64
	for _, mode := range []string{"PASSIVE", "TRUNCATE"} {
		var busy, log, done int64
		if err := m.db.w.QueryRow(`PRAGMA wal_checkpoint(`+mode+`)`).Scan(&busy, &log, &done); err != nil {
			m.tb.Fatal(err)
		}
		if busy != 0 || log < 0 {
			m.tb.Fatalf("wal_checkpoint(%s) did not run: busy %d, %d frames", mode, busy, log)
		}
		if mode == "PASSIVE" {
			frames = log
		}
	}
	return frames * (m.page + 24) // a frame is a page and its 24-byte header
}

// BenchmarkWALPerRun is what a sub-agent run writes to the database's
// log. Each op spawns 100 runs of one web chat with one SpawnEach (one
// model response), then ends them one after another, each end its own
// commit, as BenchmarkEndRunBurst ends them (run row, child session,
// result, announce delivered to the web chat). It reports the log's
// bytes per spawn and per end.
func BenchmarkWALPerRun(b *testing.B) {
	const perOp = 100
	db := newTestDB(b)
	wal := newWALMeter(b, db)
	now := time.Now()
	var spawned, ended int64
	for i := 0; i < b.N; i++ {
		wal.read()
		runs := spawnWebRuns(b, db, "wal-"+strconv.Itoa(i), "c"+strconv.Itoa(i%10), perOp, now)
		spawned += wal.read()
		for _, r := range runs {
			if err := endWebRun(b, db, r); err != nil {
				b.Fatal(err)
			}
		}
		ended += wal.read()
	}
	b.ReportMetric(float64(spawned)/float64(b.N*perOp), "wal-B/spawn")
	b.ReportMetric(float64(ended)/float64(b.N*perOp), "wal-B/end")
}

// BenchmarkWALPerTurn is what a turn writes to the log besides its
// reply: each op adds 100 messages over 10 conversations, then
// completes them one after another (no reply). It reports the log's
// bytes per message added and per turn completed.
func BenchmarkWALPerTurn(b *testing.B) {
	const perOp = 100
	db := newTestDB(b)
	wal := newWALMeter(b, db)
	ctx := context.Background()
	var added, done int64
	for i := 0; i < b.N; i++ {
		wal.read()
		ids := make([]int64, 0, perOp)
		for j := range perOp {
			chat := strconv.Itoa(j % 10)
			in := &Intake{SessionKey: "agent:main:telegram:dm:" + chat, AgentID: "main", Text: "hello " + strconv.Itoa(j),
				Origin: channels.Origin{Channel: "telegram", ChatID: chat, ChatType: channels.ChatDM}}
			if _, err := db.AddIntake(ctx, in); err != nil {
				b.Fatal(err)
			}
			ids = append(ids, in.ID)
		}
		added += wal.read()
		for _, id := range ids {
			if _, _, err := db.CompleteIntake(ctx, id, nil, time.Now()); err != nil {
				b.Fatal(err)
			}
		}
		done += wal.read()
	}
	b.ReportMetric(float64(added)/float64(b.N*perOp), "wal-B/message")
	b.ReportMetric(float64(done)/float64(b.N*perOp), "wal-B/turn")
}
