package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/heraldhq/herald/channels"
)

// Schedules (SPEC §19): a schedule's next due time is claimed in the same
// transaction that records its run (FireDue), so a due time is fired once
// across restarts, kill -9 and replicas: on PostgreSQL the due rows are
// taken FOR UPDATE SKIP LOCKED, on SQLite by the one writer; the unique
// index runs (schedule_id, schedule_due) refuses a second run of one due
// time whatever happens above it.

// Schedule kinds.
const (
	ScheduleCron  = "cron"  // Expr: five cron fields or an @descriptor
	ScheduleEvery = "every" // Expr: a Go duration ("30m0s")
	ScheduleAt    = "at"    // Expr: the one due time, RFC 3339 UTC
)

// Schedule sources.
const (
	ScheduleFromConfig = "config"
	ScheduleFromChat   = "chat"
	ScheduleFromTool   = "tool"
)

// Schedule is one recurring or one-off run of an agent into a destination.
type Schedule struct {
	ID          string
	SessionKey  string // the conversation the runs belong to (their requester)
	AgentID     string
	Kind        string // ScheduleCron | ScheduleEvery | ScheduleAt
	Expr        string
	Timezone    string // IANA name
	Task        string
	Origin      channels.Origin // where the runs are announced
	Source      string          // ScheduleFromConfig | ScheduleFromChat | ScheduleFromTool
	CatchUp     string          // latest | none | all
	MaxFailures int
	Paused      bool
	NextDue     time.Time // zero: nothing more (a one-off that fired)
	ActiveRun   string    // the run of the last firing while it has not ended
	Failures    int       // failed runs in a row
	Fired       int64     // runs started
	Skipped     int64     // due times skipped: the previous run still ran
	Missed      int64     // due times passed over while no gateway ran
	LastDue     time.Time
	CreatedAt   time.Time
	CreatedBy   string // sender id, "config" or the model's session
}

// Firing is what FireDue's plan decides for one due schedule.
type Firing struct {
	// Run and Child are the run to record for the due time Run.ScheduleDue
	// (FireDue sets Run.ScheduleID); nil: no run this time.
	Run   *Run
	Child *Session
	// Skipped counts due times skipped because the previous run still
	// ran; Missed those passed over while no gateway ran (catchUp).
	Skipped, Missed int
	// Next is the schedule's next due time; zero: none (a one-off done).
	Next time.Time
	// Failed counts as a failed run (the run could not be made); Notice,
	// if set, is posted to the destination in the same transaction.
	Failed bool
	Notice *OutboxItem
}

// Fired is one schedule FireDue acted on and what it did.
type Fired struct {
	Schedule Schedule
	Firing   Firing
	// Paused: the schedule paused in this transaction (maxFailures).
	Paused bool
}

// ScheduleCounts are the schedules by state (herald_schedules).
type ScheduleCounts struct {
	Active, Paused, Done int
}

const scheduleCols = `id, session_key, agent_id, kind, expr, timezone, task, origin, source, catch_up,
	max_failures, paused, next_due, active_run, failures, fired, skipped, missed, last_due, created_at, created_by`

func scanSchedule(rows *sql.Rows, s *Schedule) error {
	var origin string
	var paused int
	var next, last, created sql.NullInt64
	if err := rows.Scan(&s.ID, &s.SessionKey, &s.AgentID, &s.Kind, &s.Expr, &s.Timezone, &s.Task, &origin,
		&s.Source, &s.CatchUp, &s.MaxFailures, &paused, &next, &s.ActiveRun, &s.Failures, &s.Fired,
		&s.Skipped, &s.Missed, &last, &created, &s.CreatedBy); err != nil {
		return err
	}
	s.Paused = paused != 0
	s.NextDue, s.LastDue, s.CreatedAt = fromMS(next), fromMS(last), fromMS(created)
	return parseOrigin(origin, &s.Origin)
}

func scanSchedules(rows *sql.Rows) ([]Schedule, error) {
	defer rows.Close()
	var out []Schedule
	for rows.Next() {
		var s Schedule
		if err := scanSchedule(rows, &s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func insertSchedule(c conn, s *Schedule) error {
	origin, err := originJSON(s.Origin)
	if err != nil {
		return err
	}
	_, err = c.exec(`INSERT INTO schedules (`+scheduleCols+`) VALUES
		($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)`,
		s.ID, s.SessionKey, s.AgentID, s.Kind, s.Expr, s.Timezone, s.Task, origin, s.Source, s.CatchUp,
		s.MaxFailures, boolInt(s.Paused), msOrNull(s.NextDue), s.ActiveRun, s.Failures, s.Fired, s.Skipped,
		s.Missed, msOrNull(s.LastDue), s.CreatedAt.UnixMilli(), s.CreatedBy)
	return err
}

func normalizeSchedule(s *Schedule) error {
	if s.ID == "" || s.SessionKey == "" || s.AgentID == "" || s.Kind == "" || s.Expr == "" {
		return errors.New("id, session key, agent, kind and expression are required")
	}
	if s.Timezone == "" {
		s.Timezone = "UTC"
	}
	if s.Source == "" {
		s.Source = ScheduleFromChat
	}
	if s.CatchUp == "" {
		s.CatchUp = "latest"
	}
	if s.MaxFailures <= 0 {
		s.MaxFailures = 3
	}
	if s.CreatedAt.IsZero() {
		s.CreatedAt = nowMS()
	}
	s.CreatedAt, s.NextDue, s.LastDue = truncMS(s.CreatedAt), truncMS(s.NextDue), truncMS(s.LastDue)
	return nil
}

// AddSchedule stores a new schedule. With max > 0 it refuses (a
// *LimitError, Limit "maxPerConversation") when the conversation already
// has max live chat/tool schedules — active, paused or with a run still
// going; finished one-offs and config schedules delivered there do not
// count — counted in the insert's transaction. An id already
// stored gives an error wrapping ErrExists.
func (d *DB) AddSchedule(ctx context.Context, s *Schedule, max int) error {
	return d.AddScheduleWithin(ctx, s, ScheduleLimits{PerConversation: max})
}

// ScheduleLimits bound the live chat and tool schedules (active, paused or
// still running) AddScheduleWithin may add to; 0 is no limit.
type ScheduleLimits struct {
	PerConversation int // of the schedule's conversation (schedules.maxPerConversation)
	PerSender       int // made by its CreatedBy, in any conversation (schedules.maxPerSender)
	Total           int // of the gateway (schedules.maxTotal)
}

// AddScheduleWithin is AddSchedule under every limit of lim, counted in
// the transaction that inserts the schedule; the first one reached is a
// *LimitError naming it (maxPerConversation, maxPerSender, maxTotal).
func (d *DB) AddScheduleWithin(ctx context.Context, s *Schedule, lim ScheduleLimits) error {
	if err := normalizeSchedule(s); err != nil {
		return fmt.Errorf("add schedule %s: %w", s.ID, err)
	}
	const live = ` AND source <> '` + ScheduleFromConfig + `' AND (paused <> 0 OR next_due IS NOT NULL OR active_run <> '')`
	err := d.tx(ctx, func(c conn) error {
		if lim.PerSender > 0 || lim.Total > 0 {
			// Counts across conversations: one add at a time, taken
			// before any conversation's lock.
			if err := c.lock("schedules:*"); err != nil {
				return err
			}
		}
		if err := c.lock("schedules:" + s.SessionKey); err != nil {
			return err
		}
		for _, l := range []struct {
			name, where string
			arg         any
			max         int
		}{
			{"maxPerConversation", `session_key = $1`, s.SessionKey, lim.PerConversation},
			{"maxPerSender", `created_by = $1`, s.CreatedBy, lim.PerSender},
			{"maxTotal", `1 = 1`, nil, lim.Total},
		} {
			if l.max <= 0 || l.name == "maxPerSender" && s.CreatedBy == "" {
				continue
			}
			var n int
			var args []any
			if l.arg != nil {
				args = append(args, l.arg)
			}
			if err := c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&n) },
				`SELECT COUNT(*) FROM schedules WHERE `+l.where+live, args...); err != nil {
				return err
			}
			if n >= l.max {
				return &LimitError{Limit: l.name, Count: n, Max: l.max}
			}
		}
		return insertSchedule(c, s)
	})
	if le := (*LimitError)(nil); errors.As(err, &le) {
		return le
	}
	return d.wrap("add schedule "+s.ID, err)
}

// SyncConfigSchedules makes the config's schedules (SPEC §19
// schedules.list) the stored ones of source config: new ids are added,
// changed ones updated and those no longer listed removed. A schedule
// whose kind, expression and timezone did not change keeps its stored
// next due time, pause and counters, so a restart or reload neither fires
// nor skips a due time. An id already used by a chat schedule is an error.
func (d *DB) SyncConfigSchedules(ctx context.Context, list []Schedule) error {
	for i := range list {
		list[i].Source = ScheduleFromConfig
		if err := normalizeSchedule(&list[i]); err != nil {
			return fmt.Errorf("sync config schedules: %s: %w", list[i].ID, err)
		}
	}
	err := d.tx(ctx, func(c conn) error {
		if len(list) == 0 {
			// No schedule in the config (the usual start): only config
			// schedules left from an earlier config would change, and a
			// narrow look for one spares start-up the wide SELECT below
			// (anyRow).
			if ok, err := anyRow(c, `SELECT 1 FROM schedules WHERE source = '`+ScheduleFromConfig+`' LIMIT 1`); !ok {
				return err
			}
		}
		rows, err := c.query(`SELECT ` + scheduleCols + ` FROM schedules WHERE source = '` + ScheduleFromConfig + `'` + c.dialect.forUpdate)
		if err != nil {
			return err
		}
		old, err := scanSchedules(rows)
		if err != nil {
			return err
		}
		byID := make(map[string]Schedule, len(old))
		for _, s := range old {
			byID[s.ID] = s
		}
		keep := make(map[string]bool, len(list))
		for i := range list {
			s := &list[i]
			keep[s.ID] = true
			o, ok := byID[s.ID]
			if !ok {
				if err := insertSchedule(c, s); err != nil {
					if errors.Is(d.wrap("", err), ErrExists) {
						return fmt.Errorf("schedule id %q is already used by a schedule made in chat; rename it in the config", s.ID)
					}
					return err
				}
				continue
			}
			if o.Kind == s.Kind && o.Expr == s.Expr && o.Timezone == s.Timezone {
				s.NextDue = o.NextDue
			}
			origin, err := originJSON(s.Origin)
			if err != nil {
				return err
			}
			if _, err := c.exec(`UPDATE schedules SET session_key = $1, agent_id = $2, kind = $3, expr = $4, timezone = $5,
				task = $6, origin = $7, catch_up = $8, max_failures = $9, next_due = $10 WHERE id = $11`,
				s.SessionKey, s.AgentID, s.Kind, s.Expr, s.Timezone, s.Task, origin, s.CatchUp, s.MaxFailures,
				msOrNull(s.NextDue), s.ID); err != nil {
				return err
			}
		}
		for _, o := range old {
			if !keep[o.ID] {
				if _, err := c.exec(`DELETE FROM schedules WHERE id = $1`, o.ID); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return d.wrap("sync config schedules", err)
	}
	return nil
}

// GetSchedule returns the schedule; ErrNotFound.
func (d *DB) GetSchedule(ctx context.Context, id string) (*Schedule, error) {
	var s Schedule
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return scanSchedule(rows, &s) },
		`SELECT `+scheduleCols+` FROM schedules WHERE id = $1`, id)
	if err != nil {
		return nil, d.wrap("get schedule "+id, err)
	}
	return &s, nil
}

// ListSchedules returns the conversation's schedules (every schedule when
// sessionKey is ""), oldest first.
func (d *DB) ListSchedules(ctx context.Context, sessionKey string) ([]Schedule, error) {
	q := `SELECT ` + scheduleCols + ` FROM schedules`
	var args []any
	if sessionKey != "" {
		q += ` WHERE session_key = $1`
		args = append(args, sessionKey)
	}
	rows, err := d.reader(ctx).query(q+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, d.wrap("list schedules", err)
	}
	out, err := scanSchedules(rows)
	return out, d.wrap("list schedules", err)
}

// PauseSchedule pauses a schedule; ErrNotFound.
func (d *DB) PauseSchedule(ctx context.Context, id string) error {
	n, err := d.writer(ctx).execN(`UPDATE schedules SET paused = 1 WHERE id = $1`, id)
	if err != nil {
		return d.wrap("pause schedule "+id, err)
	}
	if n == 0 {
		return fmt.Errorf("pause schedule %s: %w", id, ErrNotFound)
	}
	return nil
}

// ResumeSchedule resumes a schedule from the due time next (the caller
// computes it from now: due times that passed while it was paused are not
// fired) and forgets its failures; ErrNotFound.
func (d *DB) ResumeSchedule(ctx context.Context, id string, next time.Time) error {
	n, err := d.writer(ctx).execN(`UPDATE schedules SET paused = 0, failures = 0, next_due = $1 WHERE id = $2`,
		msOrNull(next), id)
	if err != nil {
		return d.wrap("resume schedule "+id, err)
	}
	if n == 0 {
		return fmt.Errorf("resume schedule %s: %w", id, ErrNotFound)
	}
	return nil
}

// RemoveSchedule deletes a schedule (a run it started runs to its end and
// is announced); ErrNotFound.
func (d *DB) RemoveSchedule(ctx context.Context, id string) error {
	n, err := d.writer(ctx).execN(`DELETE FROM schedules WHERE id = $1`, id)
	if err != nil {
		return d.wrap("remove schedule "+id, err)
	}
	if n == 0 {
		return fmt.Errorf("remove schedule %s: %w", id, ErrNotFound)
	}
	return nil
}

// dueCond selects the schedules that may fire: not paused, a due time,
// and not a catchUp "all" schedule whose due time was missed while no
// gateway ran (before the $1 bound) waiting for its previous run to end. A
// due time that came while a gateway ran is selected even with a run going,
// so the plan skips and counts it (SPEC §19).
const dueCond = `paused = 0 AND next_due IS NOT NULL AND NOT (catch_up = 'all' AND active_run <> '' AND next_due < $1)`

// waitBound is dueCond's bound: zero holds every catchUp "all" schedule
// with a run going.
func waitBound(waitBefore time.Time) int64 {
	if waitBefore.IsZero() {
		return math.MaxInt64
	}
	return waitBefore.UnixMilli()
}

// NextScheduleAt returns the earliest due time of a schedule that may
// fire; ok is false when there is none. waitBefore is the start of the
// caller's scheduler: a catchUp "all" due time before it whose previous
// run still runs waits for that run (zero: all of them wait).
func (d *DB) NextScheduleAt(ctx context.Context, waitBefore time.Time) (time.Time, bool, error) {
	var at sql.NullInt64
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return rows.Scan(&at) },
		`SELECT MIN(next_due) FROM schedules WHERE `+dueCond, waitBound(waitBefore))
	if err != nil {
		return time.Time{}, false, d.wrap("next schedule", err)
	}
	return fromMS(at), at.Valid, nil
}

// CountSchedules counts the schedules by state.
func (d *DB) CountSchedules(ctx context.Context) (ScheduleCounts, error) {
	var c ScheduleCounts
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return rows.Scan(&c.Active, &c.Paused, &c.Done) },
		`SELECT COALESCE(SUM(CASE WHEN paused = 0 AND next_due IS NOT NULL THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN paused <> 0 THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN paused = 0 AND next_due IS NULL THEN 1 ELSE 0 END), 0) FROM schedules`)
	return c, d.wrap("count schedules", err)
}

// FireDue takes up to limit schedules due at now, earliest first, and
// records in one transaction, for each, what plan decides: the run of the
// due time (with its child session), the due times skipped or missed, the
// next due time. plan runs inside the transaction and must not use the
// store. The runs come back queued; the caller puts them on its lane (a
// crash before that leaves them queued in the store, and the next start
// or another replica runs them). Rows another replica is firing are passed
// over. waitBefore is as for NextScheduleAt. A schedule whose firing
// cannot be recorded is left unchanged and named in the error, which comes
// with the firings of the others (committed).
func (d *DB) FireDue(ctx context.Context, now, waitBefore time.Time, limit int, plan func(s *Schedule) Firing) ([]Fired, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []Fired
	var rowErrs []error
	err := d.tx(ctx, func(c conn) error {
		out = out[:0]
		rows, err := c.query(`SELECT `+scheduleCols+` FROM schedules WHERE `+dueCond+` AND next_due <= $2
			ORDER BY next_due LIMIT $3`+d.dialect.skipLocked, waitBound(waitBefore), now.UnixMilli(), limit)
		if err != nil {
			return err
		}
		due, err := scanSchedules(rows)
		if err != nil {
			return err
		}
		rowErrs = rowErrs[:0]
		for i := range due {
			s := &due[i]
			f := plan(s)
			// Each schedule under its own savepoint: one row that cannot
			// be recorded is rolled back alone and left as it was (its
			// error is returned), the others still fire.
			if _, err := c.exec(`SAVEPOINT fire_one`); err != nil {
				return err
			}
			fired, err := d.fireOne(c, s, &f)
			if err != nil {
				if _, rerr := c.exec(`ROLLBACK TO SAVEPOINT fire_one`); rerr != nil {
					return errors.Join(fmt.Errorf("schedule %s: %w", s.ID, err), rerr)
				}
				rowErrs = append(rowErrs, fmt.Errorf("schedule %s: %w", s.ID, err))
				continue
			}
			if _, err := c.exec(`RELEASE SAVEPOINT fire_one`); err != nil {
				return err
			}
			out = append(out, fired)
		}
		return nil
	})
	if err != nil {
		return nil, d.wrap("fire due schedules", err)
	}
	if len(rowErrs) > 0 {
		return out, d.wrap("fire due schedules", errors.Join(rowErrs...))
	}
	return out, nil
}

// fireOne records one schedule's firing inside FireDue's transaction.
func (d *DB) fireOne(c conn, s *Schedule, f *Firing) (Fired, error) {
	fired := Fired{Firing: *f}
	active := s.ActiveRun
	started := 0
	var lastDue any = msOrNull(s.LastDue)
	if r := f.Run; r != nil {
		r.ScheduleID = s.ID
		r.ScheduleDue = truncMS(r.ScheduleDue)
		if r.ID == "" || r.ChildKey == "" || f.Child == nil {
			return fired, errors.New("a firing's run needs an id, a child key and a child session")
		}
		if r.Status == "" {
			r.Status = StatusQueued
		}
		if r.RootKey == "" {
			r.RootKey = r.RequesterKey
		}
		r.CreatedAt = truncMS(r.CreatedAt)
		fillChild(r, f.Child)
		if err := d.normalizeSession(f.Child); err != nil {
			return fired, err
		}
		sessArgs, err := sessionArgs(f.Child)
		if err != nil {
			return fired, err
		}
		tools, err := toolsJSON(r.AllowedTools)
		if err != nil {
			return fired, err
		}
		origin, err := originJSON(r.Origin)
		if err != nil {
			return fired, err
		}
		if _, err := c.exec(insertSession, sessArgs...); err != nil {
			return fired, fmt.Errorf("child session %s: %w", f.Child.Key, err)
		}
		if err := insertRun(c, r, tools, origin); err != nil {
			return fired, fmt.Errorf("run of due time %s: %w", r.ScheduleDue.Format(time.RFC3339), err)
		}
		active, started, lastDue = r.ID, 1, r.ScheduleDue.UnixMilli()
		fired.Firing.Run = r
	}
	failures, paused := s.Failures, s.Paused
	var notices []*OutboxItem
	if f.Notice != nil {
		notices = append(notices, f.Notice)
	}
	if f.Failed {
		failures++
		if failures >= s.MaxFailures && !paused {
			paused, fired.Paused = true, true
			notices = append(notices, pausedNotice(s, failures))
		}
	}
	if _, err := c.exec(`UPDATE schedules SET next_due = $1, active_run = $2, fired = fired + $3, skipped = skipped + $4,
		missed = missed + $5, last_due = $6, failures = $7, paused = $8 WHERE id = $9`,
		msOrNull(truncMS(f.Next)), active, started, f.Skipped, f.Missed, lastDue, failures, boolInt(paused), s.ID); err != nil {
		return fired, err
	}
	for _, n := range notices {
		row, err := newOutboxRow(n)
		if err != nil {
			return fired, err
		}
		if _, err := row.insert(c); err != nil {
			return fired, fmt.Errorf("outbox: %w", err)
		}
	}
	s.NextDue, s.ActiveRun, s.Failures, s.Paused = truncMS(f.Next), active, failures, paused
	s.Fired += int64(started)
	s.Skipped += int64(f.Skipped)
	s.Missed += int64(f.Missed)
	fired.Schedule = *s
	return fired, nil
}

// SchedulePausedText is the line a schedule posts into its destination
// when it pauses after maxFailures failed runs in a row.
func SchedulePausedText(id string, failures int) string {
	return fmt.Sprintf("⏸️ Schedule %s paused after %d failed runs in a row. Resume it with /schedule resume %s.", id, failures, id)
}

func pausedNotice(s *Schedule, failures int) *OutboxItem {
	return &OutboxItem{Origin: s.Origin, Kind: channels.KindSystem, Text: SchedulePausedText(s.ID, failures),
		SessionKey: s.SessionKey, AgentID: s.AgentID}
}

// endScheduledRun is FinishRun's part for a run a schedule started: the
// schedule's previous run no longer runs, and an error or a timeout is
// one more failure in a row (a success starts the count again; a stopped
// run, one the gateway lost or one a budget stopped counts neither way:
// the budget resets by itself, a paused schedule would not). At maxFailures the
// schedule pauses and says so in its destination, in this transaction.
func endScheduledRun(c conn, r *Run) error {
	var s Schedule
	err := c.queryRow(func(rows *sql.Rows) error { return scanSchedule(rows, &s) },
		`SELECT `+scheduleCols+` FROM schedules WHERE id = $1`+c.dialect.forUpdate, r.ScheduleID)
	if errors.Is(err, ErrNotFound) {
		return nil // removed meanwhile
	}
	if err != nil {
		return err
	}
	active := s.ActiveRun
	if active == r.ID {
		active = ""
	}
	failures, paused := s.Failures, s.Paused
	var notice *OutboxItem
	switch {
	case r.BudgetStopped:
	case r.Outcome == OutcomeSuccess:
		failures = 0
	case r.Outcome == OutcomeError, r.Outcome == OutcomeTimeout:
		failures++
		if failures >= s.MaxFailures && !paused {
			paused = true
			notice = pausedNotice(&s, failures)
			notice.CreatedAt = r.EndedAt
		}
	}
	if _, err := c.exec(`UPDATE schedules SET active_run = $1, failures = $2, paused = $3 WHERE id = $4`,
		active, failures, boolInt(paused), s.ID); err != nil {
		return err
	}
	if notice == nil {
		return nil
	}
	row, err := newOutboxRow(notice)
	if err != nil {
		return err
	}
	_, err = row.insert(c)
	return err
}
