package web

import (
	"context"
	"encoding/json"
	"time"

	"github.com/heraldhq/herald/channels"
)

// Typing shows (or clears) "the agent is writing" in the client's chat; a
// clear also drops the draft (the final reply follows as a message).
func (a *Adapter) Typing(_ context.Context, to channels.Origin, on bool) error {
	a.hub.setLive(to.ChatID, func(st *liveState) {
		st.typing = on
		if !on {
			st.draft = ""
		}
	})
	return nil
}

// Draft shows the reply written so far as an SSE delta event. The web chat
// needs no platform message to edit: the ref stays "" and the final reply
// arrives as the conversation's next message.
func (a *Adapter) Draft(_ context.Context, to channels.Origin, _ string, text string) (string, error) {
	a.hub.setLive(to.ChatID, func(st *liveState) { st.draft, st.typing = text, true })
	return "", nil
}

// DraftEvery: the page can take a delta every 100 ms.
func (a *Adapter) DraftEvery() time.Duration { return 100 * time.Millisecond }

// RunView is one sub-agent run as the web chat's panel shows it.
type RunView struct {
	RunID     string    `json:"runId"`
	Label     string    `json:"label"`
	Status    string    `json:"status"` // queued, running, success, error, timeout, stopped, unknown
	CreatedAt time.Time `json:"createdAt"`
	StartedAt time.Time `json:"startedAt,omitzero"`
	EndedAt   time.Time `json:"endedAt,omitzero"`
	Tokens    int64     `json:"tokens"`
	// Activity is what a running run does now (its live note: an ACP
	// agent's latest update, "awaiting approval <code>").
	Activity string `json:"activity,omitempty"`
	// Resumes: how often the run resumed after its gateway stopped (SPEC §25).
	Resumes int `json:"resumes,omitempty"`
	// Batch is the first 8 characters of the batch the run belongs to
	// (one sessions_spawn with tasks, SPEC §23); "" = none.
	Batch string `json:"batch,omitempty"`
}

// ScheduleView is one schedule of the conversation as the panel shows it
// (SPEC §19), with Pause/Resume and Remove sending the /schedule commands.
type ScheduleView struct {
	ID      string    `json:"id"`
	When    string    `json:"when"`
	Task    string    `json:"task"`
	State   string    `json:"state"` // active, paused, done
	NextDue time.Time `json:"nextDue,omitzero"`
	Next    string    `json:"next,omitempty"` // the next due time in the schedule's timezone
}

// SetSubagents replaces the client's sub-agents panel (newest first); the
// event streams send it as an "event: subagents", also to a stream that
// connects later.
func (a *Adapter) SetSubagents(client string, runs []RunView) { a.SetPanel(client, runs, nil, nil, "") }

// SpendView is the conversation's spend as the panel shows it (SPEC §20).
type SpendView struct {
	Today string `json:"today"` // "$0.12"
	Month string `json:"month"`
}

// SetPanel replaces the client's panel: its sub-agent runs (newest first),
// its schedules, its spend and, while the conversation waits for children
// spawned with announce parent, waiting ("waiting (2 children)", SPEC
// §23), sent as "event: subagents" {"runs": […], "schedules": […],
// "spend"?: {today, month}, "waiting"?: "…"}.
func (a *Adapter) SetPanel(client string, runs []RunView, schedules []ScheduleView, spend *SpendView, waiting string) {
	if runs == nil {
		runs = []RunView{}
	}
	if schedules == nil {
		schedules = []ScheduleView{}
	}
	b, err := json.Marshal(struct {
		Runs      []RunView      `json:"runs"`
		Schedules []ScheduleView `json:"schedules"`
		Spend     *SpendView     `json:"spend,omitempty"`
		Waiting   string         `json:"waiting,omitempty"`
	}{runs, schedules, spend, waiting})
	if err != nil {
		return
	}
	a.hub.setLive(client, func(st *liveState) { st.runs = string(b) })
}
