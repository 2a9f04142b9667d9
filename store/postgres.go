package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// Drivers (config state.driver).
const (
	DriverSQLite   = "sqlite"
	DriverPostgres = "postgres"
)

// pgConns bounds one process's connections to PostgreSQL.
const pgConns = 16

// pgOpTimeout bounds a transcript statement (rowCtx).
const pgOpTimeout = 30 * time.Second

// pgBackend is what a DB on PostgreSQL holds besides the database/sql pool
// the queries share with SQLite: the pgx pool under it (closed with it) and
// the URL without its password for messages.
type pgBackend struct {
	pool *pgxpool.Pool
	url  string
}

// OpenStore opens the state database of driver: SQLite in stateDir
// (Open), or PostgreSQL at url (OpenPostgres) with stateDir for the
// process's own files.
func OpenStore(ctx context.Context, driver, url, stateDir string) (*DB, error) {
	switch driver {
	case "", DriverSQLite:
		return Open(ctx, stateDir)
	case DriverPostgres:
		return OpenPostgres(ctx, url, stateDir)
	}
	return nil, fmt.Errorf("open state database: driver %q is not sqlite or postgres", driver)
}

// OpenPostgres connects to the PostgreSQL database at url (a postgres://
// URL or a libpq key=value string), checks it and applies the schema
// migrations this binary knows. stateDir still holds the process's own
// files (herald.pid, workspaces); every piece of shared state, transcripts
// included, is in the database.
func OpenPostgres(ctx context.Context, url, stateDir string) (*DB, error) {
	if url == "" {
		return nil, errors.New("open state database: state.url is empty (driver postgres needs a URL like postgres://user:pass@host/db)")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's parse errors can quote the URL, password included.
		return nil, fmt.Errorf("open state database: state.url is not a PostgreSQL URL or key=value string (%s)", redactPGError(err, url))
	}
	cfg.MaxConns = pgConns
	cfg.ConnConfig.RuntimeParams["application_name"] = "herald"
	shown := redactURL(url)
	dir := stateDir
	if dir != "" {
		if dir, err = filepath.Abs(stateDir); err != nil {
			return nil, fmt.Errorf("open state database: state dir %q: %w", stateDir, err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("open state database: %s: %w: %w", dir, ErrReadOnly, err)
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open state database %s: %s", shown, redactPGError(err, url))
	}
	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open state database %s: %s", shown, redactPGError(err, url))
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	d := &DB{dir: dir, path: shown, w: sqlDB, r: sqlDB, pg: &pgBackend{pool: pool, url: shown}, dialect: &postgresDialect}
	d.Transcripts = rowTranscripts{d: d}
	d.files = chunkFiles{d: d}
	d.ws = newStmtCache(sqlDB)
	d.rs = d.ws
	table, _ := upgradeTable()
	if err := migrate(ctx, sqlDB, shown, d.dialect, table); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Driver returns the database's driver: DriverSQLite or DriverPostgres.
func (d *DB) Driver() string { return d.dialect.name }

func (b *pgBackend) close(d *DB) error {
	if d.rs != nil {
		d.rs.close()
	}
	err := d.w.Close()
	b.pool.Close()
	if err != nil {
		return fmt.Errorf("close state database %s: %w", b.url, err)
	}
	return nil
}

// PostgreSQL error codes this package tells apart.
const (
	pgUniqueViolation     = "23505"
	pgSerialization       = "40001"
	pgReadOnlyTransaction = "25006"
	pgInsufficientPriv    = "42501"
)

// serializationFailure reports whether err is PostgreSQL's "could not
// serialize access": a repeatable-read transaction met a row changed
// after its snapshot, and may be run again.
func serializationFailure(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == pgSerialization
}

// wrap adds the operation to err and maps PostgreSQL's codes to this
// package's sentinels.
func (b *pgBackend) wrap(op string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case pgUniqueViolation:
			return fmt.Errorf("%s: %w: %w", op, ErrExists, err)
		case pgReadOnlyTransaction, pgInsufficientPriv:
			return fmt.Errorf("%s: state database %s: %w: %w", op, b.url, ErrReadOnly, err)
		}
	}
	return fmt.Errorf("%s: %w", op, descriptorError(err, false))
}

// redactURL returns a postgres:// URL without its password, or only the
// host and database of a key=value string, for messages and logs.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	var kept []string
	for _, f := range strings.Fields(s) {
		if k, _, ok := strings.Cut(f, "="); ok && (k == "host" || k == "port" || k == "dbname" || k == "user") {
			kept = append(kept, f)
		}
	}
	return strings.Join(kept, " ")
}

// redactPGError returns err's text with any password of url taken out.
func redactPGError(err error, rawURL string) string {
	msg := err.Error()
	if u, perr := url.Parse(rawURL); perr == nil {
		if p, has := u.User.Password(); has && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
		if p := u.Query().Get("password"); p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
	}
	for _, f := range strings.Fields(rawURL) {
		if k, v, ok := strings.Cut(f, "="); ok && k == "password" && v != "" {
			msg = strings.ReplaceAll(msg, v, "xxxxx")
		}
	}
	return msg
}

// Notify sends payload to the replicas listening on channel (PostgreSQL's
// NOTIFY, delivered to listeners when it is sent, at most 8000 bytes). A
// no-op on SQLite, where one process runs.
func (d *DB) Notify(ctx context.Context, channel, payload string) error {
	if d.pg == nil {
		return nil
	}
	_, err := d.pg.pool.Exec(ctx, "SELECT pg_notify($1, $2)", channel, payload)
	if err != nil {
		return fmt.Errorf("notify %s: %w", channel, err)
	}
	return nil
}

// ListenerName is the application_name of Listen's connection.
const ListenerName = "herald listener"

// Listen calls fn with the payload of every notification sent on channel
// until ctx ends, on a connection of its own. When the connection is lost
// or cannot be made, fail (optional) is told why — the error without the
// database's password — and it connects again after a pause; what was
// sent meanwhile is not seen, so a listener also reads the store (ready,
// optional, is called each time the listener is in place, the first time
// and after every reconnection). On SQLite, where nothing is ever sent,
// it returns at once.
func (d *DB) Listen(ctx context.Context, channel string, ready func(), fn func(payload string), fail func(err error)) {
	if d.pg == nil {
		return
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := d.listenOnce(ctx, channel, ready, fn)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			backoff = min(backoff*2, 5*time.Second)
			if fail != nil {
				msg := err.Error()
				if pw := d.pg.pool.Config().ConnConfig.Password; pw != "" {
					msg = strings.ReplaceAll(msg, pw, "xxxxx")
				}
				fail(fmt.Errorf("listen on %s (%s): %s", channel, d.pg.url, msg))
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
	}
}

func (d *DB) listenOnce(ctx context.Context, channel string, ready func(), fn func(payload string)) error {
	cc := d.pg.pool.Config().ConnConfig.Copy()
	cc.RuntimeParams["application_name"] = ListenerName // tells it apart in pg_stat_activity
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	if ready != nil {
		ready()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		fn(n.Payload)
	}
}
