package store

import (
	"context"
	"database/sql"
	"time"
)

// Spend is model spend, one entry per model call (SPEC §20): budgets,
// /usage and herald usage sum it by UTC day.
type Spend interface {
	RecordSpend(ctx context.Context, e SpendEntry) error
	// SpendTotals sums the entries of every day from fromDay (YYYY-MM-DD,
	// UTC) on, by day, conversation, agent and model.
	SpendTotals(ctx context.Context, fromDay string) ([]SpendTotal, error)
	// TopSpendRuns lists the costliest runs (sub-agent runs and top-level
	// turns) from fromDay on, of one conversation ("" = all), costliest first.
	TopSpendRuns(ctx context.Context, fromDay, conversation string, limit int) ([]SpendRun, error)
}

// SpendEntry is one model call's spend.
type SpendEntry struct {
	At           time.Time
	Conversation string // the requester conversation's session key (a run's root key)
	AgentID      string
	Model        string // provider/model
	RunID        string // a sub-agent run's id, or "turn:<intake id>" for a top-level turn
	Label        string // the run's label or task, the turn's message, cut short
	USD          float64
	TokensIn     int64
	TokensOut    int64
}

// SpendTotal sums the spend of one day, conversation, agent and model.
type SpendTotal struct {
	Day          string // YYYY-MM-DD, UTC
	Conversation string
	AgentID      string
	Model        string
	USD          float64
	TokensIn     int64
	TokensOut    int64
	Calls        int64
}

// SpendRun is one run's spend.
type SpendRun struct {
	RunID        string
	Conversation string
	AgentID      string
	Label        string
	USD          float64
	Tokens       int64
	First        time.Time
}

// SpendDay is the UTC day of t as spend rows name it.
func SpendDay(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// RecordSpend adds one model call's spend.
func (d *DB) RecordSpend(ctx context.Context, e SpendEntry) error {
	_, err := d.writer(ctx).exec(`INSERT INTO spend (at, day, conversation, agent_id, model, run_id, label, usd, tokens_in, tokens_out)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		e.At.UnixMilli(), SpendDay(e.At), e.Conversation, e.AgentID, e.Model, e.RunID, e.Label, e.USD, e.TokensIn, e.TokensOut)
	return d.wrap("record spend", err)
}

// SpendTotals sums spend by day, conversation, agent and model from fromDay on.
func (d *DB) SpendTotals(ctx context.Context, fromDay string) ([]SpendTotal, error) {
	rows, err := d.reader(ctx).query(`SELECT day, conversation, agent_id, model, SUM(usd), SUM(tokens_in), SUM(tokens_out), COUNT(*)
		FROM spend WHERE day >= $1 GROUP BY day, conversation, agent_id, model`, fromDay)
	if err != nil {
		return nil, d.wrap("spend totals", err)
	}
	defer rows.Close()
	var out []SpendTotal
	for rows.Next() {
		var t SpendTotal
		if err := rows.Scan(&t.Day, &t.Conversation, &t.AgentID, &t.Model, &t.USD, &t.TokensIn, &t.TokensOut, &t.Calls); err != nil {
			return nil, d.wrap("spend totals", err)
		}
		out = append(out, t)
	}
	return out, d.wrap("spend totals", rows.Err())
}

// TopSpendRuns lists the costliest runs from fromDay on.
func (d *DB) TopSpendRuns(ctx context.Context, fromDay, conversation string, limit int) ([]SpendRun, error) {
	q := `SELECT run_id, MAX(conversation), MAX(agent_id), MAX(label), SUM(usd), SUM(tokens_in + tokens_out), MIN(at)
		FROM spend WHERE day >= $1`
	args := sqlArgs{fromDay}
	if conversation != "" {
		q += ` AND conversation = ` + args.add(conversation)
	}
	q += ` GROUP BY run_id ORDER BY SUM(usd) DESC, MIN(at) LIMIT ` + args.add(limit)
	rows, err := d.reader(ctx).query(q, args...)
	if err != nil {
		return nil, d.wrap("top spend runs", err)
	}
	defer rows.Close()
	var out []SpendRun
	for rows.Next() {
		var r SpendRun
		var first sql.NullInt64
		if err := rows.Scan(&r.RunID, &r.Conversation, &r.AgentID, &r.Label, &r.USD, &r.Tokens, &first); err != nil {
			return nil, d.wrap("top spend runs", err)
		}
		r.First = time.UnixMilli(first.Int64).UTC()
		out = append(out, r)
	}
	return out, d.wrap("top spend runs", rows.Err())
}
