// Package memory is the agent's long-term memory (SPEC §28): the tools
// memory_write, memory_search, memory_get and memory_forget over the
// store's Memories aggregate, the scope rule (memory.scope: one
// conversation and its sub-agents, or every conversation of the agent,
// never another agent's), the pinned memories put into the system prompt,
// and the /memory command's lines.
//
// It must not import gateway, subagent or any channels/<name> package, and
// no query syntax of the model reaches the store: a search is words.
package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

// Tool names.
const (
	WriteName  = "memory_write"
	SearchName = "memory_search"
	GetName    = "memory_get"
	ForgetName = "memory_forget"
)

// Limits of memory_search.
const (
	DefaultLimit = 5
	MaxLimit     = 50
)

// Scope is the memories a call sees: its agent's, of its conversation
// (the top-level session its sub-agents share) unless memory.scope is
// "agent".
func Scope(c config.Memory, agentID, conversation string) store.MemoryScope {
	if c.Scope == "agent" {
		conversation = ""
	}
	return store.MemoryScope{AgentID: agentID, Conversation: conversation}
}

// conversation is the conversation a call belongs to.
func conversation(cc agent.CallContext) string {
	if cc.RootKey != "" {
		return cc.RootKey
	}
	return cc.SessionKey
}

// Tools returns the memory tools over st under the settings c.
func Tools(st store.Memories, c config.Memory) []agent.Tool {
	if c.MaxChars <= 0 {
		c.MaxChars = config.DefaultMemoryMaxChars
	}
	b := base{st: st, c: c}
	return []agent.Tool{&write{b}, &search{b}, &get{b}, &forget{b}}
}

type base struct {
	st store.Memories
	c  config.Memory
}

func (b base) scope(cc agent.CallContext) store.MemoryScope {
	return Scope(b.c, cc.AgentID, conversation(cc))
}

func (base) Group() string { return "" }

// Item is a memory as the tools show it.
type Item struct {
	ID        string   `json:"id"`
	Text      string   `json:"text"`
	Tags      []string `json:"tags"`
	Pinned    bool     `json:"pinned"`
	CreatedAt string   `json:"createdAt"`
	Score     *float64 `json:"score,omitempty"`
}

func item(m store.Memory) Item {
	tags := m.Tags
	if tags == nil {
		tags = []string{}
	}
	return Item{ID: m.ID, Text: m.Text, Tags: tags, Pinned: m.Pinned, CreatedAt: m.CreatedAt.UTC().Format(time.RFC3339)}
}

// ---- memory_write ----

type write struct{ base }

func (t *write) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: WriteName,
		Description: fmt.Sprintf("Remember a fact, preference or decision for later turns and conversations (at most %d characters). "+
			"pin: true puts it into your system prompt from the next turn on (for what you must always keep in mind). Returns {id}.", t.c.MaxChars),
		Schema: writeSchema(),
	}
}

// writeSchema and searchSchema are rendered once, on first use: every
// turn's tool registry takes the specs.
var writeSchema = sync.OnceValue(func() json.RawMessage {
	return agent.ObjectSchema(map[string]any{
		"text": map[string]any{"type": "string", "description": "what to remember, self-contained"},
		"tags": map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "description": "optional keywords"},
		"pin":  map[string]any{"type": "boolean", "description": "put it into the system prompt (default false)"},
	}, "text")
})

var searchSchema = sync.OnceValue(func() json.RawMessage {
	return agent.ObjectSchema(map[string]any{
		"query": map[string]any{"type": "string", "description": "words to look for"},
		"limit": map[string]any{"type": "integer", "description": fmt.Sprintf("at most this many results, 1 to %d (default %d)", MaxLimit, DefaultLimit)},
	}, "query")
})

func (t *write) Call(ctx context.Context, cc agent.CallContext, raw json.RawMessage) (string, error) {
	var a struct {
		Text *string  `json:"text"`
		Tags []string `json:"tags"`
		Pin  bool     `json:"pin"`
	}
	if err := agent.DecodeArgs(WriteName, raw, &a, `{"text": "…", "tags"?: ["…"], "pin"?: false}`); err != nil {
		return "", err
	}
	if a.Text == nil || strings.TrimSpace(*a.Text) == "" {
		return "", fmt.Errorf("%s: %w: text is empty; give what to remember", WriteName, agent.ErrBadArguments)
	}
	text := strings.TrimSpace(*a.Text)
	if n := utf8.RuneCountInString(text); n > t.c.MaxChars {
		return "", fmt.Errorf("%s: %w: the memory is %d characters; memory.maxChars allows %d: shorten it or split it into several",
			WriteName, agent.ErrBadArguments, n, t.c.MaxChars)
	}
	var tags []string
	for _, tag := range a.Tags {
		if tag = strings.TrimSpace(tag); tag != "" {
			tags = append(tags, tag)
		}
	}
	m := &store.Memory{AgentID: cc.AgentID, Conversation: conversation(cc), Text: text, Tags: tags, Pinned: a.Pin}
	if err := t.st.AddMemory(ctx, m); err != nil {
		return "", fmt.Errorf("%s: could not store the memory: %w", WriteName, err)
	}
	return agent.JSONResult(WriteName, map[string]string{"id": m.ID})
}

// ---- memory_search ----

type search struct{ base }

// Repeatable implements agent.Repeatable: a search has no effect to repeat.
func (t *search) Repeatable() bool { return true }

func (t *search) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: SearchName,
		Description: "Search your memories by words (any of them; best matches first; punctuation and operators are ignored). " +
			"Returns {results:[{id, text, tags, pinned, createdAt, score}]}.",
		Schema: searchSchema(),
	}
}

func (t *search) Call(ctx context.Context, cc agent.CallContext, raw json.RawMessage) (string, error) {
	var a struct {
		Query *string `json:"query"`
		Limit *int    `json:"limit"`
	}
	if err := agent.DecodeArgs(SearchName, raw, &a, `{"query": "…", "limit"?: 5}`); err != nil {
		return "", err
	}
	if a.Query == nil {
		return "", fmt.Errorf("%s: %w: missing required field \"query\"", SearchName, agent.ErrBadArguments)
	}
	limit := DefaultLimit
	if a.Limit != nil {
		limit = *a.Limit
	}
	if limit < 1 || limit > MaxLimit {
		return "", fmt.Errorf("%s: %w: limit must be 1 to %d, got %d", SearchName, agent.ErrBadArguments, MaxLimit, limit)
	}
	words := store.MemoryWords(*a.Query)
	if len(words) == 0 {
		return "", fmt.Errorf("%s: %w: the query %q has no words to search for (punctuation and operators are ignored); give a few words",
			SearchName, agent.ErrBadArguments, *a.Query)
	}
	hits, err := t.st.SearchMemories(ctx, t.scope(cc), words, limit)
	if err != nil {
		return "", fmt.Errorf("%s: could not search the memories: %w", SearchName, err)
	}
	out := struct {
		Results []Item `json:"results"`
	}{Results: []Item{}}
	for _, h := range hits {
		it := item(h.Memory)
		s := float64(int64(h.Score*1000+0.5)) / 1000
		it.Score = &s
		out.Results = append(out.Results, it)
	}
	return agent.JSONResult(SearchName, out)
}

// ---- memory_get, memory_forget ----

var idSchema = agent.ObjectSchema(map[string]any{"id": map[string]any{"type": "string", "description": "the memory's id"}}, "id")

func (b base) id(tool string, raw json.RawMessage) (string, error) {
	var a struct {
		ID string `json:"id"`
	}
	if err := agent.DecodeArgs(tool, raw, &a, `{"id": "…"}`); err != nil {
		return "", err
	}
	if a.ID = strings.TrimSpace(a.ID); a.ID == "" {
		return "", fmt.Errorf("%s: %w: id is empty; memory_search gives the ids", tool, agent.ErrBadArguments)
	}
	return a.ID, nil
}

func (b base) notFound(tool, id string) error {
	where := "this conversation"
	if b.c.Scope == "agent" {
		where = "this agent"
	}
	return fmt.Errorf("%s: no memory %q in %s; memory_search gives the ids", tool, id, where)
}

type get struct{ base }

// Repeatable implements agent.Repeatable: reading has no effect to repeat.
func (t *get) Repeatable() bool { return true }

func (t *get) Spec() agent.ToolSpec {
	return agent.ToolSpec{Name: GetName, Description: "Read one memory by its id: {id, text, tags, pinned, createdAt}.", Schema: idSchema}
}

func (t *get) Call(ctx context.Context, cc agent.CallContext, raw json.RawMessage) (string, error) {
	id, err := t.id(GetName, raw)
	if err != nil {
		return "", err
	}
	m, err := t.st.GetMemory(ctx, t.scope(cc), id)
	if errors.Is(err, store.ErrNotFound) {
		return "", t.notFound(GetName, id)
	}
	if err != nil {
		return "", fmt.Errorf("%s: could not read memory %s: %w", GetName, id, err)
	}
	return agent.JSONResult(GetName, item(*m))
}

type forget struct{ base }

func (t *forget) Spec() agent.ToolSpec {
	return agent.ToolSpec{Name: ForgetName, Description: "Forget (delete) one memory by its id.", Schema: idSchema}
}

func (t *forget) Call(ctx context.Context, cc agent.CallContext, raw json.RawMessage) (string, error) {
	id, err := t.id(ForgetName, raw)
	if err != nil {
		return "", err
	}
	err = t.st.ForgetMemory(ctx, t.scope(cc), id)
	if errors.Is(err, store.ErrNotFound) {
		return "", t.notFound(ForgetName, id)
	}
	if err != nil {
		return "", fmt.Errorf("%s: could not forget memory %s: %w", ForgetName, id, err)
	}
	return agent.JSONResult(ForgetName, map[string]string{"forgotten": id})
}

// ---- the system prompt and /memory ----

// pinnedScan bounds the pinned memories read for the prompt.
const pinnedScan = 200

// Pinned is the system prompt block of the pinned memories of sc, newest
// first, while they fit in about injectTokens tokens (4 characters a
// token); "" when there are none.
func Pinned(ctx context.Context, st store.Memories, sc store.MemoryScope, injectTokens int) (string, error) {
	list, err := st.ListMemories(ctx, sc, true, pinnedScan)
	if err != nil || len(list) == 0 {
		return "", err
	}
	budget := injectTokens * 4
	var b strings.Builder
	b.WriteString("# Pinned memories\nThings you chose to keep in mind (memory_write with pin; memory_forget removes one):\n")
	n := 0
	for _, m := range list {
		line := fmt.Sprintf("- [%s, %s] %s\n", m.ID, m.CreatedAt.UTC().Format("2006-01-02"), m.Text)
		if utf8.RuneCountInString(line) > budget {
			break
		}
		budget -= utf8.RuneCountInString(line)
		b.WriteString(line)
		n++
	}
	if n == 0 {
		return "", nil
	}
	return b.String(), nil
}

// ListLine is one line of /memory: 🧠 <id> · <date> · <text, ≤ 80 chars>.
func ListLine(m store.Memory) string {
	text := strings.Join(strings.Fields(m.Text), " ")
	if r := []rune(text); len(r) > 80 {
		text = string(r[:79]) + "…"
	}
	return fmt.Sprintf("🧠 %s · %s · %s", m.ID, m.CreatedAt.UTC().Format("2006-01-02"), text)
}

// UsageCommand is /memory's usage line.
const UsageCommand = "Usage: /memory [forget <id>]"

// listMax bounds the lines of /memory.
const listMax = 50

// Command runs /memory [forget <id>] for the conversation conv of agentID
// and returns the reply.
func Command(ctx context.Context, st store.Memories, c config.Memory, agentID, conv, args string) string {
	sc := Scope(c, agentID, conv)
	where := "this conversation"
	if sc.Conversation == "" {
		where = "this agent"
	}
	f := strings.Fields(args)
	switch {
	case len(f) == 0 || len(f) == 1 && strings.EqualFold(f[0], "list"):
		list, err := st.ListMemories(ctx, sc, false, listMax+1)
		if err != nil {
			return "⚠️ Could not read the memories: " + err.Error()
		}
		if len(list) == 0 {
			return "🧠 No memories in " + where + " yet."
		}
		lines := make([]string, 0, len(list)+1)
		for i, m := range list {
			if i == listMax {
				lines = append(lines, fmt.Sprintf("… only the newest %d are shown.", listMax))
				break
			}
			lines = append(lines, ListLine(m))
		}
		return strings.Join(lines, "\n")
	case len(f) == 2 && strings.EqualFold(f[0], "forget"):
		err := st.ForgetMemory(ctx, sc, f[1])
		switch {
		case errors.Is(err, store.ErrNotFound):
			return fmt.Sprintf("⚠️ No memory %s in %s; /memory lists them.", f[1], where)
		case err != nil:
			return "⚠️ Could not forget the memory: " + err.Error()
		}
		return fmt.Sprintf("🧠 Forgot %s.", f[1])
	}
	return UsageCommand
}

// PinCache keeps the pinned-memory block of each scope between writes:
// every turn of every conversation and sub-agent puts it in its system
// prompt, and reading it from the store each time was 1–2 % of the
// gateway's CPU with 10,000 sub-agents in flight (docs/performance.md).
// Every write goes through Store(), which drops what was kept, so the
// cache is right only where this process is the store's one writer: the
// gateway uses it on SQLite, not on a shared PostgreSQL state where
// other replicas write memories too. Safe for concurrent use.
type PinCache struct {
	st store.Memories
	mu sync.Mutex
	// gen counts the writes; a block read while one happened is not
	// kept. Guarded by mu.
	gen uint64
	m   map[pinKey]string // guarded by mu
}

type pinKey struct {
	scope  store.MemoryScope
	tokens int
}

// maxPinScopes bounds the scopes a PinCache keeps (one per agent and
// conversation); past it the oldest half is dropped.
const maxPinScopes = 4096

// NewPinCache caches the pinned memories of st.
func NewPinCache(st store.Memories) *PinCache {
	return &PinCache{st: st, m: make(map[pinKey]string)}
}

// Pinned is Pinned over the cache's store, kept until the next write.
func (c *PinCache) Pinned(ctx context.Context, sc store.MemoryScope, injectTokens int) (string, error) {
	k := pinKey{sc, injectTokens}
	c.mu.Lock()
	block, ok := c.m[k]
	gen := c.gen
	c.mu.Unlock()
	if ok {
		return block, nil
	}
	block, err := Pinned(ctx, c.st, sc, injectTokens)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	if c.gen == gen {
		if len(c.m) >= maxPinScopes {
			clear(c.m) // rare: thousands of scopes; they are read again
		}
		c.m[k] = block
	}
	c.mu.Unlock()
	return block, nil
}

// Store is the cache's store whose AddMemory and ForgetMemory drop what
// the cache kept: give it to the tools and the /memory command.
func (c *PinCache) Store() store.Memories { return pinWrites{c.st, c} }

// forget drops every kept block.
func (c *PinCache) forget() {
	c.mu.Lock()
	c.gen++
	clear(c.m)
	c.mu.Unlock()
}

// pinWrites is a store.Memories whose writes drop a PinCache.
type pinWrites struct {
	store.Memories
	c *PinCache
}

func (w pinWrites) AddMemory(ctx context.Context, m *store.Memory) error {
	defer w.c.forget()
	return w.Memories.AddMemory(ctx, m)
}

func (w pinWrites) ForgetMemory(ctx context.Context, sc store.MemoryScope, id string) error {
	defer w.c.forget()
	return w.Memories.ForgetMemory(ctx, sc, id)
}
