package subagent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/store"
)

// A run that times out while its model calls keep failing says so in its
// Notes, instead of only "Run timed out after 1s.".
func TestTimeoutNotesNameProviderErrors(t *testing.T) {
	h := newHarness(t, "", "", func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.LastUser(), "Announce step") {
			return llmtest.Reply{Text: "Result:\n(not available)\n\nNotes:\n(none)"}
		}
		return llmtest.Reply{Status: 500, Message: "upstream overloaded", Delay: 300 * time.Millisecond}
	})
	one := 1
	res := h.m.Spawn(context.Background(), caller("1"), SpawnParams{Task: "flaky", Label: "flaky", RunTimeoutSeconds: &one})
	r := h.waitDone(res.RunID)
	if r.Outcome != store.OutcomeTimeout {
		t.Fatalf("outcome %q, want timeout (note %q)", r.Outcome, r.Note)
	}
	if !strings.HasPrefix(r.Note, "Run timed out after 1s.") || !strings.Contains(r.Note, "× anthropic HTTP 500: upstream overloaded") {
		t.Errorf("note %q, want the timeout and the repeated HTTP 500s", r.Note)
	}
}
