package store

import (
	"strconv"
)

// dialect holds the few places where SQLite and PostgreSQL need different
// SQL. Every query is written once, with $n placeholders (both engines
// read them); a query that differs only in one of these fragments splices
// the fragment in where it is built. Nothing rewrites SQL text at run time.
//
// What differs beyond SQL is the engine's plumbing and stays with it (d.pg,
// postgres.go): mapping driver errors to this package's (wrap), closing the
// pools (Close), how a write transaction runs (SQLite's group commit on its
// one writer connection: writer, txOpts), Backup (VACUUM INTO; PostgreSQL
// is pg_dump's), the bus (Notify and Listen need a pgx connection) and
// SQLHandle (PostgreSQL shares its pool). Where bytes live is a sink per
// engine, chosen by Open and OpenPostgres: Transcripts and fileStore.
type dialect struct {
	name string // DriverSQLite or DriverPostgres

	// rowid is the column that orders rows of equal time in insertion
	// order: SQLite's implicit rowid, PostgreSQL's seq identity column.
	rowid string
	// forUpdate is the row-lock clause of a SELECT in a write transaction:
	// none on SQLite, whose write transactions are already serialised
	// (BEGIN IMMEDIATE on the one writer connection).
	forUpdate string
	// skipLocked is the row-lock clause of a claim: rows another
	// transaction is claiming are passed over, not waited for.
	skipLocked string
	// nowMS is the SQL for the database's clock in unix milliseconds
	// (leases: replicas' clocks need not agree).
	nowMS string
	// jsonAppend appends the JSON value $n to the JSON array text in col.
	jsonAppend func(col, param string) string
	// pendingHead selects pending outbox items that are the oldest pending
	// item of their destination (see DB.pendingHead).
	pendingHead string
	// advisoryLocks: the lock keys of conn.lock are taken (PostgreSQL's
	// pg_advisory_xact_lock). SQLite's writes are serialised without them.
	advisoryLocks bool
	// replicas: several processes share the database, and a row held by
	// another replica is free only when that replica's lease lapsed. On
	// SQLite one process runs: any other holder is a previous run of it.
	replicas bool
	// legacyOffset is what the one tree's version is ahead of the
	// engine's old schema_migrations numbering (migrate.go).
	legacyOffset int
}

var sqliteDialect = dialect{
	name:       DriverSQLite,
	rowid:      "rowid",
	forUpdate:  "",
	skipLocked: "",
	nowMS:      "CAST(unixepoch('subsec') * 1000 AS INTEGER)",
	jsonAppend: func(col, param string) string {
		return `json_insert(` + col + `, '$[#]', json(` + param + `))`
	},
	// SQLite walks the distinct destinations with a recursive skip-scan.
	pendingHead: `id IN (WITH RECURSIVE d(dest) AS (
		SELECT min(dest) FROM outbox WHERE delivered_at IS NULL AND failed_at IS NULL
		UNION ALL
		SELECT (SELECT min(o.dest) FROM outbox o WHERE o.delivered_at IS NULL AND o.failed_at IS NULL AND o.dest > d.dest)
		FROM d WHERE d.dest IS NOT NULL)
	SELECT (SELECT min(h.id) FROM outbox h WHERE h.delivered_at IS NULL AND h.failed_at IS NULL AND h.dest = d.dest)
	FROM d WHERE d.dest IS NOT NULL)`,
}

var postgresDialect = dialect{
	name:       DriverPostgres,
	rowid:      "seq",
	forUpdate:  " FOR UPDATE",
	skipLocked: " FOR UPDATE SKIP LOCKED",
	nowMS:      "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT",
	jsonAppend: func(col, param string) string {
		return `(` + col + `::jsonb || jsonb_build_array(` + param + `::jsonb))::text`
	},
	// PostgreSQL plans a GROUP BY over the (dest, id) index better than a
	// skip-scan.
	pendingHead:   `id IN (SELECT min(id) FROM outbox WHERE delivered_at IS NULL AND failed_at IS NULL GROUP BY dest)`,
	advisoryLocks: true,
	replicas:      true,
	legacyOffset:  legacyPGOffset,
}

// sqlArgs collects the arguments of a query built piece by piece: add
// appends one and returns its placeholder.
type sqlArgs []any

func (a *sqlArgs) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// list adds every value of vs and returns their placeholders, comma
// separated (for IN (...)).
func list[T any](a *sqlArgs, vs []T) string {
	var b []byte
	for i, v := range vs {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, a.add(v)...)
	}
	return string(b)
}
