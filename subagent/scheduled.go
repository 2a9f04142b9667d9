package subagent

import (
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/store"
)

// ScheduledRun makes the queued run of one schedule firing (SPEC §19) the
// way sessions_spawn makes one for the schedule's conversation: the
// schedule's agent, its sub-agent model, thinking, limits, timeout, tools
// and policy, a child session key of its own. note, if set, opens the
// announce's Notes (a late catch-up run says how late it is). The run is
// not stored: the schedule's FireDue records it with the due time.
func (m *Manager) ScheduledRun(s *store.Schedule, due time.Time, note string) (*store.Run, *store.Session, error) {
	cfg := m.config()
	cc := agent.CallContext{
		SessionKey: s.SessionKey, RootKey: s.SessionKey, AgentID: s.AgentID, Origin: s.Origin,
		Model: cfg.AgentModel(s.AgentID), Thinking: cfg.AgentThinking(s.AgentID),
	}
	run, child, _, fail := m.build(cc, SpawnParams{Task: s.Task})
	if fail != nil {
		return nil, nil, errors.New(fail.Error)
	}
	run.ScheduleID, run.ScheduleDue, run.Note = s.ID, due, note
	return run, child, nil
}

// StartScheduled puts a run that a schedule's FireDue recorded on the
// sub-agent lane.
func (m *Manager) StartScheduled(r *store.Run) {
	log := m.runLog(r) // its fields before r is live (enqueueLocked)
	m.enqueue(r)
	m.spawned.Add(1)
	m.changed(r.RootKey)
	log.Info("scheduled run queued", zap.String("scheduleId", r.ScheduleID),
		zap.Time("due", r.ScheduleDue), zap.String("model", r.Model))
}
