package memory

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/tools"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

func openStore(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func tool(t *testing.T, st store.Memories, c config.Memory, name string) agent.Tool {
	t.Helper()
	for _, tl := range Tools(st, c) {
		if tl.Spec().Name == name {
			return tl
		}
	}
	t.Fatalf("no tool %s", name)
	return nil
}

var cc = agent.CallContext{SessionKey: "agent:main:web:dm:a", RootKey: "agent:main:web:dm:a", AgentID: "main"}

// Bad input is a result naming the problem, never a SQL error.
func TestBadInput(t *testing.T) {
	st := openStore(t)
	c := config.Memory{Scope: "conversation", MaxChars: 20, InjectTokens: 500}
	ctx := context.Background()
	for _, k := range []struct {
		tool, args, want string
	}{
		{WriteName, `{"text":"` + strings.Repeat("x", 21) + `"}`, "the memory is 21 characters; memory.maxChars allows 20"},
		{WriteName, `{"text":"  "}`, "text is empty"},
		{WriteName, `{"text":"a","colour":"red"}`, `unknown field "colour"`},
		{SearchName, `{"query":"\"*( -- ; ^: &|!"}`, "has no words to search for"},
		{SearchName, `{"query":"x","limit":0}`, "limit must be 1 to 50"},
		{SearchName, `{}`, `missing required field "query"`},
		{GetName, `{"id":"nope"}`, `no memory "nope" in this conversation`},
		{ForgetName, `{"id":"nope"}`, `no memory "nope" in this conversation`},
		{GetName, `{"id":""}`, "id is empty"},
	} {
		_, err := tool(t, st, c, k.tool).Call(ctx, cc, json.RawMessage(k.args))
		if err == nil || !strings.Contains(err.Error(), k.want) {
			t.Errorf("%s %s: %v, want an error saying %q", k.tool, k.args, err, k.want)
		}
		if err != nil && strings.Contains(strings.ToLower(err.Error()), "sql") {
			t.Errorf("%s %s: a SQL error reached the model: %v", k.tool, k.args, err)
		}
	}
	// One sentinel for every tool's argument errors (agent.ErrBadArguments).
	for _, args := range []string{`{"text":"a","colour":"red"}`, `{"text":"  "}`} {
		if _, err := tool(t, st, c, WriteName).Call(ctx, cc, json.RawMessage(args)); !errors.Is(err, tools.ErrBadArguments) {
			t.Errorf("%s %s: %v, want it to wrap tools.ErrBadArguments as the other tools' do", WriteName, args, err)
		}
	}
	// Operators and quotes around words are just the words.
	if _, err := tool(t, st, c, WriteName).Call(ctx, cc, json.RawMessage(`{"text":"vault key rotation"}`)); err != nil {
		t.Fatal(err)
	}
	out, err := tool(t, st, c, SearchName).Call(ctx, cc, json.RawMessage(`{"query":"\"vault\" AND (key* OR NOT x) NEAR/3"}`))
	if err != nil || !strings.Contains(out, "vault key rotation") {
		t.Errorf("search with operators = %s, %v", out, err)
	}
	if errors.Is(err, agent.ErrBadArguments) {
		t.Error("unexpected bad arguments")
	}
}

// Pinned memories go into the prompt newest first while they fit in
// injectTokens.
func TestPinnedBudget(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	for i, text := range []string{"oldest pinned fact", "middle pinned fact", "newest pinned fact"} {
		if err := st.AddMemory(ctx, &store.Memory{AgentID: "main", Conversation: cc.RootKey, Text: text, Pinned: true, CreatedAt: t0.Add(time.Duration(i) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	st.AddMemory(ctx, &store.Memory{AgentID: "main", Conversation: cc.RootKey, Text: "not pinned", CreatedAt: t0.Add(time.Hour)})
	sc := Scope(config.Memory{Scope: "conversation"}, "main", cc.RootKey)
	all, err := Pinned(ctx, st, sc, 500)
	if err != nil || !strings.Contains(all, "oldest pinned fact") || strings.Contains(all, "not pinned") ||
		strings.Index(all, "newest") > strings.Index(all, "middle") {
		t.Fatalf("Pinned(500) = %q, %v", all, err)
	}
	// One line is "- [xxxxxxxx, 2026-11-27] newest pinned fact\n": 45 characters.
	two, _ := Pinned(ctx, st, sc, 23)
	if !strings.Contains(two, "newest") || !strings.Contains(two, "middle") || strings.Contains(two, "oldest") {
		t.Errorf("Pinned(23 tokens) = %q, want the two newest", two)
	}
	if none, _ := Pinned(ctx, st, Scope(config.Memory{Scope: "conversation"}, "main", "agent:main:web:dm:other"), 500); none != "" {
		t.Errorf("another conversation's prompt got %q", none)
	}
}
