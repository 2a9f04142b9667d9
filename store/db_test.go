package store

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

func TestOpenCreatesPrivateDirAndWAL(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "nested")
	db, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer db.Close()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("state dir mode = %o, want 700", perm)
	}
	if db.StateDir() != dir || db.Path() != filepath.Join(dir, "herald.db") {
		t.Errorf("StateDir, Path = %q, %q", db.StateDir(), db.Path())
	}
	checks := []struct{ pragma, want string }{
		{"journal_mode", "wal"},
		{"foreign_keys", "1"},
		{"synchronous", "1"}, // NORMAL
	}
	for _, c := range checks {
		var got string
		if err := db.w.QueryRow("PRAGMA " + c.pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("PRAGMA %s = %q, want %q", c.pragma, got, c.want)
		}
	}
	// The read pool must not write.
	if _, err := db.r.Exec("CREATE TABLE x (a)"); err == nil {
		t.Error("read pool accepted a write")
	}
}

func TestTranscriptPath(t *testing.T) {
	db := newTestDB(t)
	tests := []struct{ agent, session, want string }{
		{"main", "0b5e", "transcripts/main/0b5e.jsonl"},
		{"../etc", "x", "transcripts/.._etc/x.jsonl"},
		{"main", "..", "transcripts/main/_...jsonl"},
	}
	for _, tt := range tests {
		got := db.TranscriptPath(tt.agent, tt.session)
		if want := filepath.Join(db.StateDir(), tt.want); got != want {
			t.Errorf("TranscriptPath(%q, %q) = %q, want %q", tt.agent, tt.session, got, want)
		}
	}
}

func appliedMigrations(t *testing.T, db *DB) map[int]int64 {
	t.Helper()
	rows, err := db.r.Query("SELECT version, applied_at FROM schema_migrations")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[int]int64{}
	for rows.Next() {
		var v int
		var at int64
		if err := rows.Scan(&v, &at); err != nil {
			t.Fatal(err)
		}
		m[v] = at
	}
	return m
}

func TestReopenKeepsDataAndDoesNotRemigrate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	r, child := newRun("r1")
	if err := db.CreateRun(ctx, r, child); err != nil {
		t.Fatal(err)
	}
	before := appliedMigrations(t, db)
	if len(before) != SchemaVersion() || SchemaVersion() < 1 {
		t.Fatalf("applied %v, SchemaVersion %d", before, SchemaVersion())
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = Open(ctx, dir)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer db.Close()
	after := appliedMigrations(t, db)
	for v, at := range before {
		if after[v] != at {
			t.Errorf("migration %d applied_at changed %d → %d: re-run on reopen", v, at, after[v])
		}
	}
	if len(after) != len(before) {
		t.Errorf("migrations after reopen = %v, want %v", after, before)
	}
	if _, err := db.GetRun(ctx, "r1"); err != nil {
		t.Errorf("run lost on reopen: %v", err)
	}
}

func TestMigrateAppliesOnlyNewSteps(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	// A step that fails when run twice proves it runs once.
	steps := append(append([]migration{}, migrations...),
		migration{version: len(migrations) + 1, name: "extra", sql: "CREATE TABLE extra (a INTEGER);"})
	for i := 0; i < 2; i++ {
		if err := migrate(ctx, db.w, db.Path(), steps); err != nil {
			t.Fatalf("migrate pass %d: %v", i+1, err)
		}
	}
	if got := appliedMigrations(t, db); len(got) != len(steps) {
		t.Errorf("applied = %v, want %d versions", got, len(steps))
	}

	// A failing step rolls back both its schema change and its version row.
	bad := append(append([]migration{}, steps...), migration{version: len(steps) + 1, name: "bad",
		sql: "CREATE TABLE half (a INTEGER); SELECT * FROM no_such_table;"})
	err := migrate(ctx, db.w, db.Path(), bad)
	if err == nil || !strings.Contains(err.Error(), "bad") {
		t.Fatalf("migrate with a failing step: %v, want an error naming it", err)
	}
	if got := appliedMigrations(t, db); len(got) != len(steps) {
		t.Errorf("failed step recorded: %v", got)
	}
	var n int
	if err := db.w.QueryRow("SELECT COUNT(*) FROM sqlite_master WHERE name = 'half'").Scan(&n); err != nil || n != 0 {
		t.Errorf("failed step left table half (n=%d, err=%v)", n, err)
	}
}

func TestLoadMigrations(t *testing.T) {
	tests := []struct {
		name    string
		files   fstest.MapFS
		want    []int
		wantErr string
	}{
		{"ordered", fstest.MapFS{
			"migrations/0002_b.sql": {Data: []byte("B")},
			"migrations/0001_a.sql": {Data: []byte("A")},
		}, []int{1, 2}, ""},
		{"gap", fstest.MapFS{
			"migrations/0001_a.sql": {Data: []byte("A")},
			"migrations/0003_c.sql": {Data: []byte("C")},
		}, nil, "expected version 2"},
		{"bad name", fstest.MapFS{"migrations/init.sql": {Data: []byte("A")}}, nil, "NNNN_description"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := loadMigrations(tt.files)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, m := range ms {
				got = append(got, m.version)
			}
			if len(got) != len(tt.want) || got[0] != tt.want[0] || got[1] != tt.want[1] {
				t.Errorf("versions = %v, want %v", got, tt.want)
			}
		})
	}
	// The embedded set itself is valid.
	if len(migrations) == 0 || migrations[0].version != 1 {
		t.Errorf("embedded migrations invalid: %+v", migrations)
	}
}

func TestOpenNewerSchema(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.w.Exec("INSERT INTO schema_migrations (version, applied_at) VALUES (999, 0)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = Open(ctx, dir)
	if !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("Open = %v, want ErrSchemaTooNew", err)
	}
	if !strings.Contains(err.Error(), "999") || !strings.Contains(err.Error(), filepath.Join(dir, "herald.db")) {
		t.Errorf("error %q should name the file and the version", err)
	}
}

func TestOpenCorrupt(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		setup func(t *testing.T, path string)
	}{
		{"garbage", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte(strings.Repeat("this is not a database\n", 200)), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"short garbage", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("oops"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"sqlite header, garbage pages", func(t *testing.T, path string) {
			db, err := Open(ctx, filepath.Dir(path))
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 50; i++ {
				r, child := newRun("corrupt-" + string(rune('a'+i%26)) + strings.Repeat("x", i))
				if err := db.CreateRun(ctx, r, child); err != nil {
					t.Fatal(err)
				}
			}
			db.Close()
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) < 3*4096 {
				t.Fatalf("database only %d bytes", len(b))
			}
			// Keep the 100-byte header, scribble over the rest of page 1
			// and all later pages.
			for i := 100; i < len(b); i++ {
				b[i] = byte(i*7 + 3)
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "herald.db")
			tt.setup(t, path)
			db, err := Open(ctx, dir)
			if err == nil {
				db.Close()
				t.Fatal("Open succeeded on a corrupt file")
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open = %v, want ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "move the file away") {
				t.Errorf("error %q should name %s and say to move it away", err, path)
			}
		})
	}
}

func TestOpenReadOnly(t *testing.T) {
	ctx := context.Background()
	t.Run("state dir under a regular file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(file, "state")
		_, err := Open(ctx, dir)
		if !errors.Is(err, ErrReadOnly) {
			t.Fatalf("Open = %v, want ErrReadOnly", err)
		}
		if !strings.Contains(err.Error(), dir) {
			t.Errorf("error %q should name %s", err, dir)
		}
	})
	t.Run("state dir is a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(ctx, file); !errors.Is(err, ErrReadOnly) {
			t.Fatalf("Open = %v, want ErrReadOnly", err)
		}
	})
	t.Run("chmod 0500 dir", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("running as root: chmod does not stop root writing; covered by the regular-file cases")
		}
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o700) })
		_, err := Open(ctx, dir)
		if !errors.Is(err, ErrReadOnly) || !strings.Contains(err.Error(), dir) {
			t.Fatalf("Open = %v, want ErrReadOnly naming %s", err, dir)
		}
	})
	t.Run("chmod 0400 database", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("running as root: chmod does not stop root writing")
		}
		dir := t.TempDir()
		db, err := Open(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		path := filepath.Join(dir, "herald.db")
		if err := os.Chmod(path, 0o400); err != nil {
			t.Fatal(err)
		}
		_, err = Open(ctx, dir)
		if !errors.Is(err, ErrReadOnly) || !strings.Contains(err.Error(), path) {
			t.Fatalf("Open = %v, want ErrReadOnly naming %s", err, path)
		}
	})
}

func TestOpenEmptyDirAndEmptyFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "herald.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := Open(ctx, dir)
	if err != nil {
		t.Fatalf("Open on an empty file: %v", err)
	}
	defer db.Close()
	var n int
	if err := db.r.QueryRow("SELECT COUNT(*) FROM runs").Scan(&n); err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("schema missing: %v", err)
	}
	if _, err := Open(ctx, ""); err == nil {
		t.Error("Open with an empty state dir succeeded")
	}
}
