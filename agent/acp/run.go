package acp

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	sdk "github.com/coder/acp-go-sdk"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/store"
)

// Job is one run of an ACP agent: its process, its task and what it is
// told of the run.
type Job struct {
	Spec
	// Session is the child's transcript: the prompt, the agent's messages,
	// tool calls and plans are written to it as they arrive.
	Session *agent.Session
	Task    string
	// Steer receives messages for the running agent: each is sent as
	// another session/prompt after the current one, and answered with its
	// final message.
	Steer <-chan agent.Steer
	// Call and Authorize decide permission requests as calls of the tool
	// acp (nil Authorize: every request is allowed).
	Call      agent.CallContext
	Authorize agent.Authorizer
	// OnActivity, if set, is told a short line of what the agent does now
	// (shown live), one call at a time; it must not block.
	OnActivity func(line string)
	// OnText, if set, is told the agent's message text so far as its
	// agent_message_chunk updates arrive: each message (the text between
	// two tool calls) starts again from the first chunk. It must not
	// block.
	OnText func(text string)
	// OnUsage, if set, is told what each prompt reported of its tokens and
	// cost (when it reported either), as the prompt ends.
	OnUsage func(Usage)
	// Check, if set, is asked before the agent starts and before each
	// further prompt: an error (a budget reached) ends the job with it,
	// and no prompt is sent.
	Check func() error
	// CheckCost, if set, is asked on each usage_update during a prompt
	// with the USD the prompt added so far: an error (a budget reached)
	// cancels the prompt (session/cancel) and ends the job with it, once
	// the agent answered (its cost so far is still told to OnUsage).
	CheckCost func(pendingUSD float64) error
	Clock     agent.Clock
	// LoadSession, if set, is an ACP session to resume with session/load
	// (when the agent advertises loadSession) instead of a new one.
	LoadSession string
	// CostTotal is the running cost total (USD) the agent last reported in
	// the session LoadSession resumes, as already counted (Usage.Total of
	// its last counted prompt): an agent whose total survives the load
	// (Claude Code restores its own) is counted only what it adds after
	// it. A total that comes back lower restarted, and counts whole.
	CostTotal float64
	// OnSession, if set, is told the ACP session id once it exists.
	OnSession func(id string, loadable bool)
}

// Usage is what one prompt reported: its tokens (HasTokens: the prompt's
// answer carried usage) and the cost it added in USD (HasCost: the agent
// sent usage_update with a cost in USD during it). An agent's cost is
// its session's running total; USD is the part this prompt added.
type Usage struct {
	Tokens    agent.Usage
	HasTokens bool
	USD       float64
	HasCost   bool
	// Total is the session's running cost total (USD) the agent reported
	// last, when HasCost: the point counted up to (Job.CostTotal of a
	// later job that loads the session).
	Total float64
	// Currency names a currency other than USD the agent reported its
	// cost in (that cost is not counted).
	Currency string
}

// Result is how a Job ended.
type Result struct {
	// StopReason is the last prompt's (end_turn, cancelled, max_tokens,
	// max_turn_requests, refusal), or "" when no prompt ended.
	StopReason string
	// Text is the agent's final message: its message text after its last
	// tool call in the last prompt.
	Text string
	// Usage is the tokens its prompts reported; Reported whether any did.
	Usage    agent.Usage
	Reported bool
	// Cost is the USD its usage_update costs added up to; Costed whether
	// it reported any. Currency names a cost it reported in another
	// currency (not counted).
	Cost     float64
	Costed   bool
	Currency string
	Info     Info
	// Err says why the run could not go on (start, handshake, the process
	// ending, the connection failing), or ctx's error after a stop.
	Err error
}

// Info is what an agent says of itself in initialize.
type Info struct {
	Name, Version string
	LoadSession   bool
	Capabilities  []string // what it offers beyond prompts
	AuthMethods   []string // ways it can log in (it may need one first)
	// envAuth are its env_var auth methods: an id and the variables it
	// needs set.
	envAuth []envAuth
}

type envAuth struct {
	id   string
	vars []string // required
}

func (i Info) String() string {
	name := i.Name
	if name == "" {
		name = "(unnamed)"
	}
	if i.Version != "" {
		name += " " + i.Version
	}
	caps := "none"
	if len(i.Capabilities) > 0 {
		caps = strings.Join(i.Capabilities, ", ")
	}
	s := name + " · capabilities: " + caps
	if len(i.AuthMethods) > 0 {
		s += " · auth: " + strings.Join(i.AuthMethods, ", ")
	}
	return s
}

func infoOf(r sdk.InitializeResponse) Info {
	var i Info
	if r.AgentInfo != nil {
		i.Name, i.Version = r.AgentInfo.Name, r.AgentInfo.Version
	}
	c := r.AgentCapabilities
	i.LoadSession = c.LoadSession
	for _, f := range []struct {
		on   bool
		name string
	}{
		{c.LoadSession, "loadSession"}, {c.PromptCapabilities.Image, "image"}, {c.PromptCapabilities.Audio, "audio"},
		{c.PromptCapabilities.EmbeddedContext, "embeddedContext"}, {c.McpCapabilities.Http, "mcp http"}, {c.McpCapabilities.Sse, "mcp sse"},
	} {
		if f.on {
			i.Capabilities = append(i.Capabilities, f.name)
		}
	}
	for _, m := range r.AuthMethods {
		switch {
		case m.Agent != nil:
			i.AuthMethods = append(i.AuthMethods, m.Agent.Name)
		case m.EnvVar != nil:
			i.AuthMethods = append(i.AuthMethods, m.EnvVar.Name)
			a := envAuth{id: m.EnvVar.Id}
			for _, v := range m.EnvVar.Vars {
				if !v.Optional {
					a.vars = append(a.vars, v.Name)
				}
			}
			i.envAuth = append(i.envAuth, a)
		case m.Terminal != nil:
			i.AuthMethods = append(i.AuthMethods, m.Terminal.Name)
		}
	}
	return i
}

// authRequired is the error code of ACP's auth_required.
const authRequired = -32000

// Probe starts the agent in spec.Workspace, runs initialize and
// session/new, and ends it (herald doctor). An agent that answers
// initialize but refuses a session (it needs a login) returns its Info
// and the refusal.
func Probe(ctx context.Context, spec Spec) (Info, error) {
	log := spec.Logger
	if log == nil {
		log = zap.NewNop()
	}
	r := &runner{log: log, j: Job{Spec: spec, Clock: agent.SystemClock{}}, ctx: ctx, started: time.Now()}
	cli := newClient(spec, r)
	p, err := start(spec, cli, log)
	if err != nil {
		return Info{}, err
	}
	defer p.stop()
	defer cli.terms.closeAll()
	info, err := r.initialize(ctx, p, spec)
	if err != nil {
		return info, err
	}
	if _, err := r.session(ctx, p, info); err != nil {
		var re *sdk.RequestError
		if errors.As(err, &re) && re.Code == authRequired {
			return info, fmt.Errorf("it needs a login first (%v)", err)
		}
		return info, err
	}
	return info, nil
}

// runner is one Job's state while it runs.
type runner struct {
	j       Job
	log     *zap.Logger
	ctx     context.Context // the run's: a stop cancels permission waits
	started time.Time
	actMu   sync.Mutex   // serialises OnActivity
	asking  atomic.Int32 // permission requests being decided

	mu        sync.Mutex // guards the fields below and transcript writes
	replaying bool       // session/load replays history: not written again
	costTotal float64    // the session cost the agent last reported (USD)
	costAdded float64    // what the current prompt added to it
	costSeen  bool       // the current prompt reported a cost
	currency  string     // a currency other than USD it reported a cost in
	over      error      // what CheckCost refused (the prompt is cancelled)
	overCh    chan struct{}
	text      strings.Builder
	lastText  string                    // the last flushed message text
	open      map[string]agent.ToolCall // tool calls without a result yet
	writeErr  error
}

// Run runs j: it starts the agent, opens a session, sends the task and
// every steering message as prompts, and ends the process. It returns
// when the agent's last prompt ended, or ctx is done (a stop, a timeout,
// a shutdown: session/cancel is sent first, then the process ends).
func Run(ctx context.Context, j Job) Result {
	if j.Clock == nil {
		j.Clock = agent.SystemClock{}
	}
	if j.Logger == nil {
		j.Logger = zap.NewNop()
	}
	r := &runner{j: j, log: j.Logger, ctx: ctx, open: map[string]agent.ToolCall{}, started: j.Clock.Now(), overCh: make(chan struct{})}
	if j.Check != nil {
		if err := j.Check(); err != nil {
			return Result{Err: err}
		}
	}
	cli := newClient(j.Spec, r)
	p, err := start(j.Spec, cli, r.log)
	if err != nil {
		return Result{Err: err}
	}
	defer p.stop()
	defer cli.terms.closeAll() // before the agent ends: its terminals end with it
	info, err := r.initialize(ctx, p, j.Spec)
	res := Result{Info: info}
	if err != nil {
		res.Err = err
		return res
	}
	sid, err := r.session(ctx, p, info)
	if err != nil {
		res.Err = err
		return res
	}
	input := j.Task
	var reply chan agent.SteerReply
	for {
		r.mu.Lock()
		r.recordLocked(agent.Message{Role: agent.RoleUser, Text: input}, nil)
		r.mu.Unlock()
		stop, usage, err := r.prompt(ctx, p, sid, input)
		u := r.promptUsage(usage)
		res.Usage, res.Reported = res.Usage.Add(u.Tokens), res.Reported || u.HasTokens
		res.Cost, res.Costed, res.Currency = res.Cost+u.USD, res.Costed || u.HasCost, cmp.Or(u.Currency, res.Currency)
		if (u.HasTokens || u.HasCost) && j.OnUsage != nil {
			j.OnUsage(u)
		}
		res.StopReason, res.Text = string(stop), r.finishPrompt(usage)
		if reply != nil {
			if err != nil {
				reply <- agent.SteerReply{Err: err}
			} else {
				reply <- agent.SteerReply{Text: res.Text}
			}
			reply = nil
		}
		if err != nil {
			res.Err = err
			return res
		}
		if stop != sdk.StopReasonEndTurn {
			return res
		}
		select {
		case st := <-j.Steer:
			input, reply = st.Text, st.Reply
		default:
			return res
		}
		if j.Check != nil {
			if err := j.Check(); err != nil {
				if reply != nil {
					reply <- agent.SteerReply{Err: err}
				}
				res.Err = err
				return res
			}
		}
	}
}

// promptUsage is what the prompt that just ended reported (u: its
// answer's usage, nil when it had none); it readies the cost count for
// the next prompt.
func (r *runner) promptUsage(u *sdk.Usage) Usage {
	var out Usage
	if u != nil {
		out.Tokens, out.HasTokens = agent.Usage{Input: int64(u.InputTokens), Output: int64(u.OutputTokens)}, true
		if u.CachedReadTokens != nil {
			out.Tokens.CacheRead = int64(*u.CachedReadTokens)
		}
		if u.CachedWriteTokens != nil {
			out.Tokens.CacheWrite = int64(*u.CachedWriteTokens)
		}
	}
	r.mu.Lock()
	out.USD, out.HasCost, out.Currency, out.Total = r.costAdded, r.costSeen, r.currency, r.costTotal
	r.costAdded, r.costSeen = 0, false
	r.mu.Unlock()
	return out
}

// costLocked takes a usage_update's cost: the session's running total.
// What it added since the last one (or since Job.CostTotal, in a loaded
// session) is counted; a total that went down (an agent that counts per
// prompt, or a new process that restarted its total) counts whole.
// r.mu must be held.
func (r *runner) costLocked(c *sdk.Cost) {
	if c == nil {
		return
	}
	if cur := strings.ToUpper(c.Currency); cur != "" && cur != "USD" {
		r.currency = cur
		return
	}
	added := c.Amount - r.costTotal
	if added < 0 {
		added = c.Amount
	}
	r.costTotal = c.Amount
	if r.replaying {
		return // history being replayed: counted when it happened
	}
	r.costAdded += added
	r.costSeen = true
	if r.j.CheckCost != nil && r.over == nil && r.overCh != nil {
		if err := r.j.CheckCost(r.costAdded); err != nil {
			r.over = err
			close(r.overCh) // the prompt is cancelled
		}
	}
}

// initialize runs the handshake's first step.
func (r *runner) initialize(ctx context.Context, p *process, spec Spec) (Info, error) {
	hctx, cancel := context.WithTimeout(ctx, HandshakeTimeout)
	defer cancel()
	resp, err := p.conn.Initialize(hctx, sdk.InitializeRequest{
		ProtocolVersion:    sdk.ProtocolVersionNumber,
		ClientInfo:         &sdk.Implementation{Name: "herald", Version: "1"},
		ClientCapabilities: sdk.ClientCapabilities{Fs: sdk.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: true}, Terminal: true},
	})
	if err != nil {
		return Info{}, r.failed(ctx, hctx, p, "initialize", err)
	}
	return infoOf(resp), nil
}

// session opens the run's ACP session: session/load of j.LoadSession when
// the agent can, else session/new. An agent that answers auth_required
// and offers an env_var login whose variables runtime.env sets (Codex:
// OPENAI_API_KEY) is sent authenticate with it, and asked once more.
func (r *runner) session(ctx context.Context, p *process, info Info) (sdk.SessionId, error) {
	sid, err := r.openSession(ctx, p, info)
	var re *sdk.RequestError
	if err == nil || !errors.As(err, &re) || re.Code != authRequired {
		return sid, err
	}
	method := r.envLogin(info)
	if method == "" {
		return "", err
	}
	hctx, cancel := context.WithTimeout(ctx, HandshakeTimeout)
	_, aerr := p.conn.Authenticate(hctx, sdk.AuthenticateRequest{MethodId: method})
	cancel()
	if aerr != nil {
		return "", fmt.Errorf("%w (authenticate %s: %v)", err, method, aerr)
	}
	r.log.Info("acp agent authenticated with its environment", zap.String("method", method))
	return r.openSession(ctx, p, info)
}

// envLogin is the first env_var auth method of info whose variables the
// agent's environment sets ("" if none).
func (r *runner) envLogin(info Info) string {
	set := map[string]bool{}
	for _, kv := range r.j.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && v != "" {
			set[k] = true
		}
	}
	for _, a := range info.envAuth {
		if !slices.ContainsFunc(a.vars, func(v string) bool { return !set[v] }) {
			return a.id
		}
	}
	return ""
}

// openSession sends session/load or session/new once.
func (r *runner) openSession(ctx context.Context, p *process, info Info) (sdk.SessionId, error) {
	hctx, cancel := context.WithTimeout(ctx, HandshakeTimeout)
	defer cancel()
	if r.j.LoadSession != "" && info.LoadSession {
		r.mu.Lock()
		r.replaying = true
		// What it reported in the session is counted up to here; a
		// usage_update it replays during the load says the same.
		r.costTotal = r.j.CostTotal
		r.mu.Unlock()
		_, err := p.conn.LoadSession(hctx, sdk.LoadSessionRequest{SessionId: sdk.SessionId(r.j.LoadSession), Cwd: r.j.Workspace, McpServers: []sdk.McpServer{}})
		r.mu.Lock()
		r.replaying = false
		r.mu.Unlock()
		if err != nil {
			if err = r.failed(ctx, hctx, p, "session/load", err); !errors.Is(err, context.Canceled) {
				err = fmt.Errorf("%w: %w", ErrLoad, err)
			}
			return "", err
		}
		return sdk.SessionId(r.j.LoadSession), nil
	}
	resp, err := p.conn.NewSession(hctx, sdk.NewSessionRequest{Cwd: r.j.Workspace, McpServers: []sdk.McpServer{}})
	if err != nil {
		return "", r.failed(ctx, hctx, p, "session/new", err)
	}
	if r.j.OnSession != nil {
		r.j.OnSession(string(resp.SessionId), info.LoadSession)
	}
	return resp.SessionId, nil
}

// failed explains why a handshake request failed.
func (r *runner) failed(ctx, hctx context.Context, p *process, method string, err error) error {
	name := r.j.Name
	if name == "" {
		name = "the agent"
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return ctx.Err() // a stop or a shutdown
	}
	if how := p.waitExit(); how != "" {
		return fmt.Errorf("%w during %s: agent %s (%s) %s", ErrExited, method, name, r.j.Command, how)
	}
	if hctx.Err() != nil {
		// Its own deadline or the run's: either way the agent never
		// answered, which is an error of the agent, not a slow task.
		msg := fmt.Sprintf("%v: agent %s (%s) did not answer %s (waited %s)", ErrHandshake, name, r.j.Command, method,
			r.j.Clock.Now().Sub(r.started).Round(time.Second))
		if pe := p.stderr.protoErr(); pe != "" {
			msg += "; it wrote what is not JSON-RPC: " + pe
		}
		return errors.New(msg)
	}
	return fmt.Errorf("%w: agent %s (%s) refused %s: %w", ErrHandshake, name, r.j.Command, method, err)
}

// waitExit gives a process whose connection broke a moment to be reaped,
// and says how it ended ("" if it still runs).
func (p *process) waitExit() string {
	select {
	case <-p.conn.Done():
		select {
		case <-p.waited:
		case <-time.After(time.Second):
		}
	default:
	}
	return p.exited()
}

// prompt sends one prompt and waits for its end. When ctx ends first, or
// its cost passes CheckCost, it sends session/cancel and waits a little
// for the agent to answer "cancelled" before giving up on it.
func (r *runner) prompt(ctx context.Context, p *process, sid sdk.SessionId, text string) (sdk.StopReason, *sdk.Usage, error) {
	type answer struct {
		resp sdk.PromptResponse
		err  error
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	done := make(chan answer, 1)
	go func() {
		resp, err := p.conn.Prompt(pctx, sdk.PromptRequest{SessionId: sid, Prompt: []sdk.ContentBlock{sdk.TextBlock(text)}})
		done <- answer{resp, err}
	}()
	var a answer
	var why error
	select {
	case a = <-done:
	case <-ctx.Done():
		why = ctx.Err()
	case <-r.overCh:
		r.mu.Lock()
		why = r.over
		r.mu.Unlock()
	}
	if why != nil {
		cctx, c := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		if err := p.conn.Cancel(cctx, sdk.CancelNotification{SessionId: sid}); err != nil {
			r.log.Debug("session/cancel not sent", zap.Error(err))
		}
		c()
		select {
		case a = <-done:
		case <-time.After(stopGrace):
			cancel()
			a = <-done
		}
		if a.err == nil {
			// Cancelled, or it ended first: what it used counts.
			return sdk.StopReasonCancelled, a.resp.Usage, why
		}
		return sdk.StopReasonCancelled, nil, why
	}
	if a.err != nil {
		if how := p.waitExit(); how != "" {
			return "", nil, fmt.Errorf("%w during its prompt: agent %s (%s) %s", ErrExited, r.j.Name, r.j.Command, how)
		}
		return "", nil, fmt.Errorf("the prompt to agent %s failed: %v", r.j.Name, a.err)
	}
	return a.resp.StopReason, a.resp.Usage, nil
}

// ToolActivity begins the OnActivity line of a tool call:
// "🔧 <title> (<status>)".
const ToolActivity = "🔧 "

// activity shows what the agent does now. Calls come from the update
// stream and from client requests: they are serialised.
func (r *runner) activity(line string) {
	if r.asking.Load() > 0 {
		return // the approval's note ("awaiting approval <code>") stays
	}
	if r.j.OnActivity != nil {
		r.actMu.Lock()
		defer r.actMu.Unlock()
		r.j.OnActivity(line)
	}
}

// recordLocked writes a message to the transcript (the first failure is kept
// and logged; the agent goes on). r.mu must be held.
func (r *runner) recordLocked(m agent.Message, u *agent.Usage) {
	if r.j.Session == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), 10*time.Second)
	defer cancel()
	if err := r.j.Session.Record(ctx, m, u, "", r.j.Clock); err != nil && r.writeErr == nil {
		r.writeErr = err
		r.log.Error("could not write the ACP agent's transcript", zap.Error(err))
	}
}

// flushTextLocked writes the message text gathered so far (with calls, if
// any). r.mu must be held.
func (r *runner) flushTextLocked(calls []agent.ToolCall) {
	t := r.text.String()
	r.text.Reset()
	if strings.TrimSpace(t) == "" && len(calls) == 0 {
		return
	}
	if strings.TrimSpace(t) != "" {
		r.lastText = t
	}
	r.recordLocked(agent.Message{Role: agent.RoleAssistant, Text: t, ToolCalls: calls}, nil)
}

// finishPrompt writes what is left of a prompt: its last text (the final
// message, returned), the results of calls that never ended.
func (r *runner) finishPrompt(u *sdk.Usage) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	final := r.text.String()
	var usage *agent.Usage
	if u != nil {
		usage = &agent.Usage{Input: int64(u.InputTokens), Output: int64(u.OutputTokens)}
	}
	if strings.TrimSpace(final) != "" || usage != nil {
		r.text.Reset()
		r.recordLocked(agent.Message{Role: agent.RoleAssistant, Text: final}, usage)
	}
	for id, c := range r.open {
		r.recordLocked(agent.Message{Role: agent.RoleTool, ToolResults: []agent.ToolResult{{CallID: id, Name: c.Name,
			Content: `{"status":"unfinished","error":"the prompt ended before this tool call did"}`, IsError: true}}}, nil)
		delete(r.open, id)
	}
	return strings.TrimSpace(final)
}

// update writes one session/update to the transcript and shows it.
func (r *runner) update(_ context.Context, u sdk.SessionUpdate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if u.UsageUpdate != nil {
		r.costLocked(u.UsageUpdate.Cost)
		return
	}
	if r.replaying {
		return
	}
	switch {
	case u.AgentMessageChunk != nil:
		if t := u.AgentMessageChunk.Content.Text; t != nil {
			// Builder.String does not copy, and lastLine reads only
			// the end: a chunk costs its own length, not the message's.
			r.text.WriteString(t.Text)
			if r.j.OnText != nil {
				r.j.OnText(r.text.String())
			}
			r.activity("💬 " + lastLine(r.text.String()))
		}
	case u.AgentThoughtChunk != nil:
		r.activity("💭 thinking")
	case u.ToolCall != nil:
		tc := u.ToolCall
		args, _ := json.Marshal(map[string]any{"title": tc.Title, "kind": tc.Kind, "rawInput": tc.RawInput})
		call := agent.ToolCall{ID: string(tc.ToolCallId), Name: ToolName, Args: args}
		r.open[call.ID] = call
		r.flushTextLocked([]agent.ToolCall{call})
		r.activity(fmt.Sprintf(ToolActivity+"%s (%s)", tc.Title, cmp.Or(string(tc.Status), "pending")))
		if tc.Status == sdk.ToolCallStatusCompleted || tc.Status == sdk.ToolCallStatusFailed {
			r.toolEndLocked(call.ID, string(tc.Status), tc.Title, tc.Content, tc.RawOutput)
		}
	case u.ToolCallUpdate != nil:
		tu := u.ToolCallUpdate
		id := string(tu.ToolCallId)
		c, open := r.open[id]
		title := ""
		if tu.Title != nil {
			title = *tu.Title
		} else if open {
			var a struct{ Title string }
			_ = json.Unmarshal(c.Args, &a)
			title = a.Title
		}
		if tu.Status == nil {
			return
		}
		r.activity(fmt.Sprintf(ToolActivity+"%s (%s)", cmp.Or(title, id), *tu.Status))
		if open && (*tu.Status == sdk.ToolCallStatusCompleted || *tu.Status == sdk.ToolCallStatusFailed) {
			r.toolEndLocked(id, string(*tu.Status), title, tu.Content, tu.RawOutput)
		}
	case u.Plan != nil:
		var b strings.Builder
		b.WriteString("Plan:")
		for _, e := range u.Plan.Entries {
			fmt.Fprintf(&b, "\n- [%s] %s", e.Status, e.Content)
		}
		r.note(b.String())
		r.activity(fmt.Sprintf("📋 plan: %d steps", len(u.Plan.Entries)))
	}
}

// toolEndLocked writes the result of an open tool call. r.mu must be held.
func (r *runner) toolEndLocked(id, status, title string, content []sdk.ToolCallContent, raw any) {
	var texts []string
	for _, c := range content {
		switch {
		case c.Content != nil && c.Content.Content.Text != nil:
			texts = append(texts, c.Content.Content.Text.Text)
		case c.Diff != nil:
			texts = append(texts, "diff of "+c.Diff.Path)
		}
	}
	out := map[string]any{"status": status, "title": title}
	if len(texts) > 0 {
		out["content"] = strings.Join(texts, "\n")
	}
	if raw != nil {
		out["rawOutput"] = raw
	}
	b, _ := json.Marshal(out)
	r.recordLocked(agent.Message{Role: agent.RoleTool, ToolResults: []agent.ToolResult{{CallID: id, Name: ToolName, Content: string(b),
		IsError: status == string(sdk.ToolCallStatusFailed)}}}, nil)
	delete(r.open, id)
}

// note writes a line only the transcript shows (a plan).
func (r *runner) note(text string) {
	if r.j.Session == nil || r.j.Session.Transcript == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), 10*time.Second)
	defer cancel()
	e := store.TranscriptEntry{Type: "message", Role: "system", Content: text, Timestamp: r.j.Clock.Now().UTC()}
	if err := r.j.Session.Transcript.Append(ctx, e); err != nil {
		r.log.Warn("could not write the ACP agent's plan to its transcript", zap.Error(err))
	}
}

// permission decides a session/request_permission.
func (r *runner) permission(ctx context.Context, req sdk.RequestPermissionRequest) sdk.RequestPermissionResponse {
	cancelled := sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeCancelled()}
	if r.ctx == nil {
		return cancelled
	}
	r.asking.Add(1)
	defer r.asking.Add(-1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.ctx, cancel)()
	tc := req.ToolCall
	args := map[string]any{"rawInput": tc.RawInput}
	if tc.Title != nil {
		args["title"] = *tc.Title
	}
	if tc.Kind != nil {
		args["kind"] = *tc.Kind
	}
	raw, _ := json.Marshal(args)
	var err error
	if r.j.Authorize != nil {
		cc := r.j.Call
		cc.CallID = string(tc.ToolCallId)
		err = r.j.Authorize(ctx, cc, agent.ToolCall{ID: string(tc.ToolCallId), Name: ToolName, Args: raw}, permissionTool{})
	}
	if ctx.Err() != nil {
		return cancelled
	}
	want := []sdk.PermissionOptionKind{sdk.PermissionOptionKindAllowOnce, sdk.PermissionOptionKindAllowAlways}
	if err != nil {
		want = []sdk.PermissionOptionKind{sdk.PermissionOptionKindRejectOnce, sdk.PermissionOptionKindRejectAlways}
		r.log.Info("acp permission refused", zap.String("toolCallId", string(tc.ToolCallId)), zap.Error(err))
	}
	for _, k := range want {
		for _, o := range req.Options {
			if o.Kind == k {
				return sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeSelected(o.OptionId)}
			}
		}
	}
	// The agent offered no option of that kind: no answer is "cancelled".
	return cancelled
}

// lastLine is the last non-blank line of s (trimmed), its last 80
// characters after "…" when longer. It reads only the end of s (at most
// 81 characters back, or to the line's start): a message growing by
// chunks is not read whole for every chunk.
func lastLine(s string) string {
	const keep = 80
	s = strings.TrimRightFunc(s, unicode.IsSpace)
	i, n := len(s), 0
	for i > 0 && n <= keep {
		r, size := utf8.DecodeLastRuneInString(s[:i])
		if r == '\n' {
			break
		}
		i -= size
		n++
	}
	line, whole := s[i:], i == 0 || s[i-1] == '\n'
	if !whole && strings.TrimLeftFunc(s[:i], unicode.IsSpace) == "" {
		whole = true // only blanks before it
	}
	if whole {
		line = strings.TrimLeftFunc(line, unicode.IsSpace)
		if utf8.RuneCountInString(line) <= keep {
			return line
		}
	}
	for utf8.RuneCountInString(line) > keep {
		_, size := utf8.DecodeRuneInString(line)
		line = line[size:]
	}
	return "…" + line
}
