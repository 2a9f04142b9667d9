package web

import (
	"context"
	"sync"
	"time"

	"github.com/heraldhq/herald/channels"
)

// Roles of conversation entries, as they appear in the API.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleAnnounce  = "announce"
	RoleSystem    = "system"
)

// Entry is one message of a web client's conversation, exactly as the API
// returns it (SPEC §9).
type Entry struct {
	Seq   int64     `json:"seq"`
	Role  string    `json:"role"`
	Text  string    `json:"text"`
	RunID string    `json:"runId,omitempty"`
	At    time.Time `json:"at"`
	// HTML is an assistant reply's Markdown rendered safely (set when it
	// is served, not stored).
	HTML string `json:"html,omitempty"`
	// Key makes Append idempotent per client: the outbox item an entry
	// delivers ("outbox:<id>"). Not shown to clients.
	Key string `json:"-"`
	// Files are the message's files (SPEC §18); URL is set when served.
	Files []File `json:"files,omitempty"`
	// Then are the entries Append stored right after this one in the same
	// write, in seq order (the gateway's Log: the chat's outbox items
	// queued behind the one this entry delivers); set by Append. Not
	// shown to clients.
	Then []Entry `json:"-"`
}

// Log persists each client's conversation. The gateway implements it over
// the store; NewMemoryLog is the in-memory fallback.
type Log interface {
	// Append stores e for client and returns its seq, increasing per client,
	// with e.Seq and e.At set as stored. An entry whose RunID or Key was
	// already appended for that client returns the first seq and adds
	// nothing: added is false. Append may store more entries after e in
	// the same write (e.Then); added is then true only if each of them was
	// added too. The web chat writes added entries to the client's open
	// streams as they are (After would return the same), else it has the
	// streams read the Log.
	Append(ctx context.Context, client string, e *Entry) (seq int64, added bool, err error)
	// After returns up to limit entries of client with seq > after, oldest
	// first. limit <= 0 means no limit.
	After(ctx context.Context, client string, after int64, limit int) ([]Entry, error)
}

// IntakeLog is a Log that stores a person's message together with the
// gateway's intake of it, in one transaction (optional: with a plain Log
// the web chat appends the entry, then hands the message to its sink).
type IntakeLog interface {
	Log
	// AppendInbound stores e (a person's message) for client and hands in
	// to the gateway as the sink would, with in.Origin.MessageID the
	// entry's seq (e.Seq and e.At set as stored, as Append does). stored
	// reports whether e was stored (a person's message is always a new
	// entry), also when err is
	// the gateway's refusal (a sink's error: BusyError, ErrDraining, …); a
	// message that was not stored was not taken either.
	AppendInbound(ctx context.Context, client string, e *Entry, in channels.Inbound) (seq int64, stored bool, err error)
}

// MemoryLog is a Log kept in memory: for tests, and as a fallback when the
// gateway has no store. It forgets everything when the process ends.
type MemoryLog struct {
	mu      sync.Mutex
	clients map[string]*memClient
}

type memClient struct {
	entries []Entry          // entries[i].Seq == i+1
	runs    map[string]int64 // "run:<RunID>" or "key:<Key>" → first seq
}

// NewMemoryLog returns an empty in-memory Log.
func NewMemoryLog() *MemoryLog {
	return &MemoryLog{clients: make(map[string]*memClient)}
}

var _ Log = (*MemoryLog)(nil)

// Append implements Log.
func (m *MemoryLog) Append(ctx context.Context, client string, e *Entry) (int64, bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.clients[client]
	if c == nil {
		c = &memClient{runs: make(map[string]int64)}
		m.clients[client] = c
	}
	for _, k := range []string{runKey(e.RunID), idemKey(e.Key)} {
		if seq, ok := c.runs[k]; ok && k != "" {
			return seq, false, nil
		}
	}
	seq := int64(len(c.entries)) + 1
	e.Seq = seq
	c.entries = append(c.entries, *e)
	for _, k := range []string{runKey(e.RunID), idemKey(e.Key)} {
		if k != "" {
			c.runs[k] = seq
		}
	}
	return seq, true, nil
}

func runKey(id string) string {
	if id == "" {
		return ""
	}
	return "run:" + id
}

func idemKey(k string) string {
	if k == "" {
		return ""
	}
	return "key:" + k
}

// After implements Log.
func (m *MemoryLog) After(ctx context.Context, client string, after int64, limit int) ([]Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.clients[client]
	if c == nil || after >= int64(len(c.entries)) {
		return nil, nil
	}
	if after < 0 {
		after = 0
	}
	rest := c.entries[after:]
	if limit > 0 && len(rest) > limit {
		rest = rest[:limit]
	}
	return append([]Entry(nil), rest...), nil
}
