package admin

import (
	"cmp"
	"slices"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent"
)

// The JSON objects of the console's API (SPEC §27, camelCase like the web
// chat's). `herald`'s CLI prints the same objects (Runs, OutboxItems,
// IntakeItems), so a script reads one shape from either.

// OutboxItem is one outbound message.
type OutboxItem struct {
	ID          int64  `json:"id"`
	Channel     string `json:"channel"`
	Destination string `json:"destination"` // <channel>:<chatType>:<chatId>[:thread:<id>]
	RunID       string `json:"runId,omitempty"`
	Attempts    int    `json:"attempts"`
	LastError   string `json:"lastError,omitempty"`
	// CreatedAt is when it was queued; State pending | delivered | failed | dead.
	CreatedAt time.Time `json:"createdAt"`
	State     string    `json:"state"`
	// What the CLI's outbox list showed before the console, kept.
	Kind          channels.Kind   `json:"kind"`
	SessionKey    string          `json:"sessionKey,omitempty"`
	AgentID       string          `json:"agentId,omitempty"`
	Origin        channels.Origin `json:"origin"`
	Text          string          `json:"text"`
	NextAttemptAt time.Time       `json:"nextAttemptAt,omitzero"` // pending only
	DeliveredAt   time.Time       `json:"deliveredAt,omitzero"`
	FailedAt      time.Time       `json:"failedAt,omitzero"`
	DeadAt        time.Time       `json:"deadAt,omitzero"`
	PartsSent     int             `json:"partsSent"`
}

// OutboxItemOf is the API's form of a stored item.
func OutboxItemOf(it *store.OutboxItem) OutboxItem {
	o := OutboxItem{ID: it.ID, Channel: string(it.Origin.Channel), Destination: it.Origin.String(), RunID: it.RunID,
		Attempts: it.Attempts, LastError: it.LastError, CreatedAt: it.CreatedAt, State: it.State(), Kind: it.Kind,
		SessionKey: it.SessionKey, AgentID: it.AgentID, Origin: it.Origin, Text: it.Text, DeliveredAt: it.DeliveredAt,
		FailedAt: it.FailedAt, DeadAt: it.DeadAt, PartsSent: it.PartsSent}
	if o.State == store.OutboxPending {
		o.NextAttemptAt = it.NextAttemptAt
	}
	return o
}

// OutboxItems converts a list (never nil: JSON [] when empty).
func OutboxItems(items []store.OutboxItem) []OutboxItem {
	out := make([]OutboxItem, 0, len(items))
	for i := range items {
		out = append(out, OutboxItemOf(&items[i]))
	}
	return out
}

// Run is one sub-agent run as the console's API and `herald runs list
// --json` show it; in RunTree with its children, whose Tokens and CostUSD
// it includes (rolled up).
type Run struct {
	RunID       string `json:"runId"`
	ParentRunID string `json:"parentRunId,omitempty"`
	SessionKey  string `json:"sessionKey"` // the run's own (child) session
	SessionID   string `json:"sessionId,omitempty"`
	Requester   string `json:"requester"` // the session that spawned it
	AgentID     string `json:"agentId"`
	Model       string `json:"model,omitempty"`
	Label       string `json:"label"`
	Task        string `json:"task"`
	// Status as /subagents list shows it; State and Outcome as
	// session_status's pair.
	Status    string          `json:"status"`
	State     string          `json:"state"`
	Outcome   string          `json:"outcome,omitempty"`
	Note      string          `json:"note,omitempty"`
	Depth     int             `json:"depth"`
	Origin    channels.Origin `json:"origin"`
	CreatedAt time.Time       `json:"createdAt"`
	StartedAt time.Time       `json:"startedAt,omitzero"`
	EndedAt   time.Time       `json:"endedAt,omitzero"`
	RuntimeMs int64           `json:"runtimeMs"`
	Tokens    int64           `json:"tokens"`
	TokensIn  int64           `json:"tokensIn"`
	TokensOut int64           `json:"tokensOut"`
	CostUSD   float64         `json:"costUSD"` // 0 when no price is configured
	// Resumes: times the run resumed after its gateway stopped (SPEC §25).
	Resumes int `json:"resumes,omitempty"`
	// Batch names the sessions_spawn with tasks that made it with its
	// siblings (SPEC §23); Announce is where its result went.
	Batch    string `json:"batch,omitempty"`
	Announce string `json:"announce,omitempty"`
	// Children: in RunTree, the runs it spawned ([] for none); absent in a
	// flat list (herald runs list --json).
	Children []Run `json:"children,omitzero"`
}

// RunOf is one run on its own, at now (no children; tokens and cost its
// own).
func RunOf(r *store.Run, now time.Time) Run {
	return Run{RunID: r.ID, SessionKey: r.ChildKey, SessionID: r.ChildSessionID, Requester: r.RequesterKey, AgentID: r.AgentID,
		Model: r.Model, Label: r.Label, Task: r.Task, Status: subagent.DisplayStatus(r), State: r.Status, Outcome: r.Outcome,
		Note: r.Note, Depth: r.Depth, Origin: r.Origin, CreatedAt: r.CreatedAt, StartedAt: r.StartedAt, EndedAt: r.EndedAt,
		RuntimeMs: subagent.Runtime(r, now).Milliseconds(), Tokens: r.TokensIn + r.TokensOut, TokensIn: r.TokensIn,
		TokensOut: r.TokensOut, CostUSD: max(r.CostUSD, 0), Resumes: r.Resumes, Batch: r.Batch, Announce: r.Announce}
}

// Runs is runs each on its own (RunOf), in their order; never nil.
func Runs(runs []store.Run, now time.Time) []Run {
	out := make([]Run, 0, len(runs))
	for i := range runs {
		out = append(out, RunOf(&runs[i], now))
	}
	return out
}

// RunTree arranges runs as trees (a run's parent is the run whose child
// session spawned it), newest root first, children oldest first, with
// tokens and cost rolled up. With keep set, only the runs it keeps and
// their ancestors are returned (?status=).
func RunTree(runs []store.Run, now time.Time, keep func(*store.Run) bool) []Run {
	byChild := make(map[string]*store.Run, len(runs))
	for i := range runs {
		byChild[runs[i].ChildKey] = &runs[i]
	}
	wanted := map[string]bool{}
	for i := range runs {
		r := &runs[i]
		if keep != nil && !keep(r) {
			continue
		}
		for p := r; p != nil && !wanted[p.ID]; p = byChild[p.RequesterKey] {
			wanted[p.ID] = true
		}
	}
	kids := map[string][]*store.Run{}
	var roots []*store.Run
	for i := range runs {
		r := &runs[i]
		if !wanted[r.ID] {
			continue
		}
		if p := byChild[r.RequesterKey]; p != nil {
			kids[p.ID] = append(kids[p.ID], r)
		} else {
			roots = append(roots, r)
		}
	}
	var build func(r *store.Run, parent string, depth int) Run
	build = func(r *store.Run, parent string, depth int) Run {
		v := RunOf(r, now)
		v.ParentRunID, v.Children = parent, []Run{}
		if depth < 64 { // a cycle cannot happen (a child session is new), but bound it
			cs := kids[r.ID]
			slices.SortFunc(cs, func(a, b *store.Run) int { return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID)) })
			for _, c := range cs {
				child := build(c, r.ID, depth+1)
				v.TokensIn += child.TokensIn
				v.TokensOut += child.TokensOut
				v.CostUSD += child.CostUSD
				v.Children = append(v.Children, child)
			}
		}
		v.Tokens = v.TokensIn + v.TokensOut
		return v
	}
	slices.SortFunc(roots, func(a, b *store.Run) int { return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(a.ID, b.ID)) })
	out := make([]Run, 0, len(roots))
	for _, r := range roots {
		out = append(out, build(r, "", 0))
	}
	return out
}

// IntakeItem is one inbound message; Owed until its turn completed.
type IntakeItem struct {
	ID         int64     `json:"id"`
	SessionKey string    `json:"sessionKey"`
	AgentID    string    `json:"agentId"`
	Channel    string    `json:"channel"`
	Origin     string    `json:"origin"` // <channel>:<chatType>:<chatId>[:thread:<id>]
	SenderName string    `json:"senderName,omitempty"`
	Text       string    `json:"text"`
	CreatedAt  time.Time `json:"createdAt"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	DoneAt     time.Time `json:"doneAt,omitzero"`
	Owed       bool      `json:"owed"`
	ClaimedBy  string    `json:"claimedBy,omitempty"` // the replica running it
}

// IntakeItems converts intake rows (never nil).
func IntakeItems(list []store.Intake) []IntakeItem {
	out := make([]IntakeItem, 0, len(list))
	for _, in := range list {
		out = append(out, IntakeItem{ID: in.ID, SessionKey: in.SessionKey, AgentID: in.AgentID, Channel: string(in.Origin.Channel),
			Origin: in.Origin.String(), SenderName: in.SenderName, Text: in.Text, CreatedAt: in.CreatedAt, StartedAt: in.StartedAt,
			DoneAt: in.DoneAt, Owed: in.DoneAt.IsZero(), ClaimedBy: in.ClaimedBy})
	}
	return out
}
