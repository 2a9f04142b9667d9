package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/acp"
	"github.com/heraldhq/herald/agent/tools"
	"github.com/heraldhq/herald/config"
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
	input := run.Task
	if run.Resumes > 0 {
		entries := r.m.transcript(ctx, run)
		// The tokens it reported before the stop are the run's so far.
		r.m.mu.Lock()
		rc.lr.usage = usageFromTranscript(entries)
		r.m.mu.Unlock()
		if _, ok := acpSessionIn(entries); ok {
			// The gateway stopped during this run after its agent had its
			// task; resume (manager) let it go on only because the agent
			// can load its session: it is asked to go on (SPEC §26, §25).
			input = acpResumePrompt
		}
	}
	res, err := r.m.runACP(runCtx, run, input, rc.Steer, rc.AddUsage, rc)
	return r.outcome(runCtx, rc, res, err)
}

// acpResumePrompt is the prompt of a run resumed after a restart.
const acpResumePrompt = "The gateway that runs you restarted while you worked on the task above. Go on where you left off and finish with your answer."

// transcript is a run's transcript lines (nil when unreadable).
func (m *Manager) transcript(ctx context.Context, run *store.Run) []store.TranscriptEntry {
	_, entries, _ := m.d.Store.ReadTranscript(ctx, m.d.Store.TranscriptPath(run.AgentID, run.ChildSessionID))
	return entries
}

// outcome maps how an ACP job ended to the run's outcome.
func (r acpRunner) outcome(runCtx context.Context, rc *RunCtx, res acp.Result, err error) Outcome {
	run := &rc.Run
	switch {
	case rc.Stopped():
		return Outcome{Status: store.OutcomeStopped, Result: res.Text, Note: "stopped by request"}
	case rc.ShuttingDown():
		return Outcome{}
	case err != nil:
		return Outcome{Status: store.OutcomeError, Note: err.Error()}
	case errors.Is(res.Err, context.DeadlineExceeded) || (runCtx.Err() != nil && res.Err != nil && errors.Is(res.Err, runCtx.Err())):
		return Outcome{Status: store.OutcomeTimeout, Result: res.Text,
			Note: fmt.Sprintf("Run timed out after %ds; the agent was sent session/cancel and ended.", run.TimeoutSeconds) + usageNote(res)}
	case res.Err != nil:
		return Outcome{Status: store.OutcomeError, Result: res.Text, Note: res.Err.Error() + usageNote(res)}
	}
	switch res.StopReason {
	case "end_turn":
		return Outcome{Status: store.OutcomeSuccess, Result: res.Text, Note: strings.TrimPrefix(usageNote(res), "\n")}
	case "cancelled":
		return Outcome{Status: store.OutcomeStopped, Result: res.Text, Note: "the agent cancelled its prompt"}
	}
	return Outcome{Status: store.OutcomeError, Result: res.Text,
		Note: fmt.Sprintf("The agent stopped with %q instead of ending its turn.", res.StopReason) + usageNote(res)}
}

// usageNote is the Notes line of an agent that reported no usage.
func usageNote(res acp.Result) string {
	if res.Reported {
		return ""
	}
	return "\nThe agent reported no token usage."
}

// runACP runs one job of run's ACP agent with input as its first prompt:
// in the requester conversation's workspace, writing the child's
// transcript. err is set when the job could not be set up.
//
// rc, if set, is told the agent's message text and tool calls as they
// come, to show them live (SPEC §26, §16).
func (m *Manager) runACP(ctx context.Context, run *store.Run, input string, steer <-chan agent.Steer, onUsage func(agent.Usage), rc *RunCtx) (acp.Result, error) {
	cfg := m.config()
	rt, ok := cfg.ACP(run.AgentID)
	if !ok {
		return acp.Result{}, fmt.Errorf("agent %s is no longer an ACP agent (agents.list[].runtime)", run.AgentID)
	}
	path := m.d.Store.TranscriptPath(run.AgentID, run.ChildSessionID)
	sess, err := agent.LoadSessionFrom(ctx, m.d.Store, run.ChildKey, run.ChildSessionID, run.AgentID, run.RequesterKey, path, run.StartedAt)
	if err != nil {
		return acp.Result{}, err
	}
	defer sess.Close()
	loadID, _ := acpSessionIn(m.transcript(ctx, run))
	ws := m.conversationWorkspace(cfg, run.RootKey, run.AgentID)
	log := m.runLog(run)
	job := acp.Job{
		Spec:    acpSpec(cfg, run.AgentID, rt, ws, log),
		Session: sess, Task: input, Steer: steer, Authorize: m.d.Authorize,
		Call: agent.CallContext{SessionKey: run.ChildKey, SessionID: run.ChildSessionID, RootKey: run.RootKey, AgentID: run.AgentID,
			RunID: run.ID, Depth: run.Depth, Workspace: ws, AgentWorkspace: m.d.Workspace(cfg, run.AgentID), Origin: run.Origin},
		OnActivity: func(line string) {
			m.SetNote(run.ID, line)
			if strings.HasPrefix(line, acp.ToolActivity) {
				rc.Activity(line)
			}
		},
		OnText: func(text string) {
			rc.Activity("") // it writes again: its last tool call is over
			rc.Text(text)
		},
		OnUsage: onUsage, Clock: m.d.Clock, LoadSession: loadID,
		OnSession: func(id string, loadable bool) {
			b, _ := json.Marshal(acpSessionLine{ID: id, Load: loadable})
			e := store.TranscriptEntry{Type: acpSessionType, Content: string(b), Timestamp: m.d.Clock.Now().UTC()}
			if err := sess.Transcript.Append(context.WithoutCancel(ctx), e); err != nil {
				log.Warn("could not record the ACP session id", zap.Error(err))
			}
		},
	}
	res := acp.Run(ctx, job)
	m.SetNote(run.ID, "")
	return res, nil
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

// acpTurn runs one more prompt of a finished ACP run (/subagents send):
// its agent is started again and loads the run's session when it can.
func (m *Manager) acpTurn(ctx context.Context, run *store.Run, message string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	r := *run
	r.StartedAt = m.d.Clock.Now()
	res, err := m.runACP(ctx, &r, message, nil, func(u agent.Usage) {
		if err := m.d.Store.AddRunUsage(context.WithoutCancel(ctx), run.ID, u.Input, u.Output, u.CacheRead, u.CacheWrite); err != nil {
			m.runLog(run).Warn("could not add the usage of one more prompt to the run", zap.Error(err))
		}
	}, nil)
	if err != nil {
		return "", err
	}
	if res.Err != nil {
		return res.Text, res.Err
	}
	return res.Text, nil
}
