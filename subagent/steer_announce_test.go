package subagent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/store"
)

// A steering message sent while the run writes its announce is answered at
// once with what happened, not left to time out.
func TestSteerDuringAnnounceStepIsAnswered(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	h := newHarness(t, "", "", func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.LastUser(), "Announce step") {
			<-release
			return llmtest.Reply{Text: "Result:\ndone\n\nNotes:\n(none)"}
		}
		return llmtest.Reply{Text: "work done"}
	})
	res := h.m.Spawn(context.Background(), caller("1"), SpawnParams{Task: "work", Label: "w"})
	deadline := time.Now().Add(10 * time.Second)
	for {
		// As /subagents list sees it: the stored run with its live state.
		r, err := h.db.GetRun(context.Background(), res.RunID)
		if err == nil {
			runs := []store.Run{*r}
			h.m.overlay(runs)
			if runs[0].Status == store.StatusAnnouncing {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run never reached the announce step")
		}
		time.Sleep(5 * time.Millisecond)
	}
	run, _ := h.db.GetRun(context.Background(), res.RunID)
	// Before, the message sat unread and Send reported "timeout".
	got := h.m.Send(context.Background(), run, "also check X", time.Minute)
	if got.Status != "error" || !strings.Contains(got.Error, "writing its announce") {
		t.Fatalf("Send during the announce step = %+v, want an error saying the run is finishing", got)
	}
}
