package store

import (
	"context"
	"errors"
	"sync"
)

// maxGroup bounds how many write transactions one SQLite commit carries.
const maxGroup = 64

// group commits SQLite write transactions together. SQLite has one writer,
// so concurrent transactions queue for it anyway; instead of committing
// each on its own (WAL frames, locks and a checkpoint share per commit),
// the caller that finds the writer free leads: it runs every transaction
// queued by then in one SQLite transaction, each inside its own savepoint
// (a transaction that fails is rolled back alone), commits once and wakes
// the others with their results. Then it hands the lead to the first
// caller that queued meanwhile. Nobody returns before the commit that
// holds their change, so a caller's success still means durable.
type group struct {
	mu    sync.Mutex
	queue []*groupTx
	busy  bool // a leader is running; the queue is non-empty only then
}

type groupTx struct {
	ctx  context.Context
	fn   func(conn) error
	err  error
	wake chan bool // true: lead; false: done, err is set
}

// txGroup is tx on SQLite: fn runs in a write transaction shared with the
// transactions queued alongside it.
func (d *DB) txGroup(ctx context.Context, fn func(c conn) error) error {
	t := &groupTx{ctx: ctx, fn: fn, wake: make(chan bool, 1)}
	g := &d.group
	g.mu.Lock()
	g.queue = append(g.queue, t)
	lead := !g.busy
	g.busy = true
	g.mu.Unlock()
	if !lead && !<-t.wake {
		return t.err
	}
	// Leading: t is first in the queue (the queue was empty, or the last
	// leader handed the lead to its head).
	g.mu.Lock()
	n := min(len(g.queue), maxGroup)
	batch := make([]*groupTx, n)
	copy(batch, g.queue)
	g.queue = append(g.queue[:0], g.queue[n:]...)
	g.mu.Unlock()

	d.commitGroup(batch)
	if testHookGroupCommit != nil {
		testHookGroupCommit(len(batch))
	}

	g.mu.Lock()
	var next *groupTx
	if len(g.queue) > 0 {
		next = g.queue[0]
	} else {
		g.busy = false
	}
	g.mu.Unlock()
	for _, o := range batch[1:] {
		o.wake <- false
	}
	if next != nil {
		next.wake <- true
	}
	return t.err
}

// testHookGroupCommit, when set by a benchmark, is told the size of each
// group committed.
var testHookGroupCommit func(n int)

// commitGroup runs batch in one transaction and sets each one's err.
func (d *DB) commitGroup(batch []*groupTx) {
	var miss []string
	defer func() {
		// The connection is free again: cache what the transaction missed.
		for _, q := range miss {
			_, _ = d.ws.get(batch[0].ctx, q)
		}
	}()
	// Statements run without the callers' cancellation: interrupting a
	// write rolls back the whole SQLite transaction, every caller's. A
	// caller whose context ended before its turn is not run.
	bctx := context.WithoutCancel(batch[0].ctx)
	tx, err := d.w.BeginTx(bctx, nil)
	if err != nil {
		for _, t := range batch {
			t.err = err
		}
		return
	}
	single := len(batch) == 1
	c := conn{ctx: bctx, dialect: d.dialect, cache: d.ws, tx: tx, miss: &miss}
	var fatal error
	committed := make([]bool, len(batch)) // changes kept if the commit succeeds
	for i, t := range batch {
		if err := t.ctx.Err(); err != nil {
			t.err = err
			continue
		}
		if !single {
			if _, fatal = tx.ExecContext(bctx, "SAVEPOINT g"); fatal != nil {
				break
			}
		}
		c.ctx = context.WithoutCancel(t.ctx)
		t.err = t.fn(c)
		var ct errCommitThen
		keep := t.err == nil || errors.As(t.err, &ct)
		switch {
		case single && !keep:
			_ = tx.Rollback()
			return
		case single:
		case keep:
			_, fatal = tx.ExecContext(bctx, "RELEASE g")
		default:
			if _, fatal = tx.ExecContext(bctx, "ROLLBACK TO g"); fatal == nil {
				_, fatal = tx.ExecContext(bctx, "RELEASE g")
			}
		}
		if fatal != nil {
			break
		}
		committed[i] = keep
	}
	if fatal == nil {
		fatal = tx.Commit()
	} else {
		_ = tx.Rollback()
	}
	if fatal == nil {
		return
	}
	// Nothing was committed: each caller whose change was kept learns so.
	for i, t := range batch {
		if committed[i] || t.err == nil {
			t.err = fatal
		}
	}
}
