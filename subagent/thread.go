package subagent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/store"
)

// steerWait bounds how long a message in a bound thread waits for a
// running child's answer to it before the thread is told the child has
// it (SPEC §24; the 30 s of /subagents send).
var steerWait = 30 * time.Second

// FollowUp is a message a person wrote in a thread bound to a child
// session (SPEC §24).
type FollowUp struct {
	Text string
	// Files are the message's files, already in the child's workspace
	// (RunWorkspace) and named in Text: one more turn gives them to its
	// model as the message's files (images as content, SPEC §18); a
	// running child reads them from the workspace.
	Files []agent.File
	// Resume: the message's turn was cut (a restart) after it was added
	// to the child's history; it continues from the transcript.
	Resume bool
	// OnText, if set, streams the reply of one more turn (§16).
	OnText func(text string)
}

// FollowUpResult is what came of a FollowUp: the child's answer to post
// in the thread, or Steered when a running child took the message but
// has not answered it yet.
type FollowUpResult struct {
	Reply   string
	Steered bool
}

// FollowUp hands f to run's child session: a running child gets it
// between tool calls (steering, as sessions_send) and its answer is
// awaited for a while; a finished one runs one more turn in its session
// (its agent, tools, limits and workspace), which is not announced. A run
// writing its announce is waited for, then runs the turn.
func (m *Manager) FollowUp(ctx context.Context, run *store.Run, f FollowUp) (FollowUpResult, error) {
	if strings.TrimSpace(f.Text) == "" {
		return FollowUpResult{}, errors.New("the message is empty")
	}
	m.mu.Lock()
	lr, live := m.live[run.ID]
	m.mu.Unlock()
	if !live && m.d.Peers != nil {
		if cur, err := m.d.Store.GetRun(ctx, run.ID); err == nil && m.elsewhere(ctx, cur) {
			return FollowUpResult{}, fmt.Errorf("the sub-agent is running on another replica (%s), which messages in its thread do not reach yet; send it again once it is announced", cur.Owner)
		}
	}
	if live {
		// Whatever a cut turn wrote, the message reaches the live run
		// now, or the turn after it ends.
		f.Resume = false
		reply := make(chan agent.SteerReply, 1)
		m.mu.Lock()
		steerable := !lr.stopped && lr.run.Status != store.StatusAnnouncing
		queued := false
		if steerable {
			select {
			case lr.steer <- agent.Steer{Text: f.Text, Reply: reply}:
				queued = true
			default:
			}
		}
		m.mu.Unlock()
		if steerable && !queued {
			return FollowUpResult{}, errors.New("too many messages are waiting for the sub-agent; send this again after it answers")
		}
		if queued {
			m.runLog(run).Info("message in the bound thread steers the run")
			t := time.NewTimer(steerWait)
			defer t.Stop()
			select {
			case r := <-reply:
				if r.Err == nil {
					return FollowUpResult{Reply: r.Text}, nil
				}
				if !errors.Is(r.Err, ErrFinishing) {
					return FollowUpResult{}, r.Err
				}
				// The run finished its work before reading the message:
				// it runs one more turn once its announce is written.
			case <-lr.ended:
				select {
				case r := <-reply:
					if r.Err == nil {
						return FollowUpResult{Reply: r.Text}, nil
					}
				default:
				}
			case <-t.C:
				return FollowUpResult{Steered: true}, nil
			case <-ctx.Done():
				return FollowUpResult{}, ctx.Err()
			}
		}
		select { // a stopped or announcing run ends soon
		case <-lr.ended:
		case <-ctx.Done():
			return FollowUpResult{}, ctx.Err()
		}
		cur, err := m.d.Store.GetRun(ctx, run.ID)
		if err != nil {
			return FollowUpResult{}, err
		}
		run = cur
	}
	if !run.ArchivedAt.IsZero() {
		return FollowUpResult{}, errors.New("its session was archived (archiveAfterMinutes), so it cannot answer any more; /unfocus to talk to the agent")
	}
	text, err := m.oneMoreTurn(ctx, run, f.Text, moreTurn{resume: f.Resume, onText: f.OnText, files: f.Files})
	if err != nil {
		return FollowUpResult{}, err
	}
	return FollowUpResult{Reply: text}, nil
}

// RunWorkspace is the workspace run's child works in: its requester
// conversation's (SPEC §17), created if missing. Files of a message in
// its bound thread are put there.
func (m *Manager) RunWorkspace(run *store.Run) string {
	return m.conversationWorkspace(m.config(), run.RootKey, run.AgentID)
}

// RunOfChild returns the run whose child session is childKey;
// ErrNoMatch when there is none.
func (m *Manager) RunOfChild(ctx context.Context, childKey string) (*store.Run, error) {
	sess, err := m.d.Store.GetSession(ctx, childKey)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w %q", ErrNoMatch, childKey)
	}
	if err != nil {
		return nil, err
	}
	runs, err := m.d.Store.ListRuns(ctx, store.RunFilter{RequesterKey: sess.ParentKey})
	if err != nil {
		return nil, err
	}
	for i := range runs {
		if runs[i].ChildKey == childKey {
			m.overlay(runs[i : i+1])
			return &runs[i], nil
		}
	}
	return nil, fmt.Errorf("%w %q", ErrNoMatch, childKey)
}

// ResolveInChat finds the run target names for /focus (SPEC §24): among
// the runs below sessionKey first (list numbers count there), then among
// the runs of every conversation of the chat ("<channel>:<chatType>:
// <chatId>") by run id prefix, child session key or label. A run of
// another chat is ErrNoMatch.
func (m *Manager) ResolveInChat(ctx context.Context, sessionKey, chat, target string) (*store.Run, error) {
	r, err := m.Resolve(ctx, sessionKey, target)
	if err == nil || !errors.Is(err, ErrNoMatch) {
		return r, err
	}
	if strings.HasPrefix(strings.TrimSpace(target), "#") || strings.EqualFold(strings.TrimSpace(target), "last") {
		return nil, err // list numbers and "last" are this conversation's
	}
	runs, lerr := m.d.Store.ListRuns(ctx, store.RunFilter{Chat: chat})
	if lerr != nil {
		return nil, lerr
	}
	// The store's LIKE may fold case: keep the runs whose root is exactly
	// a conversation of this chat.
	mine := runs[:0]
	for _, r := range runs {
		rest := ids.SessionKey(r.RootKey).Rest()
		if rest == chat || strings.HasPrefix(rest, chat+":thread:") {
			mine = append(mine, r)
		}
	}
	m.overlay(mine)
	return pickNamed(mine, target)
}

// pickNamed is pick without list numbers: a run id or its prefix, a child
// session key or a label.
func pickNamed(runs []store.Run, target string) (*store.Run, error) {
	t := strings.TrimSpace(target)
	if n := len(t); n > 0 && n < 4 && strings.Trim(t, "0123456789") == "" {
		return nil, fmt.Errorf("%w %q", ErrNoMatch, target)
	}
	return pick(runs, t)
}

// BoundRuns are the runs a bound thread's commands act on (SPEC §24): its
// child's run first (#1), then the runs below that child, newest first.
func (m *Manager) BoundRuns(ctx context.Context, run *store.Run) ([]store.Run, error) {
	cur, err := m.d.Store.GetRun(ctx, run.ID)
	if err != nil {
		return nil, err
	}
	below, err := m.Runs(ctx, run.ChildKey)
	if err != nil {
		return nil, err
	}
	runs := append([]store.Run{*cur}, below...)
	m.overlay(runs[:1])
	return runs, nil
}

// ResolveBound is Resolve in a bound thread: among BoundRuns.
func (m *Manager) ResolveBound(ctx context.Context, run *store.Run, target string) (*store.Run, error) {
	runs, err := m.BoundRuns(ctx, run)
	if err != nil {
		return nil, err
	}
	return pick(runs, target)
}

// noThread says why a spawn with thread: true by cc gets no thread of its
// own ("" when it may): a DM, the web chat, a channel without threads.
func (m *Manager) noThread(cc agent.CallContext) string {
	if m.d.StartThread == nil || cc.Origin.ChatType != channels.ChatGroup {
		return "thread ignored: this chat has no threads (a direct message or the web chat)" + threadHere
	}
	return ""
}

// threadHere ends the warning of a spawn that got no thread of its own.
const threadHere = "; the sub-agent runs in this thread instead"

// joinWarnings joins two warnings of a spawn result.
func joinWarnings(a, b string) string {
	return joinNonEmpty(a, b, "; ")
}

// joinNonEmpty joins a and b with sep, or is the one not empty.
func joinNonEmpty(a, b, sep string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + sep + b
}

// testHookThread, when set by a test, is called at each step of opening a
// run's thread ("recorded": the run and its pending thread are stored;
// "opened": the platform opened it); an error stops there, as a crash
// would.
var testHookThread func(step string) error

// errStopped is what a test's testHookThread returns to stop a spawn
// where it is, as a crash of the gateway would.
var errStopped = errors.New("the gateway stopped (test)")

// stepStops runs testHookThread at step: true when the spawn must stop
// there.
func stepStops(step string) bool {
	return testHookThread != nil && errors.Is(testHookThread(step), errStopped)
}

// openRunThread opens the pending thread of run (SPEC §24) in its
// requester's chat and records it: the thread becomes the run's and its
// child session's origin, bound to the child, with one line linking to it
// in the requester's thread — all in one transaction, so a crash leaves
// either nothing (the thread is still pending: the run opens it when it
// starts, retry set) or all of it. The platform gets the run's id as the
// thread's key, so a retry finds a thread opened before a crash where the
// platform allows. A refusal (no threads, no permission) is recorded too:
// the run stays in the requester's thread and warning says why. err: the
// thread is still pending (a stop, the store, or a failure that may have
// opened it: channels.ErrThreadMaybeOpened).
func (m *Manager) openRunThread(ctx context.Context, run *store.Run, retry bool) (warning string, err error) {
	requester := run.Origin
	title := TaskTitle(run.Label, run.Task)
	who := requester.SenderName
	if who == "" {
		who = "agent " + ids.SessionKey(run.RequesterKey).AgentID()
	}
	starter := fmt.Sprintf("🧵 %s\nA sub-agent (%s) working for %s on:\n%s\n\nIts result is posted here; write here to talk to it.",
		Truncate(title, 72), run.AgentID, who, Truncate(strings.TrimSpace(run.Task), 500))
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	th, err := m.d.StartThread(tctx, requester, channels.NewThread{Name: Truncate(title, 100), Text: starter, Key: run.ID, Retry: retry})
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, channels.ErrThreadMaybeOpened) {
			// Still pending: the platform may have opened it, and the
			// next try (with the key) finds it.
			return "", err
		}
		m.runLog(run).Info("sessions_spawn thread: no thread opened; the child runs in the requester's thread", zap.Error(err))
		warning = fmt.Sprintf("thread ignored: the chat platform did not open a thread (%v)", err) + threadHere
		if errors.Is(err, channels.ErrNoThreads) {
			warning = fmt.Sprintf("thread ignored: %v", err) + threadHere
		}
		if rerr := m.d.Store.RefuseRunThread(context.WithoutCancel(ctx), run.ID); rerr != nil && !errors.Is(rerr, store.ErrNotFound) {
			return warning, rerr
		}
		return warning, nil
	}
	if stepStops("opened") {
		return "", errStopped
	}
	// The person who asked stays on record: they may answer the child's
	// approval requests (SPEC §17).
	th.Origin.SenderID, th.Origin.SenderName = requester.SenderID, requester.SenderName
	cfg := m.config()
	reqAgent := ids.SessionKey(run.RequesterKey).AgentID()
	agentID := ids.SessionKey(run.RootKey).AgentID() // whom the thread's chat talks to
	if _, ok := cfg.Agent(agentID); !ok {
		agentID = reqAgent
	}
	now := m.d.Clock.Now()
	where := "in its own thread"
	if th.Link != "" {
		where += ": " + th.Link
	}
	open := store.ThreadOpened{Thread: th.Origin, Link: th.Link,
		Binding: &store.Binding{Thread: th.Origin, ChildKey: run.ChildKey, RunID: run.ID, AgentID: agentID, CreatedAt: now,
			ExpiresAt: now.Add(time.Duration(cfg.SubagentLimits(agentID).ThreadIdleMinutes) * time.Minute)},
		LinkLine: &store.OutboxItem{Origin: requester, Kind: channels.KindSystem, CreatedAt: now,
			Text:       fmt.Sprintf("🧵 %s works %s", Truncate(title, 72), where),
			SessionKey: run.RequesterKey, AgentID: reqAgent}}
	err = m.d.Store.OpenRunThread(context.WithoutCancel(ctx), run.ID, open)
	if errors.Is(err, store.ErrExists) {
		// Recorded meanwhile (another replica took the run): take it.
		cur, gerr := m.d.Store.GetRun(ctx, run.ID)
		if gerr != nil {
			return "", gerr
		}
		run.Origin = cur.Origin
		return "", nil
	}
	if err != nil {
		return "", err
	}
	run.Origin = th.Origin
	m.d.Notify()
	return "", nil
}

// runThread is the thread of its own of run, nil when it has none (or it
// cannot be read, err: the run then works where its origin says).
func (m *Manager) runThread(ctx context.Context, run *store.Run) (*store.RunThread, error) {
	if m.d.StartThread == nil || run.Origin.ChatType != channels.ChatGroup {
		return nil, nil
	}
	rt, err := m.d.Store.RunThread(ctx, run.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		if ctx.Err() == nil {
			m.runLog(run).Warn("could not read the run's thread", zap.Error(err))
		}
		return nil, err
	}
	return rt, nil
}

// requesterOrigin is where the requester of r talks: r's origin, unless r
// has a thread of its own (SPEC §24), whose origin is the child's thread —
// then the requester session's (a wake answers there, not in the child's
// thread).
func (m *Manager) requesterOrigin(r *store.Run) channels.Origin {
	if r.Origin.ThreadID == "" {
		return r.Origin
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := m.d.Store.GetSession(ctx, r.RequesterKey)
	if err != nil || s.Origin.ChatID != r.Origin.ChatID || s.Origin.ThreadID == r.Origin.ThreadID {
		return r.Origin
	}
	return s.Origin
}

// startLive starts showing run live in its own thread rt (SPEC §16,
// §24): typing while it runs and its text as it writes it, going on with
// the draft an earlier stretch of the run left. nil when the run has no
// thread of its own (a child without one shows its progress in the web
// chat's panel, §16) or its channel shows nothing live.
func (m *Manager) startLive(run *store.Run, rt *store.RunThread) *liveView {
	if m.d.Live == nil || rt == nil || rt.State != store.ThreadOpen {
		return nil
	}
	p := m.d.Live(run, rt.DraftRef)
	if p == nil {
		return nil
	}
	return &liveView{p: p}
}
