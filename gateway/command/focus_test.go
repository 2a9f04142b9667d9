package command

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
)

// storeThreads are the gateway's bindings over the harness's store.
type storeThreads struct {
	db  *store.DB
	now time.Time
}

func (s storeThreads) Focus(ctx context.Context, thread channels.Origin, run *store.Run, by string) error {
	return s.db.BindThread(ctx, &store.Binding{Thread: thread, ChildKey: run.ChildKey, RunID: run.ID, AgentID: "main",
		CreatedBy: by, CreatedAt: s.now, ExpiresAt: s.now.Add(24 * time.Hour)})
}

func (s storeThreads) Unfocus(ctx context.Context, thread channels.Origin) (bool, error) {
	_, err := s.db.UnbindThread(ctx, thread, s.now)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (s storeThreads) Bound(ctx context.Context, keys []string) map[string]bool {
	list, _ := s.db.ChildBindings(ctx, keys, s.now)
	out := map[string]bool{}
	for _, b := range list {
		out[b.ChildKey] = true
	}
	return out
}

// /focus binds a thread to a sub-agent of any conversation of the same
// chat (by id prefix or label; list numbers are this conversation's), never
// one of another chat; /subagents list marks it 🧵; commands in the bound
// thread act on the child; /unfocus ends it. Without a thread, or with no
// match, one line says so.
func TestFocusAndUnfocus(t *testing.T) {
	h := newHarness(t, "", slowOrEcho)
	env := h.env()
	env.Threads = storeThreads{db: h.db, now: h.now}
	ctx := context.Background()
	researcher := h.fixture(store.Run{ID: "aaaa1111-0000-4000-8000-000000000001", ChildKey: "agent:main:subagent:c1", ChildSessionID: "s1",
		RequesterKey: sessA, RootKey: sessA, Label: "researcher", Task: "find sources", Status: store.StatusDone, Outcome: store.OutcomeSuccess,
		CreatedAt: h.now.Add(-time.Hour), StartedAt: h.now.Add(-time.Hour), EndedAt: h.now.Add(-50 * time.Minute)})
	h.fixture(store.Run{ID: "bbbb2222-0000-4000-8000-000000000002", ChildKey: "agent:main:subagent:c2", ChildSessionID: "s2",
		RequesterKey: sessC, RootKey: sessC, Label: "elsewhere", Task: "other chat", Status: store.StatusDone, Outcome: store.OutcomeSuccess,
		CreatedAt: h.now.Add(-time.Hour)})

	threadB := channels.Origin{Channel: "slack", ChatID: "C1", ChatType: "group", ThreadID: "222.2", SenderID: "U1"}
	do := func(o channels.Origin, key, text string, bound *store.Run) string {
		t.Helper()
		reply, handled := Handle(ctx, env, Request{SessionKey: key, Origin: o, SenderID: "U1", Text: text, Bound: bound})
		if !handled {
			t.Fatalf("%q not handled", text)
		}
		return reply
	}
	noThread := channels.Origin{Channel: "slack", ChatID: "C1", ChatType: "group"}
	if got := do(noThread, "agent:main:slack:group:C1", "/focus researcher", nil); got != usageFocus {
		t.Errorf("/focus without a thread = %q, want the usage line", got)
	}
	if got := do(threadB, sessB, "/focus", nil); got != usageFocus {
		t.Errorf("/focus without a target = %q", got)
	}
	for _, target := range []string{"nobody", "elsewhere", "bbbb2222", "#1"} {
		if got, want := do(threadB, sessB, "/focus "+target, nil), `⚠️ No subagent matches "`+target+`".`; got != want {
			t.Errorf("/focus %s = %q, want %q", target, got, want)
		}
	}
	if got := do(threadB, sessB, "/focus aaaa1111", nil); got != "🎯 This thread now talks to researcher." {
		t.Fatalf("/focus by id prefix from another thread = %q", got)
	}
	if b, err := h.db.ThreadBinding(ctx, threadB, h.now); err != nil || b.ChildKey != researcher.ChildKey || b.CreatedBy != "U1" {
		t.Fatalf("binding = %+v, %v", b, err)
	}
	// The requester's list marks the bound child.
	if got := h.doEnv(env, sessA, "/subagents list"); !strings.Contains(got, "1) success · 🧵 researcher · ") {
		t.Errorf("/subagents list does not mark the bound child:\n%s", got)
	}
	// In the bound thread, commands are about the child.
	if got := do(threadB, sessB, "/subagents info", &researcher); !strings.HasPrefix(got, "ℹ️ Subagent info") || !strings.Contains(got, "Label: researcher") {
		t.Errorf("/subagents info in the bound thread = %q", got)
	}
	if got := do(threadB, sessB, "/subagents list", &researcher); !strings.Contains(got, "1) success · 🧵 researcher") || strings.Contains(got, "2)") {
		t.Errorf("/subagents list in the bound thread = %q", got)
	}
	if got := do(threadB, sessB, "/stop", &researcher); got != "⚙️ Agent was aborted. Stopped 0 sub-agents." {
		t.Errorf("/stop in the bound thread (child done) = %q", got)
	}
	if got := do(threadB, sessB, "/unfocus", &researcher); got != "🎯 Back to main." {
		t.Errorf("/unfocus = %q", got)
	}
	if got := do(threadB, sessB, "/unfocus", nil); got != "ℹ️ This thread is not bound to a subagent; it talks to main." {
		t.Errorf("/unfocus again = %q", got)
	}
	if got := h.doEnv(env, sessA, "/subagents list"); strings.Contains(got, "🧵") {
		t.Errorf("after /unfocus the list still marks it:\n%s", got)
	}
	// A list number names this conversation's own runs.
	threadA := channels.Origin{Channel: "slack", ChatID: "C1", ChatType: "group", ThreadID: "111.1"}
	if got := do(threadA, sessA, "/focus 1", nil); got != "🎯 This thread now talks to researcher." {
		t.Errorf("/focus 1 in the requester's own thread = %q", got)
	}
}
