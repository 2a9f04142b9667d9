package subagent

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/store"
)

// Two messages sent at once to a finished run take turns: the transcript
// holds each message followed by its own reply, and the run's tokens
// include both extra turns.
func TestOneMoreTurnsAreSerialised(t *testing.T) {
	h := newHarness(t, "", "", func(c llmtest.Call) llmtest.Reply {
		last := c.LastUser()
		if strings.HasPrefix(last, "extra ") {
			return llmtest.Reply{Text: "reply to " + last, Delay: 150 * time.Millisecond, Usage: agent.Usage{Input: 500, Output: 50}}
		}
		return standard(c)
	})
	ctx := context.Background()
	res := h.m.Spawn(ctx, caller("1"), SpawnParams{Task: "short"})
	done := h.waitDone(res.RunID)
	before := done.TokensIn

	var wg sync.WaitGroup
	for _, m := range []string{"extra one", "extra two"} {
		wg.Go(func() {
			if sr := h.m.Send(ctx, done, m, 30*time.Second); sr.Status != "ok" || sr.Reply != "reply to "+m {
				t.Errorf("send %q = %+v", m, sr)
			}
		})
	}
	wg.Wait()
	msgs, err := h.m.History(context.Background(), done)
	if err != nil {
		t.Fatal(err)
	}
	var tail []string
	for _, l := range HistoryLines(msgs, false) {
		if strings.Contains(l.Text, "extra ") {
			tail = append(tail, l.Text)
		}
	}
	if len(tail) != 4 || !strings.HasPrefix(tail[1], "reply to "+tail[0]) || !strings.HasPrefix(tail[3], "reply to "+tail[2]) {
		t.Errorf("transcript interleaves the two extra turns:\n%s", strings.Join(tail, "\n"))
	}
	after, err := h.db.GetRun(ctx, res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if after.TokensIn-before != 1000 {
		t.Errorf("run tokens in grew by %d, want 1000 (both extra turns)", after.TokensIn-before)
	}
}

// A reply that happens to start with "error: " is a reply, not a failure.
func TestReplyStartingWithErrorIsAReply(t *testing.T) {
	h := newHarness(t, "", "", func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.LastUser(), "any errors?") {
			return llmtest.Reply{Text: "error: none found, the logs are clean"}
		}
		return standard(c)
	})
	ctx := context.Background()
	res := h.m.Spawn(ctx, caller("1"), SpawnParams{Task: "short"})
	done := h.waitDone(res.RunID)
	sr := h.m.Send(ctx, done, "any errors?", 30*time.Second)
	if sr.Status != "ok" || sr.Reply != "error: none found, the logs are clean" {
		t.Errorf("send = %+v, want status ok with the reply as written", sr)
	}
}

// A sessions_spawn call run again (a turn resumed after a crash) answers
// with the run it already spawned instead of spawning a second one.
func TestSpawnIsIdempotentPerToolCall(t *testing.T) {
	h := newHarness(t, "", "", standard)
	ctx := context.Background()
	cc := caller("1")
	cc.CallID = "toolu_once"
	first := h.m.Spawn(ctx, cc, SpawnParams{Task: "once", Label: "once"})
	again := h.m.Spawn(ctx, cc, SpawnParams{Task: "once", Label: "once"})
	if first.Status != "accepted" || again.Status != "accepted" || again.RunID != first.RunID || again.ChildSessionKey != first.ChildSessionKey {
		t.Fatalf("first %+v, again %+v; want the same run", first, again)
	}
	cc.CallID = "toolu_other"
	if other := h.m.Spawn(ctx, cc, SpawnParams{Task: "once", Label: "once"}); other.RunID == first.RunID {
		t.Errorf("another tool call got the same run")
	}
	runs, err := h.m.Runs(ctx, cc.SessionKey)
	if err != nil || len(runs) != 2 {
		t.Errorf("%d runs, %v; want 2", len(runs), err)
	}
}

// A message sent in the moment between a run's end being committed and its
// live entry being dropped runs one more turn: the caller read the end from
// the store, so "still writing its announce" would be wrong (CI hit this).
func TestSendJustAfterTheEndIsCommitted(t *testing.T) {
	h := newHarness(t, "", "", func(c llmtest.Call) llmtest.Reply {
		if c.LastUser() == "again?" {
			return llmtest.Reply{Text: "once more"}
		}
		return standard(c)
	})
	ctx := context.Background()
	res := h.m.Spawn(ctx, caller("1"), SpawnParams{Task: "short"})
	done := h.waitDone(res.RunID)
	// Put back the live entry end() drops right after its commit.
	h.m.mu.Lock()
	live := *done // the live entry's own record, as enqueue gives it
	lr := &liveRun{run: &live, steer: make(chan agent.Steer, 16)}
	lr.run.Status = store.StatusAnnouncing
	h.m.live[done.ID] = lr
	h.m.mu.Unlock()
	sr := h.m.Send(ctx, done, "again?", 30*time.Second)
	h.m.mu.Lock()
	delete(h.m.live, done.ID)
	h.m.mu.Unlock()
	if sr.Status != "ok" || sr.Reply != "once more" {
		t.Errorf("send = %+v, want one more turn answered", sr)
	}
}
