package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// threadsProbeArg makes the test binary the threads probe:
// `<test binary> -herald-landlock-threads <file>` puts four goroutines on
// OS threads of their own, confines the process as the Landlock helper
// does (restrictLandlock), and then has each of those threads, the
// restricting one and a goroutine started afterwards read <file> (outside
// every rule) and report its no_new_privs flag: one line per thread,
// "tid=<n> read=<ok|refused> nnp=<0|1>".
const threadsProbeArg = "-herald-landlock-threads"

func init() {
	if len(os.Args) == 3 && os.Args[1] == threadsProbeArg {
		os.Exit(threadsProbe(os.Args[2]))
	}
}

func threadsProbe(outside string) int {
	runtime.LockOSThread()
	report := func() string {
		read := "ok"
		if _, err := os.ReadFile(outside); err != nil {
			read = "refused"
		}
		nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) // per thread
		if err != nil {
			nnp = -1
		}
		return fmt.Sprintf("tid=%d read=%s nnp=%d", unix.Gettid(), read, nnp)
	}
	const n = 4
	ready, start := make(chan struct{}), make(chan struct{})
	lines := make(chan string, n+2)
	for range n {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread stays this goroutine's
			ready <- struct{}{}
			<-start
			lines <- report()
		}()
	}
	for range n {
		<-ready
	}
	if err := restrictLandlock(helperSpec{}); err != nil {
		fmt.Fprintln(os.Stderr, "landlock:", err)
		return 1
	}
	close(start)
	lines <- report()
	go func() { lines <- report() }()
	for range n + 2 {
		fmt.Println(<-lines)
	}
	return 0
}

// TestLandlockConfinesEveryThread: the Landlock domain and no_new_privs
// that the helper sets apply to every thread of the process, not only the
// one that asked (go-landlock goes through libcap's psx: libpsx in a cgo
// build, syscall.AllThreadsSyscall in the static CGO_ENABLED=0 build that
// is shipped; scripts/test.sh runs this package both ways). A thread left
// out would read a file outside every rule.
func TestLandlockConfinesEveryThread(t *testing.T) {
	if !Probe().Landlock.OK {
		t.Skipf("Landlock does not work here: %s", Probe().Landlock.Detail)
	}
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(self, threadsProbeArg, outside).CombinedOutput()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	tids := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 || !strings.HasPrefix(f[0], "tid=") {
			t.Fatalf("probe line %q:\n%s", l, out)
		}
		tids[f[0]] = true
		if f[1] != "read=refused" || f[2] != "nnp=1" {
			t.Errorf("a thread is not confined: %s", l)
		}
	}
	t.Logf("Landlock ABI %d (from 8 go-landlock asks the kernel to sync the threads, below it goes through psx)", landlockABI())
	// The four locked goroutines and the restricting one hold five
	// distinct threads; the goroutine started afterwards may share one.
	if len(tids) < 5 {
		t.Errorf("the probe reported %d distinct threads, want at least 5:\n%s", len(tids), out)
	}
}
