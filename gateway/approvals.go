package gateway

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/tools"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/gateway/command"
	"github.com/heraldhq/herald/store"
)

// approvals applies the tool policy: allow runs, deny refuses, supervised
// posts an approval request into the requester's thread and waits for
// /approve or /deny (or the timeout, which denies). Requests are stored, so
// a code is never reused and the decision is on record.
type approvals struct {
	approvalDeps

	mu      sync.Mutex
	waiting map[string]chan bool // code → decision
}

// approvalDeps are the few things approvals use; the Gateway wires them
// (New).
type approvalDeps struct {
	db store.Approvals
	// security is the security section of the config in force: the policy,
	// the approval timeout and the approvers are read on every call, so a
	// reload applies to the next tool call.
	security func() config.Security
	replica  string                                         // this replica's id, recorded on each request
	alive    func(ctx context.Context, replica string) bool // whether a replica holds its lease
	// tell tells the other replicas that approval code was decided here.
	tell func(ctx context.Context, code string)
	// post puts a message for a person into the outbox.
	post func(ctx context.Context, to channels.Origin, kind channels.Kind, text, runID string)
	// setNote shows a note on a live sub-agent run ("" clears it).
	setNote func(runID, note string)
	clock   agent.Clock
	log     *zap.Logger
}

func newApprovals(deps approvalDeps) *approvals {
	return &approvals{approvalDeps: deps, waiting: make(map[string]chan bool)}
}

func (a *approvals) policy() tools.Policy { return tools.Policy(a.security().ToolPolicy) }

func (a *approvals) timeout() time.Duration {
	return time.Duration(a.security().ApprovalTimeoutSeconds) * time.Second
}

// authorize is the agent.Authorizer of every session.
func (a *approvals) authorize(ctx context.Context, cc agent.CallContext, call agent.ToolCall, tool agent.Tool) error {
	switch a.policy().Decide(call.Name, tool.Group()) {
	case tools.Allow:
		return nil
	case tools.Supervised:
		return a.ask(ctx, cc, call)
	default:
		return fmt.Errorf("tool %s is denied by the tool policy (security.toolPolicy); do without it or ask the person to change the policy", call.Name)
	}
}

const codeAlphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"

func newCode() string {
	b := make([]byte, 6)
	rand.Read(b)
	for i := range b {
		b[i] = codeAlphabet[int(b[i])%len(codeAlphabet)]
	}
	return string(b)
}

func (a *approvals) ask(ctx context.Context, cc agent.CallContext, call agent.ToolCall) error {
	now, timeout := a.clock.Now(), a.timeout()
	session := cc.RootKey
	if session == "" {
		session = cc.SessionKey
	}
	ap := &store.Approval{Code: newCode(), SessionKey: session, RunID: cc.RunID, Tool: call.Name, Args: string(call.Args),
		Origin: cc.Origin, Status: store.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(timeout), Replica: a.replica}
	if err := a.db.CreateApproval(ctx, ap); err != nil {
		return fmt.Errorf("tool %s needs approval, but the request could not be recorded: %v", call.Name, err)
	}
	decision := make(chan bool, 1)
	a.mu.Lock()
	a.waiting[ap.Code] = decision
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.waiting, ap.Code)
		a.mu.Unlock()
	}()
	who := "The agent"
	if cc.RunID != "" {
		who = fmt.Sprintf("Sub-agent run %s", cc.RunID[:min(8, len(cc.RunID))])
		a.setNote(cc.RunID, "awaiting approval "+ap.Code)
		defer a.setNote(cc.RunID, "")
	}
	// The arguments are shown whole (SPEC §17): a long request is split
	// into several messages by the outbox like any long message, never cut,
	// so nothing can hide after padding; and literally (shownArgs), so
	// nothing can hide in markup or invisible characters.
	a.post(ctx, cc.Origin, channels.KindSystem, fmt.Sprintf("🔐 Approval needed: %s wants to run %s%sReply /approve %s or /deny %s (expires in %s).",
		who, call.Name, shownArgs(cc.Origin.Channel, string(call.Args)), ap.Code, ap.Code, timeout), "")
	a.log.Info("approval requested", zap.String("code", ap.Code), zap.String("tool", call.Name), zap.String("sessionKey", cc.SessionKey),
		zap.String("rootKey", session), zap.String("runId", cc.RunID), zap.String("agentId", cc.AgentID), zap.String("channel", string(cc.Origin.Channel)))

	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case ok := <-decision:
		if ok {
			return nil
		}
		return fmt.Errorf("a person denied running %s (approval %s); do not retry it, find another way or explain", call.Name, ap.Code)
	case <-t.C:
		if decided, err := a.expire(ctx, ap.Code, "timeout"); decided != nil {
			// A person decided at the same moment: the stored decision wins.
			if *decided {
				return nil
			}
			return fmt.Errorf("a person denied running %s (approval %s); do not retry it, find another way or explain", call.Name, ap.Code)
		} else if err != nil {
			a.log.Error("could not expire an approval", zap.String("code", ap.Code), zap.Error(err))
		}
		return fmt.Errorf("no one approved %s within %s (approval %s), so it did not run", call.Name, timeout, ap.Code)
	case <-ctx.Done():
		if _, err := a.expire(ctx, ap.Code, "cancelled"); err != nil {
			a.log.Error("could not expire an approval", zap.String("code", ap.Code), zap.Error(err))
		}
		return ctx.Err()
	}
}

// expire marks a pending approval expired. When it was resolved meanwhile
// (an /approve or /deny racing the timer), it returns that decision.
func (a *approvals) expire(ctx context.Context, code, why string) (decided *bool, err error) {
	bg := context.WithoutCancel(ctx)
	_, err = a.db.ResolveApproval(bg, code, store.ApprovalExpired, why, a.clock.Now())
	if !errors.Is(err, store.ErrResolved) {
		return nil, err
	}
	ap, err := a.db.GetApproval(bg, code)
	if err != nil {
		return nil, err
	}
	switch ap.Status {
	case store.ApprovalApproved:
		ok := true
		return &ok, nil
	case store.ApprovalDenied:
		ok := false
		return &ok, nil
	}
	return nil, nil
}

// resolve answers /approve and /deny for the approvals of one session.
func (a *approvals) resolve(ctx context.Context, sessionKey, code string, approve bool, by string) (*store.Approval, error) {
	code = strings.ToUpper(strings.TrimSpace(code))
	ap, err := a.db.GetApproval(ctx, code)
	if err != nil {
		return nil, err
	}
	if ap.SessionKey != sessionKey {
		return nil, store.ErrNotFound // another conversation's code looks unknown
	}
	if !a.mayAnswer(ap.Origin, by) {
		a.log.Info("approval answer refused: not the requester or an approver", zap.String("code", code),
			zap.String("channel", string(ap.Origin.Channel)), zap.String("by", by))
		return ap, &command.NotApproverError{Name: requesterName(ap.Origin)}
	}
	status := store.ApprovalDenied
	if approve {
		status = store.ApprovalApproved
	}
	ap, err = a.db.ResolveApproval(ctx, code, status, by, a.clock.Now())
	if err != nil {
		return nil, err
	}
	if a.deliver(code, approve) {
		return ap, nil
	}
	if ap.Replica != a.replica && a.alive(ctx, ap.Replica) {
		// The tool call waits on another replica: tell it.
		a.tell(ctx, code)
		return ap, nil
	}
	return ap, errors.Join(store.ErrResolved, errors.New("the tool call that asked is no longer waiting"))
}

// mayAnswer reports whether user by may answer an approval asked from
// origin: the person whose message led to it, or a listed approver of the
// channel (security.approvers). With no sender on record (a turn no person
// started), only approvers — or, in a DM, its one person — may.
func (a *approvals) mayAnswer(origin channels.Origin, by string) bool {
	switch {
	case by != "" && by == origin.SenderID:
		return true
	case a.security().IsApprover(string(origin.Channel), by):
		return true
	}
	return origin.SenderID == "" && origin.ChatType == channels.ChatDM
}

// requesterName names the person who may answer an approval in the ⛔ reply.
// shownArgs renders a tool call's arguments for its approval request as
// the literal text a person must judge: invisible and reordering characters
// (bidi overrides, zero-width spaces, …) as \u escapes on every channel, and
// on Slack in code blocks with its markup escaped, so `<url|label>` cannot
// show only the label and `<!channel>` cannot notify anyone. It returns the
// separator before and after too: " {…}\n", or "\n```{…}```\n" on Slack.
func shownArgs(ch channels.Name, args string) string {
	shown := channels.Visible(strings.TrimSpace(args))
	if m, ok := channels.Lookup(ch); ok && m.Verbatim != nil {
		return "\n" + m.Verbatim(shown) + "\n"
	}
	return " " + shown + "\n"
}

func requesterName(o channels.Origin) string {
	switch {
	case o.SenderName != "" && o.SenderName != o.SenderID:
		return o.SenderName
	case o.SenderID == "":
		return "the person who asked"
	}
	if m, ok := channels.Lookup(o.Channel); ok && m.MentionOf != nil {
		return m.MentionOf(o.SenderID) // shown as the person's name
	}
	return o.SenderID
}

// deliver hands a decision to the tool call of this replica waiting for
// code; false when none waits here.
func (a *approvals) deliver(code string, approve bool) bool {
	a.mu.Lock()
	ch, ok := a.waiting[code]
	a.mu.Unlock()
	if ok {
		select {
		case ch <- approve:
		default: // decided already
		}
	}
	return ok
}

// decided is told by another replica that approval code was resolved
// there: a tool call of this replica waiting for it reads the decision.
func (a *approvals) decided(code string) {
	a.mu.Lock()
	_, ok := a.waiting[code]
	a.mu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ap, err := a.db.GetApproval(ctx, code)
	if err != nil {
		a.log.Warn("could not read an approval resolved on another replica", zap.String("code", code), zap.Error(err))
		return
	}
	switch ap.Status {
	case store.ApprovalApproved:
		a.deliver(code, true)
	case store.ApprovalDenied:
		a.deliver(code, false)
	}
}

// recheck reads, for each tool call waiting here, whether its approval was
// decided on another replica: a lost notification only delays the call.
func (a *approvals) recheck() {
	a.mu.Lock()
	codes := slices.Collect(maps.Keys(a.waiting))
	a.mu.Unlock()
	for _, code := range codes {
		a.decided(code)
	}
}

// expireStale marks approvals left pending by a replica that is gone (on
// SQLite: by a previous process) expired: the calls that asked died with
// it. With restarted (at start), this replica's own from before a restart
// too.
func (a *approvals) expireStale(ctx context.Context, restarted bool) error {
	pending, err := a.db.PendingApprovals(ctx)
	if err != nil || len(pending) == 0 {
		return err
	}
	alive := map[string]bool{}
	var errs []error
	for _, ap := range pending {
		if ap.Replica == a.replica && !restarted {
			continue
		}
		if ap.Replica != a.replica {
			up, ok := alive[ap.Replica]
			if !ok {
				up = a.alive(ctx, ap.Replica)
				alive[ap.Replica] = up
			}
			if up {
				continue
			}
		}
		if _, err := a.db.ResolveApproval(ctx, ap.Code, store.ApprovalExpired, "restart", a.clock.Now()); err != nil && !errors.Is(err, store.ErrResolved) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
