package sandbox

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run runs a shell command confined by mech in dir and returns its
// combined output and exit code.
func run(t *testing.T, mech string, p Policy, dir, command string) (string, int) {
	t.Helper()
	p.Mechanism = mech
	return runSpec(t, Spec{Policy: p, Dir: dir}, command)
}

// runSpec runs a shell command as spec says (its Env: a PATH).
func runSpec(t *testing.T, spec Spec, command string) (string, int) {
	t.Helper()
	mech := spec.Mechanism
	spec.Env, spec.Argv = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, []string{"/bin/sh", "-c", command}
	c, err := Command(context.Background(), spec)
	if err != nil {
		t.Fatalf("%s: %v", mech, err)
	}
	defer c.Cleanup()
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	_ = c.Wait()
	return out.String(), c.ProcessState.ExitCode()
}

// withoutPrlimit is bwrap with the limits set by the herald helper inside
// the sandbox, as on a host without util-linux's prlimit.
const withoutPrlimit = "bwrap-without-prlimit"

// mechanism returns the mechanism a name of working stands for, setting up
// (and, at the test's end, undoing) what it needs.
func mechanism(t *testing.T, name string) string {
	if name != withoutPrlimit {
		return name
	}
	saved := prlimitPath
	prlimitPath = ""
	t.Cleanup(func() { prlimitPath = saved })
	return Bwrap
}

// working lists the mechanisms that work here; a test runs under each.
func working(t *testing.T) []string {
	r := Probe()
	var out []string
	for _, m := range []struct {
		name string
		st   Status
	}{{Bwrap, r.Bwrap}, {Landlock, r.Landlock}} {
		if m.st.OK {
			out = append(out, m.name)
			if m.name == Bwrap && prlimitPath != "" {
				out = append(out, withoutPrlimit)
			}
		} else {
			t.Logf("%s does not work here: %s", m.name, m.st.Detail)
		}
	}
	if len(out) == 0 {
		t.Skip("no sandbox mechanism works here")
	}
	return out
}

// TestLimits: each limit stops a command that exceeds it, and the same
// command runs within a larger limit.
func TestLimits(t *testing.T) {
	tests := []struct {
		name      string
		tight     Policy
		command   string
		wantTight string // in the output under the tight limit
		wantCode  int    // exit code under the tight limit (0: any failure)
	}{
		{"file size", Policy{FileSizeMB: 1}, "head -c 2000000 /dev/zero > big; echo size=$(wc -c < big)", "size=1048576", 0},
		{"memory", Policy{MemoryMB: 64}, `perl -e '$x = "x" x (200*1024*1024); print "allocated\n"'`, "Out of memory", 0},
		{"cpu time", Policy{CPUSeconds: 1}, "while :; do :; done", "", 128 + 24},
	}
	for _, mech := range working(t) {
		for _, tt := range tests {
			t.Run(mech+"/"+tt.name, func(t *testing.T) {
				mech := mechanism(t, mech)
				out, code := run(t, mech, tt.tight, t.TempDir(), tt.command)
				if !strings.Contains(out, tt.wantTight) || code == 0 && tt.name != "file size" || tt.wantCode != 0 && code != tt.wantCode {
					t.Fatalf("under %+v: exit %d, output %q; want %q", tt.tight, code, out, tt.wantTight)
				}
				if tt.name == "cpu time" {
					return
				}
				out, code = run(t, mech, Policy{}, t.TempDir(), tt.command)
				if code != 0 || strings.Contains(out, tt.wantTight) {
					t.Fatalf("under the defaults: exit %d, output %q", code, out)
				}
			})
		}
	}
}

// TestProcessLimit: a fork bomb stops at maxProcesses. The kernel never
// applies RLIMIT_NPROC to root (uid 0 outside any user namespace), so the
// test needs an unprivileged run.
func TestProcessLimit(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("RLIMIT_NPROC does not apply to root: run the tests as another user to check maxProcesses")
	}
	for _, mech := range working(t) {
		t.Run(mech, func(t *testing.T) {
			mech := mechanism(t, mech)
			out, code := run(t, mech, Policy{MaxProcesses: 8}, t.TempDir(), "for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do sleep 5 & done; wait")
			if code == 0 && !strings.Contains(out, "fork") {
				t.Fatalf("16 processes ran under maxProcesses 8: exit %d %q", code, out)
			}
		})
	}
}

// TestFileSystemView: the working directory is writable; the system
// directories are readable and not writable; a file beside the working
// directory is invisible; $HOME and $TMPDIR are a private /tmp.
func TestFileSystemView(t *testing.T) {
	for _, mech := range working(t) {
		t.Run(mech, func(t *testing.T) {
			mech := mechanism(t, mech)
			parent := t.TempDir()
			dir := filepath.Join(parent, "ws")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(parent, "secret"), []byte("s3cret"), 0o600); err != nil {
				t.Fatal(err)
			}
			out, code := run(t, mech, Policy{}, dir, `echo hi > f && cat f; cat ../secret; cat /etc/shadow; touch /usr/x; `+
				`echo tmp > "$TMPDIR/t" && cat "$TMPDIR/t"; [ "$HOME" = "$TMPDIR" ] && echo home-is-tmp; ls /etc/ssl/private; true`)
			for _, want := range []string{"hi\n", "tmp\n", "home-is-tmp\n"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q: %s", want, out)
				}
			}
			if strings.Contains(out, "s3cret") || strings.Contains(out, "root:") || code != 0 {
				t.Errorf("exit %d, output %s", code, out)
			}
			if _, err := os.Stat("/usr/x"); err == nil {
				os.Remove("/usr/x")
				t.Errorf("wrote /usr/x")
			}
		})
	}
}

// TestHomeOutlivesProcess: with Spec.Home the process's HOME is that
// folder, which it may write and which keeps what it wrote for the next
// process (an ACP agent's sessions); a folder next to it stays unreadable.
func TestHomeOutlivesProcess(t *testing.T) {
	for _, mech := range working(t) {
		t.Run(mech, func(t *testing.T) {
			mech := mechanism(t, mech)
			parent := t.TempDir()
			dir, home := filepath.Join(parent, "ws"), filepath.Join(parent, "home")
			for _, d := range []string{dir, home} {
				if err := os.Mkdir(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(parent, "secret"), []byte("s3cret"), 0o600); err != nil {
				t.Fatal(err)
			}
			runIn := func(command string) string {
				out, _ := runSpec(t, Spec{Policy: Policy{Mechanism: mech}, Dir: dir, Home: home}, command)
				return out
			}
			out := runIn(`[ "$HOME" = "` + home + `" ] && echo home-set; mkdir -p "$HOME/.agent" && echo kept > "$HOME/.agent/session" && echo wrote; cat ../secret`)
			if !strings.Contains(out, "home-set\n") || !strings.Contains(out, "wrote\n") || strings.Contains(out, "s3cret") {
				t.Fatalf("first process: %s", out)
			}
			if out := runIn(`cat "$HOME/.agent/session"`); out != "kept\n" {
				t.Errorf("the next process read %q from its HOME, want what the first wrote", out)
			}
		})
	}
}

// TestRelativeDir: a working directory given relative to the gateway's
// (a relative --state-dir) works under every mechanism.
func TestRelativeDir(t *testing.T) {
	for _, mech := range working(t) {
		t.Run(mech, func(t *testing.T) {
			mech := mechanism(t, mech)
			base := t.TempDir()
			if err := os.MkdirAll(filepath.Join(base, "state", "ws"), 0o700); err != nil {
				t.Fatal(err)
			}
			t.Chdir(base)
			out, code := run(t, mech, Policy{}, filepath.Join("state", "ws"), "echo hi > f && cat f && basename $(pwd)")
			if code != 0 || out != "hi\nws\n" {
				t.Fatalf("exit %d, output %q", code, out)
			}
		})
	}
}
