package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// memoryBenchCount is how many memories BenchmarkMemorySearch stores.
const memoryBenchCount = 100_000

// benchWords is a vocabulary of pronounceable made-up words; memories draw
// from it with a Zipf distribution, like words of real text.
func benchWords(n int) []string {
	syl := []string{"ka", "lo", "mi", "ren", "tas", "vo", "qu", "ber", "sil", "dra", "ne", "pol", "fi", "gan", "tu", "zor"}
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		var b strings.Builder
		for range 2 + r.IntN(3) {
			b.WriteString(syl[r.IntN(len(syl))])
		}
		if w := b.String(); !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}

// seedMemories stores n memories of agent "main" in 1000 conversations
// (and as many of agent "other"), 12–40 words each, 500 rows a statement.
func seedMemories(b *testing.B, db *DB, n int, words []string) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	zipf := rand.NewZipf(r, 1.1, 4, uint64(len(words)-1))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const batch = 500
	for start := 0; start < 2*n; start += batch {
		var a sqlArgs
		var rows []string
		for i := start; i < start+batch && i < 2*n; i++ {
			agent := "main"
			if i >= n {
				agent = "other"
			}
			text := make([]string, 12+r.IntN(29))
			for j := range text {
				text[j] = words[zipf.Uint64()]
			}
			rows = append(rows, "("+strings.Join([]string{a.add(fmt.Sprintf("m%07d", i)), a.add(agent),
				a.add(fmt.Sprintf("agent:%s:web:dm:c%d", agent, i%1000)), a.add(strings.Join(text, " ") + "."),
				a.add(`["bench"]`), a.add(i % 50 / 49), a.add(t0.Add(time.Duration(i) * time.Minute).UnixMilli())}, ", ")+")")
		}
		err := db.tx(ctx, func(c conn) error {
			_, err := c.tx.ExecContext(ctx, `INSERT INTO memories (id, agent_id, conversation, text, tags, pinned, created_at) VALUES `+
				strings.Join(rows, ", "), a...)
			return err
		})
		if err != nil {
			b.Fatalf("seed memories: %v", err)
		}
	}
}

// BenchmarkMemorySearch is memory_search's store query over 100,000
// memories of one agent (and 100,000 of another), on this run's engine
// (SQLite, then PostgreSQL): in one conversation's scope (100 memories)
// and in the agent's scope (all 100,000), for a frequent and a rare word
// pair, top 5.
func BenchmarkMemorySearch(b *testing.B) {
	db := newTestDB(b)
	words := benchWords(5000)
	start := time.Now()
	seedMemories(b, db, memoryBenchCount, words)
	b.Logf("%s: %d memories stored in %s", db.Driver(), 2*memoryBenchCount, time.Since(start).Round(time.Millisecond))
	ctx := context.Background()
	for _, q := range []struct {
		name  string
		words []string
	}{
		{"frequent", []string{words[5], words[40]}},
		{"rare", []string{words[900], words[3000]}},
	} {
		for _, sc := range []struct {
			name  string
			scope MemoryScope
		}{
			{"conversation", MemoryScope{AgentID: "main", Conversation: "agent:main:web:dm:c7"}},
			{"agent", MemoryScope{AgentID: "main"}},
		} {
			b.Run(q.name+"/"+sc.name, func(b *testing.B) {
				hits := 0
				for b.Loop() {
					h, err := db.SearchMemories(ctx, sc.scope, q.words, 5)
					if err != nil {
						b.Fatal(err)
					}
					hits = len(h)
				}
				b.ReportMetric(float64(hits), "hits")
			})
		}
	}
}
