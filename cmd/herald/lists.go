package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heraldhq/herald/store"
)

// writeJSON prints v as indented JSON (the --json form of the list commands).
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// listOutbox is `herald outbox list [--pending] [--json]`: the outbox,
// newest first, with each item's state, destination and attempts.
func listOutbox(ctx context.Context, db store.Outbox, f *flags, w io.Writer) error {
	items, err := db.ListOutbox(ctx, f.pending, f.limit)
	if err != nil {
		return err
	}
	if f.json {
		if items == nil {
			items = []store.OutboxItem{}
		}
		return writeJSON(w, items)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tKIND\tTO\tATTEMPTS\tNEXT\tPARTS\tTEXT")
	for _, it := range items {
		state, next := "pending", it.NextAttemptAt.Local().Format(time.DateTime)
		switch {
		case !it.DeliveredAt.IsZero():
			state, next = "delivered", "-"
		case !it.FailedAt.IsZero():
			state, next = "failed", "-"
		}
		text := strings.ReplaceAll(it.Text, "\n", " ")
		if r := []rune(text); len(r) > 48 {
			text = string(r[:47]) + "…"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%d\t%s\n", it.ID, state, it.Kind, it.Origin.String(), it.Attempts, next, it.PartsSent, text)
	}
	return tw.Flush()
}
