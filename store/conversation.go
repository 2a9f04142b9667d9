package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// ConversationSettings are a conversation's own choices (/model, /think);
// empty fields follow the config. They are kept across /new.
type ConversationSettings struct {
	Model    string // provider/model
	Thinking string // off|low|medium|high
}

// ConversationSettings returns the settings of the conversation whose
// requester session key is key (zero when it has none).
func (d *DB) ConversationSettings(ctx context.Context, key string) (ConversationSettings, error) {
	var s ConversationSettings
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return rows.Scan(&s.Model, &s.Thinking) },
		`SELECT model, thinking FROM conversation_settings WHERE session_key = ?`, key)
	if errors.Is(err, ErrNotFound) {
		return s, nil
	}
	return s, d.wrap("conversation settings of "+key, err)
}

// SetConversationSettings stores the conversation's settings.
func (d *DB) SetConversationSettings(ctx context.Context, key string, s ConversationSettings) error {
	_, err := d.writer(ctx).exec(`INSERT INTO conversation_settings (session_key, model, thinking, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (session_key) DO UPDATE SET model = excluded.model, thinking = excluded.thinking, updated_at = excluded.updated_at`,
		key, s.Model, s.Thinking, nowMS().UnixMilli())
	return d.wrap("set conversation settings of "+key, err)
}

// ResetSession gives the requester session key a new session id and
// transcript (/new, /reset), recording the old ones, in one transaction.
// Its sub-agent runs keep their requester key and announce as before.
func (d *DB) ResetSession(ctx context.Context, key, newID, newPath string, at time.Time) error {
	err := d.tx(ctx, func(c conn) error {
		var oldID, oldPath string
		if err := c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&oldID, &oldPath) },
			`SELECT id, transcript_path FROM sessions WHERE key = ?`, key); err != nil {
			return err
		}
		if _, err := c.exec(`INSERT INTO session_resets (session_key, old_session_id, old_transcript, new_session_id, reset_at)
			VALUES (?, ?, ?, ?, ?)`, key, oldID, oldPath, newID, at.UnixMilli()); err != nil {
			return err
		}
		_, err := c.exec(`UPDATE sessions SET id = ?, transcript_path = ?, updated_at = ?, tokens_in = 0, tokens_out = 0 WHERE key = ?`,
			newID, newPath, at.UnixMilli(), key)
		return err
	})
	return d.wrap("reset session "+key, err)
}
