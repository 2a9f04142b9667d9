package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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
	if fi, err := os.Stat(db.Path()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("database file: %v, %v; want mode 600", fi.Mode(), err)
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
	sqliteOnly(t)
	db := newTestDB(t)
	tests := []struct{ agent, session, want string }{
		{"main", "0b5e", "transcripts/main/0b5e.jsonl"},
		{"../etc", "x", "transcripts/.._etc/x.jsonl"},
		{"main", "..", "transcripts/main/_...jsonl"},
		{`a\b`, "s\x00/1", "transcripts/a_b/s__1.jsonl"},
		{"", ".", "transcripts/_/_..jsonl"},
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

func TestOpenNewerSchema(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.w.Exec("UPDATE herald_version SET version = 999, compat = 999"); err != nil {
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
		{"quick_check finds a NULL in a NOT NULL column", func(t *testing.T, path string) {
			db, err := Open(ctx, filepath.Dir(path))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for _, q := range []string{
				"CREATE TABLE t (a TEXT)",
				"INSERT INTO t VALUES (NULL)",
				"PRAGMA writable_schema = ON",
				"UPDATE sqlite_schema SET sql = 'CREATE TABLE t (a TEXT NOT NULL)' WHERE name = 't'",
				"PRAGMA writable_schema = OFF",
			} {
				if _, err := db.w.Exec(q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
		}},
		{"intact schema, scribbled table pages", func(t *testing.T, path string) {
			db, err := Open(ctx, filepath.Dir(path))
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 200; i++ {
				r, child := newRun(fmt.Sprintf("run-%03d", i))
				r.Task = strings.Repeat("long task text ", 40)
				if err := db.CreateRun(ctx, r, child); err != nil {
					t.Fatal(err)
				}
			}
			db.Close()
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// Page 1 (schema) stays; the second half of the file is scribbled.
			for i := len(b) / 2; i < len(b); i++ {
				b[i] = byte(i*13 + 5)
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

// TestConcurrentFirstUse runs every kind of write from many goroutines on a
// fresh database, so statements are first prepared while transactions hold
// the writer connection. A deadlock shows as context deadline errors.
func TestConcurrentFirstUse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := newTestDB(t)
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				id := fmt.Sprintf("g%d-%d", g, i)
				r, child := newRun(id)
				steps := []func() error{
					func() error { return db.CreateRun(ctx, r, child) },
					func() error { return db.StartRun(ctx, id, t0) },
					func() error {
						finishedRun(r)
						return db.FinishRun(ctx, r, &OutboxItem{Text: id})
					},
					func() error { return db.AddSessionUsage(ctx, r.ChildKey, 1, 1) },
					func() error {
						return db.CreateApproval(ctx, &Approval{Code: id, SessionKey: r.RequesterKey, Tool: "exec", Origin: slackOrigin, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)})
					},
					func() error {
						_, err := db.ResolveApproval(ctx, id, ApprovalApproved, "U", t0)
						return err
					},
					func() error {
						_, err := db.AppendWeb(ctx, "c", &WebMessage{Role: "user", Text: id, RunID: id})
						return err
					},
					func() error { return db.MarkArchived(ctx, id, t0) },
					func() error {
						_, err := db.ListRuns(ctx, RunFilter{RootKey: r.RootKey, Limit: 5})
						return err
					},
				}
				for n, step := range steps {
					if err := step(); err != nil {
						t.Errorf("%s step %d: %v", id, n, err)
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
	if n, err := db.CountSpawns(ctx, "agent:main:slack:group:C42"); err != nil || n != 120 {
		t.Errorf("CountSpawns = %d, %v; want 120", n, err)
	}
	msgs, err := db.WebAfter(ctx, "c", 0, 0)
	if err != nil || len(msgs) != 120 || msgs[119].Seq != 120 {
		t.Errorf("web messages = %d, %v; want seq 1..120", len(msgs), err)
	}
}

// TestCheckReadsTheDatabase: Check (what /readyz asks) answers on an open
// store and fails once the store cannot be read: closed, or (SQLite) its
// file overwritten with something that is not a database.
func TestCheckReadsTheDatabase(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	if err := db.Check(ctx); err != nil {
		t.Fatalf("Check on an open store: %v", err)
	}
	if !onPostgres() {
		dir := t.TempDir()
		other, err := Open(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		if err := other.Check(ctx); err != nil {
			t.Fatalf("Check: %v", err)
		}
		junk := make([]byte, 8192)
		for i := range junk {
			junk[i] = 'x'
		}
		for _, p := range []string{other.Path(), other.Path() + "-wal", other.Path() + "-shm"} {
			if err := os.WriteFile(p, junk, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := other.Check(ctx); err == nil {
			t.Error("Check on a file that is no longer a database: no error")
		}
	}
	closed := newTestDB(t)
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	if err := closed.Check(ctx); err == nil {
		t.Error("Check on a closed store: no error")
	}
}
