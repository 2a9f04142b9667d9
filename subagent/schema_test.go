package subagent

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/store"
)

const answerSchema = `{"type":"object","properties":{"answer":{"type":"integer"}},"required":["answer"]}`

// TestOutputSchema: a child with an outputSchema whose first announce
// reply does not match gets one correction turn, and its matching value is
// stored with the run, returned by session_status, put on the Output line
// of the parent's result and shown fenced under the announce's Result:; a
// child still wrong after the correction ends with the Note of SPEC §23
// and no output; an invalid schema is refused at spawn.
func TestOutputSchema(t *testing.T) {
	var mu sync.Mutex
	corrections := map[string]int{}
	h := newHarness(t, "maxChildrenPerSession: 10", "", func(c llmtest.Call) llmtest.Reply {
		task, last := taskOf(c), c.LastUser()
		switch {
		case strings.HasPrefix(last, "That output does not match the schema"):
			mu.Lock()
			corrections[task]++
			mu.Unlock()
			if task == "fixes" {
				return llmtest.Reply{Text: "```json\n{\"answer\": 42}\n```"}
			}
			return llmtest.Reply{Text: `{"answer": "forty-two"}`}
		case strings.Contains(last, "Announce step"):
			if !strings.Contains(last, answerSchema) {
				t.Errorf("the announce prompt does not carry the schema:\n%s", last)
			}
			return llmtest.Reply{Text: "The answer is 42."}
		}
		return standard(c)
	})
	ctx := context.Background()
	cc := caller("1")
	fixes := h.m.Spawn(ctx, cc, SpawnParams{Task: "fixes", OutputSchema: json.RawMessage(answerSchema)})
	never := h.m.Spawn(ctx, cc, SpawnParams{Task: "never", OutputSchema: json.RawMessage(answerSchema)})
	if fixes.Status != "accepted" || never.Status != "accepted" {
		t.Fatalf("spawns = %+v, %+v", fixes, never)
	}

	r := h.waitDone(fixes.RunID)
	if r.Output != `{"answer":42}` || r.Note != "" {
		t.Errorf("run output %q, note %q; want the corrected value and no note", r.Output, r.Note)
	}
	if v := h.m.Status(r); string(v.Output) != `{"answer":42}` {
		t.Errorf("session_status output = %s", v.Output)
	}
	bad := h.waitDone(never.RunID)
	if bad.Output != "" || !strings.HasPrefix(bad.Note, "output did not match the schema: ") {
		t.Errorf("still-wrong run: output %q, note %q", bad.Output, bad.Note)
	}
	mu.Lock()
	if corrections["fixes"] != 1 || corrections["never"] != 1 {
		t.Errorf("correction turns = %v, want exactly one each", corrections)
	}
	mu.Unlock()

	pending, err := h.db.PendingResults(ctx, cc.SessionKey, "")
	if err != nil || len(pending) != 2 {
		t.Fatalf("pending results = %d, %v", len(pending), err)
	}
	for _, p := range pending {
		switch p.RunID {
		case fixes.RunID:
			if !strings.HasSuffix(p.Text, "\nNotes: (none)\nOutput: {\"answer\":42}") {
				t.Errorf("parent's result message:\n%s", p.Text)
			}
		case never.RunID:
			if strings.Contains(p.Text, "Output:") || !strings.Contains(p.Text, "Notes: output did not match the schema: ") {
				t.Errorf("parent's result message of the still-wrong run:\n%s", p.Text)
			}
		}
	}
	var shown bool
	for _, a := range h.waitAnnounces(2) {
		if a.RunID == fixes.RunID {
			shown = strings.Contains(a.Text, "Result:\n```json\n{\n  \"answer\": 42\n}\n```")
			if !shown {
				t.Errorf("chat announce:\n%s", a.Text)
			}
		}
	}
	if !shown {
		t.Error("no chat announce for the run with a schema")
	}

	for _, s := range []string{`{"type":"nope"}`, `[1]`, `{"$ref":"https://example.com/s.json"}`} {
		res := h.m.Spawn(ctx, cc, SpawnParams{Task: "x", OutputSchema: json.RawMessage(s)})
		if res.Status != "error" || !strings.Contains(res.Error, "outputSchema") {
			t.Errorf("spawn with schema %s = %+v, want an error naming outputSchema", s, res)
		}
	}
	if runs, _ := h.db.ListRuns(ctx, store.RunFilter{}); len(runs) != 2 {
		t.Errorf("%d runs, want only the 2 with a valid schema", len(runs))
	}
}
