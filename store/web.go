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
		var err error
		seq, err = d.appendWeb(c, client, m)
		return err
	})
	if err != nil {
		if m.Next != nil {
			m.Next.Item = nil
		}
		m.Added = false
		return 0, d.wrap("append web message for "+client, err)
	}
	m.Seq = seq
	return seq, nil
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
	for _, q := range []struct{ col, val string }{{"run_id", m.RunID}, {"idem", m.Key}} {
		if q.val == "" {
			continue
		}
		err := c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&seq) },
			`SELECT seq FROM web_messages WHERE client = $1 AND `+q.col+` = $2`, client, q.val)
		if err == nil {
			return seq, nil
		}
		if !errors.Is(err, ErrNotFound) {
			return 0, err
		}
	}
	if err := c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&seq) },
		`SELECT COALESCE(MAX(seq), 0) + 1 FROM web_messages WHERE client = $1`, client); err != nil {
		return 0, err
	}
	files := ""
	if len(m.Files) > 0 {
		b, err := json.Marshal(m.Files)
		if err != nil {
			return 0, err
		}
		files = string(b)
	}
	_, err = c.exec(`INSERT INTO web_messages (client, seq, role, text, run_id, idem, at, files) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		client, seq, m.Role, m.Text, nullString(m.RunID), nullString(m.Key), m.At.UnixMilli(), files)
	m.Added = err == nil
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
