package subagent

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/spend"
	"github.com/heraldhq/herald/store"
)

// sessionTool adapts a function to agent.Tool.
type sessionTool struct {
	spec       agent.ToolSpec
	fn         func(ctx context.Context, cc agent.CallContext, args json.RawMessage) (any, error)
	repeatable bool
}

// Repeatable implements agent.Repeatable.
func (t *sessionTool) Repeatable() bool { return t.repeatable }

func (t *sessionTool) Spec() agent.ToolSpec { return t.spec }
func (t *sessionTool) Group() string        { return agent.GroupSessions }
func (t *sessionTool) Call(ctx context.Context, cc agent.CallContext, args json.RawMessage) (string, error) {
	v, err := t.fn(ctx, cc, args)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(v)
	return string(b), err
}

func tool(name, desc, schema string, fn func(ctx context.Context, cc agent.CallContext, args json.RawMessage) (any, error)) agent.Tool {
	return &sessionTool{spec: agent.ToolSpec{Name: name, Description: desc, Schema: rawSchema(schema)}, fn: fn}
}

// schemas holds each session tool's schema (a constant) as bytes, made
// once: the session tools are built for every run, and copying
// sessions_spawn's 3 KB schema each time was 5 % of the bytes allocated
// with 10,000 sub-agents in flight. Callers never change a schema.
var schemas = struct {
	sync.RWMutex
	m map[string]json.RawMessage
}{m: make(map[string]json.RawMessage)}

func rawSchema(s string) json.RawMessage {
	schemas.RLock()
	b, ok := schemas.m[s]
	schemas.RUnlock()
	if ok {
		return b
	}
	b = json.RawMessage(s)
	schemas.Lock()
	schemas.m[s] = b
	schemas.Unlock()
	return b
}

// decode unmarshals args strictly enough to give the model a useful error.
func decode(tool string, args json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(args)) // no copy of args
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: bad arguments: %v; see the tool's schema", tool, err)
	}
	return nil
}

// SessionTools returns the session tools for a session at depth. delegate
// and agents_list are included only when more than one agent is configured;
// delegate is never given to a delegate session (depth < 0). The tools are
// made once per Manager and shared by every turn and run (a session tool
// holds only the Manager; what a call needs of its caller is in its
// CallContext): the caller must not change the slice.
func (m *Manager) SessionTools(depth int) []agent.Tool {
	m.sessOnce.Do(func() {
		m.sessTools = []agent.Tool{m.spawnTool(), m.sendTool(), m.listTool(), m.historyTool(), m.statusTool(), m.subagentsTool(),
			m.agentsListTool(), m.delegateTool()}
	})
	n := 6
	if len(m.config().Agents.List) > 1 {
		n = 7 // agents_list
		if depth >= 0 {
			n = 8 // delegate
		}
	}
	return slices.Clip(m.sessTools[:n])
}

func (m *Manager) spawnTool() agent.Tool {
	t := m.spawnToolDef().(*sessionTool)
	t.repeatable = true // idempotent per tool call id: see Spawn
	return &spawnTool{sessionTool: t, m: m}
}

func (m *Manager) spawnToolDef() agent.Tool {
	return tool("sessions_spawn",
		"Start a background sub-agent on a task, or several at once with tasks (a batch: all are started or none). Returns at once with a runId (a batch: runs); when one finishes its result is added to your history as a \"[sub-agent result]\" message and, with announce chat, posted to the chat (a batch: one message for all of them when the last ends). Use it for research, long work or slow tools in parallel.",
		`{"type":"object","properties":{
"task":{"type":"string","description":"what the sub-agent should do (or give tasks)"},
"tasks":{"type":"array","minItems":1,"description":"a batch in place of task: one sub-agent per element, all started or none (at most maxChildrenPerSession, or maxTotalSpawns, or 50 when both are unlimited); the other arguments apply to each; with announce chat one message reports them all","items":{"type":"object","properties":{"task":{"type":"string"},"label":{"type":"string","description":"short name, unique in the batch"},"agentId":{"type":"string"},"model":{"type":"string"},"outputSchema":{"type":"object"}},"required":["task"]}},
"label":{"type":"string","description":"short name shown to people"},
"agentId":{"type":"string","description":"run as another configured agent (if allowed)"},
"model":{"type":"string","description":"provider/model to use"},
"thinking":{"type":"string","enum":["off","low","medium","high"]},
"runTimeoutSeconds":{"type":"integer","minimum":0},
"cleanup":{"type":"string","enum":["keep","delete"]},
"thread":{"type":"boolean","description":"give the sub-agent its own chat thread (Slack, Discord, Matrix thread, Telegram forum topic): its result is posted there and people can talk to it there"},
"allowedTools":{"type":"array","items":{"type":"string"},"description":"a subset of your tools"},
"allowed_tools":{"type":"array","items":{"type":"string"}},
"action":{"type":"string","enum":["spawn","history","steer"]},
"sessionKey":{"type":"string"},"message":{"type":"string"},
"attachments":{"type":"array","items":{"type":"string"},"description":"workspace files to hand to the sub-agent, e.g. [\"attachments/chart.png\"]"},
"announce":{"type":"string","enum":["chat","parent","silent"],"description":"chat: the result is posted to the chat (default at the top level); parent: nothing is posted, you are woken once with the results of all children spawned this way in this turn (default below); silent: only your history gets it"},
"groupTimeoutSeconds":{"type":"integer","minimum":0,"description":"with announce parent: wake with the results so far after this long; a chat batch posts its one message then, the children still running shown as such (default: the longest child's runTimeoutSeconds)"},
"outputSchema":{"type":"object","description":"a JSON Schema the result must match: the sub-agent ends with one JSON value matching it, given to you as Output"}}}`,
		func(ctx context.Context, cc agent.CallContext, args json.RawMessage) (any, error) {
			var p SpawnParams
			if err := decode("sessions_spawn", args, &p); err != nil {
				return nil, err
			}
			switch p.Action {
			case "", "spawn":
				return m.Spawn(ctx, cc, p), nil
			case "history":
				return m.history(ctx, cc, p.SessionKey, 20, false)
			case "steer":
				return m.send(ctx, cc, p.SessionKey, p.Message, 30)
			default:
				return nil, fmt.Errorf(`sessions_spawn: action must be "spawn", "history" or "steer", not %q`, p.Action)
			}
		})
}

// visible resolves target among the caller's descendants.
func (m *Manager) visible(ctx context.Context, cc agent.CallContext, target string) (*store.Run, error) {
	r, err := m.Resolve(ctx, cc.SessionKey, target)
	switch {
	case errors.Is(err, ErrNoMatch):
		return nil, fmt.Errorf("no sub-agent session %q among the sessions this session spawned; call sessions_list to see them", target)
	case errors.Is(err, ErrAmbiguous):
		return nil, fmt.Errorf("%q matches more than one of the sessions this session spawned; give the full runId or sessionKey from sessions_list", target)
	}
	return r, err
}

func (m *Manager) sendTool() agent.Tool {
	return tool("sessions_send",
		"Send a message to a sub-agent session you spawned: a running one receives it between tool calls (steering); a finished one runs one more turn. Waits for the reply unless timeoutSeconds is 0.",
		`{"type":"object","properties":{"sessionKey":{"type":"string"},"label":{"type":"string"},"message":{"type":"string"},"timeoutSeconds":{"type":"integer","minimum":0}},"required":["message"]}`,
		func(ctx context.Context, cc agent.CallContext, args json.RawMessage) (any, error) {
			var p struct {
				SessionKey     string `json:"sessionKey"`
				SessionID      string `json:"session_id"`
				Label          string `json:"label"`
				Message        string `json:"message"`
				TimeoutSeconds *int   `json:"timeoutSeconds"`
			}
			if err := decode("sessions_send", args, &p); err != nil {
				return nil, err
			}
			target := cmp.Or(p.SessionKey, p.SessionID, p.Label)
			timeout := 30
			if p.TimeoutSeconds != nil {
				timeout = *p.TimeoutSeconds
			}
			return m.send(ctx, cc, target, p.Message, timeout)
		})
}

func (m *Manager) send(ctx context.Context, cc agent.CallContext, target, message string, timeoutSeconds int) (any, error) {
	if target == "" {
		return SendResult{Status: "error", Error: "sessionKey or label is required"}, nil
	}
	r, err := m.visible(ctx, cc, target)
	if err != nil {
		return SendResult{Status: "forbidden", Error: err.Error()}, nil
	}
	return m.Send(ctx, r, message, time.Duration(timeoutSeconds)*time.Second), nil
}

// SessionInfo is one entry of sessions_list.
type SessionInfo struct {
	Key            string `json:"key"`
	Label          string `json:"label,omitempty"`
	Status         string `json:"status"`
	AgentID        string `json:"agentId"`
	Model          string `json:"model"`
	StartedAt      string `json:"startedAt,omitempty"`
	EndedAt        string `json:"endedAt,omitempty"`
	TotalTokens    int64  `json:"totalTokens"`
	TranscriptPath string `json:"transcriptPath"`
	// Batch names the sessions_spawn with tasks that started it (SPEC §23).
	Batch string `json:"batch,omitempty"`
}

// DisplayStatus is a run's status as people see it: queued, running,
// "waiting (N children)" (SPEC §23), announcing, or its outcome once done.
func DisplayStatus(r *store.Run) string {
	if r.Status == store.StatusDone {
		return r.Outcome
	}
	if r.Status == store.StatusRunning && r.WaitingFor > 0 {
		return Waiting(r.WaitingFor)
	}
	return r.Status
}

// ResumedTag is how /subagents and the web chat's panel mark a run that
// resumed after its gateway stopped (SPEC §25): "resumed 2×"; "" for a
// run that never did.
func ResumedTag(r *store.Run) string {
	if r.Resumes <= 0 {
		return ""
	}
	return fmt.Sprintf("resumed %d×", r.Resumes)
}

// Waiting is how a parent that waits for n children spawned with announce
// "parent" shows: "waiting (N children)", "waiting (1 child)".
func Waiting(n int) string {
	if n == 1 {
		return "waiting (1 child)"
	}
	return fmt.Sprintf("waiting (%d children)", n)
}

// WaitingFor counts the runs of runs that sessionKey spawned with announce
// "parent" and that have not ended: what it waits for (SPEC §23).
func WaitingFor(runs []store.Run, sessionKey string) int {
	n := 0
	for i := range runs {
		r := &runs[i]
		if r.RequesterKey == sessionKey && r.Announce == store.AnnounceParent && r.Status != store.StatusDone {
			n++
		}
	}
	return n
}

func (m *Manager) listTool() agent.Tool {
	return tool("sessions_list",
		"List the sub-agent sessions this session spawned (directly or below), newest first.",
		`{"type":"object","properties":{"limit":{"type":"integer","minimum":1},"activeMinutes":{"type":"integer","minimum":1}}}`,
		func(ctx context.Context, cc agent.CallContext, args json.RawMessage) (any, error) {
			var p struct {
				Limit         int `json:"limit"`
				ActiveMinutes int `json:"activeMinutes"`
			}
			if err := decode("sessions_list", args, &p); err != nil {
				return nil, err
			}
			runs, err := m.Runs(ctx, cc.SessionKey)
			if err != nil {
				return nil, err
			}
			now := m.d.Clock.Now()
			out := []SessionInfo{}
			for i := range runs {
				r := &runs[i]
				if p.ActiveMinutes > 0 && r.Status == store.StatusDone && now.Sub(r.EndedAt) > time.Duration(p.ActiveMinutes)*time.Minute {
					continue
				}
				if p.Limit > 0 && len(out) >= p.Limit {
					break
				}
				out = append(out, SessionInfo{Key: r.ChildKey, Label: r.Label, Status: DisplayStatus(r), AgentID: r.AgentID,
					Model: r.Model, StartedAt: rfc3339(r.StartedAt), EndedAt: rfc3339(r.EndedAt),
					TotalTokens: r.TokensIn + r.TokensOut, TranscriptPath: m.TranscriptPath(r), Batch: r.Batch})
			}
			return map[string]any{"count": len(out), "sessions": out}, nil
		})
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func (m *Manager) historyTool() agent.Tool {
	return tool("sessions_history",
		"Read the messages of a sub-agent session you spawned.",
		`{"type":"object","properties":{"sessionKey":{"type":"string"},"limit":{"type":"integer","minimum":1,"maximum":200},"includeTools":{"type":"boolean"}},"required":["sessionKey"]}`,
		func(ctx context.Context, cc agent.CallContext, args json.RawMessage) (any, error) {
			var p struct {
				SessionKey   string `json:"sessionKey"`
				Limit        int    `json:"limit"`
				IncludeTools bool   `json:"includeTools"`
			}
			if err := decode("sessions_history", args, &p); err != nil {
				return nil, err
			}
			return m.history(ctx, cc, p.SessionKey, p.Limit, p.IncludeTools)
		})
}

// HistoryLine is one message of sessions_history.
type HistoryLine struct {
	Role     string `json:"role"`
	Text     string `json:"text"`
	ToolName string `json:"toolName,omitempty"`
}

// HistoryLines flattens messages for display: user and assistant text, and
// with tools the tool calls and results.
func HistoryLines(msgs []agent.Message, includeTools bool) []HistoryLine {
	var out []HistoryLine
	for _, msg := range msgs {
		switch msg.Role {
		case agent.RoleUser, agent.RoleAssistant:
			if strings.TrimSpace(msg.Text) != "" {
				out = append(out, HistoryLine{Role: string(msg.Role), Text: msg.Text})
			}
			if includeTools {
				for _, c := range msg.ToolCalls {
					out = append(out, HistoryLine{Role: "tool_call", Text: string(c.Args), ToolName: c.Name})
				}
			}
		case agent.RoleTool:
			if includeTools {
				for _, r := range msg.ToolResults {
					out = append(out, HistoryLine{Role: "tool_result", Text: r.Content, ToolName: r.Name})
				}
			}
		}
	}
	return out
}

func (m *Manager) history(ctx context.Context, cc agent.CallContext, key string, limit int, includeTools bool) (any, error) {
	if limit <= 0 {
		limit = 20
	}
	r, err := m.visible(ctx, cc, key)
	if err != nil {
		return nil, err
	}
	msgs, err := m.History(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("read the transcript of %s: %w", r.ChildKey, err)
	}
	lines := HistoryLines(msgs, includeTools)
	// Results of its own children that no turn of it took in yet are its
	// history too (SPEC §23): its next turn takes them.
	if pending, err := m.d.Store.PendingResults(ctx, r.ChildKey, r.ChildSessionID); err == nil {
		for _, res := range pending {
			lines = append(lines, HistoryLine{Role: string(agent.RoleUser), Text: res.Text})
		}
	}
	if len(lines) > limit {
		lines = lines[len(lines)-limit:]
	}
	if lines == nil {
		lines = []HistoryLine{}
	}
	return map[string]any{"sessionKey": r.ChildKey, "messages": lines}, nil
}

// StatusView is session_status's result.
type StatusView struct {
	Status  string `json:"status"`
	Outcome string `json:"outcome,omitempty"`
	Note    string `json:"note,omitempty"`
	// Result is what an ended run reported (its announce's Result).
	Result string `json:"result,omitempty"`
	// Output is the JSON value an ended run gave for its outputSchema.
	Output json.RawMessage `json:"output,omitempty"`
	// WaitingFor is how many children spawned with announce "parent" a
	// run with status "waiting" waits for.
	WaitingFor int `json:"waitingFor,omitempty"`
	// Batch is the batchId of the sessions_spawn with tasks that started
	// the run (SPEC §23).
	Batch     string `json:"batch,omitempty"`
	StartedAt string `json:"startedAt,omitempty"`
	EndedAt   string `json:"endedAt,omitempty"`
	RuntimeMs int64  `json:"runtimeMs"`
	Tokens    struct {
		Input  int64 `json:"input"`
		Output int64 `json:"output"`
		Total  int64 `json:"total"`
	} `json:"tokens"`
}

// Status describes a run for session_status.
func (m *Manager) Status(r *store.Run) StatusView {
	var v StatusView
	v.Status, v.Outcome, v.Note, v.Batch = r.Status, r.Outcome, r.Note, r.Batch
	if r.Status == store.StatusDone {
		v.Result = r.Result
		if r.Output != "" {
			v.Output = json.RawMessage(r.Output)
		}
	}
	if r.Status == store.StatusRunning && r.WaitingFor > 0 {
		v.Status, v.WaitingFor = "waiting", r.WaitingFor
	}
	v.StartedAt, v.EndedAt = rfc3339(r.StartedAt), rfc3339(r.EndedAt)
	v.RuntimeMs = Runtime(r, m.d.Clock.Now()).Milliseconds()
	v.Tokens.Input, v.Tokens.Output, v.Tokens.Total = r.TokensIn, r.TokensOut, r.TokensIn+r.TokensOut
	return v
}

// Runtime is how long a run ran (so far).
func Runtime(r *store.Run, now time.Time) time.Duration {
	switch {
	case r.StartedAt.IsZero():
		return 0
	case r.EndedAt.IsZero():
		return now.Sub(r.StartedAt)
	default:
		return r.EndedAt.Sub(r.StartedAt)
	}
}

func (m *Manager) statusTool() agent.Tool {
	return tool("session_status",
		"Status of a sub-agent run you spawned: queued, running, announcing or done, with outcome, result, runtime and tokens.",
		`{"type":"object","properties":{"sessionKey":{"type":"string"},"runId":{"type":"string"}}}`,
		func(ctx context.Context, cc agent.CallContext, args json.RawMessage) (any, error) {
			var p struct {
				SessionKey string `json:"sessionKey"`
				RunID      string `json:"runId"`
			}
			if err := decode("session_status", args, &p); err != nil {
				return nil, err
			}
			target := cmp.Or(p.SessionKey, p.RunID)
			if target == "" {
				return nil, errors.New("session_status: give sessionKey or runId")
			}
			r, err := m.visible(ctx, cc, target)
			if err != nil {
				return nil, err
			}
			return m.Status(r), nil
		})
}

func (m *Manager) subagentsTool() agent.Tool {
	return tool("subagents",
		"Manage the sub-agents this session spawned: list, stop, inspect or steer one. target is a list number, runId prefix, session key, label or \"last\".",
		`{"type":"object","properties":{"action":{"type":"string","enum":["list","stop","inspect","steer"]},"target":{"type":"string"},"message":{"type":"string"}},"required":["action"]}`,
		func(ctx context.Context, cc agent.CallContext, args json.RawMessage) (any, error) {
			var p struct {
				Action  string `json:"action"`
				Target  string `json:"target"`
				Message string `json:"message"`
			}
			if err := decode("subagents", args, &p); err != nil {
				return nil, err
			}
			switch p.Action {
			case "list":
				runs, err := m.Runs(ctx, cc.SessionKey)
				if err != nil {
					return nil, err
				}
				items := []map[string]any{}
				for i := range runs {
					r := &runs[i]
					item := map[string]any{"n": i + 1, "runId": r.ID, "sessionKey": r.ChildKey,
						"label": TaskTitle(r.Label, r.Task), "status": DisplayStatus(r)}
					if r.Batch != "" {
						item["batch"] = r.Batch
					}
					items = append(items, item)
				}
				return map[string]any{"count": len(items), "runs": items}, nil
			case "stop", "inspect", "steer":
				if p.Target == "" {
					return nil, fmt.Errorf("subagents %s: target is required", p.Action)
				}
				if p.Action == "stop" && p.Target == "all" {
					return map[string]any{"status": "ok", "stopped": m.StopBelow(ctx, cc.SessionKey)}, nil
				}
				r, err := m.visible(ctx, cc, p.Target)
				if err != nil {
					return nil, err
				}
				switch p.Action {
				case "stop":
					return map[string]any{"status": "ok", "stopped": m.Stop(ctx, r.ID)}, nil
				case "inspect":
					return map[string]any{"runId": r.ID, "sessionKey": r.ChildKey, "task": r.Task, "label": r.Label,
						"model": r.Model, "status": m.Status(r)}, nil
				default:
					return m.Send(ctx, r, p.Message, 30*time.Second), nil
				}
			default:
				return nil, fmt.Errorf(`subagents: action must be list, stop, inspect or steer, not %q`, p.Action)
			}
		})
}

func (m *Manager) agentsListTool() agent.Tool {
	return tool("agents_list", "List the agents you can spawn or delegate to.", `{"type":"object","properties":{}}`,
		func(ctx context.Context, cc agent.CallContext, args json.RawMessage) (any, error) {
			lim := m.config().SubagentLimits(cc.AgentID)
			type entry struct {
				ID           string   `json:"id"`
				Name         string   `json:"name,omitempty"`
				Model        string   `json:"model"`
				AllowedTools []string `json:"allowedTools,omitempty"`
			}
			var agents []entry
			add := func(id string) {
				a, _ := m.config().Agent(id)
				agents = append(agents, entry{ID: id, Name: a.Name, Model: m.config().AgentModel(id), AllowedTools: a.AllowedTools})
			}
			add(cc.AgentID)
			for _, a := range m.config().Agents.List {
				if a.ID != cc.AgentID && lim.AllowsAgent(a.ID) {
					add(a.ID)
				}
			}
			allowAny := false
			for _, a := range lim.AllowAgents {
				allowAny = allowAny || a == "*"
			}
			return map[string]any{"requester": cc.AgentID, "allowAny": allowAny, "agents": agents}, nil
		})
}

func (m *Manager) delegateTool() agent.Tool {
	return tool("delegate",
		"Run a task synchronously with another configured agent (its own model, prompt and tools) and get its answer.",
		`{"type":"object","properties":{"agent":{"type":"string"},"task":{"type":"string"}},"required":["agent","task"]}`,
		func(ctx context.Context, cc agent.CallContext, args json.RawMessage) (any, error) {
			var p struct {
				Agent string `json:"agent"`
				Task  string `json:"task"`
			}
			if err := decode("delegate", args, &p); err != nil {
				return nil, err
			}
			return m.Delegate(ctx, cc, p.Agent, p.Task), nil
		})
}

// DelegateResult is delegate's result.
type DelegateResult struct {
	Status string `json:"status"` // ok | forbidden | error
	Result string `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
	Tokens struct {
		Input  int64 `json:"input"`
		Output int64 `json:"output"`
		Total  int64 `json:"total"`
	} `json:"tokens"`
}

// Delegate runs agentID on task in an isolated session and waits for it.
func (m *Manager) Delegate(ctx context.Context, cc agent.CallContext, agentID, task string) DelegateResult {
	var res DelegateResult
	res.Status = "error"
	// One config and one resolved agent for the whole call: a reload while
	// the delegate runs does not mix settings in it.
	cfg := m.config()
	a := cfg.Resolve(agentID)
	if !a.Known {
		res.Error = fmt.Sprintf("unknown agent %q; call agents_list", agentID)
		return res
	}
	if strings.TrimSpace(task) == "" {
		res.Error = `"task" is required`
		return res
	}
	// The same rule as sessions_spawn (SPEC §17): the caller's own agent is
	// always allowed, any other only through its subagents.allowAgents.
	if lim := cfg.SubagentLimits(cc.AgentID); agentID != cc.AgentID && !lim.AllowsAgent(agentID) {
		res.Status = "forbidden"
		res.Error = fmt.Sprintf("agent %q is not allowed: agent %q may delegate only to %s", agentID, cc.AgentID,
			cmp.Or(strings.Join(lim.AllowAgents, ", "), "itself (subagents.allowAgents is empty)"))
		return res
	}
	if _, ok := cfg.ACP(agentID); ok {
		return m.delegateACP(ctx, cc, agentID, task)
	}
	model, ok := m.d.Catalog.Lookup(a.Model.Primary)
	if !ok {
		res.Error = fmt.Sprintf("agent %q has no usable model (%s)", agentID, a.Model.Primary)
		return res
	}
	id := uuid.NewString()
	key := string(ids.NewDelegate(agentID))
	now := m.d.Clock.Now()
	path := m.d.Store.TranscriptPath(agentID, id)
	if _, err := m.d.Store.EnsureSession(ctx, &store.Session{Key: key, ID: id, AgentID: agentID, Kind: store.KindDelegate,
		ParentKey: cc.SessionKey, RootKey: cmp.Or(cc.RootKey, cc.SessionKey), Depth: cc.Depth + 1,
		Model: model.Ref, Origin: cc.Origin, TranscriptPath: path, CreatedAt: now, UpdatedAt: now}); err != nil {
		res.Error = err.Error()
		return res
	}
	sess, err := agent.LoadSessionFrom(ctx, m.d.Store, key, id, agentID, cc.SessionKey, path, now)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer sess.Close()
	// The delegate gets its agent's tools within that agent's allowedTools,
	// and never a tool the caller does not have itself: delegating cannot
	// widen what the caller's allowedTools permit.
	reg := m.d.Tools(a).Filter(func(name string, _ agent.Tool) bool {
		return (len(a.AllowedTools) == 0 || slices.Contains(a.AllowedTools, name)) && callerHas(cc, name)
	})
	system := a.SystemPrompt
	dc := agent.CallContext{SessionKey: key, SessionID: id, RootKey: cmp.Or(cc.RootKey, cc.SessionKey), AgentID: agentID,
		RunID: cc.RunID, Depth: cc.Depth + 1, Workspace: cc.Workspace, AgentWorkspace: m.d.Workspace(cfg, agentID),
		ReadOnlyDirs: m.readOnlyDirs(cfg), Origin: cc.Origin, Model: model.Ref, Tools: reg.Names()}
	if dc.Workspace == "" {
		dc.Workspace = m.conversationWorkspace(cfg, dc.RootKey, cc.AgentID)
	}
	// The agent's own settings, else agents.defaults: the same helpers as a
	// top-level turn of that agent.
	out, err := sess.Run(ctx, agent.Turn{Model: model, System: system, Tools: reg, Thinking: a.Thinking,
		MaxIterations: a.MaxIterations, Call: dc, Authorize: m.d.Authorize, Logger: m.log, Clock: m.d.Clock,
		OnUsage: func(u agent.Usage) {
			if m.d.OnUsage != nil {
				m.d.OnUsage(agentID, model.Ref, u)
			}
		},
		Health: m.d.Catalog.Health(), Fallbacks: m.chain(cfg, &store.Run{AgentID: agentID, Model: model.Ref}, model),
		BeforeCall: m.d.Spend.Guard(spend.Call{Conversation: dc.RootKey, AgentID: agentID, RunID: cc.RunID, Label: "delegate: " + task}),
		OnCall:     m.d.Spend.Counter(spend.Call{Conversation: dc.RootKey, AgentID: agentID, RunID: cmp.Or(cc.RunID, "delegate:"+id), Label: "delegate: " + task}),
	}, task)
	res.Tokens.Input, res.Tokens.Output, res.Tokens.Total = out.Usage.Input, out.Usage.Output, out.Usage.Total()
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Status, res.Result = "ok", out.Text
	return res
}

// callerHas reports whether the caller of sessions_spawn or delegate has
// the tool name in this turn: a child never gets a tool its caller lacks
// (SPEC §3, §17). A call context without a tool list (a caller built
// without one) limits nothing.
func callerHas(cc agent.CallContext, name string) bool {
	return cc.Tools == nil || slices.Contains(cc.Tools, name)
}
