package command

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/store"
)

// Fixed ids of the fixture runs of conversation A (newest first as listed).
const (
	runQueued   = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
	runRunning  = "3f2a9c1b-6d4e-4f5a-8b7c-1d2e3f4a5b6c"
	runApproval = "5b6c7d8e-9f0a-4b1c-8d2e-3f4a5b6c7d8e"
	runStopped  = "7e8f9a0b-1c2d-4e3f-8a4b-5c6d7e8f9a0b"
	runDone     = "c4d5e6f7-a8b9-4c0d-8e1f-2a3b4c5d6e7f"
	runError    = "e1f2a3b4-c5d6-4e7f-8a9b-0c1d2e3f4a5b"
	runB        = "b7000000-0000-4000-8000-00000000000b"
)

func key(n string) string { return "agent:main:subagent:0a1b2c3d-0000-4000-8000-00000000000" + n }
func sid(n string) string { return "5e551000-0000-4000-8000-00000000000" + n }

// fixtures stores conversation A's runs (every status and outcome) and one
// run of conversation B, with fixed ids and times.
func (h *harness) fixtures() {
	now := h.now
	h.fixture(store.Run{ID: runQueued, ChildKey: key("1"), ChildSessionID: sid("1"), Label: "queued one",
		Task: "wait your turn", Status: store.StatusQueued, CreatedAt: now.Add(-30 * time.Second)})
	h.fixture(store.Run{ID: runRunning, ChildKey: key("2"), ChildSessionID: sid("2"),
		Task:   "Research the history of the Go scheduler and write a summary covering its design goals, trade-offs and the work-stealing algorithm",
		Status: store.StatusRunning, CreatedAt: now.Add(-130 * time.Second), StartedAt: now.Add(-125 * time.Second),
		TokensIn: 1500, TokensOut: 320, Resumes: 1})
	h.fixture(store.Run{ID: runApproval, ChildKey: key("3"), ChildSessionID: sid("3"), Label: "deploy check",
		Task: "run the deploy dry-run", Status: store.StatusRunning, Note: "awaiting approval K3F9",
		CreatedAt: now.Add(-5 * time.Minute), StartedAt: now.Add(-290 * time.Second)})
	done := h.fixture(store.Run{ID: runDone, ChildKey: key("5"), ChildSessionID: sid("5"), Label: "docs check",
		Task: "check the docs for broken links", Status: store.StatusDone, Outcome: store.OutcomeSuccess,
		Result: "2 broken links", Note: "two pages timed out", CreatedAt: now.Add(-20 * time.Minute), StartedAt: now.Add(-20 * time.Minute),
		EndedAt: now.Add(-20*time.Minute + 14*time.Second), ArchiveAt: now.Add(40*time.Minute + 14*time.Second),
		TokensIn: 11000, TokensOut: 2200})
	h.fixture(store.Run{ID: runStopped, ChildKey: key("4"), ChildSessionID: sid("4"), RequesterKey: key("5"),
		RootKey: sessA, Depth: 2, Task: "follow link 7", Status: store.StatusDone, Outcome: store.OutcomeStopped,
		Note: "stopped by request", CreatedAt: now.Add(-19 * time.Minute), StartedAt: now.Add(-19 * time.Minute),
		EndedAt: now.Add(-19*time.Minute + 3*time.Second)})
	h.fixture(store.Run{ID: runError, ChildKey: key("6"), ChildSessionID: sid("6"), Cleanup: "delete",
		Task: "fetch the release notes", Status: store.StatusDone, Outcome: store.OutcomeError,
		Note: "prompt is too long", CreatedAt: now.Add(-time.Hour), StartedAt: now.Add(-time.Hour),
		EndedAt: now.Add(-time.Hour + 63*time.Second), ArchiveAt: now.Add(-time.Hour + 63*time.Second),
		ArchivedAt: now.Add(-time.Hour + 64*time.Second)})
	h.transcript(done,
		msg("user", "check the docs for broken links"),
		toolCall("web_fetch", `{"url":"https://example.org/docs"}`),
		toolResult("web_fetch", `{"status":200,"body":"<a href=\"/gone\">"}`),
		msg("assistant", "Found 2 broken links:\n- /gone\n- /old"),
		msg("user", "Announce step: your run has ended."),
		msg("assistant", "Result:\n2 broken links\n\nNotes:\n(none)"),
	)
	h.fixture(store.Run{ID: runB, ChildKey: key("b"), ChildSessionID: sid("b"), RequesterKey: sessB,
		Label: "b-secret", Task: "conversation B's work", Status: store.StatusDone, Outcome: store.OutcomeSuccess,
		CreatedAt: now.Add(-time.Minute), StartedAt: now.Add(-time.Minute), EndedAt: now.Add(-50 * time.Second)})

	ctx := context.Background()
	for _, a := range []store.Approval{
		{Code: "K3F9", SessionKey: sessA, RunID: runApproval, Tool: "exec", Args: `{"command":"make deploy-dry"}`},
		{Code: "Q7XZ", SessionKey: sessA, Tool: "web_fetch", Args: `{"url":"https://example.org"}`},
		{Code: "B2B2", SessionKey: sessB, Tool: "exec", Args: `{"command":"rm -rf build"}`},
		{Code: "OLD1", SessionKey: sessA, Tool: "exec", Args: `{}`, ExpiresAt: now.Add(-time.Minute)},
	} {
		a.CreatedAt = now.Add(-2 * time.Minute)
		if a.ExpiresAt.IsZero() {
			a.ExpiresAt = now.Add(5 * time.Minute)
		}
		if err := h.db.CreateApproval(ctx, &a); err != nil {
			h.t.Fatal(err)
		}
	}
	if _, err := h.db.EnsureSession(ctx, &store.Session{Key: sessA, ID: "a0000000-0000-4000-8000-00000000000a",
		AgentID: "main", Kind: store.KindMain, CreatedAt: now, UpdatedAt: now}); err != nil {
		h.t.Fatal(err)
	}
	if err := h.db.AddSessionUsage(ctx, sessA, 12000, 3400); err != nil {
		h.t.Fatal(err)
	}
}

// TestGoldenReplies renders every reply format against fixed runs, in
// order (later cases see the effect of earlier ones, e.g. an approval
// already resolved).
func TestGoldenReplies(t *testing.T) {
	h := newHarness(t, "", slowOrEcho)
	h.fixtures()
	old := sendTimeout
	defer func() { sendTimeout = old }()
	cases := []struct {
		name, golden, session, text string
	}{
		{"list", "list", sessA, "/subagents list"},
		{"list bare", "list", sessA, "/subagents"},
		{"list bot suffix and case", "list", sessA, "  /SUBAGENTS@herald_bot \t LIST  "},
		{"list after mention", "list", sessA, "<@U0BOT> /subagents ls"},
		{"list none", "list_none", sessC, "/subagents list"},
		{"info running", "info_running", sessA, "/subagents info 2"},
		{"info awaiting approval", "info_awaiting", sessA, "/subagents info #3"},
		{"info queued via last", "info_queued", sessA, "/subagents info last"},
		{"info done by prefix", "info_done", sessA, "/subagents info c4d5e6"},
		{"info done by key", "info_done", sessA, "/subagents info " + key("5")},
		{"info done by full run id", "info_done", sessA, "/subagents INFO " + runDone},
		{"info grandchild", "info_stopped", sessA, "/subagents info 4"},
		{"info archived error", "info_error", sessA, "/subagents info 6"},
		{"log", "log", sessA, "/subagents log 5"},
		{"log tools", "log_tools", sessA, "/subagents log #5 tools"},
		{"log limit", "log_limit", sessA, "/subagents log 5 2"},
		{"log limit and tools", "log_limit_tools", sessA, "/subagents log 5 tools 3"},
		{"log empty", "log_empty", sessA, "/subagents log 1"},
		{"log archived", "log_archived", sessA, "/subagents log 6"},
		{"no match", "no_match", sessA, "/subagents info zzz"},
		{"no match number", "no_match_number", sessA, "/subagents log 7"},
		{"stop ended", "stop_ended", sessA, "/subagents stop 5"},
		{"stop running", "stop_running", sessA, "/subagents stop 2"},
		{"stop all", "stop_all", sessA, "/subagents stop ALL"},
		{"usage unknown action", "usage_subagents", sessA, "/subagents frobnicate"},
		{"usage stop", "usage_stop", sessA, "/subagents stop"},
		{"usage log", "usage_log", sessA, "/subagents log"},
		{"usage log bad option", "usage_log", sessA, "/subagents log 1 lots"},
		{"usage log zero", "usage_log", sessA, "/subagents log 1 0"},
		{"usage info", "usage_info", sessA, "/subagents info"},
		{"usage send", "usage_send", sessA, "/subagents send"},
		{"usage send no message", "usage_send", sessA, "/subagents send 5   "},
		{"usage approve", "usage_approve", sessA, "/approve"},
		{"usage deny", "usage_deny", sessA, "/deny ``"},
		{"approve", "approve", sessA, "/approve K3F9"},
		{"approve again", "approve_again", sessA, "/approve K3F9"},
		{"deny lower case with reason", "deny", sessA, "/deny q7xz too risky"},
		{"approve unknown", "approve_unknown", sessA, "/approve NOPE"},
		{"approve other conversation", "approve_other", sessA, "/approve B2B2"},
		{"approve unknown lookalike", "approve_other", sessA, "/approve `B2B2`"},
		{"approve expired", "approve_expired", sessA, "/approve OLD1"},
		{"status", "status", sessA, "/status"},
		{"status other session", "status_empty", sessC, "/status"},
		{"help", "help", sessA, "/help"},
		{"stop command", "stop_cmd", sessA, "/stop"},
		{"send to ended run", "send", sessA, "/subagents send 5 what did   you find?"},
		{"send timeout", "send_timeout", sessA, "/subagents steer c4d5 slow question"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// /subagents send waits the real 30 s (an answer must not be
			// cut short by a loaded machine), but where the model holds
			// the answer a minute: any shorter wait ends in "still running".
			sendTimeout = old
			if c.golden == "send_timeout" {
				sendTimeout = 200 * time.Millisecond
			}
			got := h.do(c.session, c.text)
			golden(t, c.golden, got)
		})
	}
	// The other conversation's approval is untouched.
	if a, err := h.db.GetApproval(context.Background(), "B2B2"); err != nil || a.Status != store.ApprovalPending {
		t.Errorf("B's approval after A typed its code: %+v, %v", a, err)
	}
}

// TestUsageIsOneLine: every usage reply is one line starting with "Usage:".
func TestUsageIsOneLine(t *testing.T) {
	for _, text := range []string{"/subagents x", "/subagents stop", "/subagents log", "/subagents log 1 -3",
		"/subagents info", "/subagents send 1", "/approve", "/deny", "/subagents kill", "/subagents steer 1"} {
		reply, handled := Handle(context.Background(), Env{}, Request{SessionKey: sessA, Text: text})
		if !handled || !strings.HasPrefix(reply, "Usage: /") || strings.Contains(reply, "\n") {
			t.Errorf("%q → %q, %v; want a one-line usage", text, reply, handled)
		}
	}
}
