package store

import (
	"encoding/binary"
	"os"
	"sync"
	"sync/atomic"
)

// A gateway's first start on a new state dir runs the recovery reads of a
// restart — runs and owed messages a previous process left (ClaimRuns,
// ClaimOwed), archives due (DueArchives, NextArchiveAt), the outbox's
// counts for /readyz and its first delivery pass (OutboxStats, PassOutbox,
// NextOutboxAt), the spend ledger's totals (SpendTotals), pending
// approvals (PendingApprovals), the next schedule (NextScheduleAt), files
// to sweep (SweepFiles' batch) — on a database that cannot hold any: each
// compiled its SQL before or right after the gateway was ready, and the
// reads opened a read connection, which parses the whole schema again
// (together ~2 ms of CPU). While nothing has been committed to a database
// this Open made from the image, they answer empty without SQL, and Open
// leaves the read pool to connect on first use.
//
// "Nothing committed" is read from SQLite's WAL index, not from this
// process's own bookkeeping, so a commit by another process (a CLI command
// on the same state dir) counts too: every commit by any connection
// increments the iChange field of the index header at the start of
// herald.db-shm (SQLite's walIndexWriteHdr), and the file stays while this
// process holds its connections open. Once it has moved, the database is
// read as always from then on. It is read with pread on a descriptor kept
// open (unwrittenSince), one system call per check.

// shmChangeAt is the offset of iChange (a native-endian uint32) in the
// WAL-index header: iVersion u32, unused u32, iChange u32.
const shmChangeAt = 8

// unwrittenSince holds, for a database Open made from the image, the
// iChange read right after (+1, so 0 means not set) and the -shm file it
// reads it from. The file stays open until the DB is closed, after
// SQLite's connections: closing any descriptor of a file drops every
// POSIX lock the process holds on it, and SQLite holds its WAL-index locks
// on -shm (an open and close per read let another process think it was
// the last one connected, checkpoint and reset the WAL under this one's
// readers: TestReloadCommand's second reload never saw its answer).
type unwrittenSince struct {
	mu     sync.Mutex
	shm    *os.File
	change atomic.Uint64
}

// read returns iChange of the WAL index.
func (u *unwrittenSince) read() (uint32, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.shm == nil {
		return 0, false
	}
	var b [shmChangeAt + 4]byte
	if n, _ := u.shm.ReadAt(b[:], 0); n < len(b) {
		return 0, false
	}
	return binary.NativeEndian.Uint32(b[shmChangeAt:]), true
}

func (u *unwrittenSince) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.shm != nil {
		u.shm.Close()
		u.shm = nil
	}
	u.change.Store(0)
}

// markUnwritten records the WAL index's change count of a database this
// Open made from the image.
func (d *DB) markUnwritten() {
	f, err := os.Open(d.path + "-shm")
	if err != nil {
		return
	}
	d.unwritten.shm = f
	if c, ok := d.unwritten.read(); ok {
		d.unwritten.change.Store(uint64(c) + 1)
	}
}

// isUnwritten reports that the database was made from the image by this
// Open and nothing has been committed to it since, by any process. It is
// false for good once a commit is seen (or the index cannot be read).
func (d *DB) isUnwritten() bool {
	want := d.unwritten.change.Load()
	if want == 0 {
		return false
	}
	if c, ok := d.unwritten.read(); ok && uint64(c)+1 == want {
		return true
	}
	d.unwritten.change.Store(0)
	return false
}
