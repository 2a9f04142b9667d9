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
	if b.Thread.ThreadID == "" || b.ChildKey == "" {
		return errors.New("bind thread: the thread id and the child session are required")
	}
	b.Thread = threadAddr(b.Thread)
	if b.CreatedAt.IsZero() {
		b.CreatedAt = nowMS()
	}
	if b.LastAt.IsZero() {
		b.LastAt = b.CreatedAt
	}
	b.CreatedAt, b.LastAt, b.ExpiresAt = truncMS(b.CreatedAt), truncMS(b.LastAt), truncMS(b.ExpiresAt)
	origin, err := originJSON(b.Thread)
	if err != nil {
		return fmt.Errorf("bind thread %s: %w", b.Thread, err)
	}
	err = d.tx(ctx, func(c conn) error {
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
	})
	return d.wrap("bind thread "+b.Thread.String(), err)
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
