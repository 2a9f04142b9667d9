package subagent

import (
	"context"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/store"
)

// ResultPrefix begins the message a sub-agent's result becomes in the
// history of the session that spawned it (SPEC §23).
const ResultPrefix = "[sub-agent result]"

// ResultNote is what the parent's model is told about results, for the
// system prompts of sessions that may spawn (SPEC §23).
const ResultNote = "When a sub-agent you started ends, its result is added to this conversation as a user message beginning with \"" +
	ResultPrefix + "\" (label, run id, Status, Result, Notes, and Output: the JSON value when you gave an outputSchema); you see it on your next turn. With sessions_spawn announce \"parent\" nothing is posted to the chat and you are woken once, with the results of all the children you spawned that way in one turn, to answer for them. Do not poll for results with tools."

// ResultMessage renders a run's result for its requester's history:
//
//	[sub-agent result] <label> · run <runId 8> · Status: <outcome>
//	Result: <result>
//	Notes: <notes>
//	Output: <compact JSON, when set>
func ResultMessage(r *store.Run, outcome, result, notes, output string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s · run %s · Status: %s\n", ResultPrefix, TaskTitle(r.Label, r.Task), shortID(r.ID), outcome)
	fmt.Fprintf(&b, "Result: %s\nNotes: %s", orDefault(result, "(not available)"), orDefault(notes, "(none)"))
	if output != "" {
		b.WriteString("\nOutput: " + output)
	}
	return b.String()
}

// shortID is the run id people see: its first 8 characters.
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// resultOf is the result row of a run's end (RunEnd.Result): every child
// spawned by a session gets one, whatever its outcome; a scheduled run
// (SPEC §19) has no parent session to tell.
func resultOf(r *store.Run, outcome, result, notes string) *store.Result {
	if r.ScheduleID != "" {
		return nil
	}
	return &store.Result{RunID: r.ID, SessionKey: r.RequesterKey, SessionID: r.RequesterSessionID,
		Text: ResultMessage(r, outcome, result, notes, r.Output), CreatedAt: r.EndedAt}
}

// Fold takes the results of f's session that no turn took yet into sess's
// history, oldest first, as user messages (SPEC §23), and returns how many
// it added. A result whose text is input is left out: the turn adds it as
// its input (a wake's). The results are marked as taken by f.By in one write (with
// f.IntakeID, the turn's start write), then written to the transcript; a
// result the history already holds — the same turn resumed after a crash
// between the two — is not added again. While sess has tool calls of a
// cut turn pending nothing is taken: the next turn takes them.
func Fold(ctx context.Context, st store.Results, sess *agent.Session, f store.Fold, clock agent.Clock, input string) (int, error) {
	if sess.PendingCalls() {
		return 0, nil
	}
	results, err := st.FoldResults(ctx, f)
	if err != nil {
		return 0, err
	}
	added := 0
	for _, res := range results {
		if res.Text == input || holdsResult(sess.History, res.Text) {
			continue
		}
		if err := sess.AddUser(ctx, res.Text, clock); err != nil {
			return added, err
		}
		added++
	}
	return added, nil
}

// holdsResult reports whether history has the result message text (its
// first line names the run).
func holdsResult(history []agent.Message, text string) bool {
	head, _, _ := strings.Cut(text, "\n")
	for i := len(history) - 1; i >= 0; i-- {
		m := history[i]
		if m.Role == agent.RoleUser && strings.HasPrefix(m.Text, head) {
			return true
		}
	}
	return false
}

// fold takes the results of the run's own children into its session sess
// before a turn of it; a store that does not answer leaves them for the
// next one. wrote: it may have written lines to sess's transcript.
func (m *Manager) fold(ctx context.Context, sess *agent.Session, run *store.Run) (wrote bool) {
	n, err := Fold(ctx, m.d.Store, sess, store.Fold{SessionKey: run.ChildKey, SessionID: run.ChildSessionID,
		By: "run:" + run.ID, At: m.d.Clock.Now()}, m.d.Clock, "")
	if err != nil {
		m.runLog(run).Warn("could not take the results of the run's sub-agents into its history", zap.Error(err))
	}
	if n > 0 {
		m.runLog(run).Info("sub-agent results taken into the run's history", zap.Int("results", n))
	}
	return n > 0 || err != nil
}
