package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/heraldhq/herald/store"
)

// testMemories: memories are found by their words (and tags), best match
// first, only within the scope asked for — one conversation or every one
// of the agent, never another agent's; a forgotten memory is found no more.
func testMemories(t *testing.T, s Store) {
	ctx := context.Background()
	const convA, convB = "agent:main:slack:group:CA", "agent:main:slack:group:CB"
	add := func(agentID, conv, text string, pinned bool, at time.Time, tags ...string) string {
		t.Helper()
		m := &store.Memory{AgentID: agentID, Conversation: conv, Text: text, Tags: tags, Pinned: pinned, CreatedAt: at}
		if err := s.AddMemory(ctx, m); err != nil || m.ID == "" {
			t.Fatalf("AddMemory(%q) = %v (id %q)", text, err, m.ID)
		}
		return m.ID
	}
	key := add("main", convA, "The deploy key lives in vault under secret/deploy.", true, t0, "ops")
	tea := add("main", convA, "Alice prefers tea over coffee; she drinks tea at 4pm.", false, t0.Add(time.Minute))
	bob := add("main", convB, "Bob deploys on Fridays.", true, t0.Add(2*time.Minute))
	other := add("other", convA, "Deployment notes of another agent.", true, t0.Add(3*time.Minute))

	ids := func(hits []store.MemoryHit) []string {
		var out []string
		for _, h := range hits {
			out = append(out, h.ID)
		}
		return out
	}
	scopeA := store.MemoryScope{AgentID: "main", Conversation: convA}
	scopeAgent := store.MemoryScope{AgentID: "main"}
	search := func(sc store.MemoryScope, q string) []store.MemoryHit {
		t.Helper()
		hits, err := s.SearchMemories(ctx, sc, store.MemoryWords(q), 10)
		if err != nil {
			t.Fatalf("SearchMemories(%+v, %q) = %v", sc, q, err)
		}
		return hits
	}
	if got := ids(search(scopeA, "deploy")); !slices.Equal(got, []string{key}) {
		t.Errorf("conversation A, \"deploy\": %v, want only A's memory %s", got, key)
	}
	if got := ids(search(scopeAgent, "deploy")); len(got) != 2 || !slices.Contains(got, key) || !slices.Contains(got, bob) {
		t.Errorf("agent scope, \"deploy\": %v, want %s and %s (\"deploys\" by prefix), never another agent's %s", got, key, bob, other)
	}
	hits := search(scopeA, "what does Alice drink? tea or coffee")
	if len(hits) == 0 || hits[0].ID != tea || hits[0].Text == "" || !hits[0].CreatedAt.Equal(t0.Add(time.Minute)) || hits[0].Pinned {
		t.Fatalf("\"Alice … tea\": %+v, want %s first with its text and date", hits, tea)
	}
	if got := ids(search(scopeA, "ops")); !slices.Equal(got, []string{key}) {
		t.Errorf("by tag \"ops\": %v, want %s", got, key)
	}
	// Query syntax of either engine is just words here.
	for _, q := range []string{`"deploy`, `deploy OR NOT key*`, `(vault) AND -secret NEAR/2 ^key: 'x' & | !`, `\\" ; DROP TABLE memories; --`} {
		if _, err := s.SearchMemories(ctx, scopeA, store.MemoryWords(q), 10); err != nil {
			t.Errorf("SearchMemories(%q) = %v, want no error", q, err)
		}
	}
	if hits, err := s.SearchMemories(ctx, scopeA, nil, 10); err != nil || len(hits) != 0 {
		t.Errorf("SearchMemories(no words) = %v, %v", hits, err)
	}

	if m, err := s.GetMemory(ctx, scopeA, key); err != nil || m.Text == "" || !m.Pinned || !slices.Equal(m.Tags, []string{"ops"}) {
		t.Errorf("GetMemory(%s) = %+v, %v", key, m, err)
	}
	for _, c := range []struct {
		sc store.MemoryScope
		id string
	}{{scopeA, bob}, {scopeAgent, other}, {scopeA, "nope"}} {
		if _, err := s.GetMemory(ctx, c.sc, c.id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetMemory(%+v, %s) = %v, want ErrNotFound", c.sc, c.id, err)
		}
		if err := s.ForgetMemory(ctx, c.sc, c.id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("ForgetMemory(%+v, %s) = %v, want ErrNotFound", c.sc, c.id, err)
		}
	}

	list, err := s.ListMemories(ctx, scopeAgent, true, 10)
	if err != nil || len(list) != 2 || list[0].ID != bob || list[1].ID != key {
		t.Errorf("ListMemories(agent, pinned) = %+v, %v; want %s then %s (newest first)", list, err, bob, key)
	}
	if list, err := s.ListMemories(ctx, scopeA, false, 1); err != nil || len(list) != 1 || list[0].ID != tea {
		t.Errorf("ListMemories(A, limit 1) = %+v, %v; want %s", list, err, tea)
	}

	if err := s.ForgetMemory(ctx, scopeA, key); err != nil {
		t.Fatal(err)
	}
	if got := ids(search(scopeAgent, "deploy vault")); !slices.Equal(got, []string{bob}) {
		t.Errorf("after forgetting %s: %v, want %s only", key, got, bob)
	}
	if err := s.ForgetMemory(ctx, scopeA, key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second ForgetMemory = %v, want ErrNotFound", err)
	}
	if err := s.AddMemory(ctx, &store.Memory{ID: tea, AgentID: "main", Conversation: convA, Text: "dup"}); !errors.Is(err, store.ErrExists) {
		t.Errorf("AddMemory with a taken id = %v, want ErrExists", err)
	}
}
