// Package pgtest gives tests a real PostgreSQL server: a throwaway cluster
// started by scripts/postgres.sh (Debian's postgresql package, run as the
// postgres user when the tests run as root) in a temp dir on a loopback
// port, one per test binary, stopped when the binary ends. Each caller of
// URL gets a fresh, empty database on it.
//
// HERALD_TEST_POSTGRES_URL points the tests at a server of your own instead
// (databases are created on it). Where PostgreSQL is not installed the tests
// that need it are skipped, unless HERALD_REQUIRE_POSTGRES=1 (make test sets
// it after installing the package): then they fail.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/devtools/loopback"
)

var (
	once    sync.Once
	baseURL string // the server's postgres database
	dir     string // the cluster's folder; "" when not started here
	script  string
	err     error
	dbs     atomic.Int64
)

// Main runs the tests of m and stops the cluster if one was started; use it
// as TestMain's body: func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }.
func Main(m *testing.M) int {
	code := m.Run()
	Stop()
	return code
}

// Stop stops the cluster started by this process, if any.
func Stop() {
	if dir == "" {
		return
	}
	if out, err := exec.Command("bash", script, "stop", dir).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: stop: %v: %s\n", err, out)
	}
	os.RemoveAll(dir)
	dir = ""
}

// Available reports whether a server can be had (starting it if needed).
func Available() bool {
	once.Do(start)
	return err == nil
}

// URL returns the URL of a new, empty database. When no server can be had
// the test is skipped, or fails under HERALD_REQUIRE_POSTGRES=1.
func URL(tb testing.TB) string {
	tb.Helper()
	once.Do(start)
	if err != nil {
		if os.Getenv("HERALD_REQUIRE_POSTGRES") == "1" {
			tb.Fatalf("PostgreSQL is required (HERALD_REQUIRE_POSTGRES=1): %v", err)
		}
		tb.Skipf("PostgreSQL not available: %v", err)
	}
	name := fmt.Sprintf("herald_test_%d_%d", os.Getpid(), dbs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, cerr := pgx.Connect(ctx, baseURL)
	if cerr != nil {
		tb.Fatalf("pgtest: connect: %v", cerr)
	}
	defer conn.Close(ctx)
	if _, cerr := conn.Exec(ctx, "CREATE DATABASE "+name); cerr != nil {
		tb.Fatalf("pgtest: create database: %v", cerr)
	}
	u, _ := url.Parse(baseURL)
	u.Path = "/" + name
	return u.String()
}

func start() {
	if u := os.Getenv("HERALD_TEST_POSTGRES_URL"); u != "" {
		baseURL = u
		return
	}
	root, rerr := repoRoot()
	if rerr != nil {
		err = rerr
		return
	}
	script = filepath.Join(root, "scripts", "postgres.sh")
	if out, berr := exec.Command("bash", script, "bindir").CombinedOutput(); berr != nil {
		err = fmt.Errorf("%s (install it with scripts/postgres.sh install)", strings.TrimSpace(string(out)))
		return
	}
	d, derr := os.MkdirTemp("", "herald-pg-")
	if derr != nil {
		err = derr
		return
	}
	// The socket path must stay short and the folder reachable by the
	// postgres user: /tmp/herald-pg-N.
	os.Chmod(d, 0o755)
	for attempt := 0; attempt < 3; attempt++ {
		host, port, perr := loopback.HostPort()
		if perr != nil {
			err = perr
			break
		}
		out, serr := exec.Command("bash", script, "start", d, fmt.Sprint(port), host).Output()
		if serr == nil {
			dir, baseURL, err = d, strings.TrimSpace(string(out)), nil
			return
		}
		var ee *exec.ExitError
		if errors.As(serr, &ee) {
			serr = fmt.Errorf("%v: %s", serr, strings.TrimSpace(string(ee.Stderr)))
		}
		err = fmt.Errorf("start PostgreSQL: %w", serr)
	}
	os.RemoveAll(d)
}

// repoRoot is the folder holding go.mod, from the test's working dir up.
func repoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", errors.New("go.mod not found above the working dir")
		}
		d = up
	}
}

// Installed reports, without starting anything, whether a server can be
// had: HERALD_TEST_POSTGRES_URL is set or PostgreSQL's programs are found.
func Installed() bool {
	if os.Getenv("HERALD_TEST_POSTGRES_URL") != "" {
		return true
	}
	root, err := repoRoot()
	if err != nil {
		return false
	}
	return exec.Command("bash", filepath.Join(root, "scripts", "postgres.sh"), "bindir").Run() == nil
}

// Required reports whether HERALD_REQUIRE_POSTGRES=1 asks that tests fail
// rather than skip without PostgreSQL.
func Required() bool { return os.Getenv("HERALD_REQUIRE_POSTGRES") == "1" }

// Rerun runs the test binary again with env added (KEY=value) and its
// output passed through, and returns its exit code: how a package runs its
// whole suite a second time on PostgreSQL.
func Rerun(env ...string) int {
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "pgtest: rerun: %v\n", err)
		return 1
	}
	return 0
}

// StoreEnv, set to "postgres", tells a test binary that this run of its
// suite is the PostgreSQL one (RunBoth sets it for the second run).
const StoreEnv = "HERALD_TEST_STORE"

// OnPostgres reports whether this run of the suite is the PostgreSQL one.
func OnPostgres() bool { return os.Getenv(StoreEnv) == "postgres" }

// RunBoth is a TestMain body for a package whose tests are a contract both
// stores must keep: the tests run on SQLite, then the binary runs again
// with StoreEnv=postgres against a throwaway cluster (stopped after). A
// package's test helpers read OnPostgres to open the store. Without
// PostgreSQL the second run is skipped with a line saying so (a failure
// under HERALD_REQUIRE_POSTGRES=1).
func RunBoth(m *testing.M, pkg string) int {
	if OnPostgres() {
		return Main(m)
	}
	if code := m.Run(); code != 0 {
		return code
	}
	if !Installed() {
		fmt.Printf("%s: PostgreSQL is not installed; the suite ran on SQLite only (scripts/postgres.sh install)\n", pkg)
		if Required() {
			return 1
		}
		return 0
	}
	fmt.Printf("%s: the suite again, on PostgreSQL\n", pkg)
	return Rerun(StoreEnv + "=postgres")
}

// Server is a PostgreSQL cluster of one test's own (OwnServer), which the
// test may stop and start again — an outage — without disturbing the
// other tests' databases.
type Server struct {
	URL  string // its postgres database
	dir  string
	host string
	port int
	tb   testing.TB
}

// OwnServer starts a throwaway cluster for tb alone on a free loopback
// port (removed at cleanup). Where PostgreSQL is not installed the test is
// skipped, or fails under HERALD_REQUIRE_POSTGRES=1.
func OwnServer(tb testing.TB) *Server {
	tb.Helper()
	root, rerr := repoRoot()
	if rerr != nil {
		tb.Fatal(rerr)
	}
	sh := filepath.Join(root, "scripts", "postgres.sh")
	if out, berr := exec.Command("bash", sh, "bindir").CombinedOutput(); berr != nil {
		if Required() {
			tb.Fatalf("PostgreSQL is required (HERALD_REQUIRE_POSTGRES=1): %s", out)
		}
		tb.Skipf("PostgreSQL not available: %s", strings.TrimSpace(string(out)))
	}
	d, derr := os.MkdirTemp("", "herald-pg-")
	if derr != nil {
		tb.Fatal(derr)
	}
	os.Chmod(d, 0o755)
	// A loopback address of its own: initdb runs seconds between picking
	// the port and binding it, and Stop … Start leaves it unbound; no
	// other process takes a port of this address meanwhile.
	host, port, perr := loopback.HostPort()
	if perr != nil {
		tb.Fatal(perr)
	}
	s := &Server{dir: d, host: host, port: port, tb: tb}
	tb.Cleanup(func() {
		exec.Command("bash", sh, "stop", d).Run()
		os.RemoveAll(d)
	})
	s.URL = s.start(sh)
	return s
}

func (s *Server) start(sh string) string {
	s.tb.Helper()
	out, err := exec.Command("bash", sh, "start", s.dir, fmt.Sprint(s.port), s.host).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		s.tb.Fatalf("pgtest: start PostgreSQL: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// Stop stops the server (pg_ctl -m fast: every connection drops at once;
// what was committed is kept — the test clusters run with
// synchronous_commit off, which an immediate stop would turn into lost
// commits that a production server does not lose).
func (s *Server) Stop() {
	s.tb.Helper()
	root, _ := repoRoot()
	if out, err := exec.Command("bash", filepath.Join(root, "scripts", "postgres.sh"), "stop", s.dir, "fast").CombinedOutput(); err != nil {
		s.tb.Fatalf("pgtest: stop PostgreSQL: %v: %s", err, out)
	}
}

// Start starts the stopped server again on the same port and data.
func (s *Server) Start() {
	s.tb.Helper()
	root, _ := repoRoot()
	s.start(filepath.Join(root, "scripts", "postgres.sh"))
}
