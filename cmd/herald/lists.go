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
