package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/heraldhq/herald/spend"
	"github.com/heraldhq/herald/store"
)

// usageCmd prints what the models cost today and this month (UTC): in
// total, per agent, conversation and model, and the costliest runs (SPEC §20).
func usageCmd(ctx context.Context, db store.Spend, f *flags, w io.Writer) error {
	u, err := spend.Report(ctx, db, time.Now(), "")
	if err != nil {
		return err
	}
	if f.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(u)
	}
	_, err = fmt.Fprint(w, u.Text())
	return err
}
