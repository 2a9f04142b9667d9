package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heraldhq/herald/admin"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent"
)

// writeJSON prints v as indented JSON (the --json form of the list commands).
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// listOutbox is `herald outbox list [--pending|--failed|--dead] [--json]`:
// the outbox, newest first, with each item's state, destination and
// attempts; --json prints the console API's items (admin.OutboxItem).
func listOutbox(ctx context.Context, db store.Outbox, f *flags, w io.Writer) error {
	state := ""
	switch {
	case f.pending:
		state = store.OutboxPending
	case f.failed:
		state = store.OutboxFailed
	case f.dead:
		state = store.OutboxDead
	}
	items, err := db.OutboxInState(ctx, state, f.limit)
	if err != nil {
		return err
	}
	if f.json {
		return writeJSON(w, admin.OutboxItems(items))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tKIND\tTO\tATTEMPTS\tNEXT\tPARTS\tTEXT")
	for _, it := range items {
		state, next := it.State(), "-"
		if state == store.OutboxPending {
			next = it.NextAttemptAt.Local().Format(time.DateTime)
		}
		text := strings.ReplaceAll(it.Text, "\n", " ")
		if r := []rune(text); len(r) > 48 {
			text = string(r[:47]) + "…"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%d\t%s\n", it.ID, state, it.Kind, it.Origin.String(), it.Attempts, next, it.PartsSent, text)
	}
	return tw.Flush()
}

// The --json forms of the list commands use the web API's field names
// (camelCase: runId, sessionKey, agentId, createdAt …; channels/web and
// docs/operations.md), never the store's Go field names.

// runJSON is one row of `herald runs list --json`. status is the word the
// table, /subagents and the web chat's panel show (success, error … once a
// run is done); state and outcome are session_status's pair.
type runJSON struct {
	RunID               string          `json:"runId"`
	SessionKey          string          `json:"sessionKey"` // the run's own (child) session
	SessionID           string          `json:"sessionId"`
	RequesterSessionKey string          `json:"requesterSessionKey"`
	AgentID             string          `json:"agentId"`
	Model               string          `json:"model"`
	Label               string          `json:"label"`
	Task                string          `json:"task"`
	Status              string          `json:"status"`
	State               string          `json:"state"`             // queued | running | announcing | done
	Outcome             string          `json:"outcome,omitempty"` // once done
	Note                string          `json:"note,omitempty"`
	Depth               int             `json:"depth"`
	Origin              channels.Origin `json:"origin"`
	CreatedAt           time.Time       `json:"createdAt"`
	StartedAt           time.Time       `json:"startedAt,omitzero"`
	EndedAt             time.Time       `json:"endedAt,omitzero"`
	RuntimeMs           int64           `json:"runtimeMs"`
	Tokens              int64           `json:"tokens"` // input + output, as the panel shows
	TokensIn            int64           `json:"tokensIn"`
	TokensOut           int64           `json:"tokensOut"`
	CostUSD             *float64        `json:"costUsd,omitempty"` // absent when no cost is configured
	Resumes             int             `json:"resumes,omitempty"` // times resumed after the gateway stopped (SPEC §25)
}

func runsJSON(runs []store.Run, now time.Time) []runJSON {
	out := make([]runJSON, 0, len(runs))
	for i := range runs {
		r := &runs[i]
		j := runJSON{RunID: r.ID, SessionKey: r.ChildKey, SessionID: r.ChildSessionID, RequesterSessionKey: r.RequesterKey,
			AgentID: r.AgentID, Model: r.Model, Label: r.Label, Task: r.Task, Status: subagent.DisplayStatus(r), State: r.Status,
			Outcome: r.Outcome, Note: r.Note, Depth: r.Depth, Origin: r.Origin, CreatedAt: r.CreatedAt, StartedAt: r.StartedAt,
			EndedAt: r.EndedAt, RuntimeMs: subagent.Runtime(r, now).Milliseconds(), Tokens: r.TokensIn + r.TokensOut,
			TokensIn: r.TokensIn, TokensOut: r.TokensOut, Resumes: r.Resumes}
		if r.CostUSD >= 0 {
			j.CostUSD = &r.CostUSD
		}
		out = append(out, j)
	}
	return out
}

// sessionJSON is one row of `herald sessions list --json`.
type sessionJSON struct {
	SessionKey       string          `json:"sessionKey"`
	SessionID        string          `json:"sessionId"`
	AgentID          string          `json:"agentId"`
	Kind             string          `json:"kind"` // main | subagent | delegate
	ParentSessionKey string          `json:"parentSessionKey,omitempty"`
	Depth            int             `json:"depth"`
	Label            string          `json:"label,omitempty"`
	Model            string          `json:"model,omitempty"`
	Origin           channels.Origin `json:"origin"`
	TranscriptPath   string          `json:"transcriptPath"`
	CreatedAt        time.Time       `json:"createdAt"`
	UpdatedAt        time.Time       `json:"updatedAt"`
	Tokens           int64           `json:"tokens"`
	TokensIn         int64           `json:"tokensIn"`
	TokensOut        int64           `json:"tokensOut"`
}

func sessionsJSON(sessions []store.Session) []sessionJSON {
	out := make([]sessionJSON, 0, len(sessions))
	for _, s := range sessions {
		out = append(out, sessionJSON{SessionKey: s.Key, SessionID: s.ID, AgentID: s.AgentID, Kind: s.Kind, ParentSessionKey: s.ParentKey,
			Depth: s.Depth, Label: s.Label, Model: s.Model, Origin: s.Origin, TranscriptPath: s.TranscriptPath, CreatedAt: s.CreatedAt,
			UpdatedAt: s.UpdatedAt, Tokens: s.TokensIn + s.TokensOut, TokensIn: s.TokensIn, TokensOut: s.TokensOut})
	}
	return out
}
