package subagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/lane"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/telemetry"
)

// TaskSpec is one element of sessions_spawn's tasks (SPEC §23): a child of
// a batch. Fields left out take the call's own (agentId, model,
// outputSchema).
type TaskSpec struct {
	Task         string          `json:"task"`
	Label        string          `json:"label,omitempty"`
	AgentID      string          `json:"agentId,omitempty"`
	Model        string          `json:"model,omitempty"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
}

// taskFields are TaskSpec's JSON names, for errors.
const taskFields = "task, label, agentId, model, outputSchema"

// SpawnedRun is one run of an accepted batch.
type SpawnedRun struct {
	RunID           string `json:"runId"`
	ChildSessionKey string `json:"childSessionKey"`
	Label           string `json:"label,omitempty"`
	ModelApplied    string `json:"modelApplied,omitempty"`
	Warning         string `json:"warning,omitempty"`
}

// decodeTask reads tasks[i] strictly; an error names the field.
func decodeTask(i int, raw json.RawMessage) (TaskSpec, error) {
	var t TaskSpec
	at := fmt.Sprintf("tasks[%d]", i)
	if b := bytes.TrimSpace(raw); len(b) == 0 || b[0] != '{' {
		return t, fmt.Errorf("%s must be an object {%s}", at, taskFields)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return t, fmt.Errorf("%s.%s must be %s, not %s", at, te.Field, jsonKind(te.Type.Kind().String()), te.Value)
		}
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return t, fmt.Errorf("%s.%s is not a field of a task; give %s", at, strings.Trim(name, `"`), taskFields)
		}
		return t, fmt.Errorf("%s: %v", at, err)
	}
	if strings.TrimSpace(t.Task) == "" {
		return t, fmt.Errorf("%s.task is required: describe what that sub-agent should do", at)
	}
	return t, nil
}

// jsonKind names a Go kind as JSON does.
func jsonKind(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	default:
		return "a " + kind
	}
}

// spawnBatch is Spawn with tasks (SPEC §23): every task is checked and
// built first, then all runs are recorded in one transaction under the
// limits — all or none — and queued.
func (m *Manager) spawnBatch(ctx context.Context, cc agent.CallContext, p SpawnParams) SpawnResult {
	if cc.CallID != "" {
		if r, err := m.d.Store.RunBySpawnCall(ctx, cc.SessionKey, cc.CallID); err == nil && r.Batch != "" {
			if res, err := m.spawnedBatch(ctx, r.Batch); err == nil {
				m.runLog(r).Info("sessions_spawn call already spawned this batch; not spawning again", zap.String("callId", cc.CallID))
				return res
			}
		}
	}
	lim := m.config().SubagentLimits(cc.AgentID)
	most := batchBound(lim)
	switch {
	case strings.TrimSpace(p.Task) != "":
		return spawnError("give either task (one sub-agent) or tasks (a batch), not both")
	case len(p.Tasks) == 0:
		return spawnError("tasks is empty: give at least one {task, label?} or use task")
	case len(p.Tasks) > most.max:
		return spawnError("tasks has %d tasks; a batch may have at most %s", len(p.Tasks), most.name)
	case strings.TrimSpace(p.Label) != "":
		return spawnError("label names one sub-agent: with tasks give each its own tasks[i].label")
	case p.Thread:
		return spawnError("thread cannot be used with tasks: a batch's children report in this conversation")
	}
	batch := uuid.NewString()
	runs := make([]*store.Run, 0, len(p.Tasks))
	children := make([]*store.Session, 0, len(p.Tasks))
	spawned := make([]SpawnedRun, 0, len(p.Tasks))
	labels := map[string]int{}
	for i, raw := range p.Tasks {
		t, err := decodeTask(i, raw)
		if err != nil {
			return spawnError("%v", err)
		}
		if l := strings.TrimSpace(t.Label); l != "" {
			if j, dup := labels[l]; dup {
				return spawnError("tasks[%d].label %q is the label of tasks[%d] too: each sub-agent of a batch needs its own", i, l, j)
			}
			labels[l] = i
		}
		one := p
		one.Tasks, one.Task, one.Label = nil, t.Task, t.Label
		if t.AgentID != "" {
			one.AgentID = t.AgentID
		}
		if t.Model != "" {
			one.Model = t.Model
		}
		if len(t.OutputSchema) > 0 {
			one.OutputSchema = t.OutputSchema
		}
		run, child, warning, fail := m.build(cc, one)
		if fail != nil {
			fail.Error = fmt.Sprintf("tasks[%d]: %s", i, fail.Error)
			return *fail
		}
		run.Batch = batch
		run.TraceParent = telemetry.Traceparent(ctx)
		if announcesInChat(run) {
			// The batch's one announce waits for its children at most
			// groupTimeoutSeconds (SPEC §23), as a wake does.
			if _, g, _ := announceOf(one, cc, lim, run.TimeoutSeconds); g > 0 {
				run.GroupDeadline = run.CreatedAt.Add(time.Duration(g) * time.Second)
			}
		}
		runs, children = append(runs, run), append(children, child)
		spawned = append(spawned, SpawnedRun{RunID: run.ID, ChildSessionKey: run.ChildKey, Label: run.Label, ModelApplied: run.Model, Warning: warning})
	}
	batchDeadline(runs)
	// The runs the lane has free slots for are recorded running (startSlot).
	var slots []*lane.Slot
	for _, run := range runs {
		slot := m.startSlot(run)
		if slot == nil {
			break
		}
		slots = append(slots, slot)
	}
	m.markSpawning(runs...)
	err := m.d.Store.SpawnRuns(ctx, runs, children, spawnLimits(lim))
	if err != nil {
		for _, slot := range slots {
			slot.Release()
		}
		m.unmarkSpawning(runs...)
	}
	if le := (*store.LimitError)(nil); errors.As(err, &le) {
		if le.Limit == "maxTotalSpawns" {
			return forbidden("limit reached: %d sub-agents were already spawned for this conversation and the batch asks for %d more (maxTotalSpawns %d); none of the batch was started",
				le.Count, le.Adding, le.Max)
		}
		return forbidden("limit reached: this session already has %d running or queued sub-agents and the batch asks for %d more (maxChildrenPerSession %d); none of the batch was started — wait for results or stop some",
			le.Count, le.Adding, le.Max)
	}
	if err != nil {
		return spawnError("could not record the batch: %v", err)
	}
	for i, run := range runs {
		var slot *lane.Slot
		if i < len(slots) {
			slot = slots[i]
		}
		m.enqueueSpawned(run, slot)
		m.armGroup(run)
	}
	m.changed(runs[0].RootKey)
	m.spawned.Add(int64(len(runs)))
	m.log.Info("sub-agent batch spawned", zap.String("batch", batch), zap.Int("runs", len(runs)), zap.String("requester", cc.SessionKey),
		zap.String("announce", runs[0].Announce))
	return SpawnResult{Status: "accepted", BatchID: batch, Runs: spawned}
}

// MaxBatchTasks bounds a batch (SPEC §23) when neither
// maxChildrenPerSession nor maxTotalSpawns does (both 0, no limit).
const MaxBatchTasks = 50

// bound is the largest batch a session may spawn and how an error names
// that limit.
type bound struct {
	max  int
	name string
}

// batchBound is the limit on a batch's tasks: the smaller of
// maxChildrenPerSession and maxTotalSpawns that is set (a batch beyond it
// could never be stored), else MaxBatchTasks.
func batchBound(lim config.Limits) bound {
	b := bound{MaxBatchTasks, fmt.Sprintf("%d (maxChildrenPerSession and maxTotalSpawns are 0, no limit; a batch still has at most %d)", MaxBatchTasks, MaxBatchTasks)}
	if n := lim.MaxTotalSpawns; n > 0 {
		b = bound{n, fmt.Sprintf("maxTotalSpawns (%d)", n)}
	}
	if n := lim.MaxChildrenPerSession; n > 0 && (lim.MaxTotalSpawns == 0 || n <= lim.MaxTotalSpawns) {
		b = bound{n, fmt.Sprintf("maxChildrenPerSession (%d)", n)}
	}
	return b
}

// batchDeadline gives every run of a chat batch the batch's group
// deadline: the latest of theirs — none when one has none (a child
// without runTimeoutSeconds, and no groupTimeoutSeconds given).
func batchDeadline(runs []*store.Run) {
	var latest time.Time
	for _, r := range runs {
		if r.GroupDeadline.IsZero() || !announcesInChat(r) {
			latest = time.Time{}
			break
		}
		if r.GroupDeadline.After(latest) {
			latest = r.GroupDeadline
		}
	}
	for _, r := range runs {
		if announcesInChat(r) {
			r.GroupDeadline = latest
		}
	}
}

// spawnedBatch is the answer of a batch spawn already recorded (its call
// made again after a crash).
func (m *Manager) spawnedBatch(ctx context.Context, batch string) (SpawnResult, error) {
	runs, err := m.d.Store.ListRuns(ctx, store.RunFilter{Batch: batch})
	if err != nil {
		return SpawnResult{}, err
	}
	slices.Reverse(runs) // spawn order
	res := SpawnResult{Status: "accepted", BatchID: batch}
	for _, r := range runs {
		res.Runs = append(res.Runs, SpawnedRun{RunID: r.ID, ChildSessionKey: r.ChildKey, Label: r.Label, ModelApplied: r.Model})
	}
	return res, nil
}

// outcomeMarks are the batch announce's header marks, in its order.
var outcomeMarks = []struct{ outcome, mark string }{
	{store.OutcomeSuccess, "✅"},
	{store.OutcomeError, "❌"},
	{store.OutcomeTimeout, "⏱"},
	{store.OutcomeUnknown, "❔"},
	{store.OutcomeStopped, "⏹"},
	{stillRunning, "⏳"},
}

// batchAnnounce is the one announce of a batch spawned with announce chat
// (SPEC §23), made from its ended runs in spawn order: the header counts
// their outcomes ("Status: ✅ 3 success · ❌ 1 error"), each child's own
// Status, Task, Result and Notes follow under its label, and one Stats
// line — the batch's wall clock, summed tokens and cost — comes last. A
// child that replied ANNOUNCE_SKIP is left out; nil when nothing is left
// to post (every child skipped or stopped).
func (m *Manager) batchAnnounce(runs []store.Run) *store.OutboxItem {
	return m.batchAnnounceAt(runs, time.Time{})
}

// batchAnnounceAt is batchAnnounce at the batch's group deadline at, when
// runs still live are shown as still running (zero at: at the end of its
// last run).
func (m *Manager) batchAnnounceAt(runs []store.Run, at time.Time) *store.OutboxItem {
	var shown []store.Run
	posts := false
	for _, r := range runs {
		if r.Skipped {
			continue
		}
		shown = append(shown, r)
		posts = posts || r.Outcome != store.OutcomeStopped
	}
	if !posts {
		return nil
	}
	end := lastEnd(shown)
	created := end
	if !at.IsZero() {
		end = at
		if at.After(created) {
			created = at
		}
	}
	return &store.OutboxItem{RunID: "batch:" + shown[0].Batch, Origin: shown[0].Origin, Kind: channels.KindAnnounce,
		Text: renderBatch(shown, end), CreatedAt: created, SessionKey: shown[0].RequesterKey, AgentID: shown[0].AgentID}
}

// stillRunning is the outcome a batch announce shows for a child that had
// not ended at the batch's group deadline (SPEC §23).
const stillRunning = "running"

// renderBatch renders a batch announce at end: a run that had not ended
// then is shown still running, its result to come in the requester's
// history.
func renderBatch(runs []store.Run, end time.Time) string {
	runs = slices.Clone(runs)
	count := map[string]int{}
	for i := range runs {
		if runs[i].Status != "" && runs[i].Status != store.StatusDone {
			runs[i].Outcome = stillRunning
			runs[i].Result = "(still running when groupTimeoutSeconds passed; its result reaches the conversation's history when it ends)"
		}
		count[runs[i].Outcome]++
	}
	head := outcomeCounts(count)
	var b strings.Builder
	b.WriteString("Status: " + strings.Join(head, " · ") + "\n")
	var in, out int64
	var cost float64
	priced := false
	start := time.Time{}
	for i, r := range runs {
		fmt.Fprintf(&b, "\n— %d/%d · %s —\n", i+1, len(runs), TaskTitle(r.Label, r.Task))
		fmt.Fprintf(&b, "Status: %s\nTask: %s\n\nResult:\n%s\n\nNotes:\n%s\n", r.Outcome, Truncate(strings.Join(strings.Fields(r.Task), " "), 72),
			orDefault(r.Result, "(not available)"), orDefault(r.Note, "(none)"))
		in, out = in+r.TokensIn, out+r.TokensOut
		if r.CostUSD >= 0 {
			cost, priced = cost+r.CostUSD, true
		}
		s := r.StartedAt
		if s.IsZero() {
			s = r.CreatedAt
		}
		if start.IsZero() || s.Before(start) {
			start = s
		}
	}
	stats := []string{
		fmt.Sprintf("runtime %s (batch of %d)", FormatRuntime(end.Sub(start)), len(runs)),
		fmt.Sprintf("tokens %s (in %s / out %s)", FormatTokens(in+out), FormatTokens(in), FormatTokens(out)),
	}
	if priced {
		stats = append(stats, "est "+FormatCost(cost))
	}
	stats = append(stats, "batch "+shortID(runs[0].Batch))
	b.WriteString("\nStats: " + strings.Join(stats, " • "))
	return b.String()
}

// lastEnd is when the last of runs ended.
func lastEnd(runs []store.Run) time.Time {
	var t time.Time
	for _, r := range runs {
		if r.EndedAt.After(t) {
			t = r.EndedAt
		}
	}
	return t
}

// BatchSummary is how far one batch is (SPEC §23), for /subagents list
// and the web chat's panel.
type BatchSummary struct {
	Batch    string // store.Run.Batch
	ID       string // its first 8 characters
	N        int    // its number in the list, from 1
	Total    int    // its runs in the list
	Ended    int
	Outcomes []string // "✅ 1 success", … in the announce's order
	Announce string
}

// Batches summarises the batches of runs, in the order their first run
// appears there.
func Batches(runs []store.Run) []BatchSummary {
	var out []BatchSummary
	at := map[string]int{}
	count := map[string]map[string]int{}
	for i := range runs {
		r := &runs[i]
		if r.Batch == "" {
			continue
		}
		j, ok := at[r.Batch]
		if !ok {
			j = len(out)
			at[r.Batch] = j
			count[r.Batch] = map[string]int{}
			out = append(out, BatchSummary{Batch: r.Batch, ID: shortID(r.Batch), N: j + 1, Announce: r.Announce})
		}
		out[j].Total++
		if r.Status == store.StatusDone {
			out[j].Ended++
			count[r.Batch][r.Outcome]++
		}
	}
	for b, j := range at {
		out[j].Outcomes = outcomeCounts(count[b])
	}
	return out
}

// outcomeCounts renders counts of outcomes in the announce's order:
// ["✅ 3 success", "❌ 1 error"].
func outcomeCounts(count map[string]int) []string {
	var out []string
	for _, om := range outcomeMarks {
		if n := count[om.outcome]; n > 0 {
			out = append(out, fmt.Sprintf("%s %d %s", om.mark, n, om.outcome))
		}
	}
	return out
}

// BatchMark is how /subagents list marks a run of batch n: "📦2 ".
func BatchMark(n int) string { return fmt.Sprintf("📦%d ", n) }

// String is the batch's line in /subagents list: "📦1 batch 1a2b3c4d: 2
// of 4 ended · ✅ 1 success · ❌ 1 error · announce chat".
func (b BatchSummary) String() string {
	parts := append([]string{fmt.Sprintf("%sbatch %s: %d of %d ended", BatchMark(b.N), b.ID, b.Ended, b.Total)}, b.Outcomes...)
	return strings.Join(append(parts, "announce "+b.Announce), " · ")
}
