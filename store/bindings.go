package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/channels"
)

// Binding is a chat thread bound to a sub-agent's child session (SPEC
// §24): while it lasts, messages in the thread go to the child.
type Binding struct {
	// Thread is the thread's address: Channel, Account, ChatID, ChatType
	// and ThreadID (sender and message fields are not kept).
	Thread    channels.Origin
	ChildKey  string // the child session the thread talks to
	RunID     string // the run of that child session
	AgentID   string // the agent the thread talked to before (/unfocus names it)
	CreatedBy string // who bound it: a sender id, or "" for sessions_spawn {thread: true}
	CreatedAt time.Time
	LastAt    time.Time // the last message in the thread
	ExpiresAt time.Time // when the binding ends without another message
}

// threadAddr is the part of an origin that names a thread.
func threadAddr(o channels.Origin) channels.Origin {
	return channels.Origin{Channel: o.Channel, Account: o.Account, ChatID: o.ChatID, ChatType: o.ChatType, ThreadID: o.ThreadID}
}

const bindingCols = `origin, child_key, run_id, agent_id, created_by, created_at, last_at, expires_at`

func scanBinding(rows *sql.Rows, b *Binding) error {
	var origin string
	var created, last, expires sql.NullInt64
	if err := rows.Scan(&origin, &b.ChildKey, &b.RunID, &b.AgentID, &b.CreatedBy, &created, &last, &expires); err != nil {
		return err
	}
	b.CreatedAt, b.LastAt, b.ExpiresAt = fromMS(created), fromMS(last), fromMS(expires)
	return parseOrigin(origin, &b.Thread)
}

// BindThread binds b.Thread to b.ChildKey, replacing the binding the
// thread had. Bindings that ended before b.CreatedAt are dropped with it.
func (d *DB) BindThread(ctx context.Context, b *Binding) error {
	origin, err := newBinding(b)
	if err != nil {
		return err
	}
	err = d.tx(ctx, func(c conn) error { return bindThread(c, b, origin) })
	return d.wrap("bind thread "+b.Thread.String(), err)
}

// newBinding checks b and applies its defaults; origin is its thread's,
// encoded.
func newBinding(b *Binding) (origin string, err error) {
	if b.Thread.ThreadID == "" || b.ChildKey == "" {
		return "", errors.New("bind thread: the thread id and the child session are required")
	}
	b.Thread = threadAddr(b.Thread)
	if b.CreatedAt.IsZero() {
		b.CreatedAt = nowMS()
	}
	if b.LastAt.IsZero() {
		b.LastAt = b.CreatedAt
	}
	b.CreatedAt, b.LastAt, b.ExpiresAt = truncMS(b.CreatedAt), truncMS(b.LastAt), truncMS(b.ExpiresAt)
	origin, err = originJSON(b.Thread)
	if err != nil {
		return "", fmt.Errorf("bind thread %s: %w", b.Thread, err)
	}
	return origin, nil
}

// bindThread writes the binding b (newBinding applied) in c.
func bindThread(c conn, b *Binding, origin string) error {
	if _, err := c.exec(`DELETE FROM thread_bindings WHERE expires_at <= $1`, b.CreatedAt.UnixMilli()); err != nil {
		return err
	}
	_, err := c.exec(`INSERT INTO thread_bindings (channel, account, chat_id, thread_id, `+bindingCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (channel, account, chat_id, thread_id) DO UPDATE SET origin = excluded.origin,
			child_key = excluded.child_key, run_id = excluded.run_id, agent_id = excluded.agent_id,
			created_by = excluded.created_by, created_at = excluded.created_at, last_at = excluded.last_at,
			expires_at = excluded.expires_at`,
		string(b.Thread.Channel), b.Thread.Account, b.Thread.ChatID, b.Thread.ThreadID, origin, b.ChildKey, b.RunID,
		b.AgentID, b.CreatedBy, b.CreatedAt.UnixMilli(), b.LastAt.UnixMilli(), b.ExpiresAt.UnixMilli())
	return err
}

// ThreadBinding returns the binding of the thread at o that lasts past
// now; ErrNotFound when the thread has none (or it ended).
func (d *DB) ThreadBinding(ctx context.Context, o channels.Origin, now time.Time) (*Binding, error) {
	var b Binding
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return scanBinding(rows, &b) },
		`SELECT `+bindingCols+` FROM thread_bindings
		WHERE channel = $1 AND account = $2 AND chat_id = $3 AND thread_id = $4 AND expires_at > $5`,
		string(o.Channel), o.Account, o.ChatID, o.ThreadID, now.UnixMilli())
	if err != nil {
		return nil, d.wrap("thread binding "+threadAddr(o).String(), err)
	}
	return &b, nil
}

// TouchBinding records a message in the thread at o at time at: its
// binding, if it still lasts then, now ends at expires. It reports whether
// there was one.
func (d *DB) TouchBinding(ctx context.Context, o channels.Origin, at, expires time.Time) (bool, error) {
	res, err := d.writer(ctx).exec(`UPDATE thread_bindings SET last_at = $1, expires_at = $2
		WHERE channel = $3 AND account = $4 AND chat_id = $5 AND thread_id = $6 AND expires_at > $1`,
		at.UnixMilli(), expires.UnixMilli(), string(o.Channel), o.Account, o.ChatID, o.ThreadID)
	if err != nil {
		return false, d.wrap("touch thread binding "+threadAddr(o).String(), err)
	}
	n, err := res.RowsAffected()
	return n > 0, d.wrap("touch thread binding "+threadAddr(o).String(), err)
}

// UnbindThread ends the binding of the thread at o and returns it;
// ErrNotFound when the thread had none that lasted past now.
func (d *DB) UnbindThread(ctx context.Context, o channels.Origin, now time.Time) (*Binding, error) {
	var b Binding
	err := d.tx(ctx, func(c conn) error {
		if err := c.queryRow(func(rows *sql.Rows) error { return scanBinding(rows, &b) },
			`SELECT `+bindingCols+` FROM thread_bindings
			WHERE channel = $1 AND account = $2 AND chat_id = $3 AND thread_id = $4`+c.dialect.forUpdate,
			string(o.Channel), o.Account, o.ChatID, o.ThreadID); err != nil {
			return err
		}
		_, err := c.exec(`DELETE FROM thread_bindings WHERE channel = $1 AND account = $2 AND chat_id = $3 AND thread_id = $4`,
			string(o.Channel), o.Account, o.ChatID, o.ThreadID)
		return err
	})
	if err == nil && !b.ExpiresAt.After(now) {
		err = ErrNotFound // it had ended already: gone now
	}
	if err != nil {
		return nil, d.wrap("unbind thread "+threadAddr(o).String(), err)
	}
	return &b, nil
}

// ChildBindings returns the bindings of the child sessions childKeys that
// last past now, oldest first.
func (d *DB) ChildBindings(ctx context.Context, childKeys []string, now time.Time) ([]Binding, error) {
	if len(childKeys) == 0 {
		return nil, nil
	}
	var args sqlArgs
	q := `SELECT ` + bindingCols + ` FROM thread_bindings WHERE child_key IN (` + list(&args, childKeys) +
		`) AND expires_at > ` + args.add(now.UnixMilli()) + ` ORDER BY created_at`
	rows, err := d.reader(ctx).query(q, args...)
	if err != nil {
		return nil, d.wrap("child bindings", err)
	}
	defer rows.Close()
	var out []Binding
	for rows.Next() {
		var b Binding
		if err := scanBinding(rows, &b); err != nil {
			return nil, d.wrap("child bindings", err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, d.wrap("child bindings", err)
	}
	return out, nil
}

// Run thread states (SPEC §24): a run spawned with thread: true has its
// thread pending until the chat platform opened it (open) or refused
// (none).
const (
	ThreadPending = "pending"
	ThreadOpen    = "open"
	ThreadNone    = "none"
)

// RunThread is the thread of its own of a run spawned with thread: true.
type RunThread struct {
	RunID  string
	State  string          // ThreadPending, ThreadOpen or ThreadNone
	Origin channels.Origin // the thread, when open
	Link   string          // a link people can follow to it ("" = none)
	// DraftRef is the platform id of the draft the run's live output shows
	// in the thread ("" = none).
	DraftRef string
}

// ThreadOpened is what OpenRunThread records, in one transaction.
type ThreadOpened struct {
	Thread channels.Origin // the run's and its child session's origin from now on
	Link   string
	// Binding binds the thread to the run's child session (BindThread's).
	Binding *Binding
	// LinkLine, if set, is the line in the requester's thread linking to
	// the new one (an outbox item; its ID is set).
	LinkLine *OutboxItem
}

// RunThread returns the thread of run runID; ErrNotFound when it was not
// spawned with one.
func (d *DB) RunThread(ctx context.Context, runID string) (*RunThread, error) {
	rt := RunThread{RunID: runID}
	var origin string
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return rows.Scan(&rt.State, &origin, &rt.Link, &rt.DraftRef) },
		`SELECT state, origin, link, draft_ref FROM run_threads WHERE run_id = $1`, runID)
	if err != nil {
		return nil, d.wrap("run thread "+runID, err)
	}
	if origin != "" {
		if err := parseOrigin(origin, &rt.Origin); err != nil {
			return nil, fmt.Errorf("run thread %s: %w", runID, err)
		}
	}
	return &rt, nil
}

// OpenRunThread records that the pending thread of run runID was opened:
// the thread becomes the origin of the run and of its child session, the
// binding and the link line are written, all in one transaction. A thread
// already open (or refused) is left as it is: ErrExists. ErrNotFound when
// the run has no thread.
func (d *DB) OpenRunThread(ctx context.Context, runID string, o ThreadOpened) error {
	thread, err := originJSON(o.Thread)
	if err != nil {
		return fmt.Errorf("open run thread %s: %w", runID, err)
	}
	var bindOrigin string
	if o.Binding != nil {
		if bindOrigin, err = newBinding(o.Binding); err != nil {
			return fmt.Errorf("open run thread %s: %w", runID, err)
		}
	}
	var item *outboxRow
	if o.LinkLine != nil {
		if item, err = newOutboxRow(o.LinkLine); err != nil {
			return fmt.Errorf("open run thread %s: %w", runID, err)
		}
	}
	err = d.tx(ctx, func(c conn) error {
		var state string
		if err := c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&state) },
			`SELECT state FROM run_threads WHERE run_id = $1`+c.dialect.forUpdate, runID); err != nil {
			return err
		}
		if state != ThreadPending {
			return ErrExists
		}
		if _, err := c.exec(`UPDATE run_threads SET state = $1, origin = $2, link = $3 WHERE run_id = $4`,
			ThreadOpen, thread, o.Link, runID); err != nil {
			return err
		}
		if _, err := c.exec(`UPDATE runs SET origin = $1 WHERE id = $2`, thread, runID); err != nil {
			return err
		}
		if _, err := c.exec(`UPDATE sessions SET origin = $1 WHERE key = (SELECT child_key FROM runs WHERE id = $2)`, thread, runID); err != nil {
			return err
		}
		if o.Binding != nil {
			if err := bindThread(c, o.Binding, bindOrigin); err != nil {
				return fmt.Errorf("binding: %w", err)
			}
		}
		if item != nil {
			id, err := item.insert(c)
			if err != nil {
				return fmt.Errorf("outbox: %w", err)
			}
			o.LinkLine.ID = id
		}
		return nil
	})
	if err != nil {
		return d.wrap("open run thread "+runID, err)
	}
	if item != nil {
		item.apply(o.LinkLine)
	}
	return nil
}

// RefuseRunThread records that the platform did not open the pending
// thread of run runID: the run stays in its requester's thread. ErrNotFound
// when it has no pending thread.
func (d *DB) RefuseRunThread(ctx context.Context, runID string) error {
	n, err := d.writer(ctx).execN(`UPDATE run_threads SET state = $1 WHERE run_id = $2 AND state = $3`, ThreadNone, runID, ThreadPending)
	if err == nil && n == 0 {
		err = ErrNotFound
	}
	return d.wrap("refuse run thread "+runID, err)
}

// SetRunDraft records the draft the live output of run runID shows in its
// thread; ErrNotFound when the run has no thread.
func (d *DB) SetRunDraft(ctx context.Context, runID, ref string) error {
	n, err := d.writer(ctx).execN(`UPDATE run_threads SET draft_ref = $1 WHERE run_id = $2`, ref, runID)
	if err == nil && n == 0 {
		err = ErrNotFound
	}
	return d.wrap("set run draft "+runID, err)
}
