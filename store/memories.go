package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"
)

// Memory is one thing an agent remembered (SPEC §28).
type Memory struct {
	ID           string
	AgentID      string
	Conversation string // the top-level session key it was written in
	Text         string
	Tags         []string
	Pinned       bool
	CreatedAt    time.Time
}

// MemoryHit is a memory found by a search, with its rank (higher is better).
type MemoryHit struct {
	Memory
	Score float64
}

// MemoryScope selects the memories one caller may see: always of one
// agent; of one conversation, or of all the agent's when Conversation is "".
type MemoryScope struct {
	AgentID      string
	Conversation string
}

// MemoryWords splits a search query into the words the full-text index
// knows: runs of letters and digits, lower-cased; everything else
// separates words. No query syntax of either engine survives it.
func MemoryWords(q string) []string {
	f := strings.FieldsFunc(strings.ToLower(q), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsNumber(r) })
	seen := map[string]bool{}
	out := f[:0]
	for _, w := range f {
		if !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}

// memoryPrefixLen: a search word at least this long also finds longer
// words it starts ("deploy" finds "deployment").
const memoryPrefixLen = 4

// memorySearch is a search's query per engine: the memories of sc with
// any of words (quoted terms; a longer word also as a prefix), ranked.
func (dl dialect) memorySearch(a *sqlArgs, sc MemoryScope, words []string, limit int) string {
	terms := make([]string, len(words))
	if dl.name == DriverPostgres {
		for i, w := range words {
			terms[i] = "'" + w + "'"
			if len([]rune(w)) >= memoryPrefixLen {
				terms[i] += ":*"
			}
		}
		q := "to_tsquery('simple', " + a.add(strings.Join(terms, " | ")) + ")"
		return `SELECT ` + memoryCols + `, ts_rank(m.tsv, ` + q + `) AS score FROM memories m WHERE m.tsv @@ ` + q + ` AND ` + sc.where(a)
	}
	for i, w := range words {
		terms[i] = `"` + w + `"`
		if len([]rune(w)) >= memoryPrefixLen {
			terms[i] += "*"
		}
	}
	// The scope is a token of the index (upgrade 26): FTS5 intersects it
	// with the words, and only the best few rows are read from memories.
	scope := "a" + hex.EncodeToString([]byte(sc.AgentID))
	if sc.Conversation != "" {
		scope = "c" + hex.EncodeToString([]byte(sc.AgentID+"|"+sc.Conversation))
	}
	match := a.add(`scope : "` + scope + `" AND (` + strings.Join(terms, " OR ") + `)`)
	return `SELECT ` + memoryCols + `, f.score FROM (SELECT rowid, -bm25(memories_fts, 1, 1, 0) AS score FROM memories_fts WHERE memories_fts MATCH ` +
		match + ` ORDER BY score DESC LIMIT ` + a.add(limit) + `) f JOIN memories m ON m.seq = f.rowid WHERE ` + sc.where(a)
}

const memoryCols = `m.id, m.agent_id, m.conversation, m.text, m.tags, m.pinned, m.created_at`

// where is the condition of sc on the memories m.
func (sc MemoryScope) where(a *sqlArgs) string {
	w := "m.agent_id = " + a.add(sc.AgentID)
	if sc.Conversation != "" {
		w += " AND m.conversation = " + a.add(sc.Conversation)
	}
	return w
}

// AddMemory stores m; its ID, if empty, is made up (a short random id),
// and a zero CreatedAt is now. ErrExists when the id is taken.
func (d *DB) AddMemory(ctx context.Context, m *Memory) error {
	if m.ID == "" {
		m.ID = shortID()
	}
	m.CreatedAt = truncMS(m.CreatedAt)
	if m.CreatedAt.IsZero() {
		m.CreatedAt = nowMS()
	}
	tags, err := json.Marshal(append([]string{}, m.Tags...))
	if err != nil {
		return fmt.Errorf("add memory: encode tags: %w", err)
	}
	pinned := 0
	if m.Pinned {
		pinned = 1
	}
	_, err = d.writer(ctx).exec(`INSERT INTO memories (id, agent_id, conversation, text, tags, pinned, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, m.ID, m.AgentID, m.Conversation, m.Text, string(tags), pinned, m.CreatedAt.UnixMilli())
	return d.wrap("add memory "+m.ID, err)
}

// SearchMemories returns the memories of sc matching any of words (see
// MemoryWords), best first, at most limit.
func (d *DB) SearchMemories(ctx context.Context, sc MemoryScope, words []string, limit int) ([]MemoryHit, error) {
	if len(words) == 0 {
		return nil, nil
	}
	var a sqlArgs
	q := d.dialect.memorySearch(&a, sc, words, limit) + ` ORDER BY score DESC, m.created_at DESC LIMIT ` + a.add(limit)
	rows, err := d.reader(ctx).query(q, a...)
	if err != nil {
		return nil, d.wrap("search memories", err)
	}
	defer rows.Close()
	var out []MemoryHit
	for rows.Next() {
		var h MemoryHit
		if err := scanMemory(rows, &h.Memory, &h.Score); err != nil {
			return nil, d.wrap("search memories", err)
		}
		out = append(out, h)
	}
	return out, d.wrap("search memories", rows.Err())
}

// ListMemories returns the memories of sc, newest first, at most limit;
// only the pinned ones when pinnedOnly.
func (d *DB) ListMemories(ctx context.Context, sc MemoryScope, pinnedOnly bool, limit int) ([]Memory, error) {
	var a sqlArgs
	q := `SELECT ` + memoryCols + ` FROM memories m WHERE ` + sc.where(&a)
	if pinnedOnly {
		q += ` AND m.pinned = 1`
	}
	rows, err := d.reader(ctx).query(q+` ORDER BY m.created_at DESC, m.seq DESC LIMIT `+a.add(limit), a...)
	if err != nil {
		return nil, d.wrap("list memories", err)
	}
	defer rows.Close()
	var out []Memory
	for rows.Next() {
		var m Memory
		if err := scanMemory(rows, &m); err != nil {
			return nil, d.wrap("list memories", err)
		}
		out = append(out, m)
	}
	return out, d.wrap("list memories", rows.Err())
}

// GetMemory returns the memory id if sc may see it; ErrNotFound.
func (d *DB) GetMemory(ctx context.Context, sc MemoryScope, id string) (*Memory, error) {
	a := sqlArgs{id}
	var m Memory
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return scanMemory(rows, &m) },
		`SELECT `+memoryCols+` FROM memories m WHERE m.id = $1 AND `+sc.where(&a), a...)
	if err != nil {
		return nil, d.wrap("get memory "+id, err)
	}
	return &m, nil
}

// ForgetMemory deletes the memory id if sc may see it; ErrNotFound.
func (d *DB) ForgetMemory(ctx context.Context, sc MemoryScope, id string) error {
	a := sqlArgs{id}
	n, err := d.writer(ctx).execN(`DELETE FROM memories AS m WHERE m.id = $1 AND `+sc.where(&a), a...)
	if err != nil {
		return d.wrap("forget memory "+id, err)
	}
	if n == 0 {
		return fmt.Errorf("forget memory %s: %w", id, ErrNotFound)
	}
	return nil
}

func scanMemory(rows *sql.Rows, m *Memory, score ...*float64) error {
	var tags string
	var pinned int
	var at int64
	dest := []any{&m.ID, &m.AgentID, &m.Conversation, &m.Text, &tags, &pinned, &at}
	for _, s := range score {
		dest = append(dest, s)
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	m.Pinned, m.CreatedAt = pinned != 0, time.UnixMilli(at).UTC()
	if err := json.Unmarshal([]byte(tags), &m.Tags); err != nil {
		return fmt.Errorf("memory %s: tags %q: %w", m.ID, tags, err)
	}
	return nil
}

// shortID is a memory's id: 8 random hex digits, short enough to type in
// /memory forget.
func shortID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}
