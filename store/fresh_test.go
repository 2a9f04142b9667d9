package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/heraldhq/herald/channels"
)

var updateFresh = flag.Bool("update-fresh", false, "rewrite store/fresh-sqlite.sql from the upgrade steps")

// stepsDB makes a SQLite database with the upgrade steps alone, one by
// one, as every new database was made before fresh-sqlite.sql.
func stepsDB(t *testing.T) *sql.DB {
	t.Helper()
	return stepsDBAt(t, filepath.Join(t.TempDir(), DBFile))
}

func stepsDBAt(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	table, err := upgradeTable()
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate(context.Background(), db, path, &sqliteDialect, table); err != nil {
		t.Fatal(err)
	}
	return db
}

// freshDump is the schema of db as SQL that makes it again: tables
// (virtual ones included, not their shadow tables nor SQLite's own), then
// indexes, views and triggers, each group in the order they were made.
// herald_version and schema_migrations are left to migrate.
func freshDump(t *testing.T, db *sql.DB) string {
	t.Helper()
	rows, err := db.Query(`SELECT m.type, m.sql FROM sqlite_master m
		LEFT JOIN pragma_table_list l ON l.schema = 'main' AND l.name = m.name
		WHERE m.sql IS NOT NULL AND m.name NOT LIKE 'sqlite_%'
		  AND m.name NOT IN ('herald_version', 'schema_migrations')
		  AND COALESCE(l.type, '') != 'shadow'
		ORDER BY CASE m.type WHEN 'table' THEN 0 WHEN 'index' THEN 1 WHEN 'view' THEN 2 ELSE 3 END, m.rowid`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var typ, stmt string
		if err := rows.Scan(&typ, &stmt); err != nil {
			t.Fatal(err)
		}
		b.WriteString(stmt + ";\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// schemaRows lists what a database holds that a migration could have
// made: every schema entry with its SQL, and each table's row count.
func schemaRows(t *testing.T, db *sql.DB) []string {
	t.Helper()
	var out, tables []string
	rows, err := db.Query(`SELECT m.type, m.name, m.tbl_name, COALESCE(m.sql, ''), COALESCE(l.type, '') FROM sqlite_master m
		LEFT JOIN pragma_table_list l ON l.schema = 'main' AND l.name = m.name ORDER BY m.type, m.name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var typ, name, tbl, stmt, ltype string
		if err := rows.Scan(&typ, &name, &tbl, &stmt, &ltype); err != nil {
			t.Fatal(err)
		}
		out = append(out, strings.Join([]string{typ, name, tbl, stmt}, " | "))
		if typ == "table" && ltype != "virtual" {
			tables = append(tables, name)
		}
	}
	rows.Close()
	for _, name := range tables {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM "` + name + `"`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("rows %s %d", name, n))
	}
	var v, c int
	if err := db.QueryRow("SELECT version, compat FROM herald_version").Scan(&v, &c); err != nil {
		t.Fatal(err)
	}
	out = append(out, fmt.Sprintf("herald_version %d %d", v, c))
	// What the file's header and the connection say about its format.
	for _, p := range []string{"page_size", "auto_vacuum", "encoding", "user_version", "application_id", "journal_mode", "foreign_keys"} {
		var val string
		if err := db.QueryRow("PRAGMA " + p).Scan(&val); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("pragma %s %s", p, val))
	}
	return out
}

// stepsImage is the file the upgrade steps leave, as fresh-sqlite.db holds
// it: VACUUMed (no free pages from dropped indexes), applied_at 0 (the
// steps ran when the file was written, not when a database is made from
// it), checkpointed and closed, so the file alone is the database (its
// header says WAL).
func stepsImage(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), DBFile)
	db := stepsDBAt(t, path)
	for _, q := range []string{"UPDATE schema_migrations SET applied_at = 0", "VACUUM"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the steps' database left a WAL (%v): the file alone is not the database", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A new database made from fresh-sqlite.sql (and the steps after its
// version) is the database the steps alone make: the same tables,
// columns, indexes, triggers and FTS tables with the same SQL, the same
// rows, the same version. Regenerate the file with
// go test ./store -run TestFreshSchemaMatchesUpgrades -update-fresh.
func TestFreshSchemaMatchesUpgrades(t *testing.T) {
	if onPostgres() {
		t.Skip("fresh-sqlite.sql is SQLite's")
	}
	steps := stepsDB(t)
	if *updateFresh {
		src := fmt.Sprintf("-- v%d: the schema upgrades 1..%d make, for a new SQLite database (store/fresh.go).\n"+
			"-- Generated by go test ./store -run TestFreshSchemaMatchesUpgrades -update-fresh; do not edit.\n%s",
			SchemaVersion(), SchemaVersion(), freshDump(t, steps))
		if err := os.WriteFile("fresh-sqlite.sql", []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile("fresh-sqlite.db", stepsImage(t), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote fresh-sqlite.sql and fresh-sqlite.db at v%d; rebuild and run the test again", SchemaVersion())
		return
	}
	if _, freshOK := sqliteUpgrades(); !freshOK {
		t.Fatalf("fresh-sqlite.sql (first line %q) is not used: its first line must be -- vN: with 1 <= N <= %d",
			strings.SplitN(freshSQLite, "\n", 2)[0], SchemaVersion())
	}
	want := schemaRows(t, steps)
	for _, c := range []struct {
		name  string
		image []byte
	}{{"fresh-sqlite.sql", nil}, {"fresh-sqlite.db", freshImage}} {
		dir := t.TempDir()
		db, err := openSQLite(context.Background(), dir, c.image, nil)
		if err != nil {
			t.Fatalf("%s: open: %v", c.name, err)
		}
		got := schemaRows(t, db.w)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("a new database made from %s differs from the upgrade steps' (regenerate it with -update-fresh):\nonly fresh:\n  %s\nonly steps:\n  %s",
				c.name, strings.Join(diff(got, want), "\n  "), strings.Join(diff(want, got), "\n  "))
		}
	}
	if v, _ := freshVersion(freshSQLite); v < SchemaVersion() {
		t.Logf("fresh-sqlite.sql is at v%d, the steps at v%d: new databases run the last %d steps one by one", v, SchemaVersion(), SchemaVersion()-v)
	}
	if !bytes.Equal(freshImage, stepsImage(t)) {
		t.Logf("fresh-sqlite.db is not the file the steps leave now (a newer step, or another SQLite): new databases are made from it and the steps after its version; regenerate it with -update-fresh")
	}
}

// On Linux a new database is the image, published whole; an existing one
// is left as it is, and a state dir where another process made the
// database first gets that one.
func TestOpenNewDatabaseFromImage(t *testing.T) {
	sqliteOnly(t)
	if runtime.GOOS != "linux" {
		t.Skip("publishImage is Linux's")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, DBFile)
	published, err := checkWritable(dir, path, freshImage)
	if err != nil || !published {
		t.Fatalf("checkWritable on an empty dir = %v, %v; want the image published", published, err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(b, freshImage) {
		t.Fatalf("the new database is not the image (%d bytes of %d, %v)", len(b), len(freshImage), err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the new database's mode = %v, %v; want 0600 (it holds conversations)", fi.Mode(), err)
	}
	if err := publishImage(dir, path, []byte("other")); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("publishing over an existing database = %v, want fs.ErrExist", err)
	}
	if published, err := checkWritable(dir, path, freshImage); err != nil || published {
		t.Fatalf("checkWritable with the database there = %v, %v; want it left as it is", published, err)
	}
	if b2, _ := os.ReadFile(path); !bytes.Equal(b2, b) {
		t.Fatal("the existing database was changed")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("the state dir holds %d entries, want the database alone", len(entries))
	}
}

// A -wal left beside a removed database (a reset after a crash: the
// operator moved herald.db away, its uncheckpointed WAL stayed) is not
// replayed onto the new database: Open gives an empty one, as it did
// when a new database was an empty file, and the image is not published
// while a -wal or -journal is there.
func TestNewDatabaseIgnoresStaleWAL(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	oldDir := t.TempDir()
	old, err := Open(ctx, oldDir)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := old.w.ExecContext(ctx, "CREATE TABLE old_conversation (x TEXT); INSERT INTO old_conversation VALUES ('before the crash')"); err != nil {
		t.Fatal(err)
	}
	if _, err := old.AddIntake(ctx, &Intake{SessionKey: "s1", AgentID: "main", Origin: channels.Origin{Channel: "web", ChatID: "c1", ChatType: "dm"}, Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	// The WAL as a crash leaves it: frames not checkpointed.
	wal, err := os.ReadFile(filepath.Join(oldDir, DBFile+"-wal"))
	if err != nil || len(wal) == 0 {
		t.Fatalf("the old database's WAL: %d bytes, %v", len(wal), err)
	}

	for _, side := range []string{"-wal", "-journal"} {
		dir := t.TempDir()
		path := filepath.Join(dir, DBFile)
		if err := os.WriteFile(path+side, wal, 0o600); err != nil {
			t.Fatal(err)
		}
		if published, err := checkWritable(dir, path, freshImage); err != nil || published {
			t.Fatalf("%s left in the dir: checkWritable = %v, %v; want the ordinary path", side, published, err)
		}
		os.Remove(path)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, DBFile)
	if err := os.WriteFile(path+"-wal", wal, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.w.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE name = 'old_conversation'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the new database holds the old database's table (%d, %v): the stale WAL was replayed", n, err)
	}
	if err := db.w.QueryRowContext(ctx, "SELECT count(*) FROM sessions").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the new database holds %d sessions (%v), want none", n, err)
	}
	var ok string
	if err := db.w.QueryRowContext(ctx, "PRAGMA quick_check").Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("quick_check on the new database = %q, %v", ok, err)
	}
	if !atNewest(ctx, db.w, newestVersion()) {
		t.Fatal("the new database is not at the newest version")
	}
}

// BenchmarkOpenNew opens a new SQLite state database: what a first start
// pays before it is ready.
func BenchmarkOpenNew(b *testing.B) {
	for b.Loop() {
		db, err := Open(context.Background(), b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		db.Close()
	}
}

// A commit by another process (a CLI command on the same state dir) made
// right after a new database is published, before this process's first
// reads, is seen by them: start-up recovery claims the message it added.
// (The former "unwritten" shortcut took its baseline after the file was
// visible and answered such reads empty for the process's life.)
func TestNewDatabaseSeesAnotherProcessCommit(t *testing.T) {
	sqliteOnly(t)
	if runtime.GOOS != "linux" {
		t.Skip("publishImage is Linux's")
	}
	ctx := context.Background()
	dir := t.TempDir()
	in := &Intake{SessionKey: "s1", AgentID: "main", Origin: channels.Origin{Channel: "web", ChatID: "c1", ChatType: "dm"}, Text: "hi"}
	var addErr error
	added := false
	db, err := openSQLite(ctx, dir, freshImage, func() {
		added = true
		other, err := Open(ctx, dir)
		if err != nil {
			addErr = err
			return
		}
		_, addErr = other.AddIntake(ctx, in)
		addErr = errors.Join(addErr, other.Close())
	})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if !added || addErr != nil {
		t.Fatalf("the other process's commit after publishing: ran %v, %v", added, addErr)
	}
	owed, err := db.ClaimOwed(ctx, Claim{Holder: "me"})
	if err != nil || len(owed) != 1 || owed[0].ID != in.ID {
		t.Fatalf("ClaimOwed after another process added a message = %+v, %v; want it", owed, err)
	}
}

// atNewest lets Open skip migrate only for a database at the newest
// version with every legacy step marked and no foreign table; anything
// else goes to migrate (which upgrades it or refuses it).
func TestAtNewestOnlyWhenNothingToDo(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	n := newestVersion()
	for _, c := range []struct {
		name string
		sql  string
		want bool
	}{
		{"newest", "", true},
		{"older", fmt.Sprintf("UPDATE herald_version SET version = %d, compat = %d", n-1, n-1), false},
		{"newer", fmt.Sprintf("UPDATE herald_version SET version = %d, compat = %d", n+1, n+1), false},
		{"compat newer", fmt.Sprintf("UPDATE herald_version SET compat = %d", n+1), false},
		{"compat unset", "UPDATE herald_version SET compat = NULL", true},
		{"legacy steps missing", fmt.Sprintf("DELETE FROM schema_migrations WHERE version = %d", n), false},
		{"no version table", "DROP TABLE herald_version", false},
		{"foreign table", "CREATE TABLE roomserver_rooms (x INTEGER)", false},
	} {
		db := stepsDB(t)
		if c.sql != "" {
			if _, err := db.Exec(c.sql); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		if got := atNewest(ctx, db, n); got != c.want {
			t.Errorf("%s: atNewest = %v, want %v", c.name, got, c.want)
		}
	}
}
