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
		`SELECT model, thinking FROM conversation_settings WHERE session_key = $1`, key)
	if errors.Is(err, ErrNotFound) {
		return s, nil
	}
	return s, d.wrap("conversation settings of "+key, err)
}

// SetConversationSettings stores the conversation's settings.
func (d *DB) SetConversationSettings(ctx context.Context, key string, s ConversationSettings) error {
	_, err := d.writer(ctx).exec(`INSERT INTO conversation_settings (session_key, model, thinking, updated_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (session_key) DO UPDATE SET model = excluded.model, thinking = excluded.thinking, updated_at = excluded.updated_at`,
		key, s.Model, s.Thinking, nowMS().UnixMilli())
	return d.wrap("set conversation settings of "+key, err)
}

// ResetSession gives the requester session key a new session id and
// transcript (/new, /reset), recording the old id and archivedPath (where
// the old transcript now is), in one transaction. Its sub-agent runs keep
// their requester key and announce as before.
func (d *DB) ResetSession(ctx context.Context, key, newID, newPath, archivedPath string, at time.Time) error {
	err := d.tx(ctx, func(c conn) error {
		var oldID, oldPath string
		if err := c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&oldID, &oldPath) },
			`SELECT id, transcript_path FROM sessions WHERE key = $1`+c.dialect.forUpdate, key); err != nil {
			return err
		}
		if archivedPath != "" {
			oldPath = archivedPath
		}
		if _, err := c.exec(`INSERT INTO session_resets (session_key, old_session_id, old_transcript, new_session_id, reset_at)
			VALUES ($1, $2, $3, $4, $5)`, key, oldID, oldPath, newID, at.UnixMilli()); err != nil {
			return err
		}
		_, err := c.exec(`UPDATE sessions SET id = $1, transcript_path = $2, updated_at = $3, tokens_in = 0, tokens_out = 0 WHERE key = $4`,
			newID, newPath, at.UnixMilli(), key)
		return err
	})
	return d.wrap("reset session "+key, err)
}

// SessionReset is one /new or /reset of a conversation.
type SessionReset struct {
	OldSessionID, OldTranscript, NewSessionID string
	At                                        time.Time
}

// SessionResets lists the resets of the conversation key, oldest first.
func (d *DB) SessionResets(ctx context.Context, key string) ([]SessionReset, error) {
	rows, err := d.reader(ctx).query(`SELECT old_session_id, old_transcript, new_session_id, reset_at
		FROM session_resets WHERE session_key = $1 ORDER BY reset_at, `+d.dialect.rowid, key)
	if err != nil {
		return nil, d.wrap("session resets of "+key, err)
	}
	defer rows.Close()
	var out []SessionReset
	for rows.Next() {
		var r SessionReset
		var at int64
		if err := rows.Scan(&r.OldSessionID, &r.OldTranscript, &r.NewSessionID, &at); err != nil {
			return nil, d.wrap("session resets of "+key, err)
		}
		r.At = time.UnixMilli(at).UTC()
		out = append(out, r)
	}
	return out, d.wrap("session resets of "+key, rows.Err())
}
