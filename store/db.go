package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"

	"github.com/heraldhq/herald/channels"
)

// DBFile is the database's file name inside the state dir.
const DBFile = "herald.db"

// busyTimeout is how long a statement waits for another connection's lock.
const busyTimeout = 5 * time.Second

// noLimit is a LIMIT that keeps every row, in both SQL dialects.
const noLimit = math.MaxInt64

// readerConns bounds the read pool; reads never block the writer in WAL mode.
const readerConns = 4

// DB is Herald's state database: one writer connection (all writes are
// serialised there, so transactions never fight for the lock) and a small
// pool of read-only connections.
type DB struct {
	dir  string
	path string

	w  *sql.DB // exactly one connection; every write goes here
	r  *sql.DB // query_only connections for reads
	ws *stmtCache
	rs *stmtCache

	// pg is set for PostgreSQL (postgres.go): w and r are then one pool.
	pg *pgBackend
	// dialect is the engine's SQL differences.
	dialect *dialect

	// Transcripts is the engine's transcript sink: files under the state
	// dir (SQLite) or rows (PostgreSQL).
	Transcripts

	// files is the engine's sink for the bytes of stored files: files
	// under the state dir (SQLite) or rows (PostgreSQL).
	files fileStore
	// sweepSelected (tests) runs after SweepFiles selected the files to
	// remove, before it removes them.
	sweepSelected func(ids []string)

	group group // SQLite: concurrent write transactions commit together

	// readsOnWriter (SQLite, DeferReadPool): reads run on the writer's
	// connection; the read pool has not connected.
	readsOnWriter atomic.Bool

	// fault, when set, fails every write transaction (InjectWriteFault).
	fault atomic.Pointer[error]

	closeOnce sync.Once
	closeErr  error
}

// Open creates stateDir (0700) if needed, opens <stateDir>/herald.db (WAL,
// synchronous=NORMAL, busy timeout, foreign keys), checks it and applies the
// schema migrations this binary knows.
//
// A file that is not a SQLite database or fails PRAGMA quick_check gives an
// error wrapping ErrCorrupt; a state dir or database that cannot be written
// gives an error wrapping ErrReadOnly; a database written by a newer Herald
// gives an error wrapping ErrSchemaTooNew.
func Open(ctx context.Context, stateDir string) (*DB, error) {
	return openSQLite(ctx, stateDir, freshImage, nil)
}

// openSQLite is Open with the image a new database is made from (nil: made
// by fresh-sqlite.sql and the steps after it); afterPublish (tests), when
// set, runs once the image is published, before this Open reads it.
func openSQLite(ctx context.Context, stateDir string, image []byte, afterPublish func()) (*DB, error) {
	if stateDir == "" {
		return nil, errors.New("open state database: state dir is empty")
	}
	dir, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, fmt.Errorf("open state database: state dir %q: %w", stateDir, err)
	}
	path := filepath.Join(dir, DBFile)
	published, err := checkWritable(dir, path, image)
	if err != nil {
		return nil, err
	}
	if published && afterPublish != nil {
		afterPublish()
	}
	if err := checkHeader(path); err != nil {
		return nil, err
	}

	d := &DB{dir: dir, path: path, dialect: &sqliteDialect, Transcripts: FileTranscripts{Dir: dir}, files: diskFiles{dir: dir}}
	d.w, err = sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return nil, fmt.Errorf("open state database %s: %w", path, err)
	}
	d.w.SetMaxOpenConns(1)
	d.w.SetMaxIdleConns(1)
	d.w.SetConnMaxLifetime(0)
	d.w.SetConnMaxIdleTime(0)
	d.ws = newStmtCache(d.w)

	// A database this call just made from the image needs no quick_check:
	// its bytes are the image's, which the tests open and compare.
	if !published {
		if err := d.check(ctx); err != nil {
			d.w.Close()
			return nil, err
		}
	}
	if !atNewest(ctx, d.w, newestVersion()) {
		table, _ := sqliteUpgrades()
		if err := migrate(ctx, d.w, path, d.dialect, table); err != nil {
			d.w.Close()
			return nil, err
		}
	}

	d.r, err = sql.Open("sqlite", dsn(path, true))
	if err != nil {
		d.w.Close()
		return nil, fmt.Errorf("open state database %s: %w", path, err)
	}
	d.r.SetMaxOpenConns(readerConns)
	d.r.SetMaxIdleConns(readerConns)
	d.r.SetConnMaxIdleTime(0)
	d.r.SetConnMaxLifetime(0)
	d.rs = newStmtCache(d.r)
	// The read pool connects on first use: each SQLite connection parses
	// the whole schema once (~0.7 ms), and a process that reads on the
	// writer until it is ready (DeferReadPool) needs none before then.
	return d, nil
}

// DeferReadPool has reads run on the writer's connection until the
// returned func is called; the read pool then connects on its first read.
// The gateway calls it at start and ends it once ready: its reads before
// ready are few and mostly sequential, and a second connection is a
// second parse of the schema (docs/performance.md, "2026-11-28: start →
// ready"). A read there waits while a write transaction holds the writer;
// no store code reads through d.reader inside a transaction (it would
// wait for itself). A no-op on PostgreSQL (one pool).
func (d *DB) DeferReadPool() (open func()) {
	if d.pg != nil {
		return func() {}
	}
	d.readsOnWriter.Store(true)
	return func() { d.readsOnWriter.Store(false) }
}

// dsn builds the modernc.org/sqlite data source name for path.
func dsn(path string, readOnly bool) string {
	q := []string{
		fmt.Sprintf("_pragma=busy_timeout(%d)", busyTimeout.Milliseconds()),
		"_pragma=foreign_keys(1)",
		"_pragma=journal_mode(WAL)",
		"_pragma=synchronous(NORMAL)",
		"_txlock=immediate",
	}
	if readOnly {
		q = append(q, "_pragma=query_only(1)")
	} else {
		// The writer's statement journals stay in memory. A group commit
		// (group.go) runs each caller in a savepoint, and a statement
		// journal over 64 KiB was spilled to a new temp file in TMPDIR,
		// created and unlinked at once: 6 % of a run's CPU in
		// BenchmarkRunLifecycle, and the churn of deleted inodes made
		// ext4 slow to create every other file there, transcripts
		// included (docs/performance.md). A group holds at most maxGroup
		// transactions' changed pages.
		q = append(q, "_pragma=temp_store(MEMORY)")
	}
	return "file:" + path + "?" + strings.Join(q, "&")
}

// noDatabaseFiles reports that neither path nor its WAL or rollback
// journal exists. A -wal or -journal left beside a database that was
// removed (an operator's reset after a crash: "move the file away") must
// not meet the image: the image's header says WAL mode and holds pages, so
// SQLite would replay the old WAL's frames onto it — the "empty" database
// would hold the old conversations, or be malformed. An empty file made
// the ordinary way has no pages, and SQLite discards a WAL or journal
// beside it, so that is the path taken whenever one is there.
func noDatabaseFiles(path string) bool {
	for _, p := range []string{path, path + "-wal", path + "-journal"} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	return true
}

// checkWritable makes sure the state dir exists and that both it and an
// existing database (with its WAL side files) can be written, so a
// read-only deployment fails at start and not on the first run. When
// there is no database yet and image is set, it makes the database from
// image and says so (published).
func checkWritable(dir, path string, image []byte) (published bool, err error) {
	readOnly := func(p string, err error) error {
		return fmt.Errorf("open state database: %s: %w: %w", p, ErrReadOnly, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, readOnly(dir, err)
	}
	if fi, err := os.Stat(dir); err != nil {
		return false, readOnly(dir, err)
	} else if !fi.IsDir() {
		return false, readOnly(dir, errors.New("not a directory"))
	}
	// A new database is made from the image when the system can publish
	// it whole (publishImage) and nothing of an earlier database is left
	// beside it (noDatabaseFiles); otherwise (and when another process
	// made it meanwhile) it is checked and made below as before.
	if len(image) > 0 && noDatabaseFiles(path) && publishImage(dir, path, image) == nil {
		return true, nil
	}
	// A new database is created private: it holds conversations. Creating
	// it shows the dir takes new files (SQLite adds its WAL beside it), so
	// only an existing database needs the probe file.
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		if err := f.Close(); err != nil {
			return false, readOnly(path, err)
		}
		return false, nil
	} else if !errors.Is(err, fs.ErrExist) {
		return false, readOnly(path, err)
	}
	probe, err := os.CreateTemp(dir, ".herald-write-check-*")
	if err != nil {
		return false, readOnly(dir, err)
	}
	name := probe.Name()
	_, werr := probe.Write([]byte{0})
	cerr := probe.Close()
	os.Remove(name)
	if werr != nil {
		return false, readOnly(dir, werr)
	}
	if cerr != nil {
		return false, readOnly(dir, cerr)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, readOnly(p, err)
		}
		f.Close()
	}
	return false, nil
}

// sqliteMagic starts every SQLite 3 database file.
var sqliteMagic = []byte("SQLite format 3\x00")

// checkHeader rejects an existing, non-empty file that is not SQLite before
// the driver gets a chance to turn it into something else.
func checkHeader(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open state database %s: %w", path, err)
	}
	defer f.Close()
	buf := make([]byte, len(sqliteMagic))
	n, err := io.ReadFull(f, buf)
	if n == 0 && (err == io.EOF) {
		return nil // empty file: SQLite treats it as a new database
	}
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("open state database %s: %w", path, err)
	}
	if !bytes.Equal(buf[:n], sqliteMagic) {
		return corrupt(path, errors.New("not a SQLite database"))
	}
	return nil
}

func corrupt(path string, detail error) error {
	return fmt.Errorf("state database %s: %w (%v); stop herald and move the file away (for example mv %s %s.corrupt) to start with an empty state",
		path, ErrCorrupt, detail, path, path)
}

// check opens the writer connection and runs PRAGMA quick_check. Opening
// the connection sets journal_mode=WAL, which SQLite can refuse with
// SQLITE_BUSY without calling the busy handler while another process opens
// or migrates the same new file (a CLI command as the gateway starts): that
// is retried for busyTimeout, never taken for damage.
func (d *DB) check(ctx context.Context) error {
	deadline := time.Now().Add(busyTimeout)
	for {
		problems, err := d.quickCheck(ctx)
		if err == nil {
			return d.checkProblems(problems)
		}
		var se *sqlite.Error
		if !errors.As(err, &se) || se.Code()&0xff != sqliteBusy || time.Now().After(deadline) {
			return d.checkFailed(err)
		}
		select {
		case <-ctx.Done():
			return d.checkFailed(err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (d *DB) quickCheck(ctx context.Context) ([]string, error) {
	rows, err := d.w.QueryContext(ctx, "PRAGMA quick_check")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		if s != "ok" {
			problems = append(problems, s)
		}
	}
	return problems, rows.Err()
}

func (d *DB) checkProblems(problems []string) error {
	if len(problems) > 0 {
		if len(problems) > 3 {
			problems = append(problems[:3], "...")
		}
		return corrupt(d.path, fmt.Errorf("quick_check: %s", strings.Join(problems, "; ")))
	}
	return nil
}

// checkFailed maps an error of PRAGMA quick_check itself: on a healthy
// file it does not fail, so any SQLite error that is not about
// permissions (scribbled pages can surface as "string or blob too big")
// means the file is damaged.
func (d *DB) checkFailed(err error) error {
	wrapped := d.wrap("open", err)
	var se *sqlite.Error
	if errors.Is(wrapped, ErrCorrupt) || errors.Is(wrapped, ErrReadOnly) || !errors.As(err, &se) {
		return wrapped
	}
	return corrupt(d.path, err)
}

// SQLite primary result codes this package tells apart.
const (
	sqlitePerm       = 3
	sqliteBusy       = 5
	sqliteReadOnly   = 8
	sqliteCorrupt    = 11
	sqliteCantOpen   = 14
	sqliteConstraint = 19
	sqliteNotADB     = 26

	sqliteConstraintPrimaryKey = sqliteConstraint | 6<<8
	sqliteConstraintUnique     = sqliteConstraint | 8<<8
)

// wrap adds the operation and the database path to err, and maps SQLite
// result codes to this package's sentinels.
func (d *DB) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if d.pg != nil {
		return d.pg.wrap(op, err)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		code := se.Code()
		switch code & 0xff {
		case sqliteCorrupt, sqliteNotADB:
			return corrupt(d.path, err)
		case sqliteCantOpen:
			// "unable to open database file" is also what running out of
			// file descriptors looks like: name that when it is the cause.
			if fd := descriptorError(err, true); fd != err {
				return fmt.Errorf("%s: state database %s: %w", op, d.path, fd)
			}
			return fmt.Errorf("%s: state database %s: %w: %w", op, d.path, ErrReadOnly, err)
		case sqliteReadOnly, sqlitePerm:
			return fmt.Errorf("%s: state database %s: %w: %w", op, d.path, ErrReadOnly, err)
		}
		if code == sqliteConstraintPrimaryKey || code == sqliteConstraintUnique {
			return fmt.Errorf("%s: %w: %w", op, ErrExists, err)
		}
	}
	return fmt.Errorf("%s: %w", op, descriptorError(err, false))
}

// Close closes both connection pools, checkpointing the WAL first.
func (d *DB) Close() error {
	d.closeOnce.Do(func() {
		if d.pg != nil {
			d.closeErr = d.pg.close(d)
			return
		}
		if d.w != nil {
			// Best effort: fold the WAL back so operators see one file.
			_, _ = d.w.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
		}
		var errs []error
		if d.rs != nil {
			d.rs.close()
		}
		if d.ws != nil {
			d.ws.close()
		}
		if d.r != nil {
			errs = append(errs, d.r.Close())
		}
		if d.w != nil {
			errs = append(errs, d.w.Close())
		}
		if err := errors.Join(errs...); err != nil {
			d.closeErr = fmt.Errorf("close state database %s: %w", d.path, err)
		}
	})
	return d.closeErr
}

// StateDir returns the absolute state dir.
func (d *DB) StateDir() string { return d.dir }

// Path returns the absolute path of herald.db.
func (d *DB) Path() string { return d.path }

func safeName(s string) string {
	if strings.ContainsAny(s, unsafeNameChars) {
		s = unsafeNames.Replace(s)
	}
	if s == "" || s == "." || s == ".." {
		return "_" + s
	}
	return s
}

// unsafeNameChars are what safeName replaces; unsafeNames replaces them
// (made once: a transcript's path is asked for every run).
const unsafeNameChars = "/\\\x00"

var unsafeNames = strings.NewReplacer("/", "_", "\\", "_", "\x00", "_")

// stmtCache keeps one prepared statement per query text.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, m: make(map[string]*sql.Stmt)}
}

// get returns the statement for q, preparing it on the pool if needed. The
// lock is not held while preparing: that waits for a connection, and the
// writer's only connection may belong to a transaction that needs peek.
func (c *stmtCache) get(ctx context.Context, q string) (*sql.Stmt, error) {
	if s, ok := c.peek(q); ok {
		return s, nil
	}
	s, err := c.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil { // closed meanwhile
		s.Close()
		return nil, sql.ErrConnDone
	}
	if old, ok := c.m[q]; ok {
		s.Close()
		return old, nil
	}
	c.m[q] = s
	return s, nil
}

// peek returns the cached statement for q without preparing one.
func (c *stmtCache) peek(q string) (*sql.Stmt, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.m[q]
	return s, ok
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.m {
		s.Close()
	}
	c.m = nil
}

// conn is what the query helpers run on: the read pool, the writer outside a
// transaction, or a write transaction.
type conn struct {
	ctx     context.Context
	dialect *dialect
	cache   *stmtCache
	tx      *sql.Tx   // nil outside a transaction
	miss    *[]string // in a transaction: queries to prepare once it ends
	// d is set on SQLite's writer outside a transaction: a write there
	// joins the group commit (group.go) instead of committing alone.
	d *DB
}

// grouped reports whether a write on c goes through the group commit.
func (c conn) grouped() bool { return c.tx == nil && c.d != nil }

func (c conn) stmt(q string) (*sql.Stmt, error) {
	if c.tx != nil {
		// The writer pool has one connection and the transaction holds it:
		// preparing on the pool here would wait forever. Use the cached
		// statement if there is one; else prepare on the transaction and
		// have tx cache it after the transaction ends.
		if s, ok := c.cache.peek(q); ok {
			return c.tx.StmtContext(c.ctx, s), nil
		}
		*c.miss = append(*c.miss, q)
		return c.tx.PrepareContext(c.ctx, q)
	}
	return c.cache.get(c.ctx, q)
}

func (c conn) exec(q string, args ...any) (sql.Result, error) {
	if c.grouped() {
		var res sql.Result
		err := c.d.tx(c.ctx, func(t conn) (err error) {
			res, err = t.exec(q, args...)
			return err
		})
		return res, err
	}
	s, err := c.stmt(q)
	if err != nil {
		return nil, err
	}
	return s.ExecContext(c.ctx, args...)
}

// execN runs q and returns the number of rows it changed.
func (c conn) execN(q string, args ...any) (int64, error) {
	res, err := c.exec(q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (c conn) query(q string, args ...any) (*sql.Rows, error) {
	s, err := c.stmt(q)
	if err != nil {
		return nil, err
	}
	return s.QueryContext(c.ctx, args...)
}

// queryRow runs q and scans its first row with scan; no row → ErrNotFound.
func (c conn) queryRow(scan func(*sql.Rows) error, q string, args ...any) error {
	if c.grouped() {
		return c.d.tx(c.ctx, func(t conn) error { return t.queryRow(scan, q, args...) })
	}
	rows, err := c.query(q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return ErrNotFound
	}
	if err := scan(rows); err != nil {
		return err
	}
	return rows.Close()
}

// lock serialises the write transactions that name the same key, for the
// rest of the transaction: a read-then-write on rows that do not exist yet
// (a count against a limit, the next sequence number). A no-op on SQLite.
func (c conn) lock(key string) error {
	if !c.dialect.advisoryLocks || c.tx == nil {
		return nil
	}
	_, err := c.tx.ExecContext(c.ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)
	return err
}

// insertID runs an INSERT … ON CONFLICT DO NOTHING RETURNING id and returns
// the new row's id, or ErrNotFound when a conflicting row kept it out.
func (c conn) insertID(q string, args ...any) (int64, error) {
	var id int64
	err := c.queryRow(func(rows *sql.Rows) error { return rows.Scan(&id) }, q, args...)
	return id, err
}

func (d *DB) reader(ctx context.Context) conn {
	if d.readsOnWriter.Load() {
		return conn{ctx: ctx, dialect: d.dialect, cache: d.ws} // outside the group commit: reads only
	}
	return conn{ctx: ctx, dialect: d.dialect, cache: d.rs}
}

// Check has the store's reader (d.reader: the writer's connection while
// DeferReadPool holds, the read pool after) answer a query that reads no
// table (SQLite: the header's user_version; PostgreSQL: SELECT 1).
// /readyz asks it at every probe (every millisecond while a harness waits
// for a start), so it costs the same on a large state as on a new one.
func (d *DB) Check(ctx context.Context) error {
	q := `SELECT 1`
	if d.dialect.name == DriverSQLite {
		q = `PRAGMA user_version`
	}
	var n int
	return d.wrap("check", d.reader(ctx).queryRow(func(r *sql.Rows) error { return r.Scan(&n) }, q))
}

// writer is the writer outside a transaction: on SQLite a write there joins
// the group commit.
func (d *DB) writer(ctx context.Context) conn {
	if d.pg != nil {
		return conn{ctx: ctx, dialect: d.dialect, cache: d.ws}
	}
	return conn{ctx: ctx, dialect: d.dialect, cache: d.ws, d: d}
}

// InjectWriteFault makes every write transaction fail with err until it is
// called with nil: a full disk or an I/O error as the driver would report
// it, for outage tests and chaos drills. Reads go on.
func (d *DB) InjectWriteFault(err error) {
	if err == nil {
		d.fault.Store(nil)
		return
	}
	d.fault.Store(&err)
}

// tx runs fn in one write transaction (BEGIN IMMEDIATE), committing when fn
// returns nil (or an errCommitThen) and rolling back otherwise. On SQLite
// the transaction may share its commit with concurrent ones (group.go); fn
// then runs to its end even if ctx is cancelled meanwhile.
func (d *DB) tx(ctx context.Context, fn func(c conn) error) error {
	return d.txOpts(ctx, nil, fn)
}

// txOpts is tx with PostgreSQL transaction options (SQLite's write
// transactions are serialised whatever they ask).
func (d *DB) txOpts(ctx context.Context, opts *sql.TxOptions, fn func(c conn) error) error {
	if f := d.fault.Load(); f != nil {
		return *f
	}
	if d.pg == nil {
		return d.txGroup(ctx, fn)
	}
	var miss []string
	defer func() {
		// The connection is free again: cache what the transaction missed.
		for _, q := range miss {
			_, _ = d.ws.get(ctx, q)
		}
	}()
	tx, err := d.w.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	if err := fn(conn{ctx: ctx, dialect: d.dialect, cache: d.ws, tx: tx, miss: &miss}); err != nil {
		var ct errCommitThen
		if errors.As(err, &ct) {
			if cerr := tx.Commit(); cerr != nil {
				return cerr
			}
			return err
		}
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Time columns hold UTC unix milliseconds; NULL is the zero time.

func msOrNull(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

func msOrNow(t time.Time) int64 {
	if t.IsZero() {
		return time.Now().UnixMilli()
	}
	return t.UnixMilli()
}

func fromMS(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.UnixMilli(n.Int64).UTC()
}

// truncMS is the time as the database gives it back.
func truncMS(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMilli(t.UnixMilli()).UTC()
}

func nowMS() time.Time { return truncMS(time.Now()) }

func originJSON(o channels.Origin) (string, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return "", fmt.Errorf("encode origin: %w", err)
	}
	return string(b), nil
}

// originCache encodes the origins of one batch's rows: the runs of one
// model response and their child sessions mostly carry the requester's
// origin, encoded once. An equal Origin (all its fields are strings)
// encodes to the same text, and the rows share the immutable string.
// The runs' allowed tools likewise (encodeTools): a response's spawns
// mostly carry the caller's tool list, each run its own copy of it.
type originCache struct {
	o  channels.Origin
	s  string
	ok bool

	tools   []string // the last list encoded, its text in toolsS
	toolsS  any
	toolsOK bool
}

// encodeTools is toolsJSON(tools), encoded again only when tools differs
// from the last list it encoded (nil and empty differ: toolsJSON keeps
// them apart).
func (c *originCache) encodeTools(tools []string) (any, error) {
	if c.toolsOK && (tools == nil) == (c.tools == nil) && slices.Equal(tools, c.tools) {
		return c.toolsS, nil
	}
	s, err := toolsJSON(tools)
	if err != nil {
		return nil, err
	}
	c.tools, c.toolsS, c.toolsOK = tools, s, true
	return s, nil
}

func (c *originCache) encode(o channels.Origin) (string, error) {
	if c.ok && o == c.o {
		return c.s, nil
	}
	s, err := originJSON(o)
	if err != nil {
		return "", err
	}
	c.o, c.s, c.ok = o, s, true
	return s, nil
}

func parseOrigin(s string, o *channels.Origin) error {
	if s == "" {
		*o = channels.Origin{}
		return nil
	}
	if err := json.Unmarshal([]byte(s), o); err != nil {
		return fmt.Errorf("decode origin %q: %w", s, err)
	}
	return nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Backup writes a consistent copy of the database to path (SQLite's
// VACUUM INTO, safe while the gateway runs); path must not exist.
func (d *DB) Backup(ctx context.Context, path string) error {
	if d.pg != nil {
		return errors.New("backup: the state is in PostgreSQL; back it up with pg_dump (docs/operations.md)")
	}
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("backup: %s already exists; choose a new file", path)
	}
	// Outside the group commit: VACUUM cannot run in a transaction.
	_, err := conn{ctx: ctx, dialect: d.dialect, cache: d.ws}.exec(`VACUUM INTO $1`, path)
	return d.wrap("backup to "+path, err)
}
