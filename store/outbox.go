package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/heraldhq/herald/channels"
)

const outboxCols = `id, run_id, origin, kind, text, created_at, attempts, next_attempt_at,
	delivered_at, failed_at, last_error, parts_sent, part_ids, sending_part, session_key, agent_id, draft_ref, claimed_by, trace_parent, dead_at`

func scanOutbox(rows *sql.Rows, o *OutboxItem) error {
	var runID sql.NullString
	var origin, kind string
	var created, next, delivered, failed, dead sql.NullInt64
	var partIDs string
	if err := rows.Scan(&o.ID, &runID, &origin, &kind, &o.Text, &created, &o.Attempts, &next,
		&delivered, &failed, &o.LastError, &o.PartsSent, &partIDs, &o.SendingPart, &o.SessionKey, &o.AgentID, &o.DraftRef, &o.ClaimedBy, &o.TraceParent, &dead); err != nil {
		return err
	}
	o.PartIDs = nil
	if err := json.Unmarshal([]byte(partIDs), &o.PartIDs); err != nil {
		return fmt.Errorf("outbox %d: part ids %q: %w", o.ID, partIDs, err)
	}
	if len(o.PartIDs) == 0 {
		o.PartIDs = nil
	}
	o.RunID, o.Kind = runID.String, channels.Kind(kind)
	o.CreatedAt, o.NextAttemptAt = fromMS(created), fromMS(next)
	o.DeliveredAt, o.FailedAt, o.DeadAt = fromMS(delivered), fromMS(failed), fromMS(dead)
	return parseOrigin(origin, &o.Origin)
}

// outboxRow is a new outbox item with its defaults applied, ready to insert.
type outboxRow struct {
	dest      string
	channel   string
	session   string
	agent     string
	runID     any
	origin    string
	kind      string
	text      string
	createdAt time.Time
	nextAt    time.Time
	draftRef  string
	trace     string
	files     []FileRef
	added     bool // insert added it (not an item with the same RunID)
}

// newOutboxRow applies the defaults: CreatedAt now, NextAttemptAt CreatedAt.
func newOutboxRow(o *OutboxItem) (*outboxRow, error) {
	origin, err := originJSON(o.Origin)
	if err != nil {
		return nil, err
	}
	r := &outboxRow{dest: Destination(o.Origin), channel: string(o.Origin.Channel), session: o.SessionKey, agent: o.AgentID, runID: nullString(o.RunID), origin: origin, kind: string(o.Kind), text: o.Text,
		createdAt: truncMS(o.CreatedAt), nextAt: truncMS(o.NextAttemptAt), draftRef: o.DraftRef, trace: o.TraceParent, files: o.Files}
	if r.createdAt.IsZero() {
		r.createdAt = nowMS()
	}
	if r.nextAt.IsZero() {
		r.nextAt = r.createdAt
	}
	return r, nil
}

// insert adds the row unless an item with the same RunID exists, and
// returns the id of the row that holds the RunID; r.added says which.
func (r *outboxRow) insert(c conn) (int64, error) {
	id, _, err := r.insertClaimed(c, "", nil)
	return id, err
}

// outboxInsertCols are the columns insert sets, $1…$12 in order.
const outboxInsertCols = `dest, channel, session_key, agent_id, run_id, origin, kind, text, created_at, next_attempt_at, draft_ref, trace_parent`

// args are the values of outboxInsertCols.
func (r *outboxRow) args(more ...any) []any {
	return append([]any{r.dest, r.channel, r.session, r.agent, r.runID, r.origin, r.kind, r.text,
		r.createdAt.UnixMilli(), r.nextAt.UnixMilli(), r.draftRef, r.trace}, more...)
}

// insertClaimed is insert, then, for holder ("": none), claimAdded: the
// row it added is claimed for holder when it is the oldest pending item
// of its destination, and marked delivered instead when w delivers it in
// the same write. claimed reports whether it was.
//
// On SQLite both are one statement: the one writer gives the new row the
// highest id, so it is its destination's oldest pending item when none is
// pending as it is inserted, and it goes into the pending indexes only
// when it stays pending. On PostgreSQL the claim is its own statement
// after the insert, as before: it sees items of the destination that
// other transactions committed meanwhile.
func (r *outboxRow) insertClaimed(c conn, holder string, w *WebDelivery) (id int64, claimed bool, err error) {
	r.added = false
	scan := func(rows *sql.Rows) error { return rows.Scan(&id) }
	switch {
	case holder == "" || c.dialect.advisoryLocks:
		err = c.queryRow(scan, `INSERT INTO outbox (`+outboxInsertCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT DO NOTHING RETURNING id`, r.args()...)
	default:
		claimBy, deliverAt := any(holder), any(nil)
		if r.webDelivers(w) {
			claimBy, deliverAt = "", w.Msg.At.UnixMilli()
		}
		scan = func(rows *sql.Rows) error { return rows.Scan(&id, &claimed) }
		err = c.queryRow(scan, `INSERT INTO outbox (`+outboxInsertCols+`, claimed_by, delivered_at)
			SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
				CASE WHEN h.pending THEN '' ELSE $13 END, CASE WHEN h.pending THEN NULL ELSE $14 END
			FROM (SELECT EXISTS (SELECT 1 FROM outbox o WHERE o.dest = $1 AND o.delivered_at IS NULL AND o.failed_at IS NULL) AS pending) h
			WHERE true ON CONFLICT DO NOTHING RETURNING id, claimed_by <> '' OR delivered_at IS NOT NULL`, r.args(claimBy, deliverAt)...)
	}
	if err == nil && len(r.files) > 0 {
		err = insertFiles(c, "outbox_files", "outbox_id", id, r.session, r.files, r.createdAt.UnixMilli())
	}
	if !errors.Is(err, ErrNotFound) {
		r.added = err == nil
		if err != nil || holder == "" || !c.dialect.advisoryLocks {
			return id, claimed && err == nil, err
		}
		claimed, err = r.claimAdded(c, holder, id, w)
		return id, claimed, err
	}
	// Kept out: the item of the RunID is stored already, and not claimed
	// (its state, attempts and parts sent, is not the new one a claim
	// reads back).
	err = c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&id) },
		`SELECT id FROM outbox WHERE run_id = $1`, r.runID)
	return id, false, err
}

// apply writes the defaults back into the caller's item.
func (r *outboxRow) apply(o *OutboxItem) {
	o.CreatedAt, o.NextAttemptAt = r.createdAt, r.nextAt
}

// claimAdded claims the row insert just added (id) for holder when it is
// the oldest pending item of its destination, as ClaimOutbox would, and
// reports whether it did (insertClaimed on PostgreSQL).
//
// When w will deliver the row in the same write (deliverWeb), the claim
// marks it delivered at once, at w's time, and leaves it claimed by
// nobody: what the claim and deliverWeb's mark together left, in one
// statement, not two.
func (r *outboxRow) claimAdded(c conn, holder string, id int64, w *WebDelivery) (bool, error) {
	set, arg := `claimed_by = $1`, any(holder)
	if r.webDelivers(w) {
		set, arg = `delivered_at = $1`, w.Msg.At.UnixMilli()
	}
	n, err := c.execN(`UPDATE outbox SET `+set+` WHERE id = $2 AND NOT EXISTS (
		SELECT 1 FROM outbox o WHERE o.dest = $3 AND o.id < $2 AND o.delivered_at IS NULL AND o.failed_at IS NULL)`,
		arg, id, r.dest)
	return n == 1, err
}

// webDelivers reports whether w delivers the row in the write that adds
// and claims it (a row with files goes by a send of its own).
func (r *outboxRow) webDelivers(w *WebDelivery) bool {
	return w != nil && len(r.files) == 0
}

// claimed makes o, added as r and claimed by claimAdded, the row as
// ClaimOutbox would return it: claimed by holder, not attempted, no part
// sent, its files those it was added with.
func (r *outboxRow) claimed(o *OutboxItem, holder string) {
	r.apply(o)
	o.ClaimedBy, o.Files, o.FilesKnown = holder, r.files, true
	o.Attempts, o.PartsSent, o.PartIDs, o.SendingPart, o.LastError = 0, 0, nil, -1, ""
	o.DeliveredAt, o.FailedAt, o.DeadAt = time.Time{}, time.Time{}, time.Time{}
}

// EnqueueOutbox adds an item to the outbox (CreatedAt defaults to now,
// NextAttemptAt to CreatedAt) and returns its id; o.ID is set too. When
// o.RunID is set and an item with that RunID is already stored, nothing is
// added and the existing item's id is returned.
func (d *DB) EnqueueOutbox(ctx context.Context, o *OutboxItem) (int64, error) {
	row, err := newOutboxRow(o)
	if err != nil {
		return 0, fmt.Errorf("enqueue outbox: %w", err)
	}
	var id int64
	if len(row.files) > 0 { // the row and its files in one transaction
		err = d.tx(ctx, func(c conn) (err error) { id, err = row.insert(c); return err })
	} else {
		id, err = row.insert(d.writer(ctx))
	}
	if err != nil {
		return 0, d.wrap("enqueue outbox", err)
	}
	o.ID = id
	row.apply(o)
	return id, nil
}

// PendingOutbox returns up to limit items neither delivered nor failed,
// due or not, oldest first (for operators and tests). limit ≤ 0 = no limit.
func (d *DB) PendingOutbox(ctx context.Context, limit int) ([]OutboxItem, error) {
	if limit <= 0 {
		limit = noLimit
	}
	rows, err := d.reader(ctx).query(`SELECT `+outboxCols+` FROM outbox
		WHERE delivered_at IS NULL AND failed_at IS NULL ORDER BY id LIMIT $1`, limit)
	if err != nil {
		return nil, d.wrap("pending outbox", err)
	}
	return d.scanOutboxRows("pending outbox", rows)
}

// Destination names where an item goes: channel, account, chat and
// thread. Items to one destination are delivered in the order they were
// queued.
func Destination(o channels.Origin) string {
	return string(o.Channel) + "|" + o.Account + "|" + o.ChatID + "|" + o.ThreadID
}

// pendingHead (the dialect's) selects pending items that are the oldest
// pending item of their destination. It finds the heads through the (dest,
// id) index of pending items, so a pass costs in destinations, not in
// backlog (the earlier per-row NOT EXISTS took 2.3 ms on SQLite and 339 ms
// on PostgreSQL per pass with 5,000 items pending,
// BenchmarkClaimOutboxBacklog).

// DueOutbox returns up to limit pending items (neither delivered nor
// failed) whose NextAttemptAt ≤ now and that are the oldest pending item
// of their destination, oldest first: a later message to a chat waits
// until the earlier one is delivered or failed for good, across restarts.
// limit ≤ 0 = no limit.
func (d *DB) DueOutbox(ctx context.Context, now time.Time, limit int) ([]OutboxItem, error) {
	if limit <= 0 {
		limit = noLimit
	}
	rows, err := d.reader(ctx).query(`SELECT `+outboxCols+` FROM outbox
		WHERE `+d.dialect.pendingHead+` AND next_attempt_at <= $1
		ORDER BY id LIMIT $2`, msOrNow(now), limit)
	if err != nil {
		return nil, d.wrap("due outbox", err)
	}
	return d.scanOutboxRows("due outbox", rows)
}

// GetOutbox returns one outbox item; ErrNotFound.
func (d *DB) GetOutbox(ctx context.Context, id int64) (*OutboxItem, error) {
	var o OutboxItem
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return scanOutbox(rows, &o) },
		`SELECT `+outboxCols+` FROM outbox WHERE id = $1`, id)
	if err != nil {
		return nil, d.wrap(fmt.Sprintf("get outbox %d", id), err)
	}
	return &o, nil
}

// NextOutboxAt returns the earliest NextAttemptAt of the pending items
// that are the oldest pending item of their destination, leaving out those
// holder claimed ("" = none left out): their sends are in flight at the
// holder, whose end makes it look again. ok is false when nothing is
// pending.
func (d *DB) NextOutboxAt(ctx context.Context, holder string) (time.Time, bool, error) {
	var at sql.NullInt64
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return rows.Scan(&at) },
		`SELECT MIN(next_attempt_at) FROM outbox WHERE `+d.dialect.pendingHead+` AND (claimed_by <> $1 OR $1 = '')`, holder)
	if err != nil {
		return time.Time{}, false, d.wrap("next outbox", err)
	}
	return fromMS(at), at.Valid, nil
}

// MarkDelivered records that a channel accepted the item. Marking an item
// delivered twice keeps the first time. ErrNotFound.
func (d *DB) MarkDelivered(ctx context.Context, id int64, at time.Time) error {
	n, err := d.deliver(d.writer(ctx), id, msOrNow(at), nil)
	return d.outboxResult(fmt.Sprintf("mark outbox %d delivered", id), n, err)
}

// deliver marks item id delivered at atMS on c (a second mark keeps the
// first time) and, when it was marked and next is set, claims its
// destination's next item (claimNext). n is the rows marked.
func (d *DB) deliver(c conn, id, atMS int64, next *NextClaim) (n int64, err error) {
	n, err = c.execN(`UPDATE outbox SET delivered_at = COALESCE(delivered_at, $1), claimed_by = '' WHERE id = $2`, atMS, id)
	if err != nil || n == 0 || next == nil {
		return n, err
	}
	return n, d.claimNext(c, next, id)
}

// NextClaim asks a write that marks an outbox item delivered to claim,
// in the same transaction, the next item of the same destination for
// Holder, as ClaimOutbox would (the oldest pending one, due at Now, free),
// unless it is past Limits (a pass buries it: BuryOutbox). Item is set to
// the claimed item (nil: none).
type NextClaim struct {
	Holder string
	Limits OutboxLimits
	Now    time.Time
	Item   *OutboxItem
}

// claimNext claims n's item after the delivered item id, on c.
func (d *DB) claimNext(c conn, n *NextClaim, id int64) error {
	n.Item = nil
	if n.Holder == "" {
		return nil
	}
	at := msOrNow(n.Now)
	maxAttempts, bornBefore := n.Limits.args(at)
	var o OutboxItem
	err := c.queryRow(func(rows *sql.Rows) error { return scanOutbox(rows, &o) },
		`UPDATE outbox SET claimed_by = $1 WHERE id = (
			SELECT MIN(h.id) FROM outbox h WHERE h.dest = (SELECT dest FROM outbox WHERE id = $2)
				AND h.delivered_at IS NULL AND h.failed_at IS NULL)
			AND next_attempt_at <= $3 AND claimed_by = ''
			AND attempts < $4 AND (created_at >= $5 OR revived_at >= $5) RETURNING `+outboxCols,
		n.Holder, id, at, maxAttempts, bornBefore)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err == nil {
		n.Item = &o
	}
	return err
}

// DeliverOutbox is MarkDelivered that also claims the item's
// destination's next one (next; nil: none) in the same transaction: a
// destination's queue goes out one commit per item, without a pass.
func (d *DB) DeliverOutbox(ctx context.Context, id int64, at time.Time, next *NextClaim) error {
	var n int64
	err := d.tx(ctx, func(c conn) (err error) {
		n, err = d.deliver(c, id, msOrNow(at), next)
		return err
	})
	if err != nil && next != nil {
		next.Item = nil
	}
	return d.outboxResult(fmt.Sprintf("mark outbox %d delivered", id), n, err)
}

// MarkRetry counts a failed attempt and schedules the next one at next;
// ErrNotFound.
func (d *DB) MarkRetry(ctx context.Context, id int64, next time.Time, errText string) error {
	n, err := d.writer(ctx).execN(`UPDATE outbox SET attempts = attempts + 1, next_attempt_at = $1,
		last_error = $2, claimed_by = '' WHERE id = $3`, msOrNow(next), errText, id)
	return d.outboxResult(fmt.Sprintf("mark outbox %d retry", id), n, err)
}

// MarkFailed gives up on the item: it counts the attempt, records the error
// and leaves the pending set; ErrNotFound.
func (d *DB) MarkFailed(ctx context.Context, id int64, at time.Time, errText string) error {
	n, err := d.writer(ctx).execN(`UPDATE outbox SET attempts = attempts + 1,
		failed_at = COALESCE(failed_at, $1), last_error = $2, claimed_by = '' WHERE id = $3`, msOrNow(at), errText, id)
	return d.outboxResult(fmt.Sprintf("mark outbox %d failed", id), n, err)
}

func (d *DB) outboxResult(op string, n int64, err error) error {
	if err != nil {
		return d.wrap(op, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", op, ErrNotFound)
	}
	return nil
}

// OutboxStats counts pending, delivered and failed items. Pending and
// failed are counted on their partial indexes; delivered is the rest.
func (d *DB) OutboxStats(ctx context.Context) (pending, delivered, failed int, err error) {
	var total int
	err = d.reader(ctx).queryRow(func(rows *sql.Rows) error {
		return rows.Scan(&pending, &failed, &total)
	}, `SELECT
		(SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL AND failed_at IS NULL),
		(SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL AND failed_at IS NOT NULL),
		(SELECT COUNT(*) FROM outbox)`)
	if err != nil {
		return 0, 0, 0, d.wrap("outbox stats", err)
	}
	return pending, total - pending - failed, failed, nil
}

// OutboxPending counts the pending items, as OutboxStats does, on the
// partial index of pending items alone: its cost grows with the backlog,
// not with every item ever sent (OutboxStats' total). /metrics reads it at
// every scrape (herald_outbox_pending).
func (d *DB) OutboxPending(ctx context.Context) (int, error) {
	var n int
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error { return rows.Scan(&n) },
		`SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL AND failed_at IS NULL`)
	return n, d.wrap("outbox pending", err)
}

// BeginPart records that the send of part (0-based) of item id starts: if
// the process dies before EndPart or AbortPart, the part's outcome is
// unknown at the next attempt. ErrNotFound.
func (d *DB) BeginPart(ctx context.Context, id int64, part int) error {
	n, err := d.writer(ctx).execN(`UPDATE outbox SET sending_part = $1 WHERE id = $2 AND delivered_at IS NULL`, part, id)
	return d.outboxResult(fmt.Sprintf("begin part %d of outbox %d", part+1, id), n, err)
}

// EndPart records that part (0-based) of item id is on the platform, with
// its platform id ("" when the platform gives none or it was skipped).
// Parts end in order; ending a part already ended changes nothing.
func (d *DB) EndPart(ctx context.Context, id int64, part int, platformID string) error {
	pid, _ := json.Marshal(platformID)
	n, err := d.writer(ctx).execN(`UPDATE outbox SET parts_sent = $1, sending_part = -1,
		part_ids = `+d.dialect.jsonAppend("part_ids", "$2")+` WHERE id = $3 AND parts_sent = $4`, part+1, string(pid), id, part)
	if err == nil && n == 0 {
		return nil // already ended
	}
	return d.outboxResult(fmt.Sprintf("end part %d of outbox %d", part+1, id), n, err)
}

// AbortPart records that the part being sent of item id failed with a
// known outcome (the platform refused it): nothing is uncertain.
func (d *DB) AbortPart(ctx context.Context, id int64) error {
	_, err := d.writer(ctx).exec(`UPDATE outbox SET sending_part = -1 WHERE id = $1`, id)
	return d.wrap(fmt.Sprintf("abort part of outbox %d", id), err)
}

// ListOutbox returns up to limit items, newest first; with pendingOnly only
// those neither delivered nor failed (for `herald outbox list`). limit ≤ 0
// = no limit.
func (d *DB) ListOutbox(ctx context.Context, pendingOnly bool, limit int) ([]OutboxItem, error) {
	state := ""
	if pendingOnly {
		state = OutboxPending
	}
	return d.OutboxInState(ctx, state, limit)
}

// Outbox item states (SPEC §27): pending until a channel accepted it
// (delivered), refused it for good (failed), or it ran out of attempts or
// time (dead).
const (
	OutboxPending   = "pending"
	OutboxDelivered = "delivered"
	OutboxFailed    = "failed"
	OutboxDead      = "dead"
)

// State is the item's state: OutboxPending, OutboxDelivered, OutboxFailed
// or OutboxDead.
func (o *OutboxItem) State() string {
	switch {
	case !o.DeliveredAt.IsZero():
		return OutboxDelivered
	case !o.DeadAt.IsZero():
		return OutboxDead
	case !o.FailedAt.IsZero():
		return OutboxFailed
	}
	return OutboxPending
}

// outboxStateWhere is the condition of each state ("" = any).
var outboxStateWhere = map[string]string{
	"":              "",
	OutboxPending:   "WHERE delivered_at IS NULL AND failed_at IS NULL",
	OutboxDelivered: "WHERE delivered_at IS NOT NULL",
	OutboxFailed:    "WHERE delivered_at IS NULL AND failed_at IS NOT NULL AND dead_at IS NULL",
	OutboxDead:      "WHERE delivered_at IS NULL AND failed_at IS NOT NULL AND dead_at IS NOT NULL",
}

// OutboxInState returns up to limit items in state ("" = any; else one of
// the Outbox* states), newest first (`herald outbox list`, the console).
// limit ≤ 0 = no limit.
func (d *DB) OutboxInState(ctx context.Context, state string, limit int) ([]OutboxItem, error) {
	where, ok := outboxStateWhere[state]
	if !ok {
		return nil, fmt.Errorf("list outbox: unknown state %q (want pending, delivered, failed or dead)", state)
	}
	if limit <= 0 {
		limit = noLimit
	}
	rows, err := d.reader(ctx).query(`SELECT `+outboxCols+` FROM outbox `+where+` ORDER BY id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, d.wrap("list outbox", err)
	}
	return d.scanOutboxRows("list outbox", rows)
}

func (d *DB) scanOutboxRows(op string, rows *sql.Rows) ([]OutboxItem, error) {
	defer rows.Close()
	var out []OutboxItem
	for rows.Next() {
		var o OutboxItem
		if err := scanOutbox(rows, &o); err != nil {
			return nil, d.wrap(op, err)
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, d.wrap(op, err)
	}
	return out, nil
}

// OutboxLimits are when an item becomes a dead letter (SPEC §27): after
// MaxAttempts failed attempts, or MaxAge after it was queued (or retried
// by RetryOutbox). A zero limit never applies.
type OutboxLimits struct {
	MaxAttempts int
	MaxAge      time.Duration
}

// BuryOutbox makes dead the items past lim that are the oldest pending
// item of their destination and free for c.Holder (see free; an item in
// flight is not), and returns them. A dead item is failed too, so its
// destination's later items go out. The deliverer calls it where it claims
// (before ClaimOutbox), so a dead item is never claimed. c.Limit is not
// used.
func (d *DB) BuryOutbox(ctx context.Context, c Claim, lim OutboxLimits, now time.Time) ([]OutboxItem, error) {
	if c.Holder == "" {
		return nil, ErrNoHolder
	}
	q, args, ok := d.buryQuery(c, lim, now)
	if !ok {
		return nil, nil
	}
	out, err := claim(d, ctx, q, args, scanOutbox)
	if err != nil {
		return nil, d.wrap("bury outbox", err)
	}
	slices.SortFunc(out, func(a, b OutboxItem) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// args are lim as a statement's bounds at at (ms): the attempts an item
// may have (no limit: the largest 32-bit value, as attempts is a 32-bit
// column on PostgreSQL) and the time before which it was born too long ago
// (no limit: 0).
func (lim OutboxLimits) args(at int64) (maxAttempts, bornBefore int64) {
	maxAttempts = math.MaxInt32
	if lim.MaxAttempts > 0 {
		maxAttempts = int64(lim.MaxAttempts)
	}
	if lim.MaxAge > 0 {
		bornBefore = at - lim.MaxAge.Milliseconds()
	}
	return maxAttempts, bornBefore
}

// buryQuery is BuryOutbox's statement; ok is false when lim has no limit.
func (d *DB) buryQuery(c Claim, lim OutboxLimits, now time.Time) (q string, args []any, ok bool) {
	if lim.MaxAttempts <= 0 && lim.MaxAge <= 0 {
		return "", nil, false
	}
	at := msOrNow(now)
	maxAttempts, bornBefore := lim.args(at)
	q = `UPDATE outbox SET dead_at = $2, failed_at = $2, claimed_by = '' WHERE id IN (
		SELECT id FROM outbox WHERE ` + d.dialect.pendingHead + ` AND ` + d.free("claimed_by", "$1", c.Reclaim) + `
		AND (attempts >= $3 OR (created_at < $4 AND revived_at < $4))` + d.dialect.skipLocked + `) RETURNING ` + outboxCols
	return q, []any{c.Holder, at, maxAttempts, bornBefore}, true
}

// RetryOutbox puts a failed, dead or waiting item back to the front: no
// attempts counted, due at now, its age counted from now (SPEC §27
// Retry). ErrNotFound for an unknown or delivered item.
func (d *DB) RetryOutbox(ctx context.Context, id int64, now time.Time) error {
	at := msOrNow(now)
	n, err := d.writer(ctx).execN(`UPDATE outbox SET failed_at = NULL, dead_at = NULL, attempts = 0, next_attempt_at = $1,
		revived_at = $1, sending_part = -1 WHERE id = $2 AND delivered_at IS NULL`, at, id)
	return d.outboxResult(fmt.Sprintf("retry outbox %d (unknown or delivered)", id), n, err)
}

// DropOutbox removes an item that was not delivered, with its files' rows
// (SPEC §27 Drop). ErrNotFound for an unknown or delivered item.
func (d *DB) DropOutbox(ctx context.Context, id int64) error {
	var n int64
	err := d.tx(ctx, func(c conn) (err error) {
		if n, err = c.execN(`DELETE FROM outbox WHERE id = $1 AND delivered_at IS NULL`, id); err != nil || n == 0 {
			return err
		}
		_, err = c.exec(`DELETE FROM outbox_files WHERE outbox_id = $1`, id)
		return err
	})
	return d.outboxResult(fmt.Sprintf("drop outbox %d (unknown or delivered)", id), n, err)
}

// OutboxBacklog is what waits in the outbox: items per state but
// delivered, and when the oldest pending one was queued.
type OutboxBacklog struct {
	Pending, Failed, Dead int
	OldestAt              time.Time // zero = nothing pending
}

// Backlog counts the undelivered items by state (the console's overview).
func (d *DB) Backlog(ctx context.Context) (OutboxBacklog, error) {
	var b OutboxBacklog
	var oldest sql.NullInt64
	err := d.reader(ctx).queryRow(func(rows *sql.Rows) error {
		return rows.Scan(&b.Pending, &oldest, &b.Failed, &b.Dead)
	}, `SELECT
		(SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL AND failed_at IS NULL),
		(SELECT MIN(created_at) FROM outbox WHERE delivered_at IS NULL AND failed_at IS NULL),
		(SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL AND failed_at IS NOT NULL AND dead_at IS NULL),
		(SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL AND failed_at IS NOT NULL AND dead_at IS NOT NULL)`)
	if err != nil {
		return OutboxBacklog{}, d.wrap("outbox backlog", err)
	}
	b.OldestAt = fromMS(oldest)
	return b, nil
}
