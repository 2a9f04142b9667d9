package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/spend"
	"github.com/heraldhq/herald/store"
)

// Limits of what one answer lists (newest first).
const (
	maxConversations = 200
	maxRuns          = 2000
	maxOutbox        = 500
	maxTranscript    = 500 // the latest lines
)

// Overview is GET /admin/api/overview.
type Overview struct {
	Status
	Outbox        OutboxCounts `json:"outbox"`
	Owed          int          `json:"owed"`
	SpendTodayUSD float64      `json:"spendTodayUSD"`
}

// OutboxCounts are the outbox's backlog.
type OutboxCounts struct {
	Pending  int       `json:"pending"`
	Failed   int       `json:"failed"`
	Dead     int       `json:"dead"`
	OldestAt time.Time `json:"oldestAt,omitzero"`
}

func (c *Console) overviewOf(ctx context.Context) (*Overview, error) {
	o := &Overview{Status: c.opts.Live.Status(ctx)}
	b, err := c.opts.Store.Backlog(ctx)
	if err != nil {
		return nil, err
	}
	o.Outbox = OutboxCounts{Pending: b.Pending, Failed: b.Failed, Dead: b.Dead, OldestAt: b.OldestAt}
	owed, err := c.opts.Store.OwedIntake(ctx)
	if err != nil {
		return nil, err
	}
	o.Owed = len(owed)
	u, err := spend.Report(ctx, c.opts.Store, c.opts.Now(), "")
	if err != nil {
		return nil, err
	}
	o.SpendTodayUSD = u.Today.USD
	return o, nil
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, _ string) {
	o, err := c.overviewOf(r.Context())
	if c.failed(w, "overview", err) {
		return
	}
	writeJSON(w, http.StatusOK, o)
}

// failed answers 500 for a store error and logs it; it reports whether it did.
func (c *Console) failed(w http.ResponseWriter, what string, err error) bool {
	if err == nil {
		return false
	}
	c.log.Error("console "+what, zap.Error(err))
	writeError(w, http.StatusInternalServerError, what+" could not be read from the state store; the gateway's log has details")
	return true
}

// Conversation is one top-level conversation.
type Conversation struct {
	SessionKey string    `json:"sessionKey"`
	AgentID    string    `json:"agentId"`
	Channel    string    `json:"channel"`
	Chat       string    `json:"chat"` // <channel>:<chatType>:<chatId>[:thread:<id>]
	User       string    `json:"user,omitempty"`
	Model      string    `json:"model,omitempty"`
	CreatedAt  time.Time `json:"createdAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
	Tokens     int64     `json:"tokens"`
}

func conversationOf(s *store.Session) Conversation {
	return Conversation{SessionKey: s.Key, AgentID: s.AgentID, Channel: string(s.Origin.Channel), Chat: s.Origin.String(),
		User: cmp.Or(s.Origin.SenderName, s.Origin.SenderID), Model: s.Model, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
		Tokens: s.TokensIn + s.TokensOut}
}

// conversations serves GET /admin/api/conversations?q=: the top-level
// conversations whose key, chat or user contains q (case-insensitive),
// most recently active first.
func (c *Console) conversations(w http.ResponseWriter, r *http.Request, _ string) {
	q := strings.ToLower(strings.TrimSpace(r.URL.Query().Get("q")))
	f := store.SessionFilter{Kind: store.KindMain}
	if q == "" {
		f.Limit = maxConversations // a search looks at every conversation
	}
	list, err := c.opts.Store.ListSessions(r.Context(), f)
	if c.failed(w, "conversations", err) {
		return
	}
	out := []Conversation{}
	for i := range list {
		v := conversationOf(&list[i])
		if q != "" && !strings.Contains(strings.ToLower(v.SessionKey+" "+v.Chat+" "+v.User+" "+list[i].Origin.SenderID), q) {
			continue
		}
		if out = append(out, v); len(out) == maxConversations {
			break
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"conversations": out})
}

// transcript serves GET /admin/api/conversations/{key}: the conversation
// and its transcript's latest lines.
func (c *Console) transcript(w http.ResponseWriter, r *http.Request, _ string) {
	key := r.PathValue("key")
	s, err := c.opts.Store.GetSession(r.Context(), key)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no conversation %q", key))
		return
	}
	if c.failed(w, "conversation", err) {
		return
	}
	path := s.TranscriptPath
	if path == "" {
		path = c.opts.Store.TranscriptPath(s.AgentID, s.ID)
	}
	if found := c.opts.Store.FindTranscript(r.Context(), path); found != "" {
		path = found
	}
	_, lines, err := c.opts.Store.ReadTranscript(r.Context(), path)
	if err != nil && !errors.Is(err, store.ErrNotFound) && c.failed(w, "transcript", err) {
		return
	}
	if len(lines) > maxTranscript {
		lines = lines[len(lines)-maxTranscript:]
	}
	if lines == nil {
		lines = []store.TranscriptEntry{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"conversation": conversationOf(s), "transcript": lines})
}

// runStatuses are the ?status= words: /subagents list's, and the states.
func keepStatus(status string) func(*store.Run) bool {
	if status == "" {
		return nil
	}
	want := map[string]bool{}
	for _, s := range strings.Split(status, ",") {
		want[strings.TrimSpace(s)] = true
	}
	return func(r *store.Run) bool { return want[r.Status] || (r.Status == store.StatusDone && want[r.Outcome]) }
}

func (c *Console) runTree(ctx context.Context, status string) ([]Run, error) {
	runs, err := c.opts.Store.ListRuns(ctx, store.RunFilter{Limit: maxRuns})
	if err != nil {
		return nil, err
	}
	return RunTree(runs, c.opts.Now(), keepStatus(status)), nil
}

// runs serves GET /admin/api/runs?status=: the runs as trees.
func (c *Console) runs(w http.ResponseWriter, r *http.Request, _ string) {
	tree, err := c.runTree(r.Context(), r.URL.Query().Get("status"))
	if c.failed(w, "runs", err) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": tree})
}

// run reads the path's run; it answers 404 and reports false when there
// is none.
func (c *Console) run(w http.ResponseWriter, r *http.Request) (*store.Run, bool) {
	id := r.PathValue("id")
	run, err := c.opts.Store.GetRun(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no run %q", id))
		return nil, false
	}
	if c.failed(w, "run", err) {
		return nil, false
	}
	return run, true
}

func (c *Console) stopRun(w http.ResponseWriter, r *http.Request, actor string) {
	run, ok := c.run(w, r)
	if !ok {
		return
	}
	n := c.opts.Live.StopRun(r.Context(), run.ID)
	c.acted(r, actor, "stop run", run.ID, nil, zap.Int("stopped", n))
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "stopped": n})
}

func (c *Console) sendRun(w http.ResponseWriter, r *http.Request, actor string) {
	run, ok := c.run(w, r)
	if !ok {
		return
	}
	var body struct {
		Message string `json:"message"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&body); err != nil || strings.TrimSpace(body.Message) == "" {
		writeError(w, http.StatusBadRequest, `the body must be JSON {"message": "…"} with a message`)
		return
	}
	res := c.opts.Live.SendRun(r.Context(), run, body.Message)
	c.acted(r, actor, "send to run", run.ID, nil, zap.String("status", res.Status))
	writeJSON(w, http.StatusOK, res)
}

var outboxStates = map[string]bool{store.OutboxPending: true, store.OutboxFailed: true, store.OutboxDead: true, store.OutboxDelivered: true}

// outbox serves GET /admin/api/outbox?state=pending|failed|dead.
func (c *Console) outbox(w http.ResponseWriter, r *http.Request, _ string) {
	state := r.URL.Query().Get("state")
	if state != "" && !outboxStates[state] {
		writeError(w, http.StatusBadRequest, "state must be pending, failed, dead or delivered")
		return
	}
	items, err := c.opts.Store.OutboxInState(r.Context(), state, maxOutbox)
	if c.failed(w, "outbox", err) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": OutboxItems(items)})
}

func (c *Console) outboxAction(w http.ResponseWriter, r *http.Request, actor string) {
	action, raw := r.PathValue("action"), r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no outbox item %q", raw))
		return
	}
	switch action {
	case "retry":
		err = c.opts.Store.RetryOutbox(r.Context(), id, c.opts.Now())
	case "drop":
		err = c.opts.Store.DropOutbox(r.Context(), id)
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no outbox action %q (retry or drop)", action))
		return
	}
	c.acted(r, actor, action+" outbox item", raw, err)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no undelivered outbox item %d", id))
		return
	}
	if c.failed(w, "outbox item", err) {
		return
	}
	if action == "retry" {
		c.opts.Live.WakeOutbox()
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// intake serves GET /admin/api/intake?owed=1: inbound messages, newest
// first (owed ones: in the order their turns run).
func (c *Console) intake(w http.ResponseWriter, r *http.Request, _ string) {
	var list []store.Intake
	var err error
	if v := r.URL.Query().Get("owed"); v == "1" || v == "true" {
		list, err = c.opts.Store.OwedIntake(r.Context())
	} else {
		list, err = c.opts.Store.RecentIntake(r.Context(), maxOutbox)
	}
	if c.failed(w, "intake", err) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": IntakeItems(list)})
}

// ScheduleView is one schedule.
type ScheduleView struct {
	ID         string    `json:"id"`
	SessionKey string    `json:"sessionKey"`
	Kind       string    `json:"kind"`
	Expr       string    `json:"expr"`
	Timezone   string    `json:"timezone,omitempty"`
	Task       string    `json:"task"`
	Source     string    `json:"source"`
	Paused     bool      `json:"paused"`
	NextDue    time.Time `json:"nextDue,omitzero"`
	ActiveRun  string    `json:"activeRun,omitempty"`
	Failures   int       `json:"failures"`
	Fired      int64     `json:"fired"`
}

func (c *Console) schedules(w http.ResponseWriter, r *http.Request, _ string) {
	list, err := c.opts.Store.ListSchedules(r.Context(), "")
	if c.failed(w, "schedules", err) {
		return
	}
	out := make([]ScheduleView, 0, len(list))
	for _, s := range list {
		out = append(out, ScheduleView{ID: s.ID, SessionKey: s.SessionKey, Kind: s.Kind, Expr: s.Expr, Timezone: s.Timezone, Task: s.Task,
			Source: s.Source, Paused: s.Paused, NextDue: s.NextDue, ActiveRun: s.ActiveRun, Failures: s.Failures, Fired: s.Fired})
	}
	writeJSON(w, http.StatusOK, map[string]any{"schedules": out})
}

func (c *Console) scheduleAction(w http.ResponseWriter, r *http.Request, actor string) {
	id, action := r.PathValue("id"), r.PathValue("action")
	switch action {
	case "pause", "resume", "remove", "run":
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no schedule action %q (pause, resume, remove or run)", action))
		return
	}
	line, err := c.opts.Live.Schedule(r.Context(), id, action)
	c.acted(r, actor, action+" schedule", id, err)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, fmt.Sprintf("no schedule %q", id))
	case err != nil:
		writeError(w, http.StatusConflict, err.Error())
	default:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "reply": line})
	}
}

// spend serves GET /admin/api/spend: this month's and today's spend and
// the configured budgets.
func (c *Console) spend(w http.ResponseWriter, r *http.Request, _ string) {
	u, err := spend.Report(r.Context(), c.opts.Store, c.opts.Now(), "")
	if c.failed(w, "spend", err) {
		return
	}
	writeJSON(w, http.StatusOK, struct {
		*spend.Usage
		Budgets config.Budgets `json:"budgets"`
	}{u, c.opts.Live.Budgets()})
}

// Approval is one tool call waiting for /approve or /deny.
type Approval struct {
	Code       string    `json:"code"`
	SessionKey string    `json:"sessionKey"`
	RunID      string    `json:"runId,omitempty"`
	Tool       string    `json:"tool"`
	Args       string    `json:"args"`
	Chat       string    `json:"chat"`
	CreatedAt  time.Time `json:"createdAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
}

func (c *Console) approvals(w http.ResponseWriter, r *http.Request, _ string) {
	list, err := c.opts.Store.PendingApprovals(r.Context())
	if c.failed(w, "approvals", err) {
		return
	}
	out := make([]Approval, 0, len(list))
	for _, a := range list {
		out = append(out, Approval{Code: a.Code, SessionKey: a.SessionKey, RunID: a.RunID, Tool: a.Tool, Args: a.Args,
			Chat: a.Origin.String(), CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt})
	}
	writeJSON(w, http.StatusOK, map[string]any{"approvals": out})
}
