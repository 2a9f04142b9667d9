package subagent

import (
	"context"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/store"
)

// A Runner does the work of one sub-agent run, from the moment it leaves
// the lane to the moment it knows how it ended. The Manager marks the run
// running before and records its end (run row, announce, spend) after, so
// announce, spend, resume and /subagents do not know which runner ran it.
// The model loop (modelRunner) is one runner; an ACP coding agent is the
// other (SPEC §26).
//
// Run writes the child's transcript lines itself, reports usage with
// RunCtx.AddUsage as it goes, and returns when the run's work is over or
// ctx is cancelled (a stop, a shutdown or the end of the run's timeout).
type Runner interface {
	Run(ctx context.Context, rc *RunCtx) Outcome
}

// Outcome is how a run ended, as its runner tells the Manager.
type Outcome struct {
	// Status is one of store.Outcome*; "" when the gateway is shutting
	// down mid-run (RunCtx.ShuttingDown): the run stays running in the
	// store and the next start recovers it.
	Status string
	// Result is the text announced under Result:, Note under Notes:.
	Result, Note string
	// Skip ends the run without an announce (the child said ANNOUNCE_SKIP).
	Skip bool
	// Output is the JSON value (compact) the run gave for its
	// outputSchema, "" when none (SPEC §23).
	Output string
	// BudgetStopped marks a run ended by a spend budget (SPEC §20).
	BudgetStopped bool
}

// RunCtx is what a runner is given of its run.
type RunCtx struct {
	// Run is the run as it started: status running, StartedAt set.
	Run store.Run
	// Steer receives the messages sessions_send and /subagents send queue
	// for the running child; each carries a Reply channel to answer on.
	Steer <-chan agent.Steer

	m    *Manager
	lr   *liveRun
	lane context.Context
	live *liveView // nil: the run shows nothing live
	// log is the run's logger, made once by execute and shared by what
	// logs about the run while it runs (each one was ~400 B for as long
	// as the run lived); nil: made when asked.
	log *zap.Logger
}

// Progress shows a running child in its delivery target (SPEC §16, §24):
// the gateway's live reply of a top-level turn, at the child's own
// thread. Runners do not see it; they report to RunCtx.Text and
// RunCtx.Activity.
type Progress interface {
	// Text shows text, everything the child has to show so far; it must
	// not block.
	Text(text string)
	// Stop ends the live view (typing off) and returns the platform id of
	// the draft it shows ("" = none): the announce replaces that draft
	// instead of posting again.
	Stop() (draftRef string)
}

// Text reports the child's message written so far (the current model
// call's, or the agent's message since its last tool call); "" when a new
// message starts. Shown live where the run has a thread of its own.
func (rc *RunCtx) Text(text string) {
	rc.live.showText(text)
	focusView(rc.lr).showText(text)
}

// liveShow is where a runner shows a child's text and activity: a
// liveView, or a RunCtx (its own thread's view and a /focus thread's).
type liveShow interface {
	showText(text string)
	showActivity(line string)
}

func (rc *RunCtx) showText(text string)     { rc.Text(text) }
func (rc *RunCtx) showActivity(line string) { rc.Activity(line) }

// Activity reports a short line of what the child does now (a tool call
// of an ACP agent), "" when that is done; shown live under its text.
func (rc *RunCtx) Activity(line string) {
	rc.live.showActivity(line)
	focusView(rc.lr).showActivity(line)
}

// liveView puts a run's text and activity together for its Progress.
type liveView struct {
	p        Progress
	mu       sync.Mutex
	text     string // the message so far; guarded by mu
	activity string // what it does now; guarded by mu
}

// textView is a live view that only streams text (the reply of one more
// turn in a bound thread: the gateway shows the turn itself).
func textView(onText func(string)) *liveView {
	if onText == nil {
		return nil
	}
	return &liveView{p: textSink(onText)}
}

type textSink func(string)

func (f textSink) Text(text string) { f(text) }
func (textSink) Stop() string       { return "" }

// showText shows the child's message so far (nil v: nothing).
func (v *liveView) showText(text string) {
	if v != nil {
		v.set(&v.text, text)
	}
}

// showActivity shows what the child does now (nil v: nothing).
func (v *liveView) showActivity(line string) {
	if v != nil {
		v.set(&v.activity, line)
	}
}

// set changes one of the view's fields and shows the view. A message
// that starts again ("") keeps the last one shown until it writes.
func (v *liveView) set(field *string, s string) {
	v.mu.Lock()
	if field == &v.text && s == "" {
		v.mu.Unlock()
		return
	}
	*field = s
	show := strings.TrimSpace(v.text)
	if v.activity != "" {
		show = strings.TrimSpace(show + "\n\n" + v.activity)
	}
	v.mu.Unlock()
	if show != "" {
		v.p.Text(show)
	}
}

// stop ends the live view: the draft it shows ("" when none) and the
// child's message it was showing then.
func (v *liveView) stop() (ref, text string) {
	if v == nil {
		return "", ""
	}
	ref = v.p.Stop()
	v.mu.Lock()
	defer v.mu.Unlock()
	return ref, strings.TrimSpace(v.text)
}

// Stopped reports whether a person or a cascade stopped the run.
func (rc *RunCtx) Stopped() bool {
	rc.m.mu.Lock()
	defer rc.m.mu.Unlock()
	return rc.lr.stopped
}

// ShuttingDown reports whether the gateway is stopping (the lane's
// context is done): a runner cut by it returns Outcome{}.
func (rc *RunCtx) ShuttingDown() bool { return rc.lane.Err() != nil }

// AddUsage counts the tokens of a model call of the run (its own or, for
// an external agent, as it reports them).
func (rc *RunCtx) AddUsage(u agent.Usage) { rc.m.addUsage(rc.lr, &rc.Run, u) }

// addUsage counts u in the live run lr of run and tells the metrics.
func (m *Manager) addUsage(lr *liveRun, run *store.Run, u agent.Usage) {
	m.mu.Lock()
	lr.usage = lr.usage.Add(u)
	m.mu.Unlock()
	if m.d.OnUsage != nil {
		m.d.OnUsage(run.AgentID, run.Model, u)
	}
}

// Announcing marks the run as writing its announce: steering messages
// still queued are answered ErrFinishing, and later ones are refused.
func (rc *RunCtx) Announcing() {
	rc.m.setStatus(rc.lr, store.StatusAnnouncing)
	for {
		select {
		case st := <-rc.lr.steer:
			if st.Reply != nil {
				st.Reply <- agent.SteerReply{Err: ErrFinishing}
			}
		default:
			return
		}
	}
}

// Log is the run's logger (with the fields of SPEC §13).
func (rc *RunCtx) Log() *zap.Logger {
	if rc.log != nil {
		return rc.log
	}
	return rc.m.runLog(&rc.Run)
}

// runnerFor picks the runner of a run: an ACP agent's, else the model
// loop.
func (m *Manager) runnerFor(r *store.Run) Runner {
	if r.Model == ACPModel {
		return acpRunner{m: m}
	}
	return modelRunner{m: m}
}
