package command

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent"
)

// Request is one command message.
type Request struct {
	SessionKey string          // the current requester session
	Origin     channels.Origin // where the command came from
	SenderID   string
	Text       string // the raw message text
	// Bound is the sub-agent run whose child session the command's thread
	// is bound to (SPEC §24); nil in an unbound conversation. Commands
	// about sub-agents then act on that child: /stop stops it,
	// /subagents lists it (as #1) and the runs below it, /approve answers
	// its requests.
	Bound *store.Run
	// Unverified is channels.Inbound.Unverified: set, /approve is refused
	// with it (a device the sender has not verified may not grant a
	// tool call; /deny stays open, refusing is never the risky answer).
	Unverified string
}

// Env is what the commands act on. Every field may be nil: a command that
// needs a missing one says it is not available instead of failing.
type Env struct {
	Subagents *subagent.Manager
	Store     store.Sessions
	Config    *config.Config
	AgentID   string                       // the session's agent
	AbortTurn func(sessionKey string) bool // cancels the session's running turn; reports whether one was running
	// Approve resolves a pending approval of THIS session only; errors wrap
	// store.ErrNotFound or store.ErrResolved.
	Approve func(ctx context.Context, sessionKey, code string, approve bool, by string) (*store.Approval, error)
	Now     func() time.Time
	// Session acts on the requester session itself (/new, /reset,
	// /compact, /model, /think).
	Session SessionControl
	// Schedules runs /schedule and gives /status its next firing (SPEC §19).
	Schedules Schedules
	// Spend answers /usage and gives /status its lines about models
	// (which answered and why, cooldowns) and spend (SPEC §20).
	Spend Spend
	// Memory runs /memory [forget <id>] for a conversation (SPEC §28).
	Memory func(ctx context.Context, sessionKey, agentID, args string) string
	// Threads binds chat threads to sub-agents (/focus, /unfocus, the 🧵
	// of /subagents list; SPEC §24).
	Threads Threads
}

// Threads is the part of the gateway's thread bindings the commands use.
type Threads interface {
	// Focus binds the thread at thread to run's child session.
	Focus(ctx context.Context, thread channels.Origin, run *store.Run, by string) error
	// Unfocus ends the thread's binding; ok is false when it had none.
	Unfocus(ctx context.Context, thread channels.Origin) (ok bool, err error)
	// Bound returns which of the child sessions childKeys a thread is
	// bound to.
	Bound(ctx context.Context, childKeys []string) map[string]bool
}

// Spend is the part of the gateway's spend accounting the commands use.
type Spend interface {
	Usage(ctx context.Context, sessionKey, agentID string) (string, error)
	StatusLines(sessionKey string) []string
}

// Schedules is the part of the scheduler the commands use
// (*schedule.Scheduler).
type Schedules interface {
	Command(ctx context.Context, c schedule.Conversation, args string) string
	StatusLine(ctx context.Context, sessionKey string) string
}

// NotApproverError is returned by Env.Approve when the sender may not
// answer the request: only the person whose message led to it (Name) or a
// listed approver of the channel may (SPEC §17). Its text is the reply.
type NotApproverError struct{ Name string }

func (e *NotApproverError) Error() string {
	return fmt.Sprintf("⛔ Only %s or an approver can answer this request.", e.Name)
}

// UnverifiedText is the reply to an /approve from a device that is not
// known to be verified; why says what is wrong with it.
func UnverifiedText(why string) string {
	return "⛔ Approvals are taken only from a verified device: " + why + "."
}

// sendTimeout bounds /subagents send (SPEC §8: 30 s); tests shorten it.
var sendTimeout = 30 * time.Second

// Replies that are fixed text.
const (
	replyNone        = "🧭 Subagents: none for this session."
	replyUnavailable = "⚠️ Sub-agents are not available in this gateway."
	replyNoSession   = "⚠️ This message has no conversation to act on."
)

// Handle runs the command in req.Text and returns the reply to post in the
// same thread. handled is false when the text is not a command of this
// package (it belongs to the agent).
func Handle(ctx context.Context, env Env, req Request) (reply string, handled bool) {
	c, err := Parse(req.Text)
	if errors.Is(err, ErrNotCommand) {
		return "", false
	}
	var ue *UsageError
	if errors.As(err, &ue) && req.Bound != nil && c.Name == NameSubagents && c.Target == "" &&
		(c.Action == ActionInfo || c.Action == ActionLog || c.Action == ActionStop) {
		// In a bound thread, /subagents info (log, stop) is about its child.
		c.Target, err = "1", nil
		if c.Action == ActionLog {
			c.Limit = DefaultLogLimit
		}
	}
	if errors.As(err, &ue) {
		return ue.Usage, true
	}
	h := handler{env: env, req: req}
	if h.env.Now == nil {
		h.env.Now = time.Now
	}
	if strings.TrimSpace(req.SessionKey) == "" && c.Name != NameHelp {
		return replyNoSession, true
	}
	switch c.Name {
	case NameSubagents:
		return h.subagents(ctx, c), true
	case NameStop:
		return h.stop(ctx), true
	case NameApprove, NameDeny:
		return h.approve(ctx, c), true
	case NameStatus:
		return h.status(ctx), true
	case NameNew, NameReset:
		return h.newSession(ctx), true
	case NameCompact:
		return h.compact(ctx, c.Arg), true
	case NameModel:
		return h.model(ctx, c.Arg), true
	case NameThink:
		return h.think(ctx, c.Arg), true
	case NameSchedule:
		return h.schedule(ctx, c.Arg), true
	case NameUsage:
		return h.usage(ctx), true
	case NameFocus:
		return h.focus(ctx, c.Target), true
	case NameUnfocus:
		return h.unfocus(ctx), true
	case NameMemory:
		if h.env.Memory == nil {
			return "⚠️ Memory is not available in this gateway.", true
		}
		return h.env.Memory(ctx, req.SessionKey, env.AgentID, c.Arg), true
	default:
		return helpText, true
	}
}

const helpText = `❓ Commands
/subagents list — the sub-agents of this conversation, newest first
/subagents stop <id|#|all> — stop one sub-agent (and those it spawned), or all
/subagents log <id|#> [limit] [tools] — a sub-agent's recent messages
/subagents info <id|#> — details of one sub-agent run
/subagents send <id|#> <message> — steer a running sub-agent or ask a finished one
/stop — abort the current turn and every sub-agent below it
/approve <code> — let a supervised tool call run
/deny <code> — refuse a supervised tool call
/status — model, tokens and sub-agents of this conversation
/new, /reset — start a fresh session here (sub-agents still running announce here)
/compact [focus] — summarise the older turns now to free context
/model [provider/model|default] — show or set this conversation's model
/think [off|low|medium|high|default] — show or set this conversation's thinking
/schedule every|cron|in|at … <task> — a run announced here later; /schedule list|pause|resume|remove <id>
/usage — what this conversation and its agent spent today and this month, and the costliest runs
/focus <id|#|label> — this thread talks to that sub-agent (any conversation of this chat); /unfocus — back to the agent
/memory — the agent's memories of this conversation; /memory forget <id> removes one
/help — this list`

type handler struct {
	env Env
	req Request
}

func (h handler) subagents(ctx context.Context, c Command) string {
	m := h.env.Subagents
	if m == nil {
		return replyUnavailable
	}
	if c.Action == ActionList {
		return h.list(ctx)
	}
	if c.Action == ActionStop && c.Target == TargetAll {
		var n int
		if h.req.Bound != nil {
			n = m.Stop(ctx, h.req.Bound.ID)
		} else {
			n = m.StopBelow(ctx, h.req.SessionKey)
		}
		return fmt.Sprintf("⚙️ Stopped %d %s.", n, plural(n, "subagent", "subagents"))
	}
	r, reply := h.resolve(ctx, c.Target)
	if r == nil {
		return reply
	}
	switch c.Action {
	case ActionStop:
		// A run that ended may still have live runs below it: stop those too.
		if n := m.Stop(ctx, r.ID); n == 0 && r.Status == store.StatusDone {
			return fmt.Sprintf("ℹ️ %s has already ended (%s).", title(r), subagent.DisplayStatus(r))
		}
		return fmt.Sprintf("⚙️ Stop requested for %s.", title(r))
	case ActionLog:
		return h.log(ctx, r, c.Limit, c.Tools)
	case ActionInfo:
		return h.info(r)
	default:
		return h.send(ctx, r, c.Message)
	}
}

// resolve finds target among the current session's runs, or returns the
// reply saying why not.
func (h handler) resolve(ctx context.Context, target string) (*store.Run, string) {
	var r *store.Run
	var err error
	if h.req.Bound != nil {
		r, err = h.env.Subagents.ResolveBound(ctx, h.req.Bound, target)
	} else {
		r, err = h.env.Subagents.Resolve(ctx, h.req.SessionKey, target)
	}
	switch {
	case err == nil:
		return r, ""
	case errors.Is(err, subagent.ErrAmbiguous):
		return nil, fmt.Sprintf("⚠️ %q matches more than one subagent; use its number from /subagents list.", shortID(target))
	case errors.Is(err, subagent.ErrNoMatch):
		return nil, fmt.Sprintf("⚠️ No subagent matches %q.", shortID(target))
	default:
		return nil, "⚠️ Could not read this conversation's sub-agents; try again in a moment."
	}
}

// runs are the sub-agents the commands act on: the current session's, or
// in a bound thread its child and the runs below it.
func (h handler) runs(ctx context.Context) ([]store.Run, error) {
	if h.req.Bound != nil {
		return h.env.Subagents.BoundRuns(ctx, h.req.Bound)
	}
	return h.env.Subagents.Runs(ctx, h.req.SessionKey)
}

func (h handler) list(ctx context.Context) string {
	runs, err := h.runs(ctx)
	if err != nil {
		return "⚠️ Could not read this conversation's sub-agents; try again in a moment."
	}
	if len(runs) == 0 {
		return replyNone
	}
	active, done := count(runs)
	now := h.env.Now()
	var b strings.Builder
	fmt.Fprintf(&b, "🧭 Subagents (current session)\nActive: %d · Done: %d", active, done)
	if n := subagent.WaitingFor(runs, h.req.SessionKey); n > 0 {
		fmt.Fprintf(&b, "\nThis conversation: %s", subagent.Waiting(n))
	}
	batches := subagent.Batches(runs)
	batchOf := map[string]int{}
	for _, bs := range batches {
		fmt.Fprintf(&b, "\n%s", bs)
		batchOf[bs.Batch] = bs.N
	}
	var bound map[string]bool
	if h.env.Threads != nil {
		keys := make([]string, len(runs))
		for i := range runs {
			keys[i] = runs[i].ChildKey
		}
		bound = h.env.Threads.Bound(ctx, keys)
	}
	for i := range runs {
		r := &runs[i]
		mark := ""
		if r.Batch != "" {
			mark = subagent.BatchMark(batchOf[r.Batch]) // one sessions_spawn with tasks
		}
		if bound[r.ChildKey] {
			mark += "🧵 " // a thread talks to it
		}
		fmt.Fprintf(&b, "\n%d) %s · %s%s · %s · run %s · %s", i+1, listStatus(r), mark, title(r), age(r, now), shortRun(r.ID), r.ChildKey)
	}
	return b.String()
}

func count(runs []store.Run) (active, done int) {
	for i := range runs {
		if runs[i].Status == store.StatusDone {
			done++
		} else {
			active++
		}
	}
	return active, done
}

// listStatus is the status people see, with the note of a live run (e.g.
// "running (awaiting approval K3F9)").
func listStatus(r *store.Run) string {
	s := subagent.DisplayStatus(r)
	if s == "" {
		s = "unknown"
	}
	return s + statusNotes(r)
}

// statusNotes follow a run's status: resumed after a stop of the gateway
// (SPEC §25), and the note of a live run.
func statusNotes(r *store.Run) string {
	var notes []string
	if tag := subagent.ResumedTag(r); tag != "" {
		notes = append(notes, tag)
	}
	if r.Status != store.StatusDone && strings.TrimSpace(r.Note) != "" {
		notes = append(notes, oneLine(r.Note, 60))
	}
	if len(notes) == 0 {
		return ""
	}
	return " (" + strings.Join(notes, "; ") + ")"
}

// age is, for a live run, how long ago it started (or was queued) — "2m
// ago" — and for an ended run how long it ran — "14s".
func age(r *store.Run, now time.Time) string {
	if r.Status == store.StatusDone {
		return subagent.FormatRuntime(subagent.Runtime(r, now))
	}
	since := r.StartedAt
	if since.IsZero() {
		since = r.CreatedAt
	}
	return ago(now.Sub(since))
}

// ago renders an elapsed time coarsely: "12s ago", "2m ago", "3h ago", "2d ago".
func ago(d time.Duration) string {
	s := int64(max(d, 0) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds ago", s)
	case s < 3600:
		return fmt.Sprintf("%dm ago", s/60)
	case s < 86400:
		return fmt.Sprintf("%dh ago", s/3600)
	default:
		return fmt.Sprintf("%dd ago", s/86400)
	}
}

// title is the label, else the task, on one line and at most 72 characters.
func title(r *store.Run) string {
	return oneLine(subagent.TaskTitle(r.Label, r.Task), 72)
}

func oneLine(s string, n int) string {
	return subagent.Truncate(strings.Join(strings.Fields(s), " "), n)
}

func shortRun(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// shortID keeps an id typed by a person short enough to quote back.
func shortID(s string) string { return subagent.Truncate(s, 64) }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func (h handler) log(ctx context.Context, r *store.Run, limit int, tools bool) string {
	var b strings.Builder
	b.WriteString("📜 Subagent log: " + title(r))
	if tag := subagent.ResumedTag(r); tag != "" {
		b.WriteString(" (" + tag + " after the gateway stopped)")
	}
	msgs, err := h.env.Subagents.History(ctx, r)
	switch {
	case err != nil && !r.ArchivedAt.IsZero():
		b.WriteString("\n(the transcript was archived)")
		return b.String()
	case errors.Is(err, os.ErrNotExist):
		b.WriteString("\n(no messages yet)")
		return b.String()
	case err != nil:
		return fmt.Sprintf("⚠️ Could not read the log of %s; the transcript is at %s.", title(r), h.env.Subagents.TranscriptPath(r))
	}
	lines := subagent.HistoryLines(msgs, tools)
	if len(lines) > limit {
		lines = lines[len(lines)-limit:]
	}
	if len(lines) == 0 {
		b.WriteString("\n(no messages yet)")
	}
	for _, l := range lines {
		b.WriteString("\n")
		switch l.Role {
		case "user":
			if subagent.IsAnnouncePrompt(l.Text) {
				// Herald's own prompt: the next line is the announce's text.
				b.WriteString("Announce step (Herald's prompt; the reply below is what was posted)")
				continue
			}
			b.WriteString("User: " + clip(l.Text))
		case "assistant":
			b.WriteString("Assistant: " + clip(l.Text))
		case "tool_call":
			b.WriteString("Tool call: " + l.ToolName + " " + clip(l.Text))
		case "tool_result":
			b.WriteString("Tool result: " + l.ToolName + ": " + clip(l.Text))
		default:
			b.WriteString(l.Role + ": " + clip(l.Text))
		}
	}
	return b.String()
}

// clip puts one log entry on one line and bounds it, so a long tool output
// does not flood the chat.
func clip(s string) string { return oneLine(s, 500) }

func (h handler) info(r *store.Run) string {
	now := h.env.Now()
	// The same word as /subagents list and the web chat's panel: the
	// outcome once done (success, error …).
	status := subagent.DisplayStatus(r) + statusNotes(r)
	runtime := "-"
	if !r.StartedAt.IsZero() {
		runtime = subagent.FormatRuntime(subagent.Runtime(r, now))
	}
	archive := stamp(r.ArchiveAt)
	if !r.ArchivedAt.IsZero() {
		archive = "archived " + stamp(r.ArchivedAt)
	}
	outcome := dash(r.Outcome)
	// Why a run failed or stopped; a success's note is the announce's Notes.
	if r.Status == store.StatusDone && r.Outcome != store.OutcomeSuccess && strings.TrimSpace(r.Note) != "" {
		outcome += " (" + oneLine(r.Note, 200) + ")"
	}
	lines := []string{
		"ℹ️ Subagent info",
		"Status: " + dash(status),
		"Label: " + dash(oneLine(r.Label, 200)),
		"Task: " + dash(oneLine(r.Task, 1000)),
		"Run: " + r.ID,
		"Session: " + r.ChildKey,
		"SessionId: " + dash(r.ChildSessionID),
		"Transcript: " + dash(h.env.Subagents.TranscriptPath(r)),
		"Model: " + dash(r.Model),
		"Runtime: " + runtime,
		"Created: " + stamp(r.CreatedAt),
		"Started: " + stamp(r.StartedAt),
		"Ended: " + stamp(r.EndedAt),
		"Cleanup: " + dash(r.Cleanup),
		"Archive: " + archive,
		"Outcome: " + outcome,
		"Tokens: " + tokens(r.TokensIn, r.TokensOut),
	}
	if r.Batch != "" {
		// Which sessions_spawn with tasks started it (SPEC §23).
		lines = slices.Insert(lines, 5, "Batch: "+r.Batch)
	}
	return strings.Join(lines, "\n")
}

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func tokens(in, out int64) string {
	return fmt.Sprintf("%s (in %s / out %s)", subagent.FormatTokens(in+out), subagent.FormatTokens(in), subagent.FormatTokens(out))
}

func (h handler) send(ctx context.Context, r *store.Run, message string) string {
	res := h.env.Subagents.Send(ctx, r, message, sendTimeout)
	switch res.Status {
	case "ok":
		reply := strings.TrimSpace(res.Reply)
		if reply == "" {
			reply = "(no reply text)"
		}
		return "💬 " + title(r) + "\n" + reply
	case "timeout", "accepted":
		return fmt.Sprintf("⏳ Subagent still running (run %s).", shortRun(r.ID))
	default:
		return fmt.Sprintf("⚠️ Could not send to %s: %s", title(r), oneLine(dash(res.Error), 300))
	}
}

func (h handler) stop(ctx context.Context) string {
	if r := h.req.Bound; r != nil {
		// /stop in a bound thread stops its child (and the runs below it)
		// and a turn of it answering in the thread.
		if h.env.AbortTurn != nil {
			h.env.AbortTurn(r.ChildKey)
		}
		n := 0
		if h.env.Subagents != nil {
			n = h.env.Subagents.Stop(ctx, r.ID)
		}
		return fmt.Sprintf("⚙️ Agent was aborted. Stopped %d %s.", n, plural(n, "sub-agent", "sub-agents"))
	}
	if h.env.AbortTurn != nil {
		h.env.AbortTurn(h.req.SessionKey)
	}
	n := 0
	if h.env.Subagents != nil {
		n = h.env.Subagents.StopBelow(ctx, h.req.SessionKey)
	}
	return fmt.Sprintf("⚙️ Agent was aborted. Stopped %d %s.", n, plural(n, "sub-agent", "sub-agents"))
}

func (h handler) approve(ctx context.Context, c Command) string {
	approve := c.Name == NameApprove
	unknown := fmt.Sprintf("⚠️ No pending approval %q.", shortID(c.Code))
	if h.env.Approve == nil {
		return unknown
	}
	if approve && h.req.Unverified != "" {
		return UnverifiedText(h.req.Unverified)
	}
	// Approvals belong to the root conversation; a bound thread answers
	// those of its child's.
	session := h.req.SessionKey
	if h.req.Bound != nil {
		session = h.req.Bound.RootKey
	}
	a, err := h.env.Approve(ctx, session, c.Code, approve, h.req.SenderID)
	if errors.Is(err, store.ErrNotFound) && strings.ToUpper(c.Code) != c.Code {
		// Codes are shown in upper case; accept them typed in lower case.
		a, err = h.env.Approve(ctx, session, strings.ToUpper(c.Code), approve, h.req.SenderID)
	}
	// Another conversation's approval must look exactly like an unknown code.
	if a != nil && a.SessionKey != "" && a.SessionKey != session {
		return unknown
	}
	var notApprover *NotApproverError
	switch {
	case errors.As(err, &notApprover):
		return notApprover.Error()
	case err == nil && a != nil:
		if approve {
			return fmt.Sprintf("✅ Approved %s: %s will run.", a.Code, dash(a.Tool))
		}
		return fmt.Sprintf("⛔ Denied %s: %s will not run.", a.Code, dash(a.Tool))
	case errors.Is(err, store.ErrResolved) && a != nil:
		if a.Status == store.ApprovalExpired {
			return fmt.Sprintf("⚠️ Approval %s expired: %s did not run.", a.Code, dash(a.Tool))
		}
		return fmt.Sprintf("⚠️ Approval %s was already %s.", a.Code, a.Status)
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrResolved), err == nil:
		return unknown
	default:
		return fmt.Sprintf("⚠️ Could not resolve approval %q; try again in a moment.", shortID(c.Code))
	}
}

func (h handler) status(ctx context.Context) string {
	model := "-"
	if h.env.Config != nil {
		model = dash(h.env.Config.AgentModel(h.env.AgentID))
	}
	if h.env.Session != nil {
		if set, err := h.env.Session.Settings(ctx, h.req.SessionKey); err == nil && set.Model != "" {
			model = set.Model + " (this conversation)"
		}
	}
	var in, out int64
	if h.env.Store != nil {
		if s, err := h.env.Store.GetSession(ctx, h.req.SessionKey); err == nil {
			in, out = s.TokensIn, s.TokensOut
		}
	}
	lines := []string{
		"📊 Status",
		"Agent: " + dash(h.env.AgentID),
		"Model: " + model,
		"Session: " + h.req.SessionKey,
		"Tokens: " + tokens(in, out),
	}
	if h.env.Subagents == nil {
		lines = append(lines, "🤖 Subagents: not available")
	} else if runs, err := h.env.Subagents.Runs(ctx, h.req.SessionKey); err != nil {
		lines = append(lines, "🤖 Subagents: could not be read")
	} else {
		active, done := count(runs)
		lines = append(lines, fmt.Sprintf("🤖 Subagents: %d active · %d done", active, done))
	}
	if h.env.Spend != nil {
		lines = append(lines, h.env.Spend.StatusLines(h.req.SessionKey)...)
	}
	if h.env.Schedules != nil {
		if line := h.env.Schedules.StatusLine(ctx, h.req.SessionKey); line != "" {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}

// schedule runs /schedule (SPEC §19) in this conversation.
func (h handler) schedule(ctx context.Context, args string) string {
	if h.env.Schedules == nil {
		return "⚠️ Schedules are not available in this gateway."
	}
	return h.env.Schedules.Command(ctx, schedule.Conversation{SessionKey: h.req.SessionKey, AgentID: h.env.AgentID,
		Origin: h.req.Origin, By: h.req.SenderID}, args)
}

// usage answers /usage (SPEC §20).
func (h handler) usage(ctx context.Context) string {
	if h.env.Spend == nil {
		return "⚠️ Spend is not counted in this gateway."
	}
	reply, err := h.env.Spend.Usage(ctx, h.req.SessionKey, h.env.AgentID)
	if err != nil {
		return "⚠️ Could not read the spend: " + err.Error()
	}
	return reply
}

// focus binds the current thread to a sub-agent of any conversation of
// this chat (SPEC §24).
func (h handler) focus(ctx context.Context, target string) string {
	if h.env.Subagents == nil || h.env.Threads == nil {
		return replyUnavailable
	}
	if h.req.Origin.ThreadID == "" {
		return usageFocus
	}
	chat := h.req.Origin
	chat.ThreadID = ""
	r, err := h.env.Subagents.ResolveInChat(ctx, h.req.SessionKey, ids.Requester(h.env.AgentID, chat).Rest(), target)
	switch {
	case errors.Is(err, subagent.ErrAmbiguous):
		return fmt.Sprintf("⚠️ %q matches more than one subagent; use its number from /subagents list.", shortID(target))
	case errors.Is(err, subagent.ErrNoMatch):
		return fmt.Sprintf("⚠️ No subagent matches %q.", shortID(target))
	case err != nil:
		return "⚠️ Could not read this chat's sub-agents; try again in a moment."
	}
	if !r.ArchivedAt.IsZero() {
		return fmt.Sprintf("⚠️ %s was archived; its session cannot be continued.", title(r))
	}
	if err := h.env.Threads.Focus(ctx, h.req.Origin, r, h.req.SenderID); err != nil {
		return "⚠️ Could not bind this thread; try again in a moment."
	}
	return fmt.Sprintf("🎯 This thread now talks to %s.", title(r))
}

// unfocus ends the current thread's binding.
func (h handler) unfocus(ctx context.Context) string {
	if h.env.Threads == nil {
		return replyUnavailable
	}
	if h.req.Origin.ThreadID == "" {
		return "Usage: /unfocus — in a thread that /focus bound to a subagent"
	}
	ok, err := h.env.Threads.Unfocus(ctx, h.req.Origin)
	switch {
	case err != nil:
		return "⚠️ Could not unbind this thread; try again in a moment."
	case !ok:
		return fmt.Sprintf("ℹ️ This thread is not bound to a subagent; it talks to %s.", dash(h.env.AgentID))
	}
	return fmt.Sprintf("🎯 Back to %s.", dash(h.env.AgentID))
}
