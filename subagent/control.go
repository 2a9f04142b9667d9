package subagent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/store"
)

// ErrNoMatch is returned when a target names no visible run.
var ErrNoMatch = errors.New("no subagent matches")

// ErrAmbiguous is returned when a target matches more than one run.
var ErrAmbiguous = errors.New("target matches more than one subagent")

// Runs returns the runs below sessionKey (children, grandchildren …), newest
// first, with live status and token counts filled in.
func (m *Manager) Runs(ctx context.Context, sessionKey string) ([]store.Run, error) {
	return m.runsBelow(ctx, sessionKey, 0, false)
}

// RecentRuns is Runs limited to the newest limit runs (0 = all), each
// with only what a list of runs shows set (store.RunFilter.Brief): the
// web chat's panel reads them about once a second while they change.
func (m *Manager) RecentRuns(ctx context.Context, sessionKey string, limit int) ([]store.Run, error) {
	return m.runsBelow(ctx, sessionKey, limit, true)
}

func (m *Manager) runsBelow(ctx context.Context, sessionKey string, limit int, brief bool) ([]store.Run, error) {
	var sess *store.Session
	var err error
	if ids.SessionKey(sessionKey).Kind() != ids.KindRequester {
		// A conversation on a channel is a tree's root (depth 0); only
		// a child session's depth needs reading.
		sess, err = m.d.Store.GetSession(ctx, sessionKey)
	}
	var runs []store.Run
	switch {
	case err == nil && sess != nil && sess.Depth > 0:
		runs, err = m.descendantsOf(ctx, sessionKey, brief)
		if limit > 0 && len(runs) > limit {
			runs = runs[:limit]
		}
	case err == nil || errors.Is(err, store.ErrNotFound):
		runs, err = m.d.Store.ListRuns(ctx, store.RunFilter{RootKey: sessionKey, Limit: limit, Brief: brief})
	}
	if err != nil {
		return nil, err
	}
	m.overlay(runs)
	return runs, nil
}

// descendantsOf walks the run tree below a child session.
func (m *Manager) descendantsOf(ctx context.Context, key string, brief bool) ([]store.Run, error) {
	var out []store.Run
	frontier := []string{key}
	for len(frontier) > 0 {
		next := frontier[0]
		frontier = frontier[1:]
		kids, err := m.d.Store.ListRuns(ctx, store.RunFilter{RequesterKey: next, Brief: brief})
		if err != nil {
			return nil, err
		}
		for _, k := range kids {
			out = append(out, k)
			frontier = append(frontier, k.ChildKey)
		}
	}
	sortNewestFirst(out)
	return out, nil
}

func sortNewestFirst(runs []store.Run) {
	slices.SortStableFunc(runs, func(a, b store.Run) int { return b.CreatedAt.Compare(a.CreatedAt) })
}

// Overlay replaces the stored fields of the runs live here with their
// in-memory state (status, start, note, tokens, children waited for), as
// Runs does: what the operator's console shows.
func (m *Manager) Overlay(runs []store.Run) { m.overlay(runs) }

// overlay replaces stored fields of live runs with their in-memory state.
func (m *Manager) overlay(runs []store.Run) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range runs {
		lr, ok := m.live[runs[i].ID]
		if !ok || runs[i].Status == store.StatusDone {
			// A run whose end is stored is shown as stored: its live entry
			// only waits for the run's goroutine to forget it, and its
			// announce may already show (delivered with the end's commit).
			continue
		}
		runs[i].Status = lr.run.Status
		runs[i].StartedAt = lr.run.StartedAt
		runs[i].Note = lr.run.Note
		runs[i].TokensIn, runs[i].TokensOut = lr.usage.Input, lr.usage.Output
		runs[i].WaitingFor = lr.waiting
	}
}

// Resolve finds the run a person or model means by target, among the runs
// below sessionKey: a list number ("1", "#1"), "last", a runId prefix, a
// full child session key, or a label.
func (m *Manager) Resolve(ctx context.Context, sessionKey, target string) (*store.Run, error) {
	runs, err := m.Runs(ctx, sessionKey)
	if err != nil {
		return nil, err
	}
	return pick(runs, target)
}

func pick(runs []store.Run, target string) (*store.Run, error) {
	t := strings.TrimSpace(target)
	if t == "" {
		return nil, fmt.Errorf("%w %q", ErrNoMatch, target)
	}
	if strings.EqualFold(t, "last") {
		if len(runs) == 0 {
			return nil, fmt.Errorf("%w %q", ErrNoMatch, target)
		}
		return &runs[0], nil
	}
	// A list number: "#3" always; a bare "3" when the list has a third run.
	// A bare number of four or more digits past the list is a runId prefix
	// that happens to be all digits (one 8-character prefix in 43 is); a
	// short one is a list number that does not exist.
	if n, err := strconv.Atoi(strings.TrimPrefix(t, "#")); err == nil {
		if n >= 1 && n <= len(runs) {
			return &runs[n-1], nil
		}
		if strings.HasPrefix(t, "#") || len(t) < 4 {
			return nil, fmt.Errorf("%w %q", ErrNoMatch, target)
		}
	}
	for i := range runs {
		if runs[i].ChildKey == t || runs[i].ID == t {
			return &runs[i], nil
		}
	}
	var found *store.Run
	for i := range runs {
		if strings.HasPrefix(runs[i].ID, strings.ToLower(t)) || (runs[i].Label != "" && strings.EqualFold(runs[i].Label, t)) {
			if found != nil {
				return nil, fmt.Errorf("%w: %q", ErrAmbiguous, target)
			}
			found = &runs[i]
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%w %q", ErrNoMatch, target)
	}
	return found, nil
}

// Stop stops a run and every run below it, on whichever replica they run.
// It returns how many live runs were stopped (or, on other replicas, asked
// to stop). A stopped run posts no announce.
func (m *Manager) Stop(ctx context.Context, runID string) int {
	n, stopped := m.StopLocal(ctx, runID)
	if m.d.Peers == nil {
		return n
	}
	r, err := m.d.Store.GetRun(ctx, runID)
	if err != nil {
		return n
	}
	remote, others := m.remoteBelow(ctx, r.ChildKey)
	if !stopped && r.Status != store.StatusDone && r.Owner != m.d.Replica {
		others = append(others, r.ID)
		if m.elsewhere(ctx, r) {
			remote++
		}
	}
	if len(others) > 0 {
		m.d.Peers.StopRun(ctx, runID, others)
	}
	return n + remote
}

// StopLocal stops a run and the runs below it that live on this replica;
// stopped reports whether the run itself was live here.
func (m *Manager) StopLocal(ctx context.Context, runID string) (n int, stopped bool) {
	m.mu.Lock()
	lr, ok := m.live[runID]
	var key string
	if ok {
		key = lr.run.ChildKey
	}
	m.mu.Unlock()
	if !ok {
		r, err := m.d.Store.GetRun(ctx, runID)
		if err != nil {
			return 0, false
		}
		key = r.ChildKey
	}
	n = m.StopBelowLocal(ctx, key)
	// Spawning first: enqueueSpawned moves a run from spawning to live in
	// one m.mu section, so a run not spawning now is live (or unknown).
	if m.stopSpawning(runID) || m.stopOne(runID) {
		n++
		stopped = true
	}
	return n, stopped
}

// stopSpawning marks runID, when a spawn is recording it here, to stop as
// soon as it is live (enqueueSpawned).
func (m *Manager) stopSpawning(runID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	sp := m.spawning[runID]
	if sp == nil || sp.stop {
		return false
	}
	sp.stop = true
	return true
}

// elsewhere reports whether r is live on another replica that is alive.
func (m *Manager) elsewhere(ctx context.Context, r *store.Run) bool {
	if r.Status == store.StatusDone || r.Owner == "" || r.Owner == m.d.Replica {
		return false
	}
	return m.d.Peers.Alive(ctx, r.Owner)
}

// remoteBelow counts the live runs below sessionKey that other live
// replicas run, and lists every run below it not ended yet that is not
// this replica's (a dead replica's run is stopped by whoever takes it
// over).
func (m *Manager) remoteBelow(ctx context.Context, sessionKey string) (n int, others []string) {
	runs, err := m.Runs(ctx, sessionKey)
	if err != nil {
		return 0, nil
	}
	alive := map[string]bool{}
	for i := range runs {
		r := &runs[i]
		if r.Status == store.StatusDone || r.Owner == m.d.Replica {
			continue
		}
		others = append(others, r.ID)
		if r.Owner == "" {
			continue
		}
		up, ok := alive[r.Owner]
		if !ok {
			up = m.d.Peers.Alive(ctx, r.Owner)
			alive[r.Owner] = up
		}
		if up {
			n++
		}
	}
	return n, others
}

// StopBelow stops every live run below sessionKey, at every depth, on
// whichever replica it runs, and returns how many it stopped (or asked
// another replica to stop).
func (m *Manager) StopBelow(ctx context.Context, sessionKey string) int {
	n := m.StopBelowLocal(ctx, sessionKey)
	if m.d.Peers == nil {
		return n
	}
	remote, others := m.remoteBelow(ctx, sessionKey)
	if len(others) > 0 {
		m.d.Peers.StopBelow(ctx, sessionKey, others)
	}
	return n + remote
}

// StopBelowLocal stops the live runs of this replica below sessionKey.
func (m *Manager) StopBelowLocal(ctx context.Context, sessionKey string) int {
	// One m.mu section for the walk and the marking: a run that goes live
	// meanwhile (enqueueSpawned) is then either among the live runs walked
	// or among the spawning runs marked.
	m.mu.Lock()
	byParent := make(map[string][]string)
	for id, lr := range m.live {
		byParent[lr.run.RequesterKey] = append(byParent[lr.run.RequesterKey], id)
	}
	childKey := make(map[string]string)
	for id, lr := range m.live {
		childKey[id] = lr.run.ChildKey
	}
	var ids []string
	frontier := []string{sessionKey}
	for len(frontier) > 0 {
		k := frontier[0]
		frontier = frontier[1:]
		for _, id := range byParent[k] {
			ids = append(ids, id)
			frontier = append(frontier, childKey[id])
		}
	}
	// Live runs whose parent run already ended are still below the root.
	for id, lr := range m.live {
		if lr.run.RootKey == sessionKey && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	// Runs being spawned below (recorded, not live yet) stop as soon as
	// they are live (enqueueSpawned).
	below := map[string]bool{sessionKey: true}
	for _, id := range ids {
		if k := childKey[id]; k != "" {
			below[k] = true
		}
	}
	n := m.stopSpawningLocked(below, sessionKey)
	m.mu.Unlock()
	for _, id := range ids {
		if m.stopOne(id) {
			n++
		}
	}
	return n
}

// stopOne marks a live run stopped and cancels it. A queued run ends here;
// a running one ends in its goroutine as soon as its context is cancelled.
func (m *Manager) stopOne(runID string) bool {
	m.mu.Lock()
	lr, ok := m.live[runID]
	if !ok || lr.stopped {
		m.mu.Unlock()
		return false
	}
	lr.stopped = true
	queued := lr.cancel == nil
	if !queued {
		lr.cancel()
	}
	run := *lr.run
	m.mu.Unlock()
	if queued {
		m.finish(lr, &run, store.OutcomeStopped, "", "stopped by request before it started", agent.Usage{})
	}
	m.runLog(&run).Info("sub-agent stop requested")
	return true
}

// ErrFinishing answers a message to a run that has finished its work and
// is writing its announce: steering can no longer reach it.
var ErrFinishing = errors.New("the sub-agent has finished its work and is writing its announce, so it cannot be steered now; send the message again once it is announced and it will run one more turn")

// SendResult is sessions_send's result.
type SendResult struct {
	Status string `json:"status"` // ok | accepted | timeout | error | forbidden
	Reply  string `json:"reply,omitempty"`
	Error  string `json:"error,omitempty"`
	RunID  string `json:"runId,omitempty"`
}

// Send steers a running child with message, or runs one more turn of a
// finished one, and waits up to timeout for its reply (0: do not wait).
func (m *Manager) Send(ctx context.Context, run *store.Run, message string, timeout time.Duration) SendResult {
	if strings.TrimSpace(message) == "" {
		return SendResult{Status: "error", Error: `"message" is required`}
	}
	reply := make(chan agent.SteerReply, 1)
	m.mu.Lock()
	_, live := m.live[run.ID]
	m.mu.Unlock()
	if !live && m.d.Peers != nil {
		if cur, err := m.d.Store.GetRun(ctx, run.ID); err == nil && m.elsewhere(ctx, cur) {
			return SendResult{Status: "error", RunID: run.ID, Error: fmt.Sprintf("the sub-agent is running on another replica (%s), "+
				"which steering messages do not reach; send the message again once it is announced and it will run one more turn", cur.Owner)}
		}
	}
	m.mu.Lock()
	lr, live := m.live[run.ID]
	if live && run.Status == store.StatusDone {
		// The store has the run's end (the caller read it): its announce is
		// committed and the live entry is only about to be dropped, so the
		// message runs one more turn.
		live = false
	}
	if live && !lr.stopped && lr.run.Status == store.StatusAnnouncing {
		m.mu.Unlock()
		return SendResult{Status: "error", Error: ErrFinishing.Error(), RunID: run.ID}
	}
	if live && !lr.stopped {
		select {
		case lr.steer <- agent.Steer{Text: message, Reply: reply}:
		default:
			m.mu.Unlock()
			return SendResult{Status: "error", Error: "too many steering messages are waiting; try again after the sub-agent replies", RunID: run.ID}
		}
		m.mu.Unlock()
		m.runLog(run).Info("steering message queued")
	} else {
		m.mu.Unlock()
		if live { // stopped but not yet ended
			return SendResult{Status: "error", Error: "the sub-agent is being stopped", RunID: run.ID}
		}
		m.bg.Add(1)
		go func() {
			defer m.bg.Done()
			text, err := m.oneMoreTurn(m.bgCtx, run, message, moreTurn{})
			reply <- agent.SteerReply{Text: text, Err: err}
		}()
	}
	if timeout <= 0 {
		return SendResult{Status: "accepted", RunID: run.ID}
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-reply:
		if r.Err != nil {
			return SendResult{Status: "error", Error: r.Err.Error(), RunID: run.ID}
		}
		return SendResult{Status: "ok", Reply: r.Text, RunID: run.ID}
	case <-t.C:
		return SendResult{Status: "timeout", RunID: run.ID}
	case <-ctx.Done():
		return SendResult{Status: "timeout", Error: ctx.Err().Error(), RunID: run.ID}
	}
}

// moreTurn are the options of one more turn: a turn resumed after a
// restart continues from the transcript without adding the message again;
// onText streams its reply (a bound thread's live reply, SPEC §24).
type moreTurn struct {
	resume bool
	onText func(string)
	files  []agent.File // the message's files (SPEC §18)
}

// oneMoreTurn runs one more turn of a finished child session.
func (m *Manager) oneMoreTurn(ctx context.Context, run *store.Run, message string, o moreTurn) (string, error) {
	// One turn per run at a time: two sends to a finished run would
	// otherwise run two sessions on one transcript.
	unlock := m.lockTurn(run.ID)
	defer unlock()
	if run.Model == ACPModel {
		return m.acpTurn(ctx, run, message, o.onText)
	}
	model, ok := m.d.Catalog.Lookup(run.Model)
	if !ok {
		return "", fmt.Errorf("model %s is no longer configured", run.Model)
	}
	sess, err := agent.LoadSessionFrom(ctx, m.d.Store, run.ChildKey, run.ChildSessionID, run.AgentID, run.RequesterKey,
		m.d.Store.TranscriptPath(run.AgentID, run.ChildSessionID), m.d.Clock.Now())
	if err != nil {
		return "", err
	}
	defer sess.Close()
	own := *run
	lr := &liveRun{run: &own}
	turn := m.childTurn(lr, run, model, m.runLog(run))
	turn.Steer = nil
	turn.Resume, turn.OnText = o.resume, o.onText
	if len(o.files) > 0 {
		turn.Files, turn.OpenFile = o.files, m.d.OpenFile
	}
	ctx, cancel := context.WithTimeout(agent.WithLogFields(ctx, runFields(run, 0)...), 5*time.Minute)
	defer cancel()
	m.fold(ctx, sess, run)
	res, err := sess.Run(ctx, turn, message)
	if u := res.Usage; u != (agent.Usage{}) {
		if err := m.d.Store.AddRunUsage(context.WithoutCancel(ctx), run.ID, u.Input, u.Output, u.CacheRead, u.CacheWrite); err != nil {
			m.runLog(run).Warn("could not add the usage of one more turn to the run", zap.Error(err))
		}
	}
	if err != nil {
		return "", err
	}
	m.runLog(run).Info("one more turn of a finished sub-agent", zap.Int64("tokens", res.Usage.Total()))
	return res.Text, nil
}

// History returns the child transcript's messages. A run's task reaches
// its transcript with its first answer (agent.Turn.DeferInput): until
// then the history of a run that started (running, announcing, or queued
// again after a restart cut it) is the task, from its row, as the
// transcript will have it.
func (m *Manager) History(ctx context.Context, run *store.Run) ([]agent.Message, error) {
	_, entries, err := m.d.Store.ReadTranscript(ctx, m.d.Store.TranscriptPath(run.AgentID, run.ChildSessionID))
	started := run.Status == store.StatusRunning || run.Status == store.StatusAnnouncing ||
		(run.Status == store.StatusQueued && run.Resumes > 0)
	if err != nil && !(started && errors.Is(err, store.ErrNotFound)) {
		return nil, err
	}
	msgs := agent.MessagesFromTranscript(entries)
	if len(msgs) == 0 && started {
		msgs = []agent.Message{{Role: agent.RoleUser, Text: run.Task}}
	}
	return msgs, nil
}

// TranscriptPath is where a run's transcript lives (before archiving).
func (m *Manager) TranscriptPath(run *store.Run) string {
	return m.d.Store.TranscriptPath(run.AgentID, run.ChildSessionID)
}

// SetNote sets the live note of a run (e.g. "awaiting approval K3F9",
// an ACP agent's latest update) and tells OnChange (the panel shows it).
func (m *Manager) SetNote(runID, note string) {
	m.mu.Lock()
	lr, ok := m.live[runID]
	changed, root := ok && lr.run.Note != note, ""
	if changed {
		lr.run.Note, root = note, lr.run.RootKey
	}
	m.mu.Unlock()
	if changed {
		m.changed(root)
	}
}

// wakeArchiver tells the archiver of a run whose archive deadline is at
// (zero: none), once it is committed. The archiver looks again when its
// own timer fires anyway, and it finds at then, so a deadline no earlier
// than that is left to it (unless Clock already passed that look: a
// test's clock, a suspended machine): with thousands of runs ending, each
// wake was a NextArchiveAt over every unarchived run (14 % of the
// gateway's CPU with 10,000 sub-agents in flight, docs/performance.md).
func (m *Manager) wakeArchiver(at time.Time) {
	if at.IsZero() {
		return
	}
	if next := m.archiveNext.Load(); next != 0 && at.UnixNano() >= next && m.d.Clock.Now().UnixNano() < next {
		return
	}
	select {
	case m.archiveWake <- struct{}{}:
	default:
	}
}

// archiver archives runs whose archive deadline passed; deadlines live in
// the store, so they survive restarts.
func (m *Manager) archiver() {
	defer m.bg.Done()
	for {
		wait := time.Hour
		ctx := m.bgCtx
		// Looking now: every run end wakes it until the next look is set
		// below (a deadline committed after NextArchiveAt read is then
		// compared with that look, not missed).
		m.archiveNext.Store(0)
		if err := m.archiveDue(ctx); err != nil && ctx.Err() == nil {
			m.log.Error("archive failed", zap.Error(err))
			wait = time.Minute
		}
		if next, ok, err := m.d.Store.NextArchiveAt(ctx); err == nil && ok {
			if d := next.Sub(m.d.Clock.Now()); d < wait {
				wait = max(d, 10*time.Millisecond)
			}
		}
		m.archiveNext.Store(m.d.Clock.Now().Add(wait).UnixNano())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-m.archiveWake:
		case <-t.C:
		}
		t.Stop()
	}
}

func (m *Manager) archiveDue(ctx context.Context) error {
	due, err := m.d.Store.DueArchives(ctx, m.d.Clock.Now())
	if err != nil {
		return err
	}
	for i := range due {
		r := &due[i]
		now := m.d.Clock.Now()
		newPath, err := m.d.Store.ArchiveTranscript(ctx, m.d.Store.TranscriptPath(r.AgentID, r.ChildSessionID), now)
		if err != nil {
			return fmt.Errorf("archive transcript of run %s: %w", r.ID, err)
		}
		if err := m.d.Store.MarkArchived(ctx, r.ID, now); err != nil {
			return err
		}
		m.runLog(r).Info("sub-agent session archived", zap.String("transcript", newPath))
	}
	return nil
}

// turnLock is a per-run mutex for turns after a run ended, kept while used.
type turnLock struct {
	mu    sync.Mutex
	users int
}

// lockTurn serialises the turns of one finished run and returns the unlock.
func (m *Manager) lockTurn(runID string) func() {
	m.mu.Lock()
	l := m.turnLocks[runID]
	if l == nil {
		l = &turnLock{}
		m.turnLocks[runID] = l
	}
	l.users++
	m.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		m.mu.Lock()
		if l.users--; l.users == 0 {
			delete(m.turnLocks, runID)
		}
		m.mu.Unlock()
	}
}
