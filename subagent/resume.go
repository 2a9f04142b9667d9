package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/store"
)

// Runs survive their process (SPEC §25). A run that was running or
// announcing when its gateway stopped is queued again and resumes from its
// transcript — the transcript is the journal: the recorded tool results are
// reused, an unanswered call is made again only when its tool is
// repeatable (agent.Repeatable), a recorded announce reply is reused. The
// run row keeps only what the transcript cannot say: how often it resumed
// and how long it ran before (for the rest of its runTimeoutSeconds).

// unknownNote is the Notes of a run that ended unknown because its gateway
// stopped and it was not (or no longer) resumed.
const unknownNote = "The gateway stopped while this run was in progress; its outcome is unknown."

// resumedNote is the line a resumed run's Notes gain.
func resumedNote(n int) string {
	return fmt.Sprintf("Resumed after the gateway stopped (%d×).", n)
}

// resume queues again a run its gateway stopped in (r is running or
// announcing in the store, claimed by this replica), or ends it unknown:
// past maxResumes, or when its transcript cannot be read or ends mid-line
// (a crash loop must not run a task forever, nor a broken transcript
// crash the gateway again).
func (m *Manager) resume(ctx context.Context, r *store.Run) error {
	limit := m.config().SubagentLimits(r.AgentID).MaxResumes
	if r.Resumes >= limit {
		note := unknownNote
		if r.Resumes > 0 {
			note = fmt.Sprintf("Resumed %d×; the gateway stopped again, its outcome is unknown.", r.Resumes)
		}
		return m.finishUnknown(ctx, r, note)
	}
	path := m.d.Store.TranscriptPath(r.AgentID, r.ChildSessionID)
	if m.d.Store.TranscriptTorn(ctx, path) {
		return m.finishUnknown(ctx, r, "The gateway stopped while this run was in progress and its transcript ends mid-line (a write cut by the stop), so it was not resumed; its outcome is unknown.")
	}
	_, entries, err := m.d.Store.ReadTranscript(ctx, path)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		m.runLog(r).Warn("the transcript of a run cut by a stop cannot be read; not resuming it", zap.Error(err))
		return m.finishUnknown(ctx, r, fmt.Sprintf("The gateway stopped while this run was in progress and its transcript cannot be read (%v), so it was not resumed; its outcome is unknown.", err))
	}
	if r.Model == ACPModel {
		// An ACP agent that had its task goes on only in its own session
		// (SPEC §26).
		if id, started := acpSessionIn(entries); started && id == "" {
			return m.finishUnknown(ctx, r, unknownNote+" Its ACP agent cannot load sessions (no loadSession), so it was not resumed.")
		}
	}
	ran := r.Ran + stretchRan(r, entries)
	if err := m.d.Store.ResumeRun(ctx, r.ID, ran); err != nil {
		return fmt.Errorf("resume run %s: %w", r.ID, err)
	}
	r.Status, r.Resumes, r.Ran = store.StatusQueued, r.Resumes+1, ran
	m.runLog(r).Info("run cut by a stop of the gateway; resuming it from its transcript",
		zap.Int("resumes", r.Resumes), zap.Duration("ran", ran))
	m.enqueue(r)
	return nil
}

// stretchRan is how long the run ran in its last stretch before the stop:
// from the stretch's start to its last transcript line (the stop itself
// left no trace, so the time after that line counts as downtime).
func stretchRan(r *store.Run, entries []store.TranscriptEntry) time.Duration {
	from := r.StretchAt
	if from.IsZero() {
		from = r.StartedAt
	}
	if from.IsZero() || len(entries) == 0 {
		return 0
	}
	return max(entries[len(entries)-1].Timestamp.Sub(from), 0)
}

// resumePoint is where a resumed run goes on, read from its transcript.
type resumePoint struct {
	// started: the task is in the transcript, so the work turn resumes
	// (agent.Turn.Resume) instead of starting.
	started bool
	// worked: the work turn had ended (its last message is the model's
	// answer); workText is that answer.
	worked   bool
	workText string
	// used is the model calls of the work turn before the stop.
	used int
	// announcing: the announce step's prompt is in the transcript;
	// announced: its reply too (announceText).
	announcing, announced bool
	announceText          string
	// usage and the cost of the calls recorded, at the model that answered
	// each (calls: how many had a model).
	usage  agent.Usage
	cost   float64
	calls  int
	priced bool
}

// readResumePoint reads where the run of entries stopped.
func (m *Manager) readResumePoint(entries []store.TranscriptEntry) resumePoint {
	var p resumePoint
	for _, e := range entries {
		if len(e.Usage) > 0 {
			var u agent.Usage
			if json.Unmarshal(e.Usage, &u) == nil {
				p.usage = p.usage.Add(u)
				if mod, ok := m.d.Catalog.Lookup(e.Model); ok && e.Model != "" {
					usd, priced := mod.EstimateCost(u)
					p.cost += usd
					p.priced = p.priced || priced
					p.calls++
				}
			}
		}
		if e.Type != "message" {
			continue
		}
		switch {
		case e.Role == string(agent.RoleUser) && IsAnnouncePrompt(e.Content):
			p.announcing = true
		case e.Role == string(agent.RoleUser):
			p.started = true
		case e.Role == string(agent.RoleAssistant) && p.announcing:
			p.announced, p.announceText = true, e.Content
		case e.Role == string(agent.RoleAssistant):
			p.used++
		}
	}
	msgs := agent.MessagesFromTranscript(entries)
	for i := len(msgs) - 1; i >= 0 && !p.announcing; i-- {
		if msgs[i].Role == agent.RoleUser {
			break // a task or a steering message still waits for its answer
		}
		if msgs[i].Role == agent.RoleAssistant {
			p.worked = len(msgs[i].ToolCalls) == 0
			p.workText = msgs[i].Text
			break
		}
	}
	if p.announcing {
		p.worked = true
		p.workText = lastWorkText(msgs)
	}
	return p
}

// lastWorkText is the last assistant text before the announce step's
// prompt.
func lastWorkText(msgs []agent.Message) string {
	for i, msg := range msgs {
		if msg.Role == agent.RoleUser && IsAnnouncePrompt(msg.Text) {
			return agent.LastAssistantText(msgs[:i])
		}
	}
	return agent.LastAssistantText(msgs)
}

// withResumed puts the resumed line last in notes (SPEC §25).
func withResumed(notes string, resumes int) string {
	if resumes <= 0 {
		return notes
	}
	line := resumedNote(resumes)
	if strings.Contains(notes, line) {
		return notes
	}
	return strings.TrimPrefix(notes+"\n"+line, "\n")
}

// loadResumePoint reads where the resumed run stopped and takes the usage and
// cost its transcript records as the run's so far (a call cut by the stop
// is not counted).
func (m *Manager) loadResumePoint(ctx context.Context, lr *liveRun, run *store.Run) resumePoint {
	_, entries, err := m.d.Store.ReadTranscript(ctx, m.d.Store.TranscriptPath(run.AgentID, run.ChildSessionID))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		m.runLog(run).Warn("could not read the transcript of a resumed run", zap.Error(err))
	}
	p := m.readResumePoint(entries)
	m.mu.Lock()
	lr.usage, lr.cost, lr.calls, lr.priced = p.usage, p.cost, p.calls, p.priced
	m.mu.Unlock()
	m.runLog(run).Info("resuming run", zap.Int("resumes", run.Resumes), zap.Bool("started", p.started),
		zap.Bool("worked", p.worked), zap.Bool("announcing", p.announcing), zap.Int("modelCalls", p.used))
	return p
}
