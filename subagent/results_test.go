package subagent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/store"
)

// TestEveryEndLeavesOneResult: a child that succeeds, one that answers
// ANNOUNCE_SKIP and one stopped each leave exactly one "[sub-agent result]"
// for the session that spawned them, in the form of SPEC §23; a turn that
// folds them in after a crash between its fold write and its transcript
// write adds each once, and a second fold adds nothing.
func TestEveryEndLeavesOneResult(t *testing.T) {
	h := newHarness(t, "maxChildrenPerSession: 10", "", func(c llmtest.Call) llmtest.Reply {
		task := taskOf(c)
		switch {
		case strings.Contains(c.LastUser(), "Announce step") && task == "quiet":
			return llmtest.Reply{Text: AnnounceSkip}
		case task == "slow" && !strings.Contains(c.LastUser(), "Announce step"):
			return llmtest.Reply{Text: "late", Delay: time.Minute}
		}
		return standard(c)
	})
	ctx := context.Background()
	cc := caller("1")
	cc.SessionID = "parent-session"
	ok := h.m.Spawn(ctx, cc, SpawnParams{Task: "count the stars", Label: "stars"})
	quiet := h.m.Spawn(ctx, cc, SpawnParams{Task: "quiet"})
	slow := h.m.Spawn(ctx, cc, SpawnParams{Task: "slow"})
	if v := h.m.Status(h.waitDone(ok.RunID)); v.Result != "findings for count the stars" {
		t.Errorf("session_status result = %q", v.Result)
	}
	h.waitDone(quiet.RunID)
	if !waitUntil(func() bool { r, _ := h.db.GetRun(ctx, slow.RunID); return r.Status == store.StatusRunning }) {
		t.Fatal("the slow run never started")
	}
	h.m.Stop(ctx, slow.RunID)
	h.waitDone(slow.RunID)

	pending, err := h.db.PendingResults(ctx, cc.SessionKey, cc.SessionID)
	if err != nil || len(pending) != 3 {
		t.Fatalf("pending results = %d, %v; want one per child", len(pending), err)
	}
	texts := map[string]string{}
	for _, p := range pending {
		texts[p.RunID] = p.Text
	}
	if want := "[sub-agent result] stars · run " + ok.RunID[:8] + " · Status: success\nResult: findings for count the stars\nNotes: (none)"; texts[ok.RunID] != want {
		t.Errorf("result of a successful child:\n%s\nwant:\n%s", texts[ok.RunID], want)
	}
	if !strings.HasPrefix(texts[quiet.RunID], "[sub-agent result] quiet · run "+quiet.RunID[:8]+" · Status: success\nResult: worked on quiet") {
		t.Errorf("result of an ANNOUNCE_SKIP child:\n%s", texts[quiet.RunID])
	}
	if !strings.HasPrefix(texts[slow.RunID], "[sub-agent result] slow · run "+slow.RunID[:8]+" · Status: stopped\n") ||
		!strings.Contains(texts[slow.RunID], "Notes: stopped by request") {
		t.Errorf("result of a stopped child:\n%s", texts[slow.RunID])
	}

	// The fold write is committed, then the process dies before the
	// transcript line: the same turn, run again, adds each result once.
	fold := store.Fold{SessionKey: cc.SessionKey, SessionID: cc.SessionID, By: "intake:7"}
	if _, err := h.db.FoldResults(ctx, fold); err != nil {
		t.Fatal(err)
	}
	path := h.db.TranscriptPath("main", cc.SessionID)
	sess, err := agent.LoadSessionFrom(ctx, h.db, cc.SessionKey, cc.SessionID, "main", "", path, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	for i, want := range []int{3, 0} {
		if n, err := Fold(ctx, h.db, sess, fold, nil, ""); err != nil || n != want {
			t.Errorf("fold %d added %d results, %v; want %d", i+1, n, err, want)
		}
	}
	if n, _ := Fold(ctx, h.db, sess, store.Fold{SessionKey: cc.SessionKey, SessionID: cc.SessionID, By: "intake:8"}, nil, ""); n != 0 {
		t.Errorf("the next turn folded %d results again", n)
	}
	if len(sess.History) != 3 || !strings.HasPrefix(sess.History[0].Text, ResultPrefix) {
		t.Errorf("history after the folds = %+v", sess.History)
	}
}

// waitUntil polls cond every 10 ms for up to 10 s.
func waitUntil(cond func() bool) bool {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// TestSpawnRefusesBadAnnounce: an unknown announce or a negative
// groupTimeoutSeconds is an error naming the field; nothing is spawned.
func TestSpawnRefusesBadAnnounce(t *testing.T) {
	h := newHarness(t, "", "", standard)
	ctx := context.Background()
	minus := -1
	for _, c := range []struct {
		p    SpawnParams
		want string
	}{
		{SpawnParams{Task: "x", Announce: "loud"}, `announce must be "chat", "parent" or "silent", not "loud"`},
		{SpawnParams{Task: "x", Announce: "parent", GroupTimeoutSeconds: &minus}, "groupTimeoutSeconds must be 0 or more"},
	} {
		res := h.m.Spawn(ctx, caller("1"), c.p)
		if res.Status != "error" || !strings.Contains(res.Error, c.want) {
			t.Errorf("spawn %+v = %+v, want an error naming %q", c.p, res, c.want)
		}
	}
	if runs, _ := h.db.ListRuns(ctx, store.RunFilter{}); len(runs) != 0 {
		t.Errorf("%d runs spawned from bad input", len(runs))
	}
}

// TestSilentChildPostsNothing: announce "silent" puts the result into the
// parent's history only: no post, no wake.
func TestSilentChildPostsNothing(t *testing.T) {
	h := newHarness(t, "", "", standard)
	ctx := context.Background()
	res := h.m.Spawn(ctx, caller("1"), SpawnParams{Task: "hush", Announce: "silent"})
	if r := h.waitDone(res.RunID); r.Announce != store.AnnounceSilent {
		t.Fatalf("announce %q, want silent", r.Announce)
	}
	if items, _ := h.db.PendingOutbox(ctx, 10); len(items) != 0 {
		t.Errorf("a silent child posted %d messages", len(items))
	}
	if owed, _ := h.db.OwedIntake(ctx); len(owed) != 0 {
		t.Errorf("a silent child woke its parent: %+v", owed)
	}
	if pending, _ := h.db.PendingResults(ctx, caller("1").SessionKey, ""); len(pending) != 1 {
		t.Errorf("a silent child left %d results for its parent, want 1", len(pending))
	}
}
