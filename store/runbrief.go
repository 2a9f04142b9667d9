package store

import "database/sql"

// briefRunCols are the columns of a brief run (RunFilter.Brief): what a
// list of runs shows — the web chat's sub-agents panel reads a
// conversation's latest runs about once a second while they change, and
// reading every column of each (its result, output, origin and allowed
// tools decoded) was most of that read.
const briefRunCols = `id, child_key, requester_key, root_key, agent_id, task, label, status, outcome, note,
	created_at, started_at, ended_at, tokens_in, tokens_out, resumes, announce, batch`

func scanBriefRuns(rows *sql.Rows) ([]Run, error) {
	defer rows.Close()
	var out []Run
	for rows.Next() {
		var r Run
		var created, started, ended sql.NullInt64
		if err := rows.Scan(&r.ID, &r.ChildKey, &r.RequesterKey, &r.RootKey, &r.AgentID, &r.Task, &r.Label,
			&r.Status, &r.Outcome, &r.Note, &created, &started, &ended, &r.TokensIn, &r.TokensOut,
			&r.Resumes, &r.Announce, &r.Batch); err != nil {
			return nil, err
		}
		r.CreatedAt, r.StartedAt, r.EndedAt = fromMS(created), fromMS(started), fromMS(ended)
		out = append(out, r)
	}
	return out, rows.Err()
}
