package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Replicas share the work through the database (SPEC §14). A replica names
// itself by gateway.replicaId and proves it is alive by renewing the lease
// ReplicaLease(id). Owed turns, queued and running sub-agent runs and
// outbox items carry the id of the replica working on them; a row whose
// holder's lease has lapsed is free for another replica to claim. Claims
// take rows with FOR UPDATE SKIP LOCKED on PostgreSQL, so replicas claiming
// at once never take the same row and never wait on each other; SQLite has
// one process, whose write transactions are serialised anyway.

// ReplicaLease is the name of the lease that says replica id is alive.
func ReplicaLease(id string) string { return "replica:" + id }

// Claim says who claims and how much: every claim method takes one.
type Claim struct {
	Holder string // the replica claiming; required (ErrNoHolder)
	// Reclaim makes rows Holder itself holds free too: a replica restarted
	// under the same id takes back what it held before.
	Reclaim bool
	Limit   int // at most this many rows; ≤ 0 = no limit
}

// ErrNoHolder: a claim was asked for without a replica id.
var ErrNoHolder = errors.New("claim: the replica id is empty")

// free is the SQL condition that the row whose holder column is col may be
// claimed by the holder in placeholder ph: nobody holds it, or a replica
// whose lease lapsed (on SQLite, any replica but holder: one process runs).
// With reclaim, rows holder itself holds are free too (Claim.Reclaim).
func (d *DB) free(col, ph string, reclaim bool) string {
	cond := "(" + col + " = ''"
	if reclaim {
		cond += " OR " + col + " = " + ph
	}
	if d.dialect.replicas {
		return cond + " OR (" + col + " <> " + ph + " AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.name = 'replica:' || " + col +
			" AND l.expires_at > " + d.dialect.nowMS + ")))"
	}
	return cond + " OR " + col + " <> " + ph + ")"
}

// LiveReplicas returns the ids of the replicas whose lease is alive,
// sorted.
func (d *DB) LiveReplicas(ctx context.Context) ([]string, error) {
	rows, err := d.reader(ctx).query(`SELECT holder FROM leases WHERE name LIKE 'replica:%' AND expires_at > ` + d.dialect.nowMS)
	if err != nil {
		return nil, d.wrap("live replicas", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, d.wrap("live replicas", err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, d.wrap("live replicas", err)
	}
	slices.Sort(out)
	return out, nil
}

// claimTries bounds the runs of a claim transaction that met a row
// another replica changed after its snapshot.
const claimTries = 20

// claimTx runs a claim transaction. On PostgreSQL it runs at REPEATABLE
// READ and again on a serialization failure: at READ COMMITTED, a claim
// whose statement began before another replica started would meet that
// replica's fresh claim on a row, re-check the row against its old
// snapshot, not find the new replica's lease there, take the replica for
// dead and claim the row a second time (two replicas running one turn;
// TestIntakeClaimsRace on PostgreSQL). At REPEATABLE READ the claim fails
// instead and runs again with a snapshot that has the lease.
func (d *DB) claimTx(ctx context.Context, fn func(c conn) error) error {
	opts := &sql.TxOptions{Isolation: sql.LevelRepeatableRead}
	var err error
	for range claimTries {
		if err = d.txOpts(ctx, opts, fn); !serializationFailure(err) {
			return err
		}
	}
	return err
}

// claim runs the claim statement q (an UPDATE … RETURNING) in a claim
// transaction (claimTx) and scans the rows it claimed.
func claim[T any](d *DB, ctx context.Context, q string, args []any, scan func(*sql.Rows, *T) error) ([]T, error) {
	var out []T
	err := d.claimTx(ctx, func(c conn) (err error) {
		out, err = queryAll(c, q, args, scan)
		return err
	})
	return out, err
}

// anyRow reports whether q (a SELECT 1 … LIMIT 1) finds a row on c. A
// claim first asks whether it has a candidate at all — at start, and on a
// gateway with nothing owed or live, the answer is no — in its own
// transaction (immediate on SQLite, one repeatable-read snapshot on
// PostgreSQL), so a "no" holds for the UPDATE it then skips. That UPDATE …
// RETURNING is a wide statement which each connection parses once: with
// the other claim, ~0.5 ms of a start's CPU before ready
// (docs/performance.md).
func anyRow(c conn, q string, args ...any) (bool, error) {
	err := c.queryRow(func(*sql.Rows) error { return nil }, q, args...)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// queryAll runs q on c and scans every row it returns with scan.
func queryAll[T any](c conn, q string, args []any, scan func(*sql.Rows, *T) error) ([]T, error) {
	rows, err := c.query(q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// anyOwedQuery asks whether any message is owed (ClaimOwed), through
// intake_owed.
const anyOwedQuery = `SELECT 1 FROM intake WHERE done_at IS NULL LIMIT 1`

// claimOwedQuery is ClaimOwed's claim for $1 of up to $2 owed messages,
// found through intake_owed (the owed messages alone, v39) in order.
func (d *DB) claimOwedQuery(reclaim bool) string {
	return `UPDATE intake SET claimed_by = $1 WHERE id IN (
		SELECT id FROM intake WHERE done_at IS NULL AND ` + d.free("claimed_by", "$1", reclaim) + ` AND NOT EXISTS (
			SELECT 1 FROM intake e WHERE e.session_key = intake.session_key AND e.id < intake.id AND e.done_at IS NULL)
		ORDER BY id LIMIT $2` + d.dialect.skipLocked + `) RETURNING ` + intakeCols
}

// ClaimOwed claims for c.Holder up to c.Limit owed messages that are the
// oldest owed message of their session and free (see free), oldest first.
// Their turns are the holder's to run; the session's later messages follow
// through CompleteIntake.
func (d *DB) ClaimOwed(ctx context.Context, c Claim) ([]Intake, error) {
	holder, limit := c.Holder, c.Limit
	if holder == "" {
		return nil, ErrNoHolder
	}
	if limit <= 0 {
		limit = noLimit
	}
	q := d.claimOwedQuery(c.Reclaim)
	var out []Intake
	err := d.claimTx(ctx, func(c conn) error {
		if ok, err := anyRow(c, anyOwedQuery); !ok {
			return err
		}
		var err error
		out, err = queryAll(c, q, []any{holder, limit}, scanIntake)
		return err
	})
	if err != nil {
		return nil, d.wrap("claim owed turns", err)
	}
	slices.SortFunc(out, func(a, b Intake) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// ClaimOutbox claims for c.Holder up to c.Limit outbox items that are due
// at now, on one of chans (the channels the holder runs; nil = any), the
// oldest pending item of their destination and free (see free), oldest
// first. The holder sends them; MarkDelivered, MarkRetry or MarkFailed lets
// them go. A later item to a destination waits until the earlier one is
// delivered or failed, on whichever replica sends it.
func (d *DB) ClaimOutbox(ctx context.Context, c Claim, chans []string, now time.Time) ([]OutboxItem, error) {
	pass, err := d.PassOutbox(ctx, c, chans, OutboxLimits{}, now)
	return pass.Claimed, err
}

// OutboxPass is what one delivery pass took (PassOutbox).
type OutboxPass struct {
	Dead    []OutboxItem // made dead letters (BuryOutbox), oldest first
	Claimed []OutboxItem // claimed to be sent (ClaimOutbox), oldest first
}

// PassOutbox is a delivery pass's one transaction: BuryOutbox with lim,
// then ClaimOutbox, for c.Holder. A dead item is failed, so its
// destination's next item may be claimed in the same pass; with other
// replicas the two statements see one snapshot (a claim transaction).
func (d *DB) PassOutbox(ctx context.Context, c Claim, chans []string, lim OutboxLimits, now time.Time) (OutboxPass, error) {
	holder, limit := c.Holder, c.Limit
	if holder == "" {
		return OutboxPass{}, ErrNoHolder
	}
	// Never the holder's own claims: their sends may be in flight.
	buryQ, buryArgs, bury := d.buryQuery(Claim{Holder: holder}, lim, now)
	if chans != nil && len(chans) == 0 && !bury {
		return OutboxPass{}, nil
	}
	if limit <= 0 {
		limit = noLimit
	}
	args := sqlArgs{holder, msOrNow(now), limit}
	onChans := ""
	if chans != nil {
		onChans = ` AND channel IN (` + list(&args, chans) + `)`
	}
	q := `UPDATE outbox SET claimed_by = $1 WHERE id IN (
		SELECT id FROM outbox WHERE ` + d.dialect.pendingHead + ` AND next_attempt_at <= $2` + onChans + ` AND ` + d.free("claimed_by", "$1", c.Reclaim) + `
		ORDER BY id LIMIT $3` + d.dialect.skipLocked + `) RETURNING ` + outboxCols
	claimAll := chans == nil || len(chans) > 0
	var out OutboxPass
	err := d.claimTx(ctx, func(c conn) error {
		out = OutboxPass{}
		// Both statements look only at pending items: with none (every
		// idle pass, a first start) the pass is one index probe, not the
		// two wide UPDATEs' planning.
		ok, err := anyRow(c, `SELECT 1 FROM outbox WHERE delivered_at IS NULL AND failed_at IS NULL LIMIT 1`)
		if !ok {
			return err
		}
		if bury {
			if out.Dead, err = queryAll(c, buryQ, buryArgs, scanOutbox); err != nil {
				return fmt.Errorf("bury: %w", err)
			}
		}
		if claimAll {
			out.Claimed, err = queryAll(c, q, args, scanOutbox)
		}
		return err
	})
	if err != nil {
		return OutboxPass{}, d.wrap("claim outbox", err)
	}
	for _, l := range [][]OutboxItem{out.Dead, out.Claimed} {
		slices.SortFunc(l, func(a, b OutboxItem) int { return cmp.Compare(a.ID, b.ID) })
	}
	return out, nil
}

// anyActiveRunQuery asks whether any run is live (ClaimRuns), through
// runs_requester_active (which holds the live runs alone).
const anyActiveRunQuery = `SELECT 1 FROM runs WHERE ` + activeRun + ` LIMIT 1`

// claimRunsQuery is ClaimRuns' claim for $1: the free live runs, found
// through runs_requester_active (which holds the live runs alone).
func (d *DB) claimRunsQuery(reclaim bool) string {
	return `UPDATE runs SET owner = $1 WHERE id IN (
		SELECT id FROM runs WHERE ` + activeRun + ` AND ` + d.free("owner", "$1", reclaim) + d.dialect.skipLocked + `) RETURNING ` + runCols
}

// ClaimRuns claims for c.Holder the runs that are queued, running or
// announcing and free (see free), oldest first: a replica that died left
// them, and the holder queues the queued ones again and announces the
// others with Status unknown. It claims every such run: c.Limit must be 0.
func (d *DB) ClaimRuns(ctx context.Context, c Claim) ([]Run, error) {
	holder := c.Holder
	if holder == "" {
		return nil, ErrNoHolder
	}
	if c.Limit > 0 {
		return nil, errors.New("claim runs: a limit is not supported")
	}
	q := d.claimRunsQuery(c.Reclaim)
	var out []Run
	err := d.claimTx(ctx, func(tx conn) error {
		if ok, err := anyRow(tx, anyActiveRunQuery); !ok {
			return err
		}
		rows, err := tx.query(q, holder)
		if err != nil {
			return err
		}
		out, err = scanRuns(rows)
		return err
	})
	if err != nil {
		return nil, d.wrap("claim runs", err)
	}
	slices.SortFunc(out, func(a, b Run) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// HoldSession records that holder runs the next turn or command of the
// session key. moved is true when another replica (or nobody) held it
// before: what holder has loaded of the session may be stale.
func (d *DB) HoldSession(ctx context.Context, key, holder string) (moved bool, err error) {
	if holder == "" {
		return false, ErrNoHolder
	}
	n, err := d.writer(ctx).execN(`UPDATE sessions SET holder = $1 WHERE key = $2 AND holder <> $3`, holder, key, holder)
	if err != nil {
		return false, d.wrap("hold session "+key, err)
	}
	return n > 0, nil
}
