package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// AppendWeb adds m to the web chat client's conversation and returns its
// seq: 1 for a client's first message, then increasing by one. m.Seq and a
// zero m.At (now) are set on return. When m.RunID is set and the client
// already has a message with that RunID, nothing is added and that
// message's seq is returned (an announce redelivered after a restart shows
// once). The same holds for m.Key (an outbox item re-sent after a crash).
func (d *DB) AppendWeb(ctx context.Context, client string, m *WebMessage) (int64, error) {
	if client == "" {
		return 0, errors.New("append web message: client is empty")
	}
	normalizeWeb(m)
	var seq int64
	err := d.tx(ctx, func(c conn) error {
		m.Followed = nil // a retried transaction starts again
		var err error
		if seq, err = d.appendWeb(c, client, m); err != nil {
			return err
		}
		return d.appendFollowing(c, client, m)
	})
	if err != nil {
		if m.Next != nil {
			m.Next.Item = nil
		}
		m.Added = false
		m.Followed = nil
		return 0, d.wrap("append web message for "+client, err)
	}
	m.Seq = seq
	return seq, nil
}

// appendFollowing is WebMessage.Then: it appends the messages of the
// items m.Next claims after m's, each delivering its item and claiming
// the next, while Then takes them.
func (d *DB) appendFollowing(c conn, client string, m *WebMessage) error {
	if m.Then == nil || m.Delivers == 0 || m.Next == nil {
		return nil
	}
	now := truncMS(m.Next.Now)
	for len(m.Followed) < MaxFollow && m.Next.Item != nil {
		it := *m.Next.Item
		var files int
		if err := c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&files) },
			`SELECT COUNT(*) FROM outbox_files WHERE outbox_id = $1`, it.ID); err != nil {
			return err
		}
		if files > 0 {
			return nil // its files go out as parts of their own: a send
		}
		f := m.Then(it)
		if f == nil {
			return nil
		}
		normalizeWeb(f)
		at := now
		if at.IsZero() {
			at = f.At
		}
		f.Delivers, f.DeliveredAt, f.Next, f.Then = it.ID, at, m.Next, nil
		seq, err := d.appendWeb(c, client, f)
		if err != nil {
			return err
		}
		f.Seq, f.Next = seq, nil
		it.ClaimedBy, it.DeliveredAt, it.FilesKnown = "", at, true
		m.Followed = append(m.Followed, Followed{Item: it, Message: *f})
	}
	return nil
}

// normalizeWeb sets m.At as AppendWeb stores it.
func normalizeWeb(m *WebMessage) {
	if m.At.IsZero() {
		m.At = nowMS()
	}
	m.At = truncMS(m.At)
}

// appendWeb is AppendWeb's transaction body (m normalized); it sets
// m.Added.
func (d *DB) appendWeb(c conn, client string, m *WebMessage) (seq int64, err error) {
	m.Added = false
	if err := c.lock("web:" + client); err != nil {
		return 0, err
	}
	if m.Delivers != 0 {
		at := m.At
		if !m.DeliveredAt.IsZero() {
			at = m.DeliveredAt
		}
		n, err := d.deliver(c, m.Delivers, at.UnixMilli(), m.Next)
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return 0, fmt.Errorf("mark outbox %d delivered: %w", m.Delivers, ErrNotFound)
		}
	}
	return d.storeWeb(c, client, m)
}

// storeWeb is appendWeb after the delivered mark: it stores m unless its
// RunID or Key finds it stored already, and returns its seq. The caller
// holds the web chat's lock (appendWeb, CompleteTurn, EndRun).
func (d *DB) storeWeb(c conn, client string, m *WebMessage) (seq int64, err error) {
	m.Added = false
	files := ""
	if len(m.Files) > 0 {
		b, err := json.Marshal(m.Files)
		if err != nil {
			return 0, err
		}
		files = string(b)
	}
	// One statement: the insert takes the next seq itself (the web
	// chat's lock is held), and a message whose RunID or Key is stored
	// already is kept out by web_messages_run or _idem (a NULL one
	// matches nothing) and returns nothing; its seq is then read. The
	// casts type the parameters of the SELECT on PostgreSQL.
	err = c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&seq) },
		`INSERT INTO web_messages (client, seq, role, text, run_id, idem, at, files)
			SELECT $1, COALESCE(MAX(seq), 0) + 1, CAST($2 AS TEXT), CAST($3 AS TEXT), CAST($4 AS TEXT), CAST($5 AS TEXT), CAST($6 AS BIGINT), CAST($7 AS TEXT)
			FROM web_messages WHERE client = $1
			ON CONFLICT DO NOTHING RETURNING seq`,
		client, m.Role, m.Text, nullString(m.RunID), nullString(m.Key), m.At.UnixMilli(), files)
	if err == nil {
		m.Added = true
		return seq, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return 0, err
	}
	// Stored already: its seq, by RunID, else by Key (each its unique
	// index).
	err = c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&seq) },
		`SELECT COALESCE((SELECT seq FROM web_messages WHERE client = $1 AND run_id = $2),
			(SELECT seq FROM web_messages WHERE client = $1 AND idem = $3), 0)`,
		client, nullString(m.RunID), nullString(m.Key))
	if err == nil && seq == 0 {
		err = fmt.Errorf("web message for %s: kept out, yet neither its run nor its key is stored", client)
	}
	return seq, err
}

// WebAfter returns the client's messages with seq > after, in seq order, at
// most limit of them (limit ≤ 0 = all).
func (d *DB) WebAfter(ctx context.Context, client string, after int64, limit int) ([]WebMessage, error) {
	if limit <= 0 {
		limit = noLimit
	}
	rows, err := d.reader(ctx).query(`SELECT seq, role, text, run_id, at, files FROM web_messages
		WHERE client = $1 AND seq > $2 ORDER BY seq LIMIT $3`, client, after, limit)
	if err != nil {
		return nil, d.wrap("web messages for "+client, err)
	}
	defer rows.Close()
	var out []WebMessage
	for rows.Next() {
		var m WebMessage
		var runID sql.NullString
		var at sql.NullInt64
		var files string
		if err := rows.Scan(&m.Seq, &m.Role, &m.Text, &runID, &at, &files); err != nil {
			return nil, d.wrap("web messages for "+client, err)
		}
		if files != "" {
			if err := json.Unmarshal([]byte(files), &m.Files); err != nil {
				return nil, d.wrap("web messages for "+client, fmt.Errorf("message %d: files: %w", m.Seq, err))
			}
		}
		m.RunID, m.At = runID.String, fromMS(at)
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, d.wrap("web messages for "+client, err)
	}
	return out, nil
}
