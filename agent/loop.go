package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/heraldhq/herald/store"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// ErrMaxIterations ends a turn that used its model-call budget.
var ErrMaxIterations = errors.New("maximum model iterations reached")

// Steer is a message injected into a running session between tool calls.
// Reply, if non-nil, receives the next assistant text after it (buffered, 1).
type Steer struct {
	Text string
	// Reply, if set, gets the model's next text after the message was read
	// (buffered, one value), or an error when the message could not reach
	// the run.
	Reply chan SteerReply
}

// SteerReply answers a Steer: the model's reply text, or why there is none.
type SteerReply struct {
	Text string
	Err  error
}

// Session is one conversation: its history in memory and its transcript on
// disk. A Session runs one turn at a time; callers serialise turns.
type Session struct {
	Key        string
	ID         string
	AgentID    string
	Transcript *store.Transcript
	History    []Message
	// pending are the tool calls of the last assistant message that never
	// got results (the process died while running them); History ends
	// with that message and the results of its calls that ended. A
	// resumed turn runs the repeatable ones and closes the others as
	// interrupted; a new turn closes them all as interrupted first.
	pending []ToolCall
	// results is the tool results slice append last made for History's
	// last message: while that message still holds it, the next result
	// goes into its spare room (a response's 100 spawn results took
	// 5,050 copies, one clone of the list per result).
	results []ToolResult
	// held are the lines of messages in History that are not in the
	// transcript yet (Turn.DeferInput): the next line written, or Close,
	// writes them first, in the same write.
	held []store.TranscriptEntry
}

// ErrHistory is returned by LoadSession when a transcript exists but
// cannot be read: the session must not go on as if it had no history.
var ErrHistory = errors.New("conversation history cannot be read")

// ErrTranscript wraps a failure to write a line of the transcript (a full
// disk, the database unreachable): the turn stopped before its history
// would have gone past what is stored, so it can run again from there.
var ErrTranscript = errors.New("transcript not written")

// LoadSession opens (or creates) the transcript at path and loads its
// history. A missing or still empty transcript is a new session; a torn
// last line is left out (and cut when the file is opened for writing);
// any other read error is ErrHistory — never a silent fresh start.
func LoadSession(ctx context.Context, key, id, agentID, parentKey, path string, now time.Time) (*Session, error) {
	return LoadSessionFrom(ctx, store.FileTranscripts{}, key, id, agentID, parentKey, path, now)
}

// LoadSessionFrom is LoadSession with the transcript in ts (files, or rows
// of a PostgreSQL store).
func LoadSessionFrom(ctx context.Context, ts store.Transcripts, key, id, agentID, parentKey, path string, now time.Time) (*Session, error) {
	_, entries, err := ts.ReadTranscript(ctx, path)
	switch {
	case err == nil:
	case errors.Is(err, store.ErrNotFound):
		entries = nil
	default:
		return nil, fmt.Errorf("session %s: %w: %w", key, ErrHistory, err)
	}
	return OpenSessionFrom(ctx, ts, entries, key, id, agentID, parentKey, path, now)
}

// OpenSessionFrom is LoadSessionFrom for a caller that has read the
// transcript's lines already (entries; nil for a new one): it opens the
// transcript for writing without reading it again.
func OpenSessionFrom(ctx context.Context, ts store.Transcripts, entries []store.TranscriptEntry, key, id, agentID, parentKey, path string, now time.Time) (*Session, error) {
	var history []Message
	var pendingCalls []ToolCall
	if len(entries) > 0 {
		history, pendingCalls = splitPendingCalls(contextFromTranscript(entries))
	}
	tr, err := ts.OpenTranscript(ctx, path, store.TranscriptHeader{SessionKey: key, SessionID: id, AgentID: agentID, ParentKey: parentKey, CreatedAt: now, Fresh: len(entries) == 0})
	if err != nil {
		return nil, fmt.Errorf("open transcript of %s: %w", key, err)
	}
	return &Session{Key: key, ID: id, AgentID: agentID, Transcript: tr, History: history, pending: pendingCalls}, nil
}

// MessagesFromTranscript rebuilds conversation history from transcript
// lines; the tool results of one batch (a line each) become one message.
func MessagesFromTranscript(entries []store.TranscriptEntry) []Message {
	msgs := make([]Message, 0, len(entries))
	for _, e := range entries {
		if e.Type != "message" {
			continue
		}
		m := Message{Role: Role(e.Role), Text: e.Content}
		if len(e.ToolCalls) > 0 {
			_ = json.Unmarshal(e.ToolCalls, &m.ToolCalls)
		}
		if len(e.ToolResults) > 0 {
			_ = json.Unmarshal(e.ToolResults, &m.ToolResults)
		}
		if len(e.Files) > 0 {
			_ = json.Unmarshal(e.Files, &m.Files)
		}
		switch m.Role {
		case RoleUser, RoleAssistant, RoleTool:
			msgs = appendMessage(msgs, m)
		}
	}
	return msgs
}

// LastAssistantText returns the text of the last assistant message with text.
func LastAssistantText(msgs []Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == RoleAssistant && strings.TrimSpace(msgs[i].Text) != "" {
			return msgs[i].Text
		}
	}
	return ""
}

// Authorizer decides whether a tool call may run; a non-nil error is given
// to the model as the tool's error result. It may block (supervised tools
// wait for a person's approval).
type Authorizer func(ctx context.Context, cc CallContext, call ToolCall, tool Tool) error

// Turn configures one turn of a session.
type Turn struct {
	Model         *Model
	System        string
	Tools         *Registry
	Thinking      string
	MaxIterations int // model calls in this turn; 0 = 30
	Call          CallContext
	Authorize     Authorizer
	Steer         <-chan Steer // optional
	OnUsage       func(Usage)  // called after each model call
	// OnCall, if set, is called after each model call with the model that
	// answered it (a fallback's, when one answered) and its usage: spend is
	// counted at that model's cost.
	OnCall func(m *Model, u Usage)
	// Fallbacks are tried in order when Model fails with a retryable error
	// after its retries (SPEC §20); Health (if set) moves models that keep
	// failing to the end of the chain and learns from each call.
	Fallbacks []*Model
	Health    *Health
	// BeforeCall, if set, is asked before every model call, compaction
	// summaries included (budgets, SPEC §20); an error ends the turn with
	// it and no call is made.
	BeforeCall func(ctx context.Context, m *Model) error
	// OnText, if set, streams: it gets the text of the current model call
	// written so far as it arrives (from a Streamer provider; others call
	// it once with the whole text). Each model call starts again from "".
	OnText func(text string)
	// Shown, if set, reports whether the text OnText got so far reached
	// anyone (nil: it did). A call whose text was shown never moves to a
	// fallback model (a person would see two answers spliced); text shown
	// to nobody (a sub-agent streamed only in case a /focus comes) does
	// not stop the fallback.
	Shown  func() bool
	Logger *zap.Logger
	Clock  Clock
	// Resume continues a turn cut short (a crash, a drain) from the
	// history: the input is already there and is not added again; tool
	// calls whose results are in the history are not made again, and a
	// call without one is made again only when its tool is Repeatable
	// (else it gets InterruptedResult) — SPEC §25.
	Resume bool
	// Used is the model calls the turn made before it was cut (a resumed
	// run's): they count against MaxIterations.
	Used int
	// DeferInput: the input's transcript line is written with the turn's
	// next one (the first answer's) in one write, or when the session
	// closes, not before the first model call. A crash before then loses
	// it: only for an input that is stored elsewhere and that a restart
	// gives again when the transcript does not have it (a sub-agent run's
	// task, in its run row; a person's message, in its intake row: SPEC
	// §25). A turn that ends before its first answer writes it on
	// Run's return.
	DeferInput bool
	// Files are the files on the input message (SPEC §18); OpenFile reads
	// their bytes for a model that takes them as content.
	Files    []File
	OpenFile func(ctx context.Context, id string) (io.ReadCloser, error)
}

// Result is what a turn produced.
type Result struct {
	Text       string // the final assistant text
	Usage      Usage  // summed over the turn's model calls
	Iterations int
	// AnsweredBy is the ref of the model that made the turn's last call.
	AnsweredBy string
	// Fallback is the last FallbackNote of the turn ("Answered by …: …
	// failed (HTTP 529 overloaded)."), "" when the primary answered.
	Fallback string
}

// Run adds input as a user message and loops model call → tools until the
// model answers without tool calls. Every message is written to the
// transcript before the next model call. On error, Result still holds the
// usage spent so far.
//
// Run, completeChain, complete and call stay on the stack while a model
// call waits for its answer: their frames are kept small (the Turn is
// passed by pointer, what comes before and after the call are calls of
// their own) so that a call in flight holds a small goroutine stack
// (docs/performance.md, memory per model call in flight).
func (s *Session) Run(ctx context.Context, t Turn, input string) (Result, error) {
	res, err := s.run(ctx, &t, input)
	if len(s.held) > 0 {
		// A turn that ended before its first answer (an error, a cut)
		// still leaves its input in the transcript, as without
		// DeferInput: a held input is written only later, never lost
		// while the process lives.
		if ferr := s.flushHeld(); ferr != nil && err == nil {
			err = ferr
		}
	}
	return res, err
}

// flushHeld writes the held lines (Turn.DeferInput) on their own.
func (s *Session) flushHeld() error {
	if err := s.Transcript.AppendLines(context.Background(), s.held...); err != nil {
		return fmt.Errorf("write transcript of %s: %w: %w", s.Key, ErrTranscript, err)
	}
	s.held = nil
	return nil
}

// run is Run's loop.
func (s *Session) run(ctx context.Context, t *Turn, input string) (Result, error) {
	var res Result
	if err := s.begin(ctx, t, input); err != nil {
		return res, err
	}
	res.Iterations = max(t.Used, 0)
	var pendingReplies []chan SteerReply
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if res.Iterations >= t.MaxIterations {
			return res, fmt.Errorf("%w (%d)", ErrMaxIterations, t.MaxIterations)
		}
		res.Iterations++
		resp, answered, err := s.completeChain(ctx, t, &res)
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return res, ctxErr
			}
			return res, err
		}
		done, err := s.answered(ctx, t, &res, resp, answered, &pendingReplies)
		if err != nil || done {
			return res, err
		}
	}
}

// begin sets t's defaults, settles the tool calls a cut turn left pending
// and adds input (unless the turn resumes).
func (s *Session) begin(ctx context.Context, t *Turn, input string) error {
	if t.Clock == nil {
		t.Clock = SystemClock{}
	}
	if t.Logger == nil {
		t.Logger = zap.NewNop()
	}
	if t.MaxIterations <= 0 {
		t.MaxIterations = 30
	}
	if t.Tools == nil {
		t.Tools = NewRegistry()
	}
	if len(s.pending) > 0 {
		// The last turn died while running these tool calls. Resumed, it
		// runs the ones that are safe to repeat (Repeatable); the others,
		// and every call when a new turn starts, are closed as
		// interrupted, so the history stays valid and nothing acts twice.
		calls := s.pending
		s.pending = nil
		for _, call := range calls {
			r := interruptedFor(call)
			if tool, ok := t.Tools.Get(call.Name); ok && t.Resume && IsRepeatable(tool) {
				r = s.callTool(ctx, t, call)
			}
			if err := s.appendResult(ctx, r, t.Clock); err != nil {
				return err
			}
		}
	}
	if t.Resume {
		return nil
	}
	m := Message{Role: RoleUser, Text: input, Files: t.Files}
	if t.DeferInput && s.Transcript != nil {
		s.appendHistory(m)
		s.held = append(s.held, transcriptEntry(m, nil, "", t.Clock))
		return nil
	}
	return s.append(ctx, m, nil, "", t.Clock)
}

// answered records a model call's answer resp (by answered), runs its tool
// calls and takes the steering messages that came meanwhile; done: the
// turn ends with res.Text set.
func (s *Session) answered(ctx context.Context, t *Turn, res *Result, resp *Response, answered *Model, pendingReplies *[]chan SteerReply) (done bool, _ error) {
	res.Usage = res.Usage.Add(resp.Usage)
	res.AnsweredBy = answered.Ref
	if t.OnUsage != nil {
		t.OnUsage(resp.Usage)
	}
	if t.OnCall != nil {
		t.OnCall(answered, resp.Usage)
	}
	msg := Message{Role: RoleAssistant, Text: resp.Text, ToolCalls: resp.ToolCalls}
	if err := s.append(ctx, msg, &resp.Usage, answered.Ref, t.Clock); err != nil {
		return false, err
	}
	if resp.Text != "" {
		for _, r := range *pendingReplies {
			r <- SteerReply{Text: resp.Text}
		}
		*pendingReplies = nil
	}
	if len(resp.ToolCalls) > 0 {
		// The per-call journal (SPEC §25): each result is written when
		// its call ends, so a crash later in the batch keeps it.
		for i := 0; i < len(resp.ToolCalls); {
			calls := preparable(t, resp.ToolCalls[i:])
			if len(calls) < 2 {
				if err := s.appendResult(ctx, s.callTool(ctx, t, resp.ToolCalls[i]), t.Clock); err != nil {
					return false, err
				}
				i++
				continue
			}
			if err := s.callPrepared(ctx, t, calls); err != nil {
				return false, err
			}
			i += len(calls)
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
	}
	// Steering messages arrive between tool calls; one that is pending
	// when the model has finished starts another round.
	steered := false
	for more := true; more && t.Steer != nil; {
		select {
		case st := <-t.Steer:
			if err := s.append(ctx, Message{Role: RoleUser, Text: st.Text}, nil, "", t.Clock); err != nil {
				return false, err
			}
			if st.Reply != nil {
				*pendingReplies = append(*pendingReplies, st.Reply)
			}
			steered = true
		default:
			more = false
		}
	}
	if len(resp.ToolCalls) == 0 && !steered {
		res.Text = resp.Text
		return true, nil
	}
	return false, nil
}

// completeChain makes one model call with t.Model, or — when it fails with
// a retryable error after its retries — with each fallback in turn
// (models that cool down last). A streamed reply falls back only before
// its first text. It returns the model that answered.
func (s *Session) completeChain(ctx context.Context, t *Turn, res *Result) (*Response, *Model, error) {
	c := &chain{models: append([]*Model{t.Model}, t.Fallbacks...)}
	models := t.Health.order(c.models)
	for i, m := range models {
		tm, err := c.turn(ctx, t, m)
		if err != nil {
			return nil, m, err
		}
		resp, err := s.complete(ctx, tm, res)
		if err == nil {
			s.chainAnswered(t, c, m, res)
			return resp, m, nil
		}
		if err = s.chainFailed(ctx, t, c, models, i, err); err != nil {
			return nil, m, err
		}
	}
	return nil, t.Model, errors.New("no model to call") // unreachable: models holds t.Model
}

// chain is the state of one completeChain.
type chain struct {
	models    []*Model          // t.Model, then its fallbacks
	failures  []string          // "<ref> failed (<reason>)", of this call
	failedNow map[string]string // ref → reason, of this call
	wrote     bool              // the current model's text reached someone
}

// turn is t for a call with m (after BeforeCall allows it), on the heap.
// Nothing a call does writes to the Turn it is given.
func (c *chain) turn(ctx context.Context, t *Turn, m *Model) (*Turn, error) {
	if t.BeforeCall != nil {
		if err := t.BeforeCall(ctx, m); err != nil {
			return nil, err
		}
	}
	c.wrote = false
	if m == t.Model && t.OnText == nil {
		// Nothing to change for this call: t itself, no copy (a Turn is
		// 576 B, kept as long as the call waits; an announce step's call,
		// a turn nobody watches).
		return t, nil
	}
	tm := new(Turn)
	*tm = *t
	tm.Model = m
	if onText, shown := t.OnText, t.Shown; onText != nil {
		tm.OnText = func(text string) {
			onText(text)
			if text != "" && (shown == nil || shown()) {
				c.wrote = true
			}
		}
	}
	return tm, nil
}

// chainAnswered notes that m answered the call.
func (s *Session) chainAnswered(t *Turn, c *chain, m *Model, res *Result) {
	t.Health.Succeeded(m.Ref)
	if why := t.Health.whyNotFirst(c.models, m.Ref, c.failedNow); len(why) > 0 {
		res.Fallback = FallbackNote(m.Ref, why)
		t.logger().Info("a fallback model answered", zap.String("sessionKey", s.Key), zap.String("model", m.Ref),
			zap.String("note", res.Fallback))
	}
}

// chainFailed handles the failure err of models[i]: nil when the next
// model of the chain is to be tried, else the call's error.
func (s *Session) chainFailed(ctx context.Context, t *Turn, c *chain, models []*Model, i int, err error) error {
	m := models[i]
	if ctx.Err() != nil || !Retryable(err) {
		return err
	}
	reason := FailureReason(err)
	t.Health.Failed(m.Ref, reason)
	if c.failedNow == nil {
		c.failedNow = map[string]string{}
	}
	c.failedNow[m.Ref] = reason
	if c.wrote || i == len(models)-1 {
		if len(c.failures) > 0 {
			err = fmt.Errorf("%s; then %s failed: %w", strings.Join(c.failures, ", "), m.Ref, err)
		}
		return err
	}
	c.failures = append(c.failures, fmt.Sprintf("%s failed (%s)", m.Ref, reason))
	t.logger().Warn("model call failed; trying the next model of the chain", zap.String("sessionKey", s.Key),
		zap.String("model", m.Ref), zap.String("next", models[i+1].Ref), zap.String("reason", reason))
	return nil
}

// complete makes one model call with the history fitted into the context
// budget; a context-length refusal gets one forced compaction and one retry.
func (s *Session) complete(ctx context.Context, t *Turn, res *Result) (*Response, error) {
	resp, err := s.call(ctx, t, res, false)
	if err != nil && errors.Is(err, ErrContextLength) && ctx.Err() == nil {
		t.Logger.Info("the provider refused the context length; compacting and retrying once", zap.String("sessionKey", s.Key), zap.Error(err))
		resp, err = s.call(ctx, t, res, true)
	}
	return resp, err
}

// call is one attempt of complete.
func (s *Session) call(ctx context.Context, t *Turn, res *Result, force bool) (*Response, error) {
	req, err := s.request(ctx, t, res, force)
	if err != nil {
		return nil, err
	}
	ctx, span := startChatSpan(ctx, t.Model, req)
	var resp *Response
	switch st, ok := t.Model.Provider.(Streamer); {
	case t.OnText == nil:
		resp, err = t.Model.Provider.Complete(ctx, *req)
	case ok:
		resp, err = st.Stream(ctx, *req, t.OnText)
	default:
		resp, err = t.Model.Provider.Complete(ctx, *req)
		if err == nil && resp.Text != "" {
			t.OnText(resp.Text)
		}
	}
	endChatSpan(ctx, span, resp, err)
	return resp, err
}

// request is the Request of a call: the history fitted into the context
// budget (its compaction's usage added to res).
func (s *Session) request(ctx context.Context, t *Turn, res *Result, force bool) (*Request, error) {
	msgs, spent, err := s.fit(ctx, t, force)
	res.Usage = res.Usage.Add(spent)
	if err != nil {
		return nil, err
	}
	return &Request{
		Model: t.Model.ID, System: t.System, Messages: msgs, Tools: t.Tools.Specs(),
		Thinking: t.Thinking, MaxTokens: t.Model.MaxTokens,
		Images: t.Model.Images, OpenFile: t.OpenFile,
	}, nil
}

func (s *Session) callTool(ctx context.Context, t *Turn, call ToolCall) ToolResult {
	c := s.checkCall(ctx, t, call)
	return s.runCall(t, &c)
}

// checkedCall is a tool call past checkCall: refused (r is its result),
// or allowed to run.
type checkedCall struct {
	ctx     context.Context // the call's, within its span
	span    trace.Span
	call    ToolCall
	cc      CallContext
	args    json.RawMessage
	tool    Tool
	refused bool
	r       ToolResult
}

// checkCall starts a call's span and checks the call: its tool exists
// and t.Authorize allows it (the tool policy, an approval's wait).
func (s *Session) checkCall(ctx context.Context, t *Turn, call ToolCall) checkedCall {
	c := checkedCall{call: call, cc: t.Call, args: call.Args, r: ToolResult{CallID: call.ID, Name: call.Name}}
	c.cc.CallID = call.ID
	if len(c.args) == 0 {
		c.args = json.RawMessage("{}")
	}
	// The span covers the policy check and an approval's wait too.
	c.ctx, c.span = startToolSpan(ctx, call, c.args)
	tool, ok := t.Tools.Get(call.Name)
	if !ok {
		c.refused = true
		c.r.IsError = true
		c.r.Content = errorJSON(fmt.Sprintf("unknown tool %q; available tools: %s", call.Name, strings.Join(t.Tools.Names(), ", ")))
		return c
	}
	c.tool = tool
	if t.Authorize != nil {
		if err := t.Authorize(c.ctx, c.cc, call, tool); err != nil {
			c.refused = true
			c.r.IsError = true
			c.r.Content = errorJSON(err.Error())
		}
	}
	return c
}

// runCall runs a checked call (a refused one keeps its result) and ends
// its span.
func (s *Session) runCall(t *Turn, c *checkedCall) ToolResult {
	defer func() { endToolSpan(c.ctx, c.span, c.r) }()
	if c.refused {
		return c.r
	}
	out, err := c.tool.Call(c.ctx, c.cc, c.args)
	if err != nil {
		c.r.IsError = true
		c.r.Content = errorJSON(err.Error())
		t.Logger.Debug("tool error", zap.String("tool", c.call.Name), zap.Error(err))
		return c.r
	}
	c.r.Content = out
	return c.r
}

// preparable is the run of calls at the head of calls that go to one
// Preparer tool: empty when the first call's tool is not one.
func preparable(t *Turn, calls []ToolCall) []ToolCall {
	tool, ok := t.Tools.Get(calls[0].Name)
	if _, prep := tool.(Preparer); !ok || !prep {
		return nil
	}
	n := 1
	for n < len(calls) && calls[n].Name == calls[0].Name {
		n++
	}
	return calls[:n]
}

// callPrepared runs calls, consecutive calls of one Preparer tool, as
// callTool runs each, except that the calls every check allows are
// prepared together first (one store transaction for all the spawns of
// a response). Each result is still written when its call ends (SPEC
// §25); a call prepared but not run, because writing an earlier result
// failed, is run with its result dropped, as a crash would leave it.
func (s *Session) callPrepared(ctx context.Context, t *Turn, calls []ToolCall) error {
	checked := make([]checkedCall, len(calls))
	allowed := make([]PreparedCall, 0, len(calls))
	for i, call := range calls {
		checked[i] = s.checkCall(ctx, t, call)
		if c := &checked[i]; !c.refused {
			allowed = append(allowed, PreparedCall{Ctx: c.ctx, CC: &c.cc, Args: c.args})
		}
	}
	if len(allowed) > 1 {
		tool, _ := t.Tools.Get(calls[0].Name)
		tool.(Preparer).Prepare(allowed)
		defer tool.(Preparer).Done(allowed)
	}
	if s.Transcript != nil {
		defer s.Transcript.Hold()() // 100 spawns' results: a write each, one open
	}
	for i := range checked {
		if err := s.appendResult(ctx, s.runCall(t, &checked[i]), t.Clock); err != nil {
			for j := i + 1; j < len(checked); j++ {
				s.runCall(t, &checked[j])
			}
			return err
		}
	}
	return nil
}

func errorJSON(msg string) string {
	b, _ := json.Marshal(map[string]string{"status": "error", "error": msg})
	return string(b)
}

// Record appends m to the session's history and transcript as a turn
// does, for a runner that is not the model loop (an ACP agent, SPEC §26):
// both write the same lines.
func (s *Session) Record(ctx context.Context, m Message, u *Usage, model string, clock Clock) error {
	return s.append(ctx, m, u, model, clock)
}

// appendResult records the result of one tool call: a transcript line of
// its own, merged into the batch's tool message in history.
func (s *Session) appendResult(ctx context.Context, r ToolResult, clock Clock) error {
	return s.append(ctx, Message{Role: RoleTool, ToolResults: []ToolResult{r}}, nil, "", clock)
}

// append records m in history and the transcript (after the held lines,
// in one write).
func (s *Session) append(ctx context.Context, m Message, u *Usage, model string, clock Clock) error {
	s.appendHistory(m)
	if s.Transcript == nil {
		return nil
	}
	if err := s.writeLine(ctx, transcriptEntry(m, u, model, clock)); err != nil {
		return fmt.Errorf("write transcript of %s: %w: %w", s.Key, ErrTranscript, err)
	}
	return nil
}

// writeLine appends e to the transcript, after the held lines, in one
// write.
func (s *Session) writeLine(ctx context.Context, e store.TranscriptEntry) error {
	if len(s.held) == 0 {
		return s.Transcript.Append(ctx, e)
	}
	err := s.Transcript.AppendLines(ctx, append(s.held, e)...)
	if err == nil {
		s.held = nil
	}
	return err
}

// transcriptEntry is m's transcript line.
func transcriptEntry(m Message, u *Usage, model string, clock Clock) store.TranscriptEntry {
	e := store.TranscriptEntry{Type: "message", Role: string(m.Role), Content: m.Text, Model: model, Timestamp: clock.Now().UTC()}
	if len(m.ToolCalls) > 0 {
		e.ToolCalls, _ = json.Marshal(m.ToolCalls)
	}
	if len(m.ToolResults) > 0 {
		e.ToolResults, _ = json.Marshal(m.ToolResults)
	}
	if len(m.Files) > 0 {
		e.Files, _ = json.Marshal(m.Files)
	}
	if u != nil {
		e.Usage, _ = json.Marshal(u)
	}
	return e
}

// appendHistory is appendMessage on History, with a tool result merged
// into the last tool message in place when that message's results are
// the slice this session made (s.results): nothing else holds its spare
// room. Views of History taken before keep their lengths and see no
// change but the last message's new results, as with appendMessage.
func (s *Session) appendHistory(m Message) {
	n := len(s.History)
	if n == 0 || m.Role != RoleTool || s.History[n-1].Role != RoleTool {
		s.History, s.results = appendMessage(s.History, m), nil
		return
	}
	last := s.History[n-1].ToolResults
	if len(last) != len(s.results) || len(last) == 0 || &last[0] != &s.results[0] {
		s.results = make([]ToolResult, len(last), 2*(len(last)+len(m.ToolResults)))
		copy(s.results, last)
	}
	s.results = append(s.results, m.ToolResults...)
	s.History[n-1].ToolResults = s.results
}

// PendingCalls reports whether the history ends with tool calls of a cut
// turn that have no results yet.
func (s *Session) PendingCalls() bool { return len(s.pending) > 0 }

// AddUser appends a user message to the history and the transcript
// without a model call: a sub-agent's result folded in before a turn
// (SPEC §23). Not while PendingCalls: a message there would split the
// calls from their results.
func (s *Session) AddUser(ctx context.Context, text string, clock Clock) error {
	if len(s.pending) > 0 {
		return errors.New("add a message: tool calls of a cut turn are pending")
	}
	if clock == nil {
		clock = SystemClock{}
	}
	return s.append(ctx, Message{Role: RoleUser, Text: text}, nil, "", clock)
}

// Close writes the held lines and closes the transcript.
func (s *Session) Close() error {
	if s.Transcript == nil {
		return nil
	}
	var err error
	if len(s.held) > 0 {
		err = s.flushHeld()
		s.held = nil
	}
	return errors.Join(err, s.Transcript.Close())
}
