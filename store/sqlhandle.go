package store

import (
	"database/sql"
	"fmt"
)

// SQLHandle is a database/sql handle on the state database for a library
// that keeps its own tables there, versioned in its own version tables
// (mautrix's Matrix crypto store: crypto_* and mx_* tables). Dialect is
// DriverSQLite or DriverPostgres. Close releases what the handle holds; it
// never closes the store.
type SQLHandle struct {
	DB      *sql.DB
	Dialect string
	Close   func() error
}

// sqlHandleConns bounds the SQLite pool of an SQLHandle.
const sqlHandleConns = 4

// SQLHandle opens a handle on the state database. On PostgreSQL it is the
// store's own pool (Close does nothing); on SQLite a small pool of its own
// on the same file (WAL, the same busy timeout, immediate transactions),
// which Close closes.
func (d *DB) SQLHandle() (SQLHandle, error) {
	if d.pg != nil {
		return SQLHandle{DB: d.w, Dialect: d.dialect.name, Close: func() error { return nil }}, nil
	}
	db, err := sql.Open("sqlite", dsn(d.path, false))
	if err != nil {
		return SQLHandle{}, fmt.Errorf("open state database %s: %w", d.path, err)
	}
	db.SetMaxOpenConns(sqlHandleConns)
	db.SetMaxIdleConns(sqlHandleConns)
	return SQLHandle{DB: db, Dialect: d.dialect.name, Close: db.Close}, nil
}
