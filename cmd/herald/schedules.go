package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heraldhq/herald/schedule"
	"github.com/heraldhq/herald/store"
)

// scheduleJSON is one schedule in `herald schedules list --json`.
type scheduleJSON struct {
	ID           string    `json:"id"`
	Conversation string    `json:"conversation"` // the requester session key
	AgentID      string    `json:"agentId"`
	Kind         string    `json:"kind"` // cron | every | at
	Expr         string    `json:"expr"`
	Timezone     string    `json:"timezone"`
	When         string    `json:"when"`
	State        string    `json:"state"` // active | paused | done
	NextDue      time.Time `json:"nextDue,omitzero"`
	LastDue      time.Time `json:"lastDue,omitzero"`
	Task         string    `json:"task"`
	Deliver      string    `json:"deliver"` // channel:chatType:chat[:thread:id]
	Source       string    `json:"source"`  // config | chat | tool
	CatchUp      string    `json:"catchUp"`
	MaxFailures  int       `json:"maxFailures"`
	Failures     int       `json:"failures"` // failed runs in a row
	Fired        int64     `json:"fired"`
	Skipped      int64     `json:"skipped"`
	Missed       int64     `json:"missed"`
	ActiveRun    string    `json:"activeRun,omitempty"`
}

func scheduleState(sc *store.Schedule) string {
	switch {
	case sc.Paused:
		return "paused"
	case sc.NextDue.IsZero():
		return "done"
	}
	return "active"
}

// listSchedules is `herald schedules list [--json]`: every schedule, oldest
// first, with its state, next due time and counts.
func listSchedules(ctx context.Context, db store.Schedules, f *flags, w io.Writer) error {
	list, err := db.ListSchedules(ctx, "")
	if err != nil {
		return err
	}
	if f.json {
		out := make([]scheduleJSON, 0, len(list))
		for i := range list {
			sc := &list[i]
			when := sc.Kind + " " + sc.Expr
			if wh, err := schedule.Parse(sc.Kind, sc.Expr, sc.Timezone); err == nil {
				when = wh.Label()
			}
			out = append(out, scheduleJSON{ID: sc.ID, Conversation: sc.SessionKey, AgentID: sc.AgentID, Kind: sc.Kind,
				Expr: sc.Expr, Timezone: sc.Timezone, When: when, State: scheduleState(sc), NextDue: sc.NextDue,
				LastDue: sc.LastDue, Task: sc.Task, Deliver: sc.Origin.String(), Source: sc.Source, CatchUp: sc.CatchUp,
				MaxFailures: sc.MaxFailures, Failures: sc.Failures, Fired: sc.Fired, Skipped: sc.Skipped,
				Missed: sc.Missed, ActiveRun: sc.ActiveRun})
		}
		return writeJSON(w, out)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tWHEN\tNEXT\tTO\tFIRED\tSKIPPED\tMISSED\tFAILURES\tTASK")
	for i := range list {
		sc := &list[i]
		when, next := sc.Kind+" "+sc.Expr, "-"
		if wh, err := schedule.Parse(sc.Kind, sc.Expr, sc.Timezone); err == nil {
			when = wh.Label()
			if !sc.NextDue.IsZero() {
				next = wh.FormatTime(sc.NextDue)
			}
		}
		task := strings.ReplaceAll(sc.Task, "\n", " ")
		if r := []rune(task); len(r) > 48 {
			task = string(r[:47]) + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d/%d\t%s\n", sc.ID, scheduleState(sc), when, next,
			sc.Origin.String(), sc.Fired, sc.Skipped, sc.Missed, sc.Failures, sc.MaxFailures, task)
	}
	return tw.Flush()
}
