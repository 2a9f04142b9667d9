package subagent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/store"
)

// announceOf checks sessions_spawn's announce and groupTimeoutSeconds
// (SPEC §23): the announce mode (default chat for a top-level caller,
// parent deeper down) and the group timeout in seconds (0 = none) of a
// child whose runTimeoutSeconds is timeout.
func announceOf(p SpawnParams, cc agent.CallContext, lim config.Limits, timeout int) (string, int, *SpawnResult) {
	announce := p.Announce
	switch announce {
	case "":
		announce = store.AnnounceChat
		if cc.Depth >= 1 {
			announce = store.AnnounceParent
		}
	case store.AnnounceChat, store.AnnounceParent, store.AnnounceSilent:
	default:
		return "", 0, spawnErrorP(`announce must be "chat", "parent" or "silent", not %q`, announce)
	}
	group := lim.GroupTimeoutSeconds
	if p.GroupTimeoutSeconds != nil {
		if *p.GroupTimeoutSeconds < 0 {
			return "", 0, spawnErrorP("groupTimeoutSeconds must be 0 or more, not %d", *p.GroupTimeoutSeconds)
		}
		if *p.GroupTimeoutSeconds > 0 {
			group = *p.GroupTimeoutSeconds
		}
	}
	if group == 0 {
		group = timeout
	}
	return announce, group, nil
}

// wakeOf is the wake a run's end adds for its top-level requester when it
// is the last live run of its spawn group (SPEC §23); nil when the run
// does not wake anyone: announce chat or silent, stopped by a person, or
// spawned by a sub-agent run (that run waits for it in its own loop).
func (m *Manager) wakeOf(r *store.Run, outcome, text string) *store.Intake {
	if r.Announce != store.AnnounceParent || outcome == store.OutcomeStopped || r.Depth != 1 || r.ScheduleID != "" {
		return nil
	}
	return &store.Intake{SessionKey: r.RequesterKey, AgentID: ids.SessionKey(r.RequesterKey).AgentID(), Origin: m.requesterOrigin(r),
		Text: text, PlatformID: "wake:" + r.SpawnGroup, SessionID: r.RequesterSessionID, ClaimedBy: m.d.Replica,
		CreatedAt: r.EndedAt, TraceParent: r.TraceParent, Kind: store.IntakeWake}
}

// handWake hands a wake this replica claimed to the gateway's main lane; a
// wake left unclaimed follows its session's owed turn (CompleteIntake).
func (m *Manager) handWake(w *store.Intake) {
	if w == nil || w.ID == 0 || w.ClaimedBy != m.d.Replica || m.d.Wake == nil {
		return
	}
	m.d.Wake(*w)
}

// armGroup sets the timer that, at the deadline of r's group, wakes the
// requester of its spawn group with the results so far, or posts the
// announce of its chat batch, should a child of it still run then
// (groupTimeoutSeconds, SPEC §23). The deadline is stored with the runs
// and armed again when a restart adopts them: no poller.
func (m *Manager) armGroup(r *store.Run) {
	if r.GroupDeadline.IsZero() {
		return
	}
	var group string
	var fire func(context.Context, *store.Run)
	switch {
	case r.Announce == store.AnnounceParent && r.Depth == 1:
		group, fire = r.SpawnGroup, m.groupTimedOut
	case r.Batch != "" && announcesInChat(r):
		group, fire = "batch:"+r.Batch, m.batchTimedOut
	default:
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.groupTimers == nil || m.groupTimers[group] != nil && !m.groupDeadline[group].Before(r.GroupDeadline) {
		return // stopped, or a later deadline of the group is set
	}
	if t := m.groupTimers[group]; t != nil && t.Stop() {
		m.bg.Done()
	}
	run := *r
	m.bg.Add(1)
	m.groupDeadline[group] = r.GroupDeadline
	var t *time.Timer
	t = time.AfterFunc(max(r.GroupDeadline.Sub(m.d.Clock.Now()), 0), func() {
		defer m.bg.Done()
		m.mu.Lock()
		if m.groupTimers[group] == t { // not replaced or disarmed meanwhile
			delete(m.groupTimers, group)
			delete(m.groupDeadline, group)
		}
		m.mu.Unlock()
		fire(m.bgCtx, &run)
	})
	m.groupTimers[group] = t
}

// groupEnded stops and forgets the group timer that the stored end of r
// left nothing to do: r was the last live run of its chat batch (its
// announce written, or none due), or its end added the wake of its
// spawn group. Other timers stay until they fire; either way the map
// holds no timer of a group that ended or timed out.
func (m *Manager) groupEnded(r *store.Run, batchEnded bool, wake *store.Intake) {
	switch {
	case batchEnded && r.Batch != "":
		m.disarmGroup("batch:" + r.Batch)
	case wake != nil && wake.ID != 0 && r.SpawnGroup != "":
		m.disarmGroup(r.SpawnGroup)
	}
}

// disarmGroup stops the timer of group and forgets it. A timer already
// firing finds the group gone and fires once more, finding nothing to do.
func (m *Manager) disarmGroup(group string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.groupTimers[group]
	if t == nil {
		return
	}
	if t.Stop() {
		m.bg.Done()
	}
	delete(m.groupTimers, group)
	delete(m.groupDeadline, group)
}

// watchBatchEnd makes end report, once it is stored, whether its run was
// the last live run of its batch: Store.EndRun calls BatchEnd.Render in
// the end's transaction only when no other run of the batch is live.
func watchBatchEnd(end *store.RunEnd) *bool {
	last := new(bool)
	if end.Batch != nil && end.Batch.Render != nil {
		render := end.Batch.Render
		end.Batch.Render = func(runs []store.Run) *store.OutboxItem {
			*last = true
			return render(runs)
		}
	}
	return last
}

// batchTimedOut posts the announce of r's chat batch at its group
// deadline when children of it still run: the ended ones with their
// results, the others shown as still running. Their later ends post no
// second announce (the batch's is stored); their results still reach the
// requester's history.
func (m *Manager) batchTimedOut(ctx context.Context, r *store.Run) {
	if ctx.Err() != nil {
		return
	}
	log := m.runLog(r)
	item, err := m.d.Store.AnnounceBatch(ctx, r.Batch, func(runs []store.Run) *store.OutboxItem {
		now, live := m.d.Clock.Now(), 0
		for i := range runs {
			if runs[i].Status != store.StatusDone {
				if runs[i].GroupDeadline.After(now) {
					return nil // not due yet
				}
				live++
			}
		}
		if live == 0 {
			return nil // the batch ended: its last end announced it
		}
		item := m.batchAnnounceAt(runs, now)
		if item != nil {
			item.TraceParent = r.TraceParent
		}
		return item
	})
	if err != nil {
		log.Warn("could not announce a batch at its group deadline; it is announced when its last child ends", zap.Error(err))
		return
	}
	if item != nil {
		log.Info("batch group timed out; announced with its children still running", zap.String("batch", r.Batch))
		m.d.Notify()
	}
}

// stopGroupTimers stops the group timers not fired yet (Shutdown); the
// groups' children still wake their requester when they end.
func (m *Manager) stopGroupTimers() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for g, t := range m.groupTimers {
		if t.Stop() {
			m.bg.Done()
		}
		delete(m.groupTimers, g)
	}
	m.groupTimers, m.groupDeadline = nil, nil
}

// groupTimedOut wakes the requester of r's group when children of it
// still run at its deadline; the wake's input names them, and their
// results reach the history when they end.
func (m *Manager) groupTimedOut(ctx context.Context, r *store.Run) {
	if ctx.Err() != nil {
		return
	}
	log := m.runLog(r)
	live, err := m.d.Store.ListRuns(ctx, store.RunFilter{SpawnGroup: r.SpawnGroup,
		Statuses: []string{store.StatusQueued, store.StatusRunning, store.StatusAnnouncing}})
	if err != nil {
		log.Warn("could not check a spawn group at its deadline; its children still wake it when they end", zap.Error(err))
		return
	}
	now := m.d.Clock.Now()
	for _, c := range live {
		if c.GroupDeadline.After(now) {
			return // a later child of the group set a later deadline
		}
	}
	if len(live) == 0 {
		return // the group ended: its last child woke the requester
	}
	w := m.wakeOf(r, store.OutcomeSuccess, timeoutInput(live, "; the others reach this conversation when they end."))
	w.CreatedAt = now
	added, err := m.d.Store.AddIntake(ctx, w)
	if err != nil {
		log.Warn("could not wake the requester at its group's deadline; its children still wake it when they end", zap.Error(err))
		return
	}
	if added {
		log.Info("spawn group timed out; requester woken", zap.String("group", r.SpawnGroup), zap.Int("running", len(live)))
		m.handWake(w)
	}
}

// WakePrefix begins the input of a wake at a group's deadline.
const WakePrefix = "[sub-agent wake]"

// timeoutInput is the input of a wake at a group's deadline: which of
// the group's children (live) still run, then tail.
func timeoutInput(live []store.Run, tail string) string {
	labels := make([]string, len(live))
	for i := range live {
		labels[i] = TaskTitle(live[i].Label, live[i].Task)
	}
	slices.Sort(labels)
	return fmt.Sprintf("%s groupTimeoutSeconds passed while %d of your sub-agents still run (%s); the results so far are above%s",
		WakePrefix, len(labels), strings.Join(labels, ", "), tail)
}

// announcesInChat reports whether r's end posts the §6 announce (announce
// chat, also for runs from before announce existed).
func announcesInChat(r *store.Run) bool {
	return r.Announce == "" || r.Announce == store.AnnounceChat
}

// resultText is the text of a result row ("" for none).
func resultText(res *store.Result) string {
	if res == nil {
		return ""
	}
	return res.Text
}

// runEnded tells r's requester, when it is a run live here waiting for
// its children, that one ended.
func (m *Manager) runEnded(r *store.Run) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.live[m.liveKeys[r.RequesterKey]]; ok && p.kidEnded != nil {
		close(p.kidEnded)
		p.kidEnded = make(chan struct{})
	}
}

// kidEndedChan is closed at the next end of a child of lr's run.
func (m *Manager) kidEndedChan(lr *liveRun) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if lr.kidEnded == nil {
		lr.kidEnded = make(chan struct{})
	}
	return lr.kidEnded
}

// childRecheck is how often a run waiting for its children looks at the
// store even when no run ended in this process (a child adopted by
// another replica after its own died).
const childRecheck = 30 * time.Second

// awaitChildren is a sub-agent run's wait for the children it spawned with
// announce "parent" (SPEC §23): the run does not end, and does not run its
// announce step, while one of them runs. It returns the input of the run's
// next turn — the last of their results, the earlier ones folded into
// sess before it — or "" when no such child's result is waiting to be
// taken in. At the children's group deadline it stops waiting and the
// input says which still run. A ctx that ends (the run's own timeout, a
// stop) ends the wait with its error.
func (m *Manager) awaitChildren(ctx context.Context, rc *RunCtx, sess *agent.Session) (string, error) {
	run := &rc.Run
	if !m.mayHaveChildren(run.ID) {
		return "", nil
	}
	defer m.setWaiting(rc, 0)
	timedOut := ""
	var parentRuns map[string]bool
	for {
		ended := m.kidEndedChan(rc.lr)
		kids, err := m.d.Store.ListRuns(ctx, store.RunFilter{RequesterKey: run.ChildKey})
		if err != nil {
			return "", err
		}
		parentRuns = map[string]bool{}
		var live []store.Run
		var deadline time.Time
		for _, k := range kids {
			if k.Announce != store.AnnounceParent {
				continue
			}
			parentRuns[k.ID] = true
			if k.Status != store.StatusDone {
				live = append(live, k)
				if k.GroupDeadline.After(deadline) {
					deadline = k.GroupDeadline
				}
			}
		}
		if len(live) == 0 {
			break
		}
		m.setWaiting(rc, len(live))
		wait := childRecheck
		if !deadline.IsZero() {
			wait = min(wait, deadline.Sub(m.d.Clock.Now()))
		}
		if !deadline.IsZero() && wait <= 0 {
			timedOut = timeoutInput(live, ".")
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ended:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		}
		t.Stop()
	}
	if len(parentRuns) == 0 {
		return "", nil // no child reports to this run: nothing to fold in
	}
	pending, err := m.d.Store.PendingResults(ctx, run.ChildKey, run.ChildSessionID)
	if err != nil {
		return "", err
	}
	input := timedOut
	for _, p := range pending {
		if parentRuns[p.RunID] && timedOut == "" {
			input = p.Text // the last one is the turn's input
		}
	}
	if input == "" {
		return "", nil
	}
	n, err := Fold(ctx, m.d.Store, sess, store.Fold{SessionKey: run.ChildKey, SessionID: run.ChildSessionID,
		By: "run:" + run.ID, At: m.d.Clock.Now()}, m.d.Clock, input)
	if err != nil {
		return "", err
	}
	rc.Log().Info("children's results taken in; the run goes on", zap.Int("results", n+1))
	return input, nil
}

// setWaiting records how many children the run waits for (/subagents
// list, session_status).
func (m *Manager) setWaiting(rc *RunCtx, n int) {
	m.mu.Lock()
	changed := rc.lr.waiting != n
	rc.lr.waiting = n
	m.mu.Unlock()
	if changed {
		m.changed(rc.Run.RootKey)
	}
}
