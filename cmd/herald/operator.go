package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heraldhq/herald/admin"
	"github.com/heraldhq/herald/store"
)

// The operator's commands beside the console (SPEC §27): dead letters,
// owed messages. Their --json output is the console API's objects.

// outboxAction is `herald outbox retry|drop <id>`, through the store (it
// works whichever replica holds the item, and with no gateway running).
// A running gateway sends a retried item within a minute, at once when
// `herald` reaches it (console API) instead.
func outboxAction(ctx context.Context, db store.Outbox, action, arg string, w io.Writer) error {
	id, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || id <= 0 {
		return fmt.Errorf("outbox %s: %q is not an outbox id (herald outbox list shows them)", action, arg)
	}
	switch action {
	case "retry":
		err = db.RetryOutbox(ctx, id, time.Now())
	case "drop":
		err = db.DropOutbox(ctx, id)
	}
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no undelivered outbox item %d (herald outbox list shows them)", id)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "outbox item %d: %s\n", id, map[string]string{"retry": "queued again (attempts reset)", "drop": "dropped"}[action])
	return nil
}

// listIntake is `herald intake list [--owed] [--json]`: inbound messages,
// newest first (owed ones: oldest first, in the order their turns run).
func listIntake(ctx context.Context, db store.Turns, f *flags, w io.Writer) error {
	var list []store.Intake
	var err error
	if f.owed {
		list, err = db.OwedIntake(ctx)
		if len(list) > f.limit && f.limit > 0 {
			list = list[:f.limit]
		}
	} else {
		list, err = db.RecentIntake(ctx, f.limit)
	}
	if err != nil {
		return err
	}
	items := admin.IntakeItems(list)
	if f.json {
		return writeJSON(w, items)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tRECEIVED\tFROM\tSESSION\tTEXT")
	for _, it := range items {
		state := "done"
		switch {
		case it.Owed && !it.StartedAt.IsZero():
			state = "owed (started)"
		case it.Owed:
			state = "owed"
		}
		text := strings.ReplaceAll(it.Text, "\n", " ")
		if r := []rune(text); len(r) > 48 {
			text = string(r[:47]) + "…"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", it.ID, state, it.CreatedAt.Local().Format(time.DateTime), it.Origin, it.SessionKey, text)
	}
	return tw.Flush()
}
