package store

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/devtools/pgtest"
)

// The migration histories before the one tree (store/migrations and
// store/migrations/postgres as the last main before it left them) are kept in
// testdata/legacy: a database they made must open with the new tree and
// keep its rows. e7a46f5 is the last main before this session's changes
// (SQLite 16 steps, PostgreSQL 7); "latest" adds the files steps.
var legacyCuts = []struct {
	name            string
	sqlite, pgSteps int
}{
	{"e7a46f5", 16, 7},
	{"latest", 19, 10},
}

// legacyDB makes a database the way the old migrate did (each file, then
// its schema_migrations row) with the first n files of dir, and returns
// the handle it made it with.
func applyLegacy(t *testing.T, db *sql.DB, dir string, n int) {
	t.Helper()
	ctx := context.Background()
	names, err := fs.Glob(os.DirFS("testdata/legacy"), dir+"/*.sql")
	if err != nil || len(names) < n {
		t.Fatalf("legacy %s: %v files, %v", dir, len(names), err)
	}
	sort.Strings(names)
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at BIGINT NOT NULL
	)`); err != nil {
		t.Fatal(err)
	}
	for i, name := range names[:n] {
		b, err := os.ReadFile(filepath.Join("testdata/legacy", name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, string(b)); err != nil {
			t.Fatalf("legacy %s: %v", name, err)
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)", i+1, int64(1700000000000+i)); err != nil {
			t.Fatal(err)
		}
	}
}

// columns lists table.column type of every table but the version tables.
func columns(t *testing.T, db *sql.DB, pg bool) []string {
	t.Helper()
	q := `SELECT m.name || '.' || p.name || ' ' || p.type FROM sqlite_master m, pragma_table_info(m.name) p
		WHERE m.type = 'table' AND m.name NOT IN ('schema_migrations', 'herald_version', 'sqlite_sequence')`
	if pg {
		q = `SELECT table_name || '.' || column_name || ' ' || data_type FROM information_schema.columns
			WHERE table_schema = 'public' AND table_name NOT IN ('schema_migrations', 'herald_version')`
	}
	return schemaLines(t, db, q)
}

// indexes lists every index and constraint of the tables but the version
// tables, each as one line that names its table, whether it is unique, its
// columns and its predicate: SQLite's own indexes (CREATE INDEX) and the
// ones behind PRIMARY KEY and UNIQUE (pragma_index_list), and foreign keys;
// PostgreSQL's indexes as it prints them (pg_indexes) and its constraints
// (pg_constraint). Names count: a query or an ON CONFLICT may rely on one.
func indexes(t *testing.T, db *sql.DB, pg bool) []string {
	t.Helper()
	q := `SELECT m.name || ' index ' || CASE i."unique" WHEN 1 THEN 'unique ' ELSE '' END || i.origin || ' ' ||
			CASE i.origin WHEN 'c' THEN i.name ELSE '' END || ' (' ||
			(SELECT group_concat(COALESCE(c.name, '<expr>'), ', ') FROM (SELECT name FROM pragma_index_xinfo(i.name) WHERE key = 1 ORDER BY seqno) c) || ')' ||
			CASE i.partial WHEN 1 THEN ' WHERE ' || lower(trim(substr(x.sql, instr(upper(x.sql), ' WHERE ') + 7))) ELSE '' END
		FROM sqlite_master m, pragma_index_list(m.name) i LEFT JOIN (SELECT name,
			replace(replace(replace(sql, char(10), ' '), char(13), ' '), char(9), ' ') AS sql FROM sqlite_master WHERE type = 'index') x ON x.name = i.name
		WHERE m.type = 'table' AND m.name NOT IN ('schema_migrations', 'herald_version', 'sqlite_sequence')
		UNION ALL
		SELECT m.name || ' foreign key (' || f."from" || ') references ' || f."table" || ' (' || COALESCE(f."to", '') || ')' ||
			' on delete ' || lower(f.on_delete)
		FROM sqlite_master m, pragma_foreign_key_list(m.name) f
		WHERE m.type = 'table'`
	if pg {
		q = `SELECT tablename || ' ' || indexdef FROM pg_indexes
			WHERE schemaname = 'public' AND tablename NOT IN ('schema_migrations', 'herald_version')
			UNION ALL
			SELECT c.conrelid::regclass::text || ' constraint ' || c.conname || ' ' || pg_get_constraintdef(c.oid)
			FROM pg_constraint c JOIN pg_class r ON r.oid = c.conrelid
			WHERE c.connamespace = 'public'::regnamespace AND r.relname NOT IN ('schema_migrations', 'herald_version')`
	}
	return schemaLines(t, db, q)
}

// schemaLines runs q, one text column a row, and returns its rows with
// their white space folded, sorted.
func schemaLines(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, strings.Join(strings.Fields(s), " "))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// A state dir or PostgreSQL database made by the previous release opens
// with the one tree: its version is adopted, the newer steps run, the rows
// it held read back through the store, and its schema is the one a new
// database gets.
func TestUpgradeFromLegacyDatabase(t *testing.T) {
	for _, cut := range legacyCuts {
		t.Run(cut.name, func(t *testing.T) {
			ctx := context.Background()
			pg := onPostgres()
			dir := t.TempDir()
			var raw *sql.DB
			var url string
			var err error
			if pg {
				url = pgtest.URL(t)
				raw, err = sql.Open("pgx", url)
			} else {
				raw, err = sql.Open("sqlite", dsn(filepath.Join(dir, DBFile), false))
			}
			if err != nil {
				t.Fatal(err)
			}
			if pg {
				applyLegacy(t, raw, "postgres", cut.pgSteps)
			} else {
				applyLegacy(t, raw, "sqlite", cut.sqlite)
			}
			// Rows as the previous release wrote them.
			at := time.Date(2026, 11, 24, 9, 30, 0, 0, time.UTC)
			ms := at.UnixMilli()
			tpath := filepath.Join(dir, "transcripts", "main", "s1.jsonl")
			if pg {
				tpath = filepath.Join("transcripts", "main", "s1.jsonl")
			}
			origin := `{"channel":"slack","account":"T1","chatId":"C42"}`
			for _, q := range []struct {
				sql  string
				args []any
			}{
				{`INSERT INTO sessions (key, id, agent_id, kind, origin, transcript_path, created_at, updated_at)
					VALUES ('agent:main:slack:group:C42', 's1', 'main', 'main', $1, $2, $3, $3)`, []any{origin, tpath, ms}},
				{`INSERT INTO sessions (key, id, agent_id, kind, created_at, updated_at)
					VALUES ('agent:main:subagent:r1', 'c1', 'main', 'subagent', $1, $1)`, []any{ms}},
				{`INSERT INTO runs (id, child_key, child_session_id, requester_key, root_key, agent_id, task, status, outcome, result, origin, created_at)
					VALUES ('r1', 'agent:main:subagent:r1', 'c1', 'agent:main:slack:group:C42', 'agent:main:slack:group:C42', 'main', 'sum up', 'done', 'success', 'the summary', $1, $2)`, []any{origin, ms}},
				{`INSERT INTO outbox (run_id, origin, kind, text, created_at, next_attempt_at, dest)
					VALUES ('r1', $1, 'announce', 'the summary', $2, $2, 'slack|T1|C42|')`, []any{origin, ms}},
				{`INSERT INTO intake (session_key, agent_id, channel, platform_id, origin, text, created_at)
					VALUES ('agent:main:slack:group:C42', 'main', 'slack', 'm1', $1, 'hello', $2)`, []any{origin, ms}},
				{`INSERT INTO kv (key, value, updated_at) VALUES ('telegram:offset', '42', $1)`, []any{ms}},
				{`INSERT INTO spend (at, day, conversation, agent_id, model, run_id, usd, tokens_in, tokens_out)
					VALUES ($1, '2026-11-24', 'agent:main:slack:group:C42', 'main', 'anthropic/claude-haiku', 'r1', 0.25, 1000, 200)`, []any{ms}},
			} {
				if _, err := raw.ExecContext(ctx, q.sql, q.args...); err != nil {
					t.Fatalf("%s: %v", q.sql, err)
				}
			}
			header := `{"type":"session","version":1,"sessionKey":"agent:main:slack:group:C42","sessionId":"s1","agentId":"main","createdAt":"2026-11-24T09:30:00Z"}`
			line := `{"type":"message","role":"user","content":"hello","timestamp":"2026-11-24T09:30:00Z"}`
			if pg {
				if _, err := raw.ExecContext(ctx, `INSERT INTO transcript_lines (name, line, body) VALUES ($1, 1, $2), ($1, 2, $3)`, tpath, header, line); err != nil {
					t.Fatal(err)
				}
			} else {
				if err := os.MkdirAll(filepath.Dir(tpath), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(tpath, []byte(header+"\n"+line+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			raw.Close()

			var db *DB
			if pg {
				db, err = OpenPostgres(ctx, url, dir)
			} else {
				db, err = Open(ctx, dir)
			}
			if err != nil {
				t.Fatalf("open the %s database with the one tree: %v", cut.name, err)
			}
			defer db.Close()

			var v, compat int
			if err := db.w.QueryRow("SELECT version, compat FROM herald_version").Scan(&v, &compat); err != nil || v != SchemaVersion() {
				t.Fatalf("herald_version = %d (compat %d), %v; want %d", v, compat, err, SchemaVersion())
			}
			s, err := db.GetSession(ctx, "agent:main:slack:group:C42")
			if err != nil || s.ID != "s1" || s.Origin.ChatID != "C42" || !s.CreatedAt.Equal(at) {
				t.Errorf("session = %+v, %v", s, err)
			}
			r, err := db.GetRun(ctx, "r1")
			if err != nil || r.Result != "the summary" || r.Outcome != OutcomeSuccess || r.Origin.Channel != "slack" {
				t.Errorf("run = %+v, %v", r, err)
			}
			items, err := db.ListOutbox(ctx, true, 10)
			if err != nil || len(items) != 1 || items[0].Text != "the summary" || items[0].RunID != "r1" {
				t.Errorf("outbox = %+v, %v", items, err)
			}
			owed, err := db.OwedIntake(ctx)
			if err != nil || len(owed) != 1 || owed[0].Text != "hello" || string(owed[0].Origin.Channel) != "slack" {
				t.Errorf("owed = %+v, %v", owed, err)
			}
			if val, ok, err := db.GetKV(ctx, "telegram:offset"); err != nil || !ok || val != "42" {
				t.Errorf("kv = %q %v %v", val, ok, err)
			}
			tot, err := db.SpendTotals(ctx, "2026-11-01")
			if err != nil || len(tot) != 1 || tot[0].USD != 0.25 {
				t.Errorf("spend = %+v, %v", tot, err)
			}
			h, entries, err := db.ReadTranscript(ctx, s.TranscriptPath)
			if err != nil || h.SessionID != "s1" || len(entries) != 1 || entries[0].Content != "hello" {
				t.Errorf("transcript = %+v %+v, %v", h, entries, err)
			}
			// The upgraded database goes on working: new rows on top of old.
			if _, err := db.EnqueueOutbox(ctx, &OutboxItem{Origin: s.Origin, Kind: channels.KindReply, Text: "after"}); err != nil {
				t.Errorf("enqueue after upgrade: %v", err)
			}

			// Same schema as a database the one tree made from nothing.
			fresh := newTestDB(t)
			if got, want := columns(t, db.w, pg), columns(t, fresh.w, pg); !slices.Equal(got, want) {
				t.Errorf("upgraded schema differs from a new one:\nupgraded %v\nnew      %v", diff(got, want), diff(want, got))
			}
			// Same indexes and constraints: a unique index an upgrade forgot
			// (intake de-duplication, one announce per run) is a bug that
			// the columns do not show.
			got, want := indexes(t, db.w, pg), indexes(t, fresh.w, pg)
			if len(want) < 20 {
				t.Fatalf("a new database lists %d indexes and constraints: %v", len(want), want)
			}
			if !slices.Equal(got, want) {
				t.Errorf("upgraded indexes differ from a new database's:\nonly upgraded %q\nonly new      %q", diff(got, want), diff(want, got))
			}
			// schema_migrations still tells an older herald how far it is.
			legacyTop := SchemaVersion()
			if pg {
				legacyTop -= legacyPGOffset
			}
			var top int
			if err := db.w.QueryRow("SELECT MAX(version) FROM schema_migrations").Scan(&top); err != nil || top != legacyTop {
				t.Errorf("schema_migrations top = %d, %v; want %d", top, err, legacyTop)
			}
		})
	}
}

// diff lists what a has and b has not.
func diff(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// treeWith returns the embedded tree plus extra files.
func treeWith(t *testing.T, extra map[string]string) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	names, _ := fs.Glob(upgradeFiles, "upgrades/*.sql")
	for _, n := range names {
		b, _ := upgradeFiles.ReadFile(n)
		m[n] = &fstest.MapFile{Data: b}
	}
	for n, s := range extra {
		m[path.Join("upgrades", n)] = &fstest.MapFile{Data: []byte(s)}
	}
	return m
}

// A step runs once; a failing step rolls back its changes and its version.
func TestMigrateAppliesOnlyNewSteps(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	next := SchemaVersion() + 1
	table, err := loadUpgrades(treeWith(t, map[string]string{
		"99-extra.sql": fmt.Sprintf("-- v%d: extra\nCREATE TABLE extra (a INTEGER);\n", next),
	}), "upgrades")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // a step that fails when run twice proves it runs once
		if err := migrate(ctx, db.w, db.Path(), db.dialect, table); err != nil {
			t.Fatalf("migrate pass %d: %v", i+1, err)
		}
	}
	bad, err := loadUpgrades(treeWith(t, map[string]string{
		"99-extra.sql": fmt.Sprintf("-- v%d: extra\nCREATE TABLE extra (a INTEGER);\n", next),
		"99-bad.sql":   fmt.Sprintf("-- v%d: bad\nCREATE TABLE half (a INTEGER);\nSELECT * FROM no_such_table;\n", next+1),
	}), "upgrades")
	if err != nil {
		t.Fatal(err)
	}
	err = migrate(ctx, db.w, db.Path(), db.dialect, bad)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("v%d", next+1)) {
		t.Fatalf("migrate with a failing step: %v, want an error naming it", err)
	}
	var v int
	if err := db.w.QueryRow("SELECT version FROM herald_version").Scan(&v); err != nil || v != next {
		t.Errorf("version after the failed step = %d, %v; want %d", v, err, next)
	}
	if _, err := db.w.Exec("SELECT * FROM half"); err == nil {
		t.Error("failed step left table half")
	}
}

func TestLoadUpgrades(t *testing.T) {
	for _, tt := range []struct {
		name    string
		files   fstest.MapFS
		wantErr string
	}{
		{"gap", fstest.MapFS{
			"u/01.sql": {Data: []byte("-- v1: a\nSELECT 1;\n")},
			"u/03.sql": {Data: []byte("-- v3: c\nSELECT 1;\n")},
		}, "versions must be 1, 2, 3"},
		{"twice", fstest.MapFS{
			"u/01.sql": {Data: []byte("-- v1: a\nSELECT 1;\n")},
			"u/02.sql": {Data: []byte("-- v1: again\nSELECT 1;\n")},
		}, "override"},
		{"no header", fstest.MapFS{"u/01.sql": {Data: []byte("CREATE TABLE a (b INTEGER);\nSELECT 1;\n")}}, "header"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := loadUpgrades(tt.files, "u"); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
	// The embedded tree parses and has one step per file: Open trusts
	// newestVersion() (the file count) for a database already at the
	// newest version without parsing the tree (atNewest), so this is
	// where a malformed upgrade file is caught.
	if upgrades, err := upgradeTable(); err != nil || len(upgrades) < 19 || len(upgrades) != newestVersion() {
		t.Errorf("embedded tree: %d steps (%d files), %v", len(upgrades), newestVersion(), err)
	}
}

// Processes opening one new database at once (replicas on PostgreSQL; a
// CLI command while the gateway starts on SQLite) migrate one after the
// other: none fails on a step another already ran.
func TestMigrateConcurrentOpens(t *testing.T) {
	url, dir := "", t.TempDir()
	if onPostgres() {
		url = pgtest.URL(t)
	}
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			var db *DB
			var err error
			if url != "" {
				db, err = OpenPostgres(context.Background(), url, t.TempDir())
			} else {
				db, err = Open(context.Background(), dir)
			}
			if err == nil {
				err = db.Close()
			}
			errs <- err
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent open: %v", err)
		}
	}
}
