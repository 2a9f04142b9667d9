package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/heraldhq/herald/channels"
)

const runCols = `id, child_key, child_session_id, requester_key, root_key, depth, agent_id, task, label,
	model, thinking, cleanup, timeout_seconds, max_iterations, allowed_tools, origin, status, outcome,
	note, result, created_at, started_at, ended_at, tokens_in, tokens_out, cache_read, cache_write,
	cost_usd, archive_at, archived_at, owner, schedule_id, schedule_due, trace_parent, requester_session_id, resumes, ran_ms, stretch_at, announce, spawn_group, group_deadline, output_schema, output, batch, skipped`

func scanRun(rows *sql.Rows, r *Run) error {
	var tools sql.NullString
	var origin string
	var created, started, ended, archiveAt, archivedAt, due, stretch, groupDeadline sql.NullInt64
	var ranMS int64
	if err := rows.Scan(&r.ID, &r.ChildKey, &r.ChildSessionID, &r.RequesterKey, &r.RootKey, &r.Depth,
		&r.AgentID, &r.Task, &r.Label, &r.Model, &r.Thinking, &r.Cleanup, &r.TimeoutSeconds,
		&r.MaxIterations, &tools, &origin, &r.Status, &r.Outcome, &r.Note, &r.Result, &created,
		&started, &ended, &r.TokensIn, &r.TokensOut, &r.CacheRead, &r.CacheWrite, &r.CostUSD,
		&archiveAt, &archivedAt, &r.Owner, &r.ScheduleID, &due, &r.TraceParent, &r.RequesterSessionID,
		&r.Resumes, &ranMS, &stretch, &r.Announce, &r.SpawnGroup, &groupDeadline, &r.OutputSchema, &r.Output, &r.Batch, &r.Skipped); err != nil {
		return err
	}
	r.ScheduleDue, r.GroupDeadline = fromMS(due), fromMS(groupDeadline)
	r.Ran, r.StretchAt = time.Duration(ranMS)*time.Millisecond, fromMS(stretch)
	r.CreatedAt, r.StartedAt, r.EndedAt = fromMS(created), fromMS(started), fromMS(ended)
	r.ArchiveAt, r.ArchivedAt = fromMS(archiveAt), fromMS(archivedAt)
	r.AllowedTools = nil
	if tools.Valid {
		if err := json.Unmarshal([]byte(tools.String), &r.AllowedTools); err != nil {
			return fmt.Errorf("run %s: decode allowed tools: %w", r.ID, err)
		}
	}
	return parseOrigin(origin, &r.Origin)
}

func scanRuns(rows *sql.Rows) ([]Run, error) {
	defer rows.Close()
	var out []Run
	for rows.Next() {
		var r Run
		if err := scanRun(rows, &r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// toolsJSON keeps nil (no restriction) apart from an empty list (no tools).
func toolsJSON(tools []string) (any, error) {
	if tools == nil {
		return nil, nil
	}
	b, err := json.Marshal(tools)
	if err != nil {
		return nil, fmt.Errorf("encode allowed tools: %w", err)
	}
	return string(b), nil
}

// CreateRun stores the run and its child session in one transaction; if
// either insert fails neither row is stored. child may be nil when the child
// session is already stored.
//
// Defaults: ID a new uuid, ChildKey/ChildSessionID from child, RootKey the
// RequesterKey, Status queued, CreatedAt now. The child session's empty
// fields are taken from the run (kind subagent, parent = requester, root,
// depth, agent, label, model, origin). A run ID or child key already stored
// gives an error wrapping ErrExists.
func (d *DB) CreateRun(ctx context.Context, r *Run, child *Session) error {
	return d.SpawnRun(ctx, r, child, SpawnLimits{})
}

// SpawnLimits bound SpawnRun; a zero field is not checked.
type SpawnLimits struct {
	// MaxChildren bounds the requester's runs that are queued, running or
	// announcing (maxChildrenPerSession).
	MaxChildren int
	// MaxTotal bounds every run ever created under the root session
	// (maxTotalSpawns).
	MaxTotal int
}

// LimitError is SpawnRun's refusal: a SpawnLimits bound was reached.
type LimitError struct {
	Limit  string // "maxChildrenPerSession" or "maxTotalSpawns"
	Count  int    // runs counted
	Max    int
	Adding int // runs the refused spawn would have added (1, or a batch's)
}

func (e *LimitError) Error() string {
	if e.Adding > 1 {
		return fmt.Sprintf("limit reached: %d runs counted and %d more asked for, %s is %d", e.Count, e.Adding, e.Limit, e.Max)
	}
	return fmt.Sprintf("limit reached: %d runs counted, %s is %d", e.Count, e.Limit, e.Max)
}

// SpawnCallError is SpawnRuns' refusal of a run whose SpawnCallID already
// spawned a run of its requester (RunID; the first of a batch's): the call
// is made again, by a turn replayed after a crash. It wraps ErrExists.
type SpawnCallError struct {
	CallID string
	RunID  string
}

func (e *SpawnCallError) Error() string {
	return fmt.Sprintf("sessions_spawn call %s already spawned run %s", e.CallID, e.RunID)
}

func (e *SpawnCallError) Unwrap() error { return ErrExists }

// SpawnRun is CreateRun with the spawn limits checked in the same
// transaction as the insert, so two parallel spawns cannot both take the
// last slot and no lock is held across the round trip. A reached limit gives
// a *LimitError and stores nothing.
func (d *DB) SpawnRun(ctx context.Context, r *Run, child *Session, lim SpawnLimits) error {
	return d.SpawnRuns(ctx, []*Run{r}, []*Session{child}, lim)
}

// SpawnRuns records the runs (each with its child session children[i], nil
// when stored already) in one transaction, all or none: the limits are
// checked for all of them at once (a requester's live runs plus the new
// ones within MaxChildren, a root's runs plus the new ones within
// MaxTotal), so a batch spawn (SPEC §23) that one limit would cut stores
// nothing and gives a *LimitError. Defaults as CreateRun, each run's own.
// A run's SpawnCallID is recorded for the first run that names it (the
// other runs of one call are found by their Batch); a call recorded
// already gives a *SpawnCallError naming its run, before any limit is
// checked, and stores nothing.
func (d *DB) SpawnRuns(ctx context.Context, runs []*Run, children []*Session, lim SpawnLimits) error {
	if len(children) != len(runs) {
		return fmt.Errorf("spawn runs: %d runs, %d child sessions", len(runs), len(children))
	}
	preps := make([]preparedRun, len(runs))
	var roots []string
	var origins originCache
	for i, r := range runs {
		p, err := d.prepareRun(r, children[i], &origins)
		if err != nil {
			return err
		}
		preps[i] = p
		if !slices.Contains(roots, r.RootKey) {
			roots = append(roots, r.RootKey)
		}
	}
	slices.Sort(roots) // locks in one order: two batches cannot deadlock
	err := d.tx(ctx, func(c conn) error {
		for _, root := range roots {
			if err := c.lock("spawn:" + root); err != nil {
				return err
			}
		}
		// The calls first: a call that spawned already (a turn replayed
		// after a crash) is told so before any limit, and the common case
		// needs no read before the transaction. All or none: a call
		// stored before undoes the calls inserted with it.
		_, taken, err := recordSpawnCalls(c, runs)
		if err != nil {
			return err
		}
		for _, r := range runs {
			if id, ok := taken[spawnCallKey(r)]; ok {
				return &SpawnCallError{CallID: r.SpawnCallID, RunID: id}
			}
		}
		if err := checkSpawnLimits(c, runs, lim); err != nil {
			return err
		}
		all := make([]int, len(runs))
		for i := range all {
			all[i] = i
		}
		return insertSpawnedRows(c, runs, children, preps, all)
	})
	if err != nil {
		if le := (*LimitError)(nil); errors.As(err, &le) {
			return le
		}
		if sc := (*SpawnCallError)(nil); errors.As(err, &sc) {
			return sc
		}
		if len(runs) == 1 {
			return d.wrap("create run "+runs[0].ID, err)
		}
		return d.wrap(fmt.Sprintf("create %d runs", len(runs)), err)
	}
	return nil
}

// SpawnEach records each of the runs (child session children[i], nil when
// stored already) as its own SpawnRun would, one after the other, but all
// in one transaction: the separate sessions_spawn calls of one model
// response. Each run's limits are checked with the runs before it in the
// list counted, as if they had been spawned first, so the runs a limit
// refuses are the ones that separate SpawnRun calls in that order would
// refuse. errs[i] is run i's *LimitError or *SpawnCallError (that run
// stored nothing, the others are stored); a non-nil err means nothing
// was stored.
func (d *DB) SpawnEach(ctx context.Context, runs []*Run, children []*Session, lim SpawnLimits) (errs []error, err error) {
	if len(children) != len(runs) {
		return nil, fmt.Errorf("spawn each: %d runs, %d child sessions", len(runs), len(children))
	}
	preps := make([]preparedRun, len(runs))
	var roots []string
	var origins originCache
	for i, r := range runs {
		p, err := d.prepareRun(r, children[i], &origins)
		if err != nil {
			return nil, err
		}
		preps[i] = p
		if !slices.Contains(roots, r.RootKey) {
			roots = append(roots, r.RootKey)
		}
	}
	slices.Sort(roots)
	err = d.tx(ctx, func(c conn) error {
		errs = make([]error, len(runs)) // a retried transaction starts again
		for _, root := range roots {
			if err := c.lock("spawn:" + root); err != nil {
				return err
			}
		}
		bounds := spawnBounds(runs, lim)
		n, err := countBounds(c, bounds)
		if err != nil {
			return err
		}
		counts := &spawnCounts{bounds: bounds, n: n}
		// The calls go in together, each for the first run that names it;
		// taken holds the calls stored before, with their runs. Then the
		// runs are walked in order as separate SpawnRun calls would be,
		// in memory: the calls, the counts and the refusals. The calls
		// that spawned nothing are deleted, and the runs kept go in
		// together.
		calls, taken, err := recordSpawnCalls(c, runs)
		if err != nil {
			return err
		}
		keep := make([]int, 0, len(runs))
		for i, r := range runs {
			call := spawnCallKey(r)
			if r.SpawnCallID != "" {
				if id, ok := taken[call]; ok {
					errs[i] = &SpawnCallError{CallID: r.SpawnCallID, RunID: id}
					continue
				}
			}
			err := counts.check(r)
			if le := (*LimitError)(nil); errors.As(err, &le) {
				errs[i] = le
				continue
			}
			if err != nil {
				return err
			}
			if r.SpawnCallID != "" {
				taken[call] = r.ID
			}
			keep = append(keep, i)
			counts.inserted(r)
		}
		if err := settleSpawnCalls(c, calls, taken); err != nil {
			return err
		}
		return insertSpawnedRows(c, runs, children, preps, keep)
	})
	if err != nil {
		return nil, d.wrap(fmt.Sprintf("create %d runs", len(runs)), err)
	}
	return errs, nil
}

// spawnCallKey is r's key in spawn_calls: its requester and call.
func spawnCallKey(r *Run) string { return r.RequesterKey + "\x00" + r.SpawnCallID }

// A newSpawnCall is a spawn_calls row SpawnEach or SpawnRuns inserted:
// for the first of its runs that names the call.
type newSpawnCall struct {
	key       string
	requester string
	callID    string
	runID     string
}

// recordSpawnCalls inserts the runs' calls, each for the first run naming
// it, in multi-row statements. It returns the calls it inserted, and the
// run each call stored before holds (taken, by spawnCallKey).
func recordSpawnCalls(c conn, runs []*Run) ([]newSpawnCall, map[string]string, error) {
	taken := map[string]string{}
	var calls []newSpawnCall
	seen := make(map[string]bool, len(runs))
	for _, r := range runs {
		k := spawnCallKey(r)
		if r.SpawnCallID == "" || seen[k] {
			continue
		}
		seen[k] = true
		calls = append(calls, newSpawnCall{k, r.RequesterKey, r.SpawnCallID, r.ID})
	}
	inserted := make([]bool, len(calls))
	err := spawnCallRows.each(c, len(calls), func(off, n int, q string) error {
		chunk := calls[off : off+n]
		args := make([]any, 0, 3*n)
		for _, sc := range chunk {
			args = append(args, sc.requester, sc.callID, sc.runID)
		}
		rows, err := c.query(q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		// Each row names a call of the chunk, read in place. The rows come
		// in the chunk's order, so the search starts after the last found.
		var req, call sql.RawBytes
		next := 0
		for rows.Next() {
			if err := rows.Scan(&req, &call); err != nil {
				return err
			}
			for k := range chunk {
				j := (next + k) % n
				if sc := &chunk[j]; !inserted[off+j] && string(call) == sc.callID && string(req) == sc.requester {
					inserted[off+j], next = true, j+1
					break
				}
			}
		}
		return rows.Close()
	})
	if err != nil {
		return nil, nil, err
	}
	kept := calls[:0]
	for i, sc := range calls {
		if inserted[i] {
			kept = append(kept, sc)
			continue
		}
		var id string
		if err := c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&id) },
			`SELECT run_id FROM spawn_calls WHERE requester_key = $1 AND call_id = $2`, sc.requester, sc.callID); err != nil {
			return nil, nil, err
		}
		taken[sc.key] = id
	}
	return kept, taken, nil
}

// settleSpawnCalls deletes the calls recordSpawnCalls inserted that no
// run took (taken): their first run was refused by a limit, so the call
// spawned nothing. A later run naming the same call has the same
// requester and root, so the same limit refuses it too.
func settleSpawnCalls(c conn, calls []newSpawnCall, taken map[string]string) error {
	for _, sc := range calls {
		if _, ok := taken[sc.key]; ok {
			continue
		}
		if _, err := c.exec(`DELETE FROM spawn_calls WHERE requester_key = $1 AND call_id = $2`, sc.requester, sc.callID); err != nil {
			return err
		}
	}
	return nil
}

// insertSpawnedRows inserts the rows of the spawned runs runs[i], i in
// keep: their child sessions (when given), the runs and their pending
// threads, each table's rows in multi-row statements.
func insertSpawnedRows(c conn, runs []*Run, children []*Session, preps []preparedRun, keep []int) error {
	// args is reused by every statement below; made once at the size of
	// the largest (a runs statement of min(len(keep), 64) rows: the other
	// tables have fewer columns and no more rows), not grown by append in
	// each (~2.4 KB of copies a spawn in the 10,000 case).
	args := make([]any, 0, min(len(keep), 1<<(multiRowSizes-1))*runRows.cols)
	var sessions, threads []int
	for _, i := range keep {
		if children[i] != nil {
			sessions = append(sessions, i)
		}
		if runs[i].ThreadPending {
			threads = append(threads, i)
		}
	}
	var once []any // the chunks' arguments with the shared columns once (multiRow.exec)
	err := sessionRows.each(c, len(sessions), func(off, n int, q string) error {
		args = args[:0]
		for _, i := range sessions[off : off+n] {
			args = append(args, preps[i].sessArgs...)
		}
		return sessionRows.exec(c, q, n, args, &once)
	})
	if err != nil {
		return fmt.Errorf("child sessions: %w", err)
	}
	err = runRows.each(c, len(keep), func(off, n int, q string) error {
		args = args[:0]
		for _, i := range keep[off : off+n] {
			args = appendRunArgs(args, runs[i], preps[i].tools, preps[i].origin)
		}
		return runRows.exec(c, q, n, args, &once)
	})
	if err != nil {
		return err
	}
	err = threadRows.each(c, len(threads), func(off, n int, q string) error {
		args = args[:0]
		for _, i := range threads[off : off+n] {
			args = append(args, runs[i].ID, ThreadPending)
		}
		_, err := c.exec(q, args...)
		return err
	})
	if err != nil {
		return fmt.Errorf("run threads: %w", err)
	}
	return nil
}

var (
	// The columns a spawn batch's child sessions and runs mostly share
	// (multiRow.shared): all but the keys and ids, the task and label,
	// the times and the trace parent.
	sessionRows = multiRow{head: `INSERT INTO sessions (` + sessionCols + `) VALUES `, cols: 16,
		shared: []int{2, 3, 4, 5, 6, 8, 9, 13, 14, 15}}
	runRows = multiRow{head: `INSERT INTO runs (` + runCols + `) VALUES `, cols: 45,
		shared: []int{3, 4, 5, 6, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32,
			34, 35, 36, 38, 39, 40, 41, 42, 43, 44}}
	threadRows    = multiRow{head: `INSERT INTO run_threads (run_id, state) VALUES `, cols: 2}
	spawnCallRows = multiRow{head: `INSERT INTO spawn_calls (requester_key, call_id, run_id) VALUES `, cols: 3,
		tail: ` ON CONFLICT (requester_key, call_id) DO NOTHING RETURNING requester_key, call_id`}
)

// multiRow is an INSERT of several rows in one statement: head, then
// the rows' placeholders, then tail. Its statements hold a power of two
// rows, at most 64, so that a few texts are prepared and cached (the
// statement cache keeps every text) and no statement binds more
// parameters than the engines allow (SQLite 32,766, PostgreSQL 65,535).
//
// On SQLite the placeholders are ?, not $n: modernc finds each
// parameter's name by a walk of the statement's list of names
// (sqlite3_bind_parameter_name), which is quadratic in the parameters:
// 64 runs' 2,880 $n took ~1 ms to bind, against none for ?.
//
// On SQLite, a chunk whose rows all hold the same value in each of the
// shared columns is inserted by a statement that binds those values once
// (sharedQuery), not once a row (exec). A response's 100 spawns agree on most of their columns
// (requester, root, agent, model, limits, origin, tools, status and the
// empty ones): binding a parameter is a call into SQLite under the
// connection's mutex, and database/sql converts each argument first.
type multiRow struct {
	head   string
	cols   int
	tail   string
	shared []int                                    // ascending column indexes; used without a tail only
	q      [2][multiRowSizes]atomic.Pointer[string] // [sqlite][log2 rows]
	qs     [multiRowSizes]atomic.Pointer[string]    // SQLite, the shared columns once
}

// exec runs q, the statement of a chunk of rows rows, with args, the
// rows' values one row after the other. On SQLite, when the rows agree
// on every shared column, it runs the statement that binds those once
// instead, with its arguments made in *once (kept for the next chunk).
// The same rows are inserted either way.
func (m *multiRow) exec(c conn, q string, rows int, args []any, once *[]any) error {
	if rows > 1 && len(m.shared) > 0 && m.tail == "" && c.dialect.name == DriverSQLite {
		if a, ok := m.sharedOnce(args, rows, (*once)[:0]); ok {
			*once = a
			_, err := c.exec(m.sharedQuery(bits.Len(uint(rows))-1), a...)
			return err
		}
	}
	_, err := c.exec(q, args...)
	return err
}

// sharedOnce appends to dst the arguments of sharedQuery for the rows
// whose values are args: the shared columns' values (the first row's),
// then each row's other columns in order. ok is false when some row
// differs from the first in a shared column, or holds there a value that
// is not a string, an integer, a float or NULL.
func (m *multiRow) sharedOnce(args []any, rows int, dst []any) (_ []any, ok bool) {
	for _, col := range m.shared {
		v := args[col]
		for r := 1; r < rows; r++ {
			if !sameArg(v, args[r*m.cols+col]) {
				return dst, false
			}
		}
		dst = append(dst, v)
	}
	for r := range rows {
		row, j := args[r*m.cols:(r+1)*m.cols], 0
		for col, v := range row {
			if j < len(m.shared) && m.shared[j] == col {
				j++
				continue
			}
			dst = append(dst, v)
		}
	}
	return dst, true
}

// sameArg reports whether a and b are the same value of a type a
// statement binds as it is (anything else is never the same: an
// interface comparison of a []byte would panic).
func sameArg(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		return same(x, b)
	case int:
		return same(x, b)
	case int64:
		return same(x, b)
	case float64:
		return same(x, b)
	}
	return false
}

// same reports whether b is a T equal to x.
func same[T comparable](x T, b any) bool {
	y, ok := b.(T)
	return ok && x == y
}

// sharedQuery is the SQLite statement for 1<<k rows with the shared
// columns bound once: INSERT … SELECT with the shared columns' ? in its
// select list and the other columns from a VALUES list of the rows (its
// columns are column1, column2, …). All placeholders are anonymous, as
// in query: an ?NNN has a name, which modernc reads and parses for every
// parameter it binds. Its arguments are sharedOnce's: the shared
// columns' values, then each row's other columns, in the order of the ?.
func (m *multiRow) sharedQuery(k int) string {
	if q := m.qs[k].Load(); q != nil {
		return *q
	}
	var b strings.Builder
	b.WriteString(strings.Replace(m.head, ") VALUES ", ") SELECT ", 1))
	j, v := 0, 0
	for col := range m.cols {
		if col > 0 {
			b.WriteString(", ")
		}
		if j < len(m.shared) && m.shared[j] == col {
			j++
			b.WriteByte('?')
			continue
		}
		v++
		b.WriteString("column")
		b.WriteString(strconv.Itoa(v))
	}
	b.WriteString(" FROM (VALUES ")
	for r := range 1 << k {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for c := range v {
			if c > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('?')
		}
		b.WriteByte(')')
	}
	b.WriteByte(')')
	b.WriteString(m.tail)
	q := b.String()
	m.qs[k].Store(&q)
	return q
}

const multiRowSizes = 7 // 1 … 64 rows

// each calls fn for consecutive chunks of n rows: offset, rows and the
// statement on c's engine for that many rows.
func (m *multiRow) each(c conn, n int, fn func(off, rows int, q string) error) error {
	for off := 0; off < n; {
		k := min(bits.Len(uint(n-off)), multiRowSizes) - 1
		rows := 1 << k
		if err := fn(off, rows, m.query(c.dialect.name == DriverSQLite, k)); err != nil {
			return err
		}
		off += rows
	}
	return nil
}

// query is the statement for 1<<k rows, with ? placeholders on SQLite.
func (m *multiRow) query(sqlite bool, k int) string {
	e := 0
	if sqlite {
		e = 1
	}
	if q := m.q[e][k].Load(); q != nil {
		return *q
	}
	var b strings.Builder
	b.WriteString(m.head)
	p := 0
	for r := range 1 << k {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for col := range m.cols {
			if col > 0 {
				b.WriteString(", ")
			}
			p++
			if sqlite {
				b.WriteByte('?')
			} else {
				b.WriteByte('$')
				b.WriteString(strconv.Itoa(p))
			}
		}
		b.WriteByte(')')
	}
	b.WriteString(m.tail)
	q := b.String()
	m.q[e][k].Store(&q)
	return q
}

// preparedRun is what a new run's rows need, encoded.
type preparedRun struct {
	tools    any
	origin   string
	sessArgs []any // the child session's row; nil: stored already
}

// prepareRun applies a new run's defaults (CreateRun) and those its child
// session takes from it, and encodes what its rows need (origins through
// oc: the runs of one batch and their children mostly share one origin).
func (d *DB) prepareRun(r *Run, child *Session, oc *originCache) (p preparedRun, err error) {
	if r.ID == "" {
		r.ID = uuid.NewString()
	}
	if r.RootKey == "" {
		r.RootKey = r.RequesterKey
	}
	if r.Status == "" {
		r.Status = StatusQueued
	}
	if r.Announce == "" {
		r.Announce = AnnounceChat
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = nowMS()
	}
	r.CreatedAt, r.StartedAt, r.EndedAt = truncMS(r.CreatedAt), truncMS(r.StartedAt), truncMS(r.EndedAt)
	r.ArchiveAt, r.ArchivedAt = truncMS(r.ArchiveAt), truncMS(r.ArchivedAt)
	if child != nil {
		fillChild(r, child)
		if err := d.normalizeSession(child); err != nil {
			return p, fmt.Errorf("create run %s: child %w", r.ID, err)
		}
		if r.ChildKey == "" {
			r.ChildKey = child.Key
		}
		if r.ChildSessionID == "" {
			r.ChildSessionID = child.ID
		}
		origin, err := oc.encode(child.Origin)
		if err != nil {
			return p, fmt.Errorf("create run %s: %w", r.ID, err)
		}
		p.sessArgs = sessionRow(child, origin)
	}
	if r.ChildKey == "" {
		return p, fmt.Errorf("create run %s: child session key is empty", r.ID)
	}
	if p.tools, err = oc.encodeTools(r.AllowedTools); err != nil {
		return p, fmt.Errorf("create run %s: %w", r.ID, err)
	}
	if p.origin, err = oc.encode(r.Origin); err != nil {
		return p, fmt.Errorf("create run %s: %w", r.ID, err)
	}
	return p, nil
}

// insertRun inserts the run row r (tools and origin encoded).
func insertRun(c conn, r *Run, tools any, origin string) error {
	_, err := c.exec(runRows.query(c.dialect.name == DriverSQLite, 0), appendRunArgs(make([]any, 0, runRows.cols), r, tools, origin)...)
	return err
}

// appendRunArgs appends run r's row (tools and origin encoded) in
// runCols' order.
func appendRunArgs(args []any, r *Run, tools any, origin string) []any {
	return append(args,
		r.ID, r.ChildKey, r.ChildSessionID, r.RequesterKey, r.RootKey, r.Depth, r.AgentID, r.Task,
		r.Label, r.Model, r.Thinking, r.Cleanup, r.TimeoutSeconds, r.MaxIterations, tools, origin,
		r.Status, r.Outcome, r.Note, r.Result, r.CreatedAt.UnixMilli(), msOrNull(r.StartedAt),
		msOrNull(r.EndedAt), r.TokensIn, r.TokensOut, r.CacheRead, r.CacheWrite, r.CostUSD,
		msOrNull(r.ArchiveAt), msOrNull(r.ArchivedAt), r.Owner, r.ScheduleID, msOrNull(r.ScheduleDue), r.TraceParent, r.RequesterSessionID,
		r.Resumes, r.Ran.Milliseconds(), msOrNull(r.StretchAt), r.Announce, r.SpawnGroup, msOrNull(r.GroupDeadline), r.OutputSchema, r.Output, r.Batch, boolInt(r.Skipped))
}

// checkSpawnLimits counts inside the writer's transaction: with one writer
// connection (SQLite) or the roots' locks held (PostgreSQL), nothing can
// insert a run of the same root between the count and the insert. The new
// runs count with the stored ones: each requester's and each root's. All
// the counts are one statement, each read from an index alone
// (runs_requester_active, runs_root).
func checkSpawnLimits(c conn, runs []*Run, lim SpawnLimits) error {
	bounds := spawnBounds(runs, lim)
	n, err := countBounds(c, bounds)
	if err != nil {
		return err
	}
	for i, b := range bounds {
		if n[i]+b.add > b.max {
			return &LimitError{Limit: b.limit, Count: n[i], Max: b.max, Adding: b.add}
		}
	}
	return nil
}

// A spawnBound counts the runs whose col is key, and also match (SQL):
// limit's count, at most max; add is how many of the new runs it counts.
type spawnBound struct {
	limit, col, also string
	max              int
	key              string
	add              int
}

// spawnBounds is the bounds lim sets on adding runs.
func spawnBounds(runs []*Run, lim SpawnLimits) []spawnBound {
	var bounds []spawnBound
	adding := func(limit string, max int, col, also string, key func(*Run) string) {
		if max <= 0 {
			return
		}
		first := len(bounds)
		for _, r := range runs {
			k := key(r)
			i := slices.IndexFunc(bounds[first:], func(b spawnBound) bool { return b.key == k })
			if i < 0 {
				bounds = append(bounds, spawnBound{limit, col, also, max, k, 1})
			} else {
				bounds[first+i].add++
			}
		}
	}
	adding("maxChildrenPerSession", lim.MaxChildren, "requester_key", ` AND `+activeRun, func(r *Run) string { return r.RequesterKey })
	adding("maxTotalSpawns", lim.MaxTotal, "root_key", "", func(r *Run) string { return r.RootKey })
	return bounds
}

// countBounds counts the stored runs of each bound, in one statement.
func countBounds(c conn, bounds []spawnBound) ([]int, error) {
	n := make([]int, len(bounds))
	if len(bounds) == 0 {
		return n, nil
	}
	dest := make([]any, len(bounds))
	for i := range n {
		dest[i] = &n[i]
	}
	q, args := boundsQuery(bounds)
	err := c.queryRow(func(rows *sql.Rows) error { return rows.Scan(dest...) }, q, args...)
	return n, err
}

// boundsQuery is countBounds' statement and its arguments.
func boundsQuery(bounds []spawnBound) (string, sqlArgs) {
	var args sqlArgs
	counts := make([]string, len(bounds))
	for i, b := range bounds {
		counts[i] = `(SELECT COUNT(*) FROM runs WHERE ` + b.col + ` = ` + args.add(b.key) + b.also + ` AND schedule_id = '')`
	}
	return `SELECT ` + strings.Join(counts, ", "), args
}

// spawnCounts is SpawnEach's running count of each bound of its runs: the
// stored runs, counted once, and each run it inserted after. Inside the
// writer's transaction (one writer connection, or the roots' locks held)
// nothing else inserts a run of these roots meanwhile, so this is what a
// count before each run would read.
type spawnCounts struct {
	bounds []spawnBound
	n      []int
}

// check is checkSpawnLimits for r alone, as the next run.
func (sc *spawnCounts) check(r *Run) error {
	for i, b := range sc.bounds {
		if b.key == boundKey(b, r) && sc.n[i]+1 > b.max {
			return &LimitError{Limit: b.limit, Count: sc.n[i], Max: b.max, Adding: 1}
		}
	}
	return nil
}

// inserted counts r, just inserted, in the bounds whose count has it.
func (sc *spawnCounts) inserted(r *Run) {
	if r.ScheduleID != "" {
		return
	}
	for i, b := range sc.bounds {
		if b.key != boundKey(b, r) {
			continue
		}
		if b.col == "requester_key" && r.Status != StatusQueued && r.Status != StatusRunning && r.Status != StatusAnnouncing {
			continue
		}
		sc.n[i]++
	}
}

// boundKey is r's key in b's column.
func boundKey(b spawnBound, r *Run) string {
	if b.col == "requester_key" {
		return r.RequesterKey
	}
	return r.RootKey
}

// RunBySpawnCall returns the run that the tool call callID of the session
// requesterKey spawned; ErrNotFound when that call spawned none.
func (d *DB) RunBySpawnCall(ctx context.Context, requesterKey, callID string) (*Run, error) {
	var runID string
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return rows.Scan(&runID) },
		`SELECT run_id FROM spawn_calls WHERE requester_key = $1 AND call_id = $2`, requesterKey, callID)
	if err != nil {
		return nil, d.wrap("run by spawn call "+callID, err)
	}
	return d.GetRun(ctx, runID)
}

func fillChild(r *Run, s *Session) {
	if s.Kind == "" {
		s.Kind = KindSubagent
	}
	if s.Key == "" {
		s.Key = r.ChildKey
	}
	if s.ID == "" {
		s.ID = r.ChildSessionID
	}
	if s.AgentID == "" {
		s.AgentID = r.AgentID
	}
	if s.ParentKey == "" {
		s.ParentKey = r.RequesterKey
	}
	if s.RootKey == "" {
		s.RootKey = r.RootKey
	}
	if s.Depth == 0 {
		s.Depth = r.Depth
	}
	if s.Label == "" {
		s.Label = r.Label
	}
	if s.Model == "" {
		s.Model = r.Model
	}
	if s.Origin == (channels.Origin{}) {
		s.Origin = r.Origin
	}
	if s.CreatedAt.IsZero() {
		s.CreatedAt = r.CreatedAt
	}
}

// StartRun moves a queued run to running: StartedAt is set unless a run
// resumed after a stop (ResumeRun) keeps its own, and its current stretch
// begins at at. ErrNotFound; a run that is not queued gives an error
// wrapping ErrNotQueued.
func (d *DB) StartRun(ctx context.Context, runID string, at time.Time) error {
	ms := msOrNow(at)
	n, err := d.writer(ctx).execN(startRunSQL, StatusRunning, ms, ms, runID, StatusQueued)
	return d.movedRun(ctx, "start run", runID, n, err)
}

// startRunSQL moves a queued run to running (StartRun, RunEnd.Start).
const startRunSQL = `UPDATE runs SET status = $1, started_at = COALESCE(started_at, $2), stretch_at = $3
	WHERE id = $4 AND status = $5`

// ResumeRun queues again a run that was running or announcing when its
// gateway stopped (SPEC §25): Resumes goes up by one, Ran becomes ran
// (the time it ran before this stop); StartedAt is kept. ErrNotFound; a
// run in another state gives an error wrapping ErrNotQueued.
func (d *DB) ResumeRun(ctx context.Context, runID string, ran time.Duration) error {
	n, err := d.writer(ctx).execN(`UPDATE runs SET status = $1, resumes = resumes + 1, ran_ms = $2
		WHERE id = $3 AND status IN ($4, $5)`, StatusQueued, ran.Milliseconds(), runID, StatusRunning, StatusAnnouncing)
	return d.movedRun(ctx, "resume run", runID, n, err)
}

// movedRun is the answer of an update (op) that moves run runID from one
// status to another: nil when it moved the row (n = 1), else ErrNotFound
// or an error naming the status it is in, wrapping ErrNotQueued.
func (d *DB) movedRun(ctx context.Context, op, runID string, n int64, err error) error {
	if err != nil {
		return d.wrap(op+" "+runID, err)
	}
	if n == 1 {
		return nil
	}
	r, err := d.GetRun(ctx, runID)
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, runID, err)
	}
	return fmt.Errorf("%s %s: status is %s: %w", op, runID, r.Status, ErrNotQueued)
}

// SetRunStatus sets the run's status (and nothing else); ErrNotFound.
func (d *DB) SetRunStatus(ctx context.Context, runID, status string) error {
	n, err := d.writer(ctx).execN(`UPDATE runs SET status = $1 WHERE id = $2`, status, runID)
	if err != nil {
		return d.wrap("set run status "+runID, err)
	}
	if n == 0 {
		return fmt.Errorf("set run status %s: %w", runID, ErrNotFound)
	}
	return nil
}

// SetRunNote sets the run's status and note, e.g. running with
// "awaiting approval <code>"; ErrNotFound.
func (d *DB) SetRunNote(ctx context.Context, runID, status, note string) error {
	n, err := d.writer(ctx).execN(`UPDATE runs SET status = $1, note = $2 WHERE id = $3`, status, note, runID)
	if err != nil {
		return d.wrap("set run note "+runID, err)
	}
	if n == 0 {
		return fmt.Errorf("set run note %s: %w", runID, ErrNotFound)
	}
	return nil
}

// FinishRun stores the run's end (Status, default done; Outcome, Note,
// Result, StartedAt if set, EndedAt, default now; token counts, cost and
// ArchiveAt) and, when announce is non-nil, the announce's outbox row, in
// one transaction: either both are stored or neither. announce.RunID
// defaults to r.ID; an outbox row for that RunID already stored is kept and
// no second row is added (announce.ID is set to it). ErrNotFound.
func (d *DB) FinishRun(ctx context.Context, r *Run, announce *OutboxItem) error {
	return d.EndRun(ctx, r, RunEnd{Announce: announce})
}

// RunEnd is what a run's end writes beside the run row, in the same
// transaction (EndRun).
type RunEnd struct {
	// Announce is the announce's outbox row (nil: none).
	Announce *OutboxItem
	// Result is the run's result for the session that spawned it (SPEC
	// §23; nil: none). RunID defaults to the run's; a result already
	// stored for the run is kept and no second one is added.
	Result *Result
	// Wake, when set, is the owed intake (Kind IntakeWake) that wakes the
	// requester once the run's spawn group (r.SpawnGroup) has no other
	// queued, running or announcing run (SPEC §23). It is added like
	// AddIntake (claimed for Wake.ClaimedBy when it is its session's oldest
	// owed message); Wake.ID is set when it was added, 0 when the group
	// still runs or its wake is already stored (its PlatformID).
	Wake *Intake
	// Batch, for a run of a batch (r.Batch), adds the batch's one
	// announce when this is the end of its last live run (SPEC §23).
	Batch *BatchEnd
	// ClaimAnnounce, when set, is the replica that claims the announce it
	// adds for sending (ClaimOutbox) in the same transaction, when the
	// announce is the oldest pending item of its destination:
	// Announce.ClaimedBy says whether it did, and its fields are then the
	// claimed row's (a new item: no attempt, no part sent).
	ClaimAnnounce string
	// Start, when set, is the queued run that starts as this one ends
	// (in its lane slot): it is moved to running as StartRun does, in
	// the same transaction; a run no longer queued is left as it is.
	Start *RunStart
	// Web, with ClaimAnnounce, delivers an announce for the web chat in
	// the same transaction when it was claimed (WebDelivery; its RunID
	// defaults to the announce's).
	Web *WebDelivery
}

// RunStart names a run to start and when (RunEnd.Start).
type RunStart struct {
	RunID string
	At    time.Time
}

// BatchEnd is the announce of a batch (RunEnd.Batch).
type BatchEnd struct {
	// Render makes the announce from the batch's runs, in the order they
	// were spawned, this run's end included. EndRun calls it in its
	// transaction when no other run of the batch is queued, running or
	// announcing; the item it returns (nil: none) is added to the outbox
	// with the files of the batch's results after its own, once: its
	// RunID defaults to "batch:<id>", and a stored item with that RunID is
	// kept.
	Render func(runs []Run) *OutboxItem
	// Announce is set to the item when this end added it, else nil.
	Announce *OutboxItem
}

// EndRun is FinishRun with everything a run's end writes (RunEnd): the
// run row, its announce and its result for the requester session, all in
// one transaction. The run row's update also clears a stop asked for the
// run (RequestStop): an ended run carries no pending stop.
func (d *DB) EndRun(ctx context.Context, r *Run, end RunEnd) error {
	announce := end.Announce
	var wakeHolder string
	if end.Wake != nil {
		wakeHolder = end.Wake.ClaimedBy
	}
	if r.Status == "" {
		r.Status = StatusDone
	}
	if r.EndedAt.IsZero() {
		r.EndedAt = nowMS()
	}
	r.StartedAt, r.EndedAt, r.ArchiveAt = truncMS(r.StartedAt), truncMS(r.EndedAt), truncMS(r.ArchiveAt)
	var item *outboxRow
	if announce != nil {
		if announce.RunID == "" {
			announce.RunID = r.ID
		}
		var err error
		if item, err = newOutboxRow(announce); err != nil {
			return fmt.Errorf("finish run %s: %w", r.ID, err)
		}
	}
	web, err := end.Web.forWrite(announce != nil, end.ClaimAnnounce)
	if err != nil {
		return fmt.Errorf("finish run %s: %w", r.ID, err)
	}
	if web != nil && web.Msg.RunID == "" {
		web.Msg.RunID = announce.RunID
	}
	claimedAnnounce := false
	err = d.tx(ctx, func(c conn) error {
		claimedAnnounce = false
		web.undeliver()
		if web != nil {
			// The web chat's lock first, before any session's (addWake),
			// the order a person's message takes them (AddIntake).
			if err := c.lock("web:" + web.Client); err != nil {
				return err
			}
		}
		n, err := c.execN(`UPDATE runs SET status = $1, outcome = $2, note = $3, result = $4,
			started_at = COALESCE($5, started_at), ended_at = $6, tokens_in = $7, tokens_out = $8,
			cache_read = $9, cache_write = $10, cost_usd = $11, archive_at = $12, output = $13, skipped = $14,
			stop_at = NULL WHERE id = $15`,
			r.Status, r.Outcome, r.Note, r.Result, msOrNull(r.StartedAt), r.EndedAt.UnixMilli(),
			r.TokensIn, r.TokensOut, r.CacheRead, r.CacheWrite, r.CostUSD, msOrNull(r.ArchiveAt), r.Output, boolInt(r.Skipped), r.ID)
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrNotFound
		}
		// The child session shows the run's tokens (herald sessions list).
		child := `(SELECT child_key FROM runs WHERE id = $4)`
		key := r.ID
		if r.ChildKey != "" { // a run as read or spawned: no lookup
			child, key = `$4`, r.ChildKey
		}
		if _, err := c.exec(`UPDATE sessions SET tokens_in = $1, tokens_out = $2, updated_at = $3
			WHERE key = `+child, r.TokensIn, r.TokensOut, r.EndedAt.UnixMilli(), key); err != nil {
			return err
		}
		if st := end.Start; st != nil {
			ms := msOrNow(st.At)
			if _, err := c.exec(startRunSQL, StatusRunning, ms, ms, st.RunID, StatusQueued); err != nil {
				return fmt.Errorf("start run %s: %w", st.RunID, err)
			}
		}
		if testHookFinishRun != nil {
			if err := testHookFinishRun(); err != nil {
				return err
			}
		}
		if item != nil {
			id, claimed, err := item.insertClaimed(c, end.ClaimAnnounce, web)
			if err != nil {
				return fmt.Errorf("outbox: %w", err)
			}
			announce.ID, claimedAnnounce = id, claimed
		}
		if end.Result != nil {
			if err := insertResult(c, r, end.Result); err != nil {
				return fmt.Errorf("result: %w", err)
			}
		}
		if end.Batch != nil && r.Batch != "" {
			if end.Batch.Announce, err = addBatchAnnounce(c, d.dialect, r, end.Batch.Render); err != nil {
				return fmt.Errorf("batch %s: %w", r.Batch, err)
			}
		}
		if end.Wake != nil {
			end.Wake.ClaimedBy = wakeHolder
			if err := addWake(c, r, end.Wake); err != nil {
				return fmt.Errorf("wake: %w", err)
			}
		}
		// After the announce, so a pause notice follows the run it is about.
		if r.ScheduleID != "" {
			if err := endScheduledRun(c, r); err != nil {
				return fmt.Errorf("schedule %s: %w", r.ScheduleID, err)
			}
		}
		// Last: the delivery's claim of the chat's next item sees what this
		// end added after the announce (a batch's announce, a pause notice).
		if item != nil {
			more := (end.Batch != nil && end.Batch.Announce != nil) || r.ScheduleID != ""
			if err := d.deliverWeb(c, item, announce.ID, claimedAnnounce, web, more); err != nil {
				return fmt.Errorf("web: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		if announce != nil {
			announce.ID = 0
		}
		if end.Batch != nil {
			end.Batch.Announce = nil
		}
		web.undeliver()
		return d.wrap("finish run "+r.ID, err)
	}
	if announce != nil {
		item.apply(announce)
		if claimedAnnounce {
			item.claimed(announce, end.ClaimAnnounce)
		}
		web.markDelivered(announce)
	}
	return nil
}

// addBatchAnnounce adds the announce of r's batch in the transaction that
// ends r when no other run of the batch is live (BatchEnd.Render), and
// returns it (nil: the batch still runs, Render gave none, or it is stored
// already).
func addBatchAnnounce(c conn, dia *dialect, r *Run, render func([]Run) *OutboxItem) (*OutboxItem, error) {
	if render == nil {
		return nil, nil
	}
	// Two ends of one batch on two replicas: the second to take the lock
	// sees the first one's end.
	if err := c.lock("batch:" + r.Batch); err != nil {
		return nil, err
	}
	var live int
	if err := c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&live) },
		batchLiveQuery, r.Batch); err != nil || live > 0 {
		return nil, err
	}
	return insertBatchAnnounce(c, dia, r.Batch, render)
}

// AnnounceBatch adds the announce of a batch whose runs may still run
// (its group deadline passed, SPEC §23) and returns it; nil when render
// gave none or the batch's announce is stored already — by its last end
// or by an earlier call — so it is added once, and the ends of the runs
// still live add no second one.
func (d *DB) AnnounceBatch(ctx context.Context, batch string, render func(runs []Run) *OutboxItem) (*OutboxItem, error) {
	var item *OutboxItem
	err := d.tx(ctx, func(c conn) error {
		// The same lock as the ends of the batch's runs: either the last
		// end sees this announce, or this sees that end and its announce.
		if err := c.lock("batch:" + batch); err != nil {
			return err
		}
		var err error
		item, err = insertBatchAnnounce(c, d.dialect, batch, render)
		return err
	})
	if err != nil {
		return nil, d.wrap("announce batch "+batch, err)
	}
	return item, nil
}

// insertBatchAnnounce renders the announce of the batch from its runs in
// spawn order and adds it with the files of their results, unless an
// announce of the batch is stored already; the caller holds the batch's
// lock.
func insertBatchAnnounce(c conn, dia *dialect, batch string, render func([]Run) *OutboxItem) (*OutboxItem, error) {
	rows, err := c.query(batchRunsQuery(dia), batch)
	if err != nil {
		return nil, err
	}
	runs, err := scanRuns(rows)
	if err != nil {
		return nil, err
	}
	item := render(runs)
	if item == nil {
		return nil, nil
	}
	if item.RunID == "" {
		item.RunID = "batch:" + batch
	}
	rows, err = c.query(batchFilesQuery(dia), batch)
	if err != nil {
		return nil, err
	}
	files, err := scanFileRefs(rows)
	if err != nil {
		return nil, err
	}
	item.Files = append(item.Files, files...)
	row, err := newOutboxRow(item)
	if err != nil {
		return nil, err
	}
	var exists int
	if err := c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&exists) },
		`SELECT COUNT(*) FROM outbox WHERE run_id = $1`, item.RunID); err != nil || exists > 0 {
		return nil, err
	}
	if item.ID, err = row.insert(c); err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	row.apply(item)
	return item, nil
}

// The conditions of the partial indexes on runs (v37), stated in the
// queries that read them: SQLite uses a partial index only when the
// query's WHERE holds its condition, which a bound parameter does not
// show (PostgreSQL's generic plans likewise).
const (
	activeRun    = `status IN ('queued', 'running', 'announcing')` // runs_requester_active
	inSpawnGroup = `spawn_group <> ''`                             // runs_spawn_group
	inBatch      = `batch <> ''`                                   // runs_batch
)

// The reads of a batch's runs, through runs_batch: how many are live,
// the runs in spawn order, and the files of their results.
const batchLiveQuery = `SELECT COUNT(*) FROM runs WHERE batch = $1 AND ` + inBatch + ` AND ` + activeRun

func batchRunsQuery(dia *dialect) string {
	return `SELECT ` + runCols + ` FROM runs WHERE batch = $1 AND ` + inBatch + ` ORDER BY created_at, ` + dia.rowid
}

func batchFilesQuery(dia *dialect) string {
	return `SELECT f.file_id, f.name, f.mime, f.size, f.kind, f.caption FROM result_files f
		JOIN runs r ON r.id = f.run_id WHERE r.batch = $1 AND r.` + inBatch + ` ORDER BY r.created_at, r.` + dia.rowid + `, f.seq`
}

// testHookFinishRun, when set by a test, runs inside FinishRun's transaction
// between the run update and the outbox insert.
var testHookFinishRun func() error

// GetRun returns the run; ErrNotFound.
func (d *DB) GetRun(ctx context.Context, runID string) (*Run, error) {
	return d.getRun(ctx, "get run "+runID, `SELECT `+runCols+` FROM runs WHERE id = $1`, runID)
}

// GetRunByChildKey returns the run whose child session is key; ErrNotFound.
func (d *DB) GetRunByChildKey(ctx context.Context, key string) (*Run, error) {
	return d.getRun(ctx, "get run of "+key, `SELECT `+runCols+` FROM runs WHERE child_key = $1`, key)
}

func (d *DB) getRun(ctx context.Context, op, q string, arg any) (*Run, error) {
	var r Run
	if err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return scanRun(rows, &r) }, q, arg); err != nil {
		return nil, d.wrap(op, err)
	}
	return &r, nil
}

// ListRuns returns the runs matching f, newest first.
func (d *DB) ListRuns(ctx context.Context, f RunFilter) ([]Run, error) {
	q, args := d.listRunsQuery(f)
	scan := scanRuns
	if f.Brief {
		scan = scanBriefRuns
	}
	rows, err := d.reader(ctx).query(q, args...)
	if err != nil {
		return nil, d.wrap("list runs", err)
	}
	runs, err := scan(rows)
	if err != nil {
		return nil, d.wrap("list runs", err)
	}
	return runs, nil
}

// listRunsQuery is ListRuns' statement for f and its arguments.
func (d *DB) listRunsQuery(f RunFilter) (string, sqlArgs) {
	var where []string
	var args sqlArgs
	if f.RequesterKey != "" {
		where = append(where, "requester_key = "+args.add(f.RequesterKey))
	}
	if f.RootKey != "" {
		where = append(where, "root_key = "+args.add(f.RootKey))
	}
	if f.Chat != "" {
		esc := likeEscape(f.Chat)
		where = append(where, "(root_key LIKE "+args.add("agent:%:"+esc)+` ESCAPE '\' OR root_key LIKE `+
			args.add("agent:%:"+esc+":thread:%")+` ESCAPE '\')`)
	}
	if f.SpawnGroup != "" {
		where = append(where, "spawn_group = "+args.add(f.SpawnGroup), inSpawnGroup)
	}
	if f.Batch != "" {
		where = append(where, "batch = "+args.add(f.Batch), inBatch)
	}
	order := "created_at"
	if len(f.Statuses) > 0 {
		where = append(where, "status IN ("+list(&args, f.Statuses)+")")
		if !slices.ContainsFunc(f.Statuses, func(s string) bool {
			return s != StatusQueued && s != StatusRunning && s != StatusAnnouncing
		}) {
			// Live runs only: read from runs_requester_active, which holds
			// them alone, and sorted. With the column itself in ORDER BY,
			// SQLite (which has no statistics) walks runs_created instead:
			// every run ever stored, in order.
			where = append(where, activeRun)
			order = "+created_at"
		}
	}
	cols := runCols
	if f.Brief {
		cols = briefRunCols
	}
	q := `SELECT ` + cols + ` FROM runs`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY " + order + " DESC, " + d.dialect.rowid + " DESC"
	if f.Limit > 0 {
		q += " LIMIT " + args.add(f.Limit)
	}
	return q, args
}

// countSpawnsQuery counts a root's runs from runs_root alone.
const countSpawnsQuery = `SELECT COUNT(*) FROM runs WHERE root_key = $1`

// CountSpawns counts every run ever created under the top-level session
// rootKey, finished or not.
func (d *DB) CountSpawns(ctx context.Context, rootKey string) (int, error) {
	var n int
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return rows.Scan(&n) }, countSpawnsQuery, rootKey)
	if err != nil {
		return 0, d.wrap("count spawns "+rootKey, err)
	}
	return n, nil
}

// DueArchives returns the runs whose ArchiveAt is set and ≤ now and that are
// not archived yet, earliest deadline first.
func (d *DB) DueArchives(ctx context.Context, now time.Time) ([]Run, error) {
	// A child a thread is bound to (SPEC §24) is archived once its
	// binding ended too: people still talk to it there.
	rows, err := d.reader(ctx).query(`SELECT `+runCols+` FROM runs
		WHERE archive_at IS NOT NULL AND archived_at IS NULL AND archive_at <= $1
		AND NOT EXISTS (SELECT 1 FROM thread_bindings b WHERE b.child_key = runs.child_key AND b.expires_at > $1)
		ORDER BY archive_at, `+d.dialect.rowid, msOrNow(now))
	if err != nil {
		return nil, d.wrap("due archives", err)
	}
	runs, err := scanRuns(rows)
	if err != nil {
		return nil, d.wrap("due archives", err)
	}
	return runs, nil
}

// NextArchiveAt returns the earliest pending archive deadline (for a child
// a thread is bound to, the later of its deadline and the binding's end);
// ok is false when there is none.
func (d *DB) NextArchiveAt(ctx context.Context) (time.Time, bool, error) {
	var at sql.NullInt64
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return rows.Scan(&at) },
		`SELECT MIN(CASE WHEN b.e > r.archive_at THEN b.e ELSE r.archive_at END) FROM runs r
		LEFT JOIN (SELECT child_key, MAX(expires_at) AS e FROM thread_bindings GROUP BY child_key) b ON b.child_key = r.child_key
		WHERE r.archive_at IS NOT NULL AND r.archived_at IS NULL`)
	if err != nil {
		return time.Time{}, false, d.wrap("next archive", err)
	}
	return fromMS(at), at.Valid, nil
}

// MarkArchived sets the run's ArchivedAt and marks its child session
// deleted, in one transaction; ErrNotFound.
func (d *DB) MarkArchived(ctx context.Context, runID string, at time.Time) error {
	ms := msOrNow(at)
	err := d.tx(ctx, func(c conn) error {
		n, err := c.execN(`UPDATE runs SET archived_at = COALESCE(archived_at, $1) WHERE id = $2`, ms, runID)
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrNotFound
		}
		_, err = c.exec(`UPDATE sessions SET deleted_at = COALESCE(deleted_at, $1)
			WHERE key = (SELECT child_key FROM runs WHERE id = $2)`, ms, runID)
		return err
	})
	if err != nil {
		return d.wrap("mark archived "+runID, err)
	}
	return nil
}

// AddRunUsage adds the tokens of a model call made after the run ended (a
// "one more turn" through sessions_send or /subagents send) to the run and
// to its child session; ErrNotFound.
func (d *DB) AddRunUsage(ctx context.Context, runID string, in, out, cacheRead, cacheWrite int64) error {
	return d.tx(ctx, func(c conn) error {
		n, err := c.execN(`UPDATE runs SET tokens_in = tokens_in + $1, tokens_out = tokens_out + $2,
			cache_read = cache_read + $3, cache_write = cache_write + $4 WHERE id = $5`, in, out, cacheRead, cacheWrite, runID)
		if err != nil {
			return d.wrap("add run usage "+runID, err)
		}
		if n == 0 {
			return fmt.Errorf("add run usage %s: %w", runID, ErrNotFound)
		}
		_, err = c.exec(`UPDATE sessions SET tokens_in = tokens_in + $1, tokens_out = tokens_out + $2
			WHERE key = (SELECT child_key FROM runs WHERE id = $3)`, in, out, runID)
		return d.wrap("add run usage "+runID, err)
	})
}
