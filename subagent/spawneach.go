package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/lane"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/telemetry"
)

// spawnTool is sessions_spawn. It is an agent.Preparer: the separate
// sessions_spawn calls of one model response record their runs in one
// store transaction (store.SpawnEach) rather than one each, and each call
// then starts its run and answers as Spawn would have. Each call keeps
// its own run, limits, announce and result: this is not a batch (tasks,
// SPEC §23).
type spawnTool struct {
	*sessionTool
	m *Manager

	mu       sync.Mutex
	prepared map[preparedKey]preparedSpawn // until its Call
}

// preparedKey names a prepared call: the one spawn tool serves every turn
// and run (SessionTools), and call ids are the model's, unique only within
// a turn.
type preparedKey struct {
	session, turn, call string
}

func keyOf(cc *agent.CallContext) preparedKey {
	return preparedKey{session: cc.SessionKey, turn: cc.Turn, call: cc.CallID}
}

// preparedSpawn is a call's spawn done ahead by Prepare: its run recorded
// (to start in slot, when it has one), or its answer when it was refused
// (a pointer: refusals are rare, and a response's 100 prepared spawns are
// held in a slice and a map).
type preparedSpawn struct {
	run     *store.Run
	slot    *lane.Slot
	warning string
	refused *SpawnResult
}

// Call answers a prepared call with its prepared spawn, starting the run
// now as Spawn does right after recording it; any other call is made as
// ever.
func (t *spawnTool) Call(ctx context.Context, cc agent.CallContext, args json.RawMessage) (string, error) {
	t.mu.Lock()
	ps, ok := t.prepared[keyOf(&cc)]
	t.forget(keyOf(&cc))
	t.mu.Unlock()
	if !ok {
		return t.sessionTool.Call(ctx, cc, args)
	}
	if ps.run == nil {
		return agent.JSONResult("sessions_spawn", ps.refused)
	}
	return agent.JSONResult("sessions_spawn", t.m.startSpawned(ps.run, ps.slot, ps.warning))
}

// Prepare records the runs of the plain spawns among calls in one
// transaction, each checked against the limits after the ones before it,
// in order, as their Spawn calls one after the other would be. A call it
// leaves out — another action, a batch (tasks), a thread, attachments,
// arguments Spawn refuses, a call made again after a crash
// (store.SpawnCallError), or all of them when the transaction fails — is
// made by Call as ever.
func (t *spawnTool) Prepare(calls []agent.PreparedCall) {
	m := t.m
	ids := make([]preparedKey, 0, len(calls))
	runs := make([]*store.Run, 0, len(calls))
	children := make([]*store.Session, 0, len(calls))
	items := make([]preparedSpawn, 0, len(calls))
	agentID := calls[0].CC.AgentID
	for _, c := range calls {
		var p SpawnParams
		if c.CC.CallID == "" || c.CC.AgentID != agentID || decode("sessions_spawn", c.Args, &p) != nil ||
			p.Action != "" && p.Action != "spawn" || p.Tasks != nil || p.Thread || len(p.Attachments) > 0 ||
			t.has(keyOf(c.CC)) || slices.Contains(ids, keyOf(c.CC)) {
			continue
		}
		run, child, warning, fail := m.build(*c.CC, p)
		if fail != nil {
			continue
		}
		run.TraceParent = telemetry.Traceparent(c.Ctx)
		ids = append(ids, keyOf(c.CC))
		runs, children = append(runs, run), append(children, child)
		items = append(items, preparedSpawn{run: run, warning: warning})
	}
	if len(items) < 2 {
		return
	}
	for i := range items {
		items[i].slot = m.startSlot(items[i].run)
	}
	lim := m.config().SubagentLimits(agentID)
	m.markSpawning(runs...)
	errs, err := m.d.Store.SpawnEach(calls[0].Ctx, runs, children, spawnLimits(lim))
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.prepared == nil {
		t.prepared = make(map[preparedKey]preparedSpawn, len(items))
	}
	var unrecorded []*store.Run
	defer func() { m.unmarkSpawning(unrecorded...) }()
	for i, ps := range items {
		if err != nil || errs[i] != nil {
			ps.slot.Release()
			unrecorded = append(unrecorded, ps.run)
		}
		le := (*store.LimitError)(nil)
		switch {
		case err != nil:
			continue
		case errors.As(errs[i], &le):
			refused := limitReached(le)
			ps = preparedSpawn{refused: &refused}
		case errs[i] != nil: // *store.SpawnCallError: Spawn answers it with the run
			continue
		}
		t.prepared[ids[i]] = ps
	}
}

// Done starts the runs of prepared calls that were never made (a panic cut
// their turn): their record says running or queued, as a restart would
// find and resume them, and until they start their spawning entry and
// lane slot would stay taken.
func (t *spawnTool) Done(calls []agent.PreparedCall) {
	var left []preparedSpawn
	t.mu.Lock()
	for _, c := range calls {
		if ps, ok := t.prepared[keyOf(c.CC)]; ok {
			t.forget(keyOf(c.CC))
			if ps.run != nil {
				left = append(left, ps)
			}
		}
	}
	t.mu.Unlock()
	for _, ps := range left {
		t.m.runLog(ps.run).Warn("the sessions_spawn call of this run was not made (its turn was cut); starting the run it recorded")
		t.m.startSpawned(ps.run, ps.slot, ps.warning)
	}
}

// forget drops k's prepared call; the map goes with the last one, so that
// a burst of spawns does not leave it at its peak size. t.mu is held.
func (t *spawnTool) forget(k preparedKey) {
	delete(t.prepared, k)
	if len(t.prepared) == 0 {
		t.prepared = nil
	}
}

func (t *spawnTool) has(k preparedKey) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.prepared[k]
	return ok
}
