package subagent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/acp"
	"github.com/heraldhq/herald/agent/tools"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/spend"
	"github.com/heraldhq/herald/store"
)

// ACPModel is the model of a run of an ACP agent (SPEC §26): it brings its
// own, so no Herald model is resolved, priced or called for it.
const ACPModel = "acp"

// acpSessionType is the transcript line that records a run's ACP session
// (so a later prompt, or a restart, can load it).
const acpSessionType = "acp_session"

// acpRunner runs a child as an external coding agent over ACP.
type acpRunner struct{ m *Manager }

var _ Runner = acpRunner{}

func (r acpRunner) Run(ctx context.Context, rc *RunCtx) Outcome {
	run := &rc.Run
	runCtx := ctx
	if run.TimeoutSeconds > 0 {
		var c context.CancelFunc
		runCtx, c = context.WithTimeout(ctx, max(time.Duration(run.TimeoutSeconds)*time.Second-run.Ran, 0))
		defer c()
	}
	entries, err := r.m.transcript(ctx, run)
	if err != nil {
		return Outcome{Status: store.OutcomeError, Note: err.Error()}
	}
	input := run.Task
	if run.Resumes > 0 {
		// The tokens and cost it reported before the stop are the run's
		// so far.
		usd, n := acpCostIn(entries)
		r.m.mu.Lock()
		rc.lr.usage = usageFromTranscript(entries)
		rc.lr.cost, rc.lr.calls, rc.lr.priced = usd, n, n > 0
		r.m.mu.Unlock()
		if _, ok := acpSessionIn(entries); ok {
			// The gateway stopped during this run after its agent had its
			// task; resume (manager) let it go on only because the agent
			// can load its session: it is asked to go on (SPEC §26, §25).
			input = acpResumePrompt
		}
	}
	res, priced, err := r.m.runACP(runCtx, run, input, entries, rc.Steer, func(u acp.Usage, usd float64, priced bool) {
		if u.HasTokens {
			rc.AddUsage(u.Tokens)
		}
		r.m.addCall(rc.lr, usd, priced)
	}, rc)
	return r.outcome(runCtx, rc, res, priced, err)
}

// acpResumePrompt is the prompt of a run resumed after a restart.
const acpResumePrompt = "The gateway that runs you restarted while you worked on the task above. Go on where you left off and finish with your answer."

// transcript reads a run's transcript lines, once per job: the session
// to load, the usage so far and the child's history all come from them
// (nil for a run that has none yet).
func (m *Manager) transcript(ctx context.Context, run *store.Run) ([]store.TranscriptEntry, error) {
	_, entries, err := m.d.Store.ReadTranscript(ctx, m.d.Store.TranscriptPath(run.AgentID, run.ChildSessionID))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("session %s: %w: %w", run.ChildKey, agent.ErrHistory, err)
	}
	return entries, nil
}

// outcome maps how an ACP job ended to the run's outcome (priced: its
// agent has a runtime.cost).
func (r acpRunner) outcome(runCtx context.Context, rc *RunCtx, res acp.Result, priced bool, err error) Outcome {
	run := &rc.Run
	notes := usageNote(res, priced)
	switch {
	case rc.Stopped():
		return Outcome{Status: store.OutcomeStopped, Result: res.Text, Note: "stopped by request"}
	case rc.ShuttingDown():
		return Outcome{}
	case err != nil:
		return Outcome{Status: store.OutcomeError, Note: err.Error()}
	case run.Resumes > 0 && errors.Is(res.Err, acp.ErrLoad):
		// Resumed after a stop, but the agent has lost the session it
		// worked in (it may have done part of the task): not an error of
		// the task, an unknown outcome (SPEC §25, §26).
		return Outcome{Status: store.OutcomeUnknown, Note: unknownNote + " Its ACP agent could not load its session when started again (" +
			res.Err.Error() + "), so it was not resumed."}
	case errors.Is(res.Err, spend.ErrBudget):
		// Over budget before a prompt: none was sent (SPEC §20).
		return Outcome{Status: store.OutcomeError, Result: res.Text, Note: budgetLine(res.Err), BudgetStopped: true}
	case errors.Is(res.Err, context.DeadlineExceeded) || (runCtx.Err() != nil && res.Err != nil && errors.Is(res.Err, runCtx.Err())):
		return Outcome{Status: store.OutcomeTimeout, Result: res.Text,
			Note: fmt.Sprintf("Run timed out after %ds; the agent was sent session/cancel and ended.", run.TimeoutSeconds) + notes}
	case res.Err != nil:
		return Outcome{Status: store.OutcomeError, Result: res.Text, Note: res.Err.Error() + notes}
	}
	switch res.StopReason {
	case "end_turn":
		return Outcome{Status: store.OutcomeSuccess, Result: res.Text, Note: strings.TrimPrefix(notes, "\n")}
	case "cancelled":
		return Outcome{Status: store.OutcomeStopped, Result: res.Text, Note: "the agent cancelled its prompt"}
	}
	return Outcome{Status: store.OutcomeError, Result: res.Text,
		Note: fmt.Sprintf("The agent stopped with %q instead of ending its turn.", res.StopReason) + notes}
}

// usageNote is the Notes of what an agent did not report of its usage
// and cost ("" when its spend is known), each line after a newline;
// priced: its runtime.cost prices its tokens.
func usageNote(res acp.Result, priced bool) string {
	var b strings.Builder
	if !res.Reported {
		b.WriteString("\nThe agent reported no token usage.")
	}
	switch {
	case res.Costed:
	case res.Currency != "":
		fmt.Fprintf(&b, "\nThe agent reported its cost in %s, which the budgets (USD) do not count", res.Currency)
		if priced && res.Reported {
			b.WriteString("; its tokens are priced by its runtime.cost.")
		} else {
			b.WriteString("; its spend counts $0.")
		}
	case res.Reported && !priced:
		b.WriteString("\nThe agent reported tokens but no cost, and its runtime.cost is not set: its spend counts $0 against the budgets.")
	}
	return b.String()
}

// acpSpendModel is the model an ACP agent's spend is counted at (the
// ledger's and herald_spend_usd_total's model).
func acpSpendModel(agentID string) string { return ACPModel + ":" + agentID }

// acpCostType is the transcript line of the USD one prompt of an ACP
// agent cost (so a resumed run knows its cost so far).
const acpCostType = "acp_cost"

type acpCostLine struct {
	USD float64 `json:"usd"`
	// Total is the session's running cost total the agent reported, as
	// counted up to this line (absent: it reported none).
	Total *float64 `json:"total,omitempty"`
}

// acpCostTotalIn is the running cost total counted up to in the
// transcript's last ACP session (acp.Job.CostTotal of a job that loads
// it): the last total an acp_cost line records after that session's
// acp_session line, 0 when none does.
func acpCostTotalIn(entries []store.TranscriptEntry) float64 {
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Type == acpSessionType {
			return 0
		}
		var l acpCostLine
		if entries[i].Type == acpCostType && json.Unmarshal([]byte(entries[i].Content), &l) == nil && l.Total != nil {
			return *l.Total
		}
	}
	return 0
}

// acpCostIn sums the costs a transcript records (n: how many prompts).
func acpCostIn(entries []store.TranscriptEntry) (usd float64, n int) {
	for _, e := range entries {
		var l acpCostLine
		if e.Type == acpCostType && json.Unmarshal([]byte(e.Content), &l) == nil {
			usd += l.USD
			n++
		}
	}
	return usd, n
}

// runACP runs one job of run's ACP agent with input as its first prompt:
// in the requester conversation's workspace, writing the child's
// transcript (entries: its lines so far). Budgets are checked before the
// agent starts and before each prompt; what each prompt reported is
// counted in the spend ledger at what it cost (the cost the agent
// reported, else its tokens at runtime.cost, else $0) and told to count.
// priced: the agent has a runtime.cost. err is set when the job could
// not be set up.
//
// live, if set, shows the agent's message text and tool calls as they
// come (SPEC §26, §16).
func (m *Manager) runACP(ctx context.Context, run *store.Run, input string, entries []store.TranscriptEntry, steer <-chan agent.Steer,
	count func(u acp.Usage, usd float64, priced bool), live liveShow) (res acp.Result, priced bool, err error) {
	cfg := m.config()
	rt, ok := cfg.ACP(run.AgentID)
	if !ok {
		return acp.Result{}, false, fmt.Errorf("agent %s is no longer an ACP agent (agents.list[].runtime)", run.AgentID)
	}
	path := m.d.Store.TranscriptPath(run.AgentID, run.ChildSessionID)
	sess, err := agent.OpenSessionFrom(ctx, m.d.Store, entries, run.ChildKey, run.ChildSessionID, run.AgentID, run.RequesterKey, path, run.StartedAt)
	if err != nil {
		return acp.Result{}, false, err
	}
	defer sess.Close()
	loadID, _ := acpSessionIn(entries)
	ws := m.conversationWorkspace(cfg, run.RootKey, run.AgentID)
	log := m.runLog(run)
	sc := spend.Call{Conversation: run.RootKey, AgentID: run.AgentID, RunID: run.ID, Label: TaskTitle(run.Label, run.Task)}
	price := &agent.Model{Ref: acpSpendModel(run.AgentID), Cost: rt.Cost}
	onUsage := func(u acp.Usage) {
		usd, priced := u.USD, u.HasCost
		if !priced && u.HasTokens {
			usd, priced = price.EstimateCost(u.Tokens)
		}
		m.d.Spend.Record(ctx, sc, price.Ref, usd, u.Tokens)
		if usd > 0 || u.HasCost {
			l := acpCostLine{USD: usd}
			if u.HasCost {
				l.Total = &u.Total // a later session/load counts from here
			}
			b, _ := json.Marshal(l)
			e := store.TranscriptEntry{Type: acpCostType, Content: string(b), Timestamp: m.d.Clock.Now().UTC()}
			if err := sess.Transcript.Append(context.WithoutCancel(ctx), e); err != nil {
				log.Warn("could not record the cost of an ACP prompt in its transcript", zap.Error(err))
			}
		}
		count(u, usd, priced)
	}
	spec := acpSpec(cfg, run.AgentID, rt, ws, log)
	// Its HOME outlives the process: agents keep their sessions there
	// (Claude Code under ~/.claude), and a private /tmp would lose them,
	// so session/load after a restart or for /subagents send would find
	// nothing. It is the ACP agent's own folder for the conversation.
	aws := m.d.Workspace(cfg, run.AgentID)
	if home := tools.ConversationWorkspace(aws, run.RootKey); home != "" {
		if err := tools.EnsureWorkspace(aws, home); err != nil {
			log.Warn("could not create the ACP agent's home; it gets a private /tmp, so its sessions will not outlive it", zap.Error(err))
		} else {
			spec.Home = home
		}
	}
	if live == nil {
		live = (*liveView)(nil)
	}
	job := acp.Job{
		Spec:    spec,
		Session: sess, Task: input, Steer: steer, Authorize: m.d.Authorize,
		Call: agent.CallContext{SessionKey: run.ChildKey, SessionID: run.ChildSessionID, RootKey: run.RootKey, AgentID: run.AgentID,
			RunID: run.ID, Depth: run.Depth, Workspace: ws, AgentWorkspace: aws, Origin: run.Origin},
		OnActivity: func(line string) {
			m.SetNote(run.ID, line)
			if strings.HasPrefix(line, acp.ToolActivity) {
				live.showActivity(line)
			}
		},
		OnText: func(text string) {
			live.showActivity("") // it writes again: its last tool call is over
			live.showText(text)
		},
		OnUsage: onUsage, Check: func() error { return m.d.Spend.Check(sc) }, Clock: m.d.Clock, LoadSession: loadID,
		CheckCost: func(usd float64) error { return m.d.Spend.CheckPending(sc, usd) },
		CostTotal: acpCostTotalIn(entries),
		OnSession: func(id string, loadable bool) {
			b, _ := json.Marshal(acpSessionLine{ID: id, Load: loadable})
			e := store.TranscriptEntry{Type: acpSessionType, Content: string(b), Timestamp: m.d.Clock.Now().UTC()}
			if err := sess.Transcript.Append(context.WithoutCancel(ctx), e); err != nil {
				log.Warn("could not record the ACP session id", zap.Error(err))
			}
		},
	}
	res = acp.Run(ctx, job)
	m.SetNote(run.ID, "")
	return res, rt.Cost != nil, nil
}

type acpSessionLine struct {
	ID   string `json:"sessionId"`
	Load bool   `json:"loadSession"`
}

// acpSessionIn returns the last ACP session of a transcript if its agent
// can load it (id), and whether the transcript records one at all
// (started: the agent had a session, so it may have begun the task).
func acpSessionIn(entries []store.TranscriptEntry) (id string, started bool) {
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Type != acpSessionType {
			continue
		}
		var l acpSessionLine
		if json.Unmarshal([]byte(entries[i].Content), &l) == nil && l.Load {
			return l.ID, true
		}
		return "", true
	}
	return "", false
}

// acpSpec is the process of ACP agent id under cfg, working in ws.
func acpSpec(cfg *config.Config, id string, rt config.Runtime, ws string, log *zap.Logger) acp.Spec {
	env := make([]string, 0, len(rt.Env))
	keys := make([]string, 0, len(rt.Env))
	for k := range rt.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+rt.Env[k].Value())
	}
	ro := make([]string, 0, len(rt.ReadPaths))
	for _, p := range rt.ReadPaths {
		ro = append(ro, config.ExpandHome(p))
	}
	return acp.Spec{Name: id, Command: rt.Command, Args: rt.Args, Env: env, Network: rt.Network, ReadPaths: ro,
		Workspace: ws, Sandbox: tools.ExecSandbox(cfg.Tools.Exec), Logger: log}
}

// ACPSpec is the process of ACP agent id as a run would start it, working
// in a scratch folder ws (herald doctor).
func ACPSpec(cfg *config.Config, id, ws string, log *zap.Logger) (acp.Spec, bool) {
	rt, ok := cfg.ACP(id)
	if !ok {
		return acp.Spec{}, false
	}
	return acpSpec(cfg, id, rt, ws, log), true
}

// acpTurn runs one more prompt of a finished ACP run (/subagents send, a
// message in its bound thread): its agent is started again and loads the
// run's session when it can. onText, if set, streams its answer.
func (m *Manager) acpTurn(ctx context.Context, run *store.Run, message string, onText func(string)) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	r := *run
	r.StartedAt = m.d.Clock.Now()
	entries, err := m.transcript(ctx, run)
	if err != nil {
		return "", err
	}
	res, _, err := m.runACP(ctx, &r, message, entries, nil, func(u acp.Usage, _ float64, _ bool) {
		if !u.HasTokens {
			return
		}
		t := u.Tokens
		if err := m.d.Store.AddRunUsage(context.WithoutCancel(ctx), run.ID, t.Input, t.Output, t.CacheRead, t.CacheWrite); err != nil {
			m.runLog(run).Warn("could not add the usage of one more prompt to the run", zap.Error(err))
		}
	}, textView(onText))
	if err != nil {
		return "", err
	}
	if res.Err != nil {
		return res.Text, res.Err
	}
	return res.Text, nil
}

// delegateACP runs ACP agent agentID on task for delegate (SPEC §26): in a
// delegate session of its own, in the caller's conversation workspace, its
// permission requests decided like a run's, its budget checked and its
// spend counted like a run's; the caller waits for its final message.
func (m *Manager) delegateACP(ctx context.Context, cc agent.CallContext, agentID, task string) DelegateResult {
	var res DelegateResult
	res.Status = "error"
	id := uuid.NewString()
	key := string(ids.NewDelegate(agentID))
	now := m.d.Clock.Now()
	root := cmp.Or(cc.RootKey, cc.SessionKey)
	if _, err := m.d.Store.EnsureSession(ctx, &store.Session{Key: key, ID: id, AgentID: agentID, Kind: store.KindDelegate,
		ParentKey: cc.SessionKey, RootKey: root, Depth: cc.Depth + 1, Model: ACPModel, Origin: cc.Origin,
		TranscriptPath: m.d.Store.TranscriptPath(agentID, id), CreatedAt: now, UpdatedAt: now}); err != nil {
		res.Error = err.Error()
		return res
	}
	run := &store.Run{ID: cmp.Or(cc.RunID, "delegate:"+id), AgentID: agentID, Model: ACPModel, ChildKey: key, ChildSessionID: id,
		RootKey: root, RequesterKey: cc.SessionKey, Depth: cc.Depth + 1, Origin: cc.Origin, Task: task, Label: "delegate: " + task,
		StartedAt: now}
	out, priced, err := m.runACP(ctx, run, task, nil, nil, func(acp.Usage, float64, bool) {}, nil)
	res.Tokens.Input, res.Tokens.Output, res.Tokens.Total = out.Usage.Input, out.Usage.Output, out.Usage.Total()
	switch {
	case err != nil:
		res.Error = err.Error()
	case out.Err != nil:
		res.Result, res.Error = out.Text, budgetLine(out.Err)
	case out.StopReason != "end_turn":
		res.Result, res.Error = out.Text, fmt.Sprintf("the agent stopped with %q instead of ending its turn", out.StopReason)
	default:
		res.Status, res.Result = "ok", out.Text
		if n := strings.TrimSpace(usageNote(out, priced)); n != "" {
			res.Result += "\n\n(" + n + ")" // what its spend is not known of
		}
	}
	return res
}
