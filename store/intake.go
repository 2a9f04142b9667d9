package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/channels"
)

// Intake is one inbound message whose turn is owed until Done is set
// (SPEC §12 durable intake).
type Intake struct {
	ID         int64
	SessionKey string
	AgentID    string
	// PlatformID is the platform's id of the message ("" = none): a second
	// message with the same channel and PlatformID is a re-delivery.
	PlatformID string
	Origin     channels.Origin
	SenderName string
	Text       string
	Mentioned  bool
	CreatedAt  time.Time
	StartedAt  time.Time // zero until its turn first started
	DoneAt     time.Time // zero while the turn is owed
	// DraftRef is the platform id of the draft the turn shows while its
	// reply is written ("" = none), set by SetIntakeDraft.
	DraftRef string
	// ClaimedBy is the replica that runs the turn ("" = none yet). Only the
	// oldest owed message of a session is claimed, so a session has one
	// turn at a time across replicas. Set it on AddIntake to claim the
	// message when it is its session's oldest owed one; AddIntake clears it
	// when it is not.
	ClaimedBy string
	// TraceParent is the W3C trace context of the message's intake span
	// ("" = not traced): its turn, also after a restart or on another
	// replica, continues that trace (SPEC §22).
	TraceParent string
	// Files are the message's stored files (PutFile), written with the row
	// (AddIntake) and read back with IntakeFiles.
	Files []FileRef
	// FilesKnown says Files holds all the message's files, as on the
	// message AddIntake added: nothing to read back.
	FilesKnown bool
	// Kind is "" for a message from a person, IntakeWake for the wake of
	// a parent whose sub-agents ended (SPEC §23).
	Kind string
	// SessionID is the requester session id a wake is for ("" = any): a
	// conversation started again with /new is not woken for the old one.
	SessionID string
	// Web, when set, is the web chat's entry of the message: AddIntake
	// appends it to the conversation of the client Origin.ChatID
	// (AppendWeb) in the transaction that stores the message, and its seq
	// becomes Origin.MessageID and PlatformID (client/seq). One commit
	// stores both; a failed one stores neither.
	Web *WebMessage
	// Session, when set, is the requester session row of the message (its
	// Origin the message's): AddIntake stores it as EnsureSession does, in
	// the transaction that adds the message, and leaves the stored row
	// there (the existing one unless SessionCreated). Nothing is done for
	// a re-delivery.
	Session        *Session
	SessionCreated bool
}

// IntakeWake is the Kind of an owed turn that wakes a parent session
// with its sub-agents' results (SPEC §23).
const IntakeWake = "wake"

const intakeCols = `id, session_key, agent_id, platform_id, origin, sender_name, text, mentioned, created_at, started_at, done_at, draft_ref, claimed_by, trace_parent, kind, session_id`

func scanIntake(rows *sql.Rows, in *Intake) error {
	var pid sql.NullString
	var origin string
	var created, started, done sql.NullInt64
	if err := rows.Scan(&in.ID, &in.SessionKey, &in.AgentID, &pid, &origin, &in.SenderName, &in.Text, &in.Mentioned,
		&created, &started, &done, &in.DraftRef, &in.ClaimedBy, &in.TraceParent, &in.Kind, &in.SessionID); err != nil {
		return err
	}
	in.PlatformID = pid.String
	in.CreatedAt, in.StartedAt, in.DoneAt = fromMS(created), fromMS(started), fromMS(done)
	return parseOrigin(origin, &in.Origin)
}

// AddIntake stores an inbound message as owed and sets in.ID. When a
// message with the same channel and PlatformID is already stored, nothing
// is added, in.ID is the stored one's and added is false: a re-delivery.
// With in.ClaimedBy set, the new message is claimed for that replica if it
// is the oldest owed message of its session; otherwise in.ClaimedBy is
// cleared and the message waits for the turn before it (CompleteIntake
// passes it on).
func (d *DB) AddIntake(ctx context.Context, in *Intake) (added bool, err error) {
	if in.Web != nil && in.Origin.ChatID == "" {
		return false, errors.New("add intake: a web entry needs the client in Origin.ChatID")
	}
	origin, err := originJSON(in.Origin)
	if err != nil {
		return false, fmt.Errorf("add intake: %w", err)
	}
	in.CreatedAt = truncMS(in.CreatedAt)
	if in.CreatedAt.IsZero() {
		in.CreatedAt = nowMS()
	}
	if in.Web != nil {
		normalizeWeb(in.Web)
	}
	if in.Session != nil {
		if err := d.normalizeSession(in.Session); err != nil {
			return false, fmt.Errorf("add intake: %w", err)
		}
	}
	holder := in.ClaimedBy
	err = d.tx(ctx, func(c conn) error {
		in.ClaimedBy, in.SessionCreated = holder, false
		if in.Web != nil {
			seq, err := d.appendWeb(c, in.Origin.ChatID, in.Web)
			if err != nil {
				return err
			}
			in.Web.Seq = seq
			in.Origin.MessageID = strconv.FormatInt(seq, 10)
			in.PlatformID = in.Origin.ChatID + "/" + in.Origin.MessageID
			if origin, err = originJSON(in.Origin); err != nil {
				return err
			}
		}
		var err error
		added, err = addIntake(c, in, origin)
		if err != nil || !added || in.Session == nil {
			return err
		}
		in.Session.Origin = in.Origin
		args, err := sessionArgs(in.Session)
		if err != nil {
			return err
		}
		in.SessionCreated, err = ensureSession(c, in.Session, args)
		return err
	})
	if err != nil {
		if in.Web != nil {
			in.Web.Added = false
		}
		return false, d.wrap("add intake", err)
	}
	return added, nil
}

// addIntake is AddIntake's transaction body (origin: in.Origin encoded).
func addIntake(c conn, in *Intake, origin string) (added bool, err error) {
	holder := in.ClaimedBy
	in.ClaimedBy = ""
	// Messages of one session are stored one at a time, so ids grow in
	// the order the session's turns run.
	if err := c.lock("session:" + in.SessionKey); err != nil {
		return false, err
	}
	id, err := c.insertID(`INSERT INTO intake (session_key, agent_id, channel, platform_id, origin, sender_name, text, mentioned, created_at, trace_parent, kind, session_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT DO NOTHING RETURNING id`,
		in.SessionKey, in.AgentID, string(in.Origin.Channel), nullString(in.PlatformID), origin, in.SenderName, in.Text,
		in.Mentioned, in.CreatedAt.UnixMilli(), in.TraceParent, in.Kind, in.SessionID)
	if errors.Is(err, ErrNotFound) {
		return false, c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&in.ID) },
			`SELECT id FROM intake WHERE channel = $1 AND platform_id = $2`, string(in.Origin.Channel), in.PlatformID)
	}
	if err != nil {
		return false, err
	}
	in.ID = id
	if err := insertFiles(c, "intake_files", "intake_id", id, in.SessionKey, in.Files, in.CreatedAt.UnixMilli()); err != nil {
		return true, err
	}
	in.FilesKnown = true
	if holder == "" {
		return true, nil
	}
	n, err := c.execN(`UPDATE intake SET claimed_by = $1 WHERE id = $2 AND NOT EXISTS (
		SELECT 1 FROM intake e WHERE e.session_key = $3 AND e.id < $4 AND e.done_at IS NULL)`, holder, id, in.SessionKey, id)
	if n == 1 {
		in.ClaimedBy = holder
	}
	return true, err
}

// The reads of a spawn group's runs, through runs_spawn_group: the
// group's other live runs (addWake), its runs with announce parent and
// how many of them are live, and the last of them to end (addTurnWake).
const (
	groupLiveQuery      = `SELECT COUNT(*) FROM runs WHERE spawn_group = $1 AND ` + inSpawnGroup + ` AND id <> $2 AND ` + activeRun
	turnGroupCountQuery = `SELECT COUNT(*), COALESCE(SUM(CASE WHEN status IN ($2, $3, $4) THEN 1 ELSE 0 END), 0) FROM runs
		WHERE spawn_group = $1 AND ` + inSpawnGroup + ` AND announce = $5`
	turnGroupLastQuery = `SELECT r.requester_key, r.origin, r.requester_session_id, r.trace_parent, r.outcome, COALESCE(s.text, '')
		FROM runs r LEFT JOIN results s ON s.run_id = r.id
		WHERE r.spawn_group = $1 AND r.` + inSpawnGroup + ` AND r.announce = $2 ORDER BY r.ended_at DESC, r.id DESC LIMIT 1`
)

// addWake adds the wake w of the run r's spawn group in the transaction
// that ends r, unless another run of the group is still live (RunEnd.Wake).
func addWake(c conn, r *Run, w *Intake) error {
	if r.SpawnGroup != "" {
		// Locks in the order CompleteIntake takes them: session, group.
		if err := c.lock("session:" + w.SessionKey); err != nil {
			return err
		}
		if err := c.lock("group:" + r.SpawnGroup); err != nil {
			return err
		}
		var n int
		if err := c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&n) },
			groupLiveQuery, r.SpawnGroup, r.ID); err != nil {
			return err
		}
		if n == 0 {
			// The turn that spawned the group may still spawn into it: its
			// completion adds the wake then (addTurnWake).
			if turn, err := strconv.ParseInt(strings.TrimPrefix(r.SpawnGroup, "intake:"), 10, 64); err == nil && strings.HasPrefix(r.SpawnGroup, "intake:") {
				if err := c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&n) },
					`SELECT COUNT(*) FROM intake WHERE id = $1 AND done_at IS NULL`, turn); err != nil {
					return err
				}
			}
		}
		if n > 0 {
			w.ID = 0
			return nil
		}
	}
	origin, err := originJSON(w.Origin)
	if err != nil {
		return err
	}
	w.Kind = IntakeWake
	w.CreatedAt = truncMS(w.CreatedAt)
	if w.CreatedAt.IsZero() {
		w.CreatedAt = nowMS()
	}
	added, err := addIntake(c, w, origin)
	if !added {
		w.ID, w.ClaimedBy = 0, ""
	}
	return err
}

// addTurnWake adds, in the transaction that completes the owed turn id,
// the wake of the children it spawned with announce "parent" when all of
// them ended while it ran (their last end could not: the turn might still
// have spawned more). Unclaimed, it is the session's next owed turn. A
// group whose last run was stopped wakes no one.
func addTurnWake(c conn, id int64, agentID string) error {
	group := fmt.Sprintf("intake:%d", id)
	if err := c.lock("group:" + group); err != nil {
		return err
	}
	var live, all int
	if err := c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&all, &live) },
		turnGroupCountQuery, group, StatusQueued, StatusRunning, StatusAnnouncing, AnnounceParent); err != nil {
		return err
	}
	if all == 0 || live > 0 {
		return nil
	}
	var w Intake
	var outcome, origin string
	err := c.queryRow(func(rows *sql.Rows) error {
		return rows.Scan(&w.SessionKey, &origin, &w.SessionID, &w.TraceParent, &outcome, &w.Text)
	}, turnGroupLastQuery, group, AnnounceParent)
	if err != nil || outcome == OutcomeStopped {
		return err
	}
	if err := parseOrigin(origin, &w.Origin); err != nil {
		return err
	}
	// A child with a thread of its own (SPEC §24) has that thread as its
	// origin: the wake answers where the turn that spawned it was asked.
	var asked string
	if err := c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&asked) },
		`SELECT origin FROM intake WHERE id = $1`, id); err == nil {
		var o channels.Origin
		if parseOrigin(asked, &o) == nil && o.ThreadID != w.Origin.ThreadID {
			w.Origin, origin = o, asked
		}
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	w.AgentID, w.PlatformID, w.Kind, w.CreatedAt = agentID, "wake:"+group, IntakeWake, nowMS()
	_, err = addIntake(c, &w, origin)
	return err
}

// StartIntake records that the turn of an owed message started (once; a
// resumed turn keeps the first time).
func (d *DB) StartIntake(ctx context.Context, id int64, at time.Time) error {
	_, err := d.writer(ctx).exec(`UPDATE intake SET started_at = $1 WHERE id = $2 AND started_at IS NULL`, msOrNow(at), id)
	return d.wrap("start intake", err)
}

// CompleteIntake ends an owed turn: the reply (nil for none) goes into the
// outbox and the message is marked done, in one transaction, so a crash
// leaves either both or neither. It returns the outbox id (0 for none).
// Completing a message already done adds nothing. When the message was
// claimed, the session's next owed message (if any, and unclaimed) is
// claimed for the same replica in the same transaction and returned: its
// turn is the next one to run.
func (d *DB) CompleteIntake(ctx context.Context, id int64, reply *OutboxItem, at time.Time) (int64, *Intake, error) {
	return d.CompleteTurn(ctx, TurnEnd{ID: id, Reply: reply, At: at})
}

// TurnEnd is how an owed turn ends (CompleteTurn).
type TurnEnd struct {
	ID    int64       // the owed message
	Reply *OutboxItem // nil for none
	At    time.Time   // done at
	// With AddUsage, TokensIn and TokensOut (the turn's model usage) are
	// added to its session's totals and its UpdatedAt bumped
	// (AddSessionUsage) in the transaction that marks the message done:
	// once, whatever retries the completion.
	AddUsage            bool
	TokensIn, TokensOut int64
	// ClaimReply, when set, is the replica that claims the reply for
	// sending (ClaimOutbox) in the same transaction, when the reply is the
	// oldest pending item of its destination: Reply.ClaimedBy says whether
	// it did, and its fields are then the claimed row's (a new item: no
	// attempt, no part sent).
	ClaimReply string
	// NoRuns says the turn spawned no sub-agent run (it made no tool call,
	// and did not start before): there is no spawn group whose wake the
	// completion could owe (addTurnWake), so none is looked for.
	NoRuns bool
	// Web, with ClaimReply, delivers a reply for the web chat in the same
	// transaction when it was claimed (WebDelivery).
	Web *WebDelivery
}

// WebDelivery asks the write that adds an outbox item for the web chat
// and claims it (TurnEnd.ClaimReply, RunEnd.ClaimAnnounce) to deliver it
// in the same transaction, as the deliverer's send would (the web chat's
// Send, then AppendWeb with Key "outbox:<id>" marking it delivered and
// claiming the chat's next item with Msg.Next): the item is claimed only
// when it is the oldest pending one of its chat, so order is kept, and
// the entry and the delivered mark are in one commit with the item
// itself, so a crash leaves all or none. An item with files, or not
// claimed, is not delivered so: Msg.Delivers is then 0.
type WebDelivery struct {
	Client string
	// Msg is the entry: Role, Text, RunID, At (the delivery time too) and
	// Next are the caller's; Key, Delivers, Seq and Added are set by the
	// write.
	Msg WebMessage
}

// forWrite is w made ready for a write that adds an outbox item (adds)
// and claims it for claim (empty: it does not claim it), or nil when
// that write will not deliver it (w nil, no item, no claim).
func (w *WebDelivery) forWrite(adds bool, claim string) (*WebDelivery, error) {
	if w == nil || !adds || claim == "" {
		return nil, nil
	}
	if w.Client == "" {
		return nil, errors.New("a web delivery needs its client")
	}
	normalizeWeb(&w.Msg)
	return w, nil
}

// markDelivered sets it, the item the write added, as w delivered it
// (nil or Msg.Delivers 0: not): held by nobody, delivered at
// Msg.DeliveredAt.
func (w *WebDelivery) markDelivered(it *OutboxItem) {
	if w != nil && w.Msg.Delivers != 0 {
		it.ClaimedBy, it.DeliveredAt = "", w.Msg.DeliveredAt
	}
}

// deliverWeb delivers item id, which r was added as and claimed
// (claimAdded, which marked it delivered), as w asks (nil: not), on c:
// it claims the chat's next item (w.Msg.Next) and stores the message.
// more says the write added other outbox items after r. Without them, on
// SQLite's one writer, an item claimed as its chat's oldest pending one
// was its chat's only pending one, so there is no next item to claim and
// no statement asks for one; with several writers (PostgreSQL) another
// transaction may have committed one meanwhile.
func (d *DB) deliverWeb(c conn, r *outboxRow, id int64, claimed bool, w *WebDelivery, more bool) error {
	if !claimed || !r.webDelivers(w) {
		return nil
	}
	w.Msg.Key, w.Msg.Delivers, w.Msg.DeliveredAt = "outbox:"+strconv.FormatInt(id, 10), id, w.Msg.At
	if next := w.Msg.Next; next != nil && (more || c.dialect.advisoryLocks) {
		if err := d.claimNext(c, next, id); err != nil {
			return err
		}
	}
	seq, err := d.storeWeb(c, w.Client, &w.Msg)
	w.Msg.Seq = seq
	return err
}

// undeliver clears what deliverWeb set, before a try and when its
// transaction failed.
func (w *WebDelivery) undeliver() {
	if w == nil {
		return
	}
	w.Msg.Delivers, w.Msg.Seq, w.Msg.Added = 0, 0, false
	if w.Msg.Next != nil {
		w.Msg.Next.Item = nil
	}
}

// CompleteTurn is CompleteIntake with the turn's usage (TurnEnd): a
// turn's end is one commit.
func (d *DB) CompleteTurn(ctx context.Context, e TurnEnd) (int64, *Intake, error) {
	id, reply, at := e.ID, e.Reply, e.At
	var row *outboxRow
	if reply != nil {
		r, err := newOutboxRow(reply)
		if err != nil {
			return 0, nil, fmt.Errorf("complete intake %d: %w", id, err)
		}
		row = r
	}
	var outID int64
	var next *Intake
	var claimed bool
	web, err := e.Web.forWrite(reply != nil, e.ClaimReply)
	if err != nil {
		return 0, nil, fmt.Errorf("complete intake %d: %w", id, err)
	}
	err = d.tx(ctx, func(c conn) error {
		next, claimed = nil, false
		web.undeliver()
		var key, holder, agentID string
		scan := func(rows *sql.Rows) error { return rows.Scan(&key, &holder, &agentID) }
		n := int64(1)
		var err error
		if !c.dialect.advisoryLocks {
			// No session lock to take before the mark (SQLite: one
			// writer): the mark returns what the lock would need.
			err = c.queryRow(scan, `UPDATE intake SET done_at = $1 WHERE id = $2 AND done_at IS NULL
				RETURNING session_key, claimed_by, agent_id`, msOrNow(at), id)
			if errors.Is(err, ErrNotFound) {
				n, err = 0, c.queryRow(scan, `SELECT session_key, claimed_by, agent_id FROM intake WHERE id = $1`, id)
			}
			if err != nil {
				return err
			}
		} else {
			if err = c.queryRow(scan, `SELECT session_key, claimed_by, agent_id FROM intake WHERE id = $1`, id); err != nil {
				return err
			}
			if web != nil {
				// The web chat's lock before the session's, as a person's
				// message takes them (AddIntake).
				if err = c.lock("web:" + web.Client); err != nil {
					return err
				}
			}
			if err = c.lock("session:" + key); err != nil {
				return err
			}
			if n, err = c.execN(`UPDATE intake SET done_at = $1 WHERE id = $2 AND done_at IS NULL`, msOrNow(at), id); err != nil {
				return err
			}
		}
		if n == 0 {
			// Completed already: a retry after a commit whose outcome was
			// lost with the connection. Nothing is added twice; the message
			// that commit handed on to holder is returned again, so its
			// turn is not left owed.
			if holder == "" {
				return nil
			}
			var in Intake
			err := c.queryRow(func(rows *sql.Rows) error { return scanIntake(rows, &in) },
				`SELECT `+intakeCols+` FROM intake WHERE id = (SELECT MIN(id) FROM intake WHERE session_key = $1 AND done_at IS NULL)
					AND claimed_by = $2`, key, holder)
			switch {
			case err == nil:
				next = &in
			case errors.Is(err, ErrNotFound):
				err = nil
			}
			return err
		}
		if row != nil {
			if outID, claimed, err = row.insertClaimed(c, e.ClaimReply, web); err != nil {
				return err
			}
			if err = d.deliverWeb(c, row, outID, claimed, web, false); err != nil {
				return err
			}
		}
		if e.AddUsage {
			// A session gone meanwhile (deleted) loses the count, as
			// AddSessionUsage's ErrNotFound did.
			if _, err := c.exec(`UPDATE sessions SET tokens_in = tokens_in + $1, tokens_out = tokens_out + $2,
				updated_at = $3 WHERE key = $4`, e.TokensIn, e.TokensOut, time.Now().UnixMilli(), key); err != nil {
				return err
			}
		}
		if !e.NoRuns {
			if err := addTurnWake(c, id, agentID); err != nil {
				return fmt.Errorf("wake: %w", err)
			}
		}
		if holder == "" {
			return nil
		}
		var in Intake
		err = c.queryRow(func(rows *sql.Rows) error { return scanIntake(rows, &in) },
			`UPDATE intake SET claimed_by = $1 WHERE id = (SELECT MIN(id) FROM intake WHERE session_key = $2 AND done_at IS NULL)
				AND claimed_by = '' RETURNING `+intakeCols, holder, key)
		switch {
		case err == nil:
			next = &in
		case errors.Is(err, ErrNotFound):
			err = nil
		}
		return err
	})
	if err != nil {
		web.undeliver()
		return 0, nil, d.wrap(fmt.Sprintf("complete intake %d", id), err)
	}
	if reply != nil && outID != 0 {
		reply.ID = outID
		row.apply(reply)
		if claimed {
			row.claimed(reply, e.ClaimReply)
		}
		web.markDelivered(reply)
	}
	return outID, next, nil
}

// owedIntakeQuery reads the owed messages in order, through intake_owed.
const owedIntakeQuery = `SELECT ` + intakeCols + ` FROM intake WHERE done_at IS NULL ORDER BY id`

// OwedIntake returns the messages whose turn is owed, in arrival order.
func (d *DB) OwedIntake(ctx context.Context) ([]Intake, error) {
	rows, err := d.reader(ctx).query(owedIntakeQuery)
	if err != nil {
		return nil, d.wrap("owed intake", err)
	}
	return scanIntakes("owed intake", d, rows)
}

// RecentIntake returns up to limit messages, owed or answered, newest
// first (`herald intake list`, the console). limit ≤ 0 = no limit.
func (d *DB) RecentIntake(ctx context.Context, limit int) ([]Intake, error) {
	if limit <= 0 {
		limit = noLimit
	}
	rows, err := d.reader(ctx).query(`SELECT `+intakeCols+` FROM intake ORDER BY id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, d.wrap("recent intake", err)
	}
	return scanIntakes("recent intake", d, rows)
}

func scanIntakes(op string, d *DB, rows *sql.Rows) ([]Intake, error) {
	defer rows.Close()
	var out []Intake
	for rows.Next() {
		var in Intake
		if err := scanIntake(rows, &in); err != nil {
			return nil, d.wrap(op, err)
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, d.wrap(op, err)
	}
	return out, nil
}

// SetIntakeDraft records the platform id of the draft the owed message's
// turn shows, so a resumed turn edits the same draft.
func (d *DB) SetIntakeDraft(ctx context.Context, id int64, ref string) error {
	_, err := d.writer(ctx).exec(`UPDATE intake SET draft_ref = $1 WHERE id = $2`, ref, id)
	return d.wrap("set intake draft", err)
}
