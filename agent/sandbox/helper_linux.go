package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/sys/unix"
)

// init runs the helper when this binary was started as one. The helper is a
// program of its own that shares the binary (like a re-exec in container
// runtimes): it ends the process itself and never returns to main.
func init() {
	if len(os.Args) != 2 || !strings.HasPrefix(os.Args[1], "{") {
		return
	}
	switch filepath.Base(os.Args[0]) {
	case outerName:
		os.Exit(outerMain(os.Args[1]))
	case innerName:
		os.Exit(innerMain(os.Args[1]))
	}
}

// Exit codes of the helper itself (as sh and env use them).
const (
	exitHelperFailed = 125 // the sandbox could not be set up; nothing ran
	exitNotFound     = 127
)

func helperFail(code int, format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "herald sandbox: "+format+"\n", args...)
	return code
}

func decodeSpec(arg string) (helperSpec, error) {
	var hs helperSpec
	if err := json.Unmarshal([]byte(arg), &hs); err != nil {
		return hs, fmt.Errorf("bad helper spec: %w", err)
	}
	if len(hs.Argv) == 0 || hs.Dir == "" {
		return hs, errors.New("bad helper spec: no command or directory")
	}
	return hs, nil
}

// outerMain is the Landlock helper's parent half: a child subreaper that
// starts the confined half, waits for it, and then kills every process it
// left behind (setsid, nohup and & included: orphans are re-parented to the
// subreaper, not to init). SIGTERM (exec's timeout, the gateway stopping)
// and the gateway's death do the same at once.
func outerMain(arg string) int {
	hs, err := decodeSpec(arg)
	if err != nil {
		return helperFail(exitHelperFailed, "%v", err)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return helperFail(exitHelperFailed, "become a subreaper: %v", err)
	}
	// Told to stop, or the gateway died (the death signal).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0, 0, 0); err != nil {
		return helperFail(exitHelperFailed, "set the death signal: %v", err)
	}
	if os.Getppid() == 1 { // the gateway died before the line above
		return helperFail(exitHelperFailed, "the gateway is gone")
	}
	children := make(chan os.Signal, 16)
	signal.Notify(children, syscall.SIGCHLD)

	// The confined half dies with this thread (its death signal).
	runtime.LockOSThread()
	inner := &exec.Cmd{Path: "/proc/self/exe", Args: []string{innerName, arg}, Dir: hs.Dir,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}}
	if err := inner.Start(); err != nil {
		return helperFail(exitHelperFailed, "start the confined process: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = inner.Wait(); close(done) }()
	code := 0
wait:
	for {
		select {
		case <-done:
			code = exitCode(inner.ProcessState)
			break wait
		case s := <-sigs:
			_ = inner.Process.Kill()
			<-done
			code = 128 + int(s.(syscall.Signal))
			break wait
		case <-children:
			reapOthers(inner.Process.Pid)
		}
	}
	killDescendants(5 * time.Second)
	return code
}

// exitCode is a shell's view of how a process ended.
func exitCode(st *os.ProcessState) int {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// reapOthers reaps exited orphans that were re-parented to the subreaper,
// leaving the confined half itself to its Wait.
func reapOthers(keep int) {
	for {
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
			return
		}
		pid := int(siginfoPid(&info))
		if pid == 0 || pid == keep {
			return
		}
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
}

// killDescendants kills and reaps every process below this one until none
// is left (or within passes; a process that escaped re-parenting would be
// beyond reach anyway).
func killDescendants(within time.Duration) {
	end := time.Now().Add(within)
	self := os.Getpid()
	for {
		for _, pid := range childrenOf(self) {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if errors.Is(err, unix.ECHILD) {
				return
			}
			if err != nil || pid <= 0 {
				break
			}
		}
		if time.Now().After(end) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	// Fast path: the kernel's list per thread (CONFIG_PROC_CHILDREN).
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if len(tasks) > 0 {
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(f); err == nil {
					out = append(out, n)
				}
			}
		}
		return out
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}

// innerMain is the half that becomes the command: resource limits and
// umask 077, and under Landlock also no capabilities, no_new_privs, the
// Landlock domain and the seccomp socket filter; then execve.
func innerMain(arg string) int {
	// Thread-scoped state (capabilities, the network namespace,
	// no_new_privs, the seccomp filter) must be set on the thread that
	// calls execve.
	runtime.LockOSThread()
	hs, err := decodeSpec(arg)
	if err != nil {
		return helperFail(exitHelperFailed, "%v", err)
	}
	if hs.Mode == Landlock {
		if err := dropCapabilities(); err != nil {
			return helperFail(exitHelperFailed, "drop capabilities: %v", err)
		}
		if !hs.Network && canUnshareNet() {
			// Defence in depth for a privileged gateway (CAP_SYS_ADMIN): a
			// network namespace of its own. Without the privilege there is
			// none (the probe says so: `herald doctor`, the start-up log);
			// the seccomp filter below is what keeps the network out.
			_ = unix.Unshare(unix.CLONE_NEWNET)
		}
		if err := restrictLandlock(hs); err != nil {
			return helperFail(exitHelperFailed, "landlock: %v", err)
		}
		// After no_new_privs (set by the Landlock step), before execve.
		if err := installSeccomp(hs.Network, landlockABI()); err != nil {
			return helperFail(exitHelperFailed, "seccomp socket filter: %v", err)
		}
	} else if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return helperFail(exitHelperFailed, "no_new_privs: %v", err)
	}
	// Files and folders the command creates are its own (SPEC §17: 0600 and
	// 0700), whatever the gateway's umask.
	unix.Umask(0o077)
	if err := os.Chdir(hs.Dir); err != nil {
		return helperFail(exitHelperFailed, "%v", err)
	}
	env := os.Environ()
	path := lookPath(hs.Argv[0], env)
	if err := setLimits(hs); err != nil {
		return helperFail(exitHelperFailed, "resource limits: %v", err)
	}
	err = unix.Exec(path, hs.Argv, env)
	return helperFail(exitNotFound, "run %s: %v", hs.Argv[0], err)
}

// setLimits applies the policy's limits (never above the current hard
// limit). The process limit comes last: it may stop this runtime from
// starting threads.
func setLimits(hs helperSpec) error {
	set := func(name string, res int, cur, hard uint64) error {
		var old unix.Rlimit
		if err := unix.Getrlimit(res, &old); err == nil {
			cur, hard = min(cur, old.Max), min(hard, old.Max)
		}
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: cur, Max: hard}); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	mb := func(n int) uint64 { return uint64(n) << 20 }
	if err := set("core", unix.RLIMIT_CORE, 0, 0); err != nil {
		return err
	}
	if err := set("memory (data)", unix.RLIMIT_DATA, mb(hs.MemoryMB), mb(hs.MemoryMB)); err != nil {
		return err
	}
	if err := set("file size", unix.RLIMIT_FSIZE, mb(hs.FileSizeMB), mb(hs.FileSizeMB)); err != nil {
		return err
	}
	if hs.CPUSeconds > 0 {
		// SIGXCPU at the soft limit, SIGKILL a second later.
		if err := set("cpu time", unix.RLIMIT_CPU, uint64(hs.CPUSeconds), uint64(hs.CPUSeconds)+1); err != nil {
			return err
		}
	}
	return set("processes", unix.RLIMIT_NPROC, uint64(hs.MaxProcesses), uint64(hs.MaxProcesses))
}

// canUnshareNet: this process may create a network namespace without a
// user namespace (CAP_SYS_ADMIN in its effective set: a root gateway).
func canUnshareNet() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[unix.CAP_SYS_ADMIN/32].Effective&(1<<(unix.CAP_SYS_ADMIN%32)) != 0
}

// dropCapabilities empties the bounding, ambient and inheritable sets, so a
// gateway running as root starts its commands without any capability.
func dropCapabilities() error {
	last := 40
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			last = n
		}
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			if errors.Is(err, unix.EPERM) {
				break // no CAP_SETPCAP: an unprivileged gateway, nothing to drop
			}
			return err
		}
	}
	_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	if data[0].Inheritable == 0 && data[1].Inheritable == 0 {
		return nil // nothing to clear (and capset may be filtered, as in the systemd unit)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	return unix.Capset(&hdr, &data[0])
}

// restrictLandlock confines this process (all its threads) and everything
// it starts: read-only system directories and /etc essentials, read-write
// Writable, nothing else; no TCP without network; no signals or abstract
// sockets to processes outside the sandbox. It sets no_new_privs.
func restrictLandlock(hs helperSpec) error {
	cfg := landlock.V11.BestEffort()
	if hs.Network {
		cfg = landlock.Config{HandledAccessFS: landlock.V11.HandledAccessFS, Scoped: landlock.V11.Scoped}.BestEffort()
	}
	rules := []landlock.Rule{
		landlock.RODirs(systemDirs...).IgnoreIfMissing(),
		landlock.RODirs(etcDirs...).IgnoreIfMissing(),
		landlock.ROFiles(etcFiles...).IgnoreIfMissing(),
		landlock.ROFiles(devRead...).IgnoreIfMissing(),
		landlock.RWFiles(devWrite...).IgnoreIfMissing(),
		landlock.RWDirs(hs.Writable...).WithRefer(),
	}
	for _, p := range hs.ReadOnly {
		st, err := os.Stat(p)
		switch {
		case err != nil:
		case st.IsDir():
			rules = append(rules, landlock.RODirs(p))
		default:
			rules = append(rules, landlock.ROFiles(p))
		}
	}
	return cfg.Restrict(rules...)
}

// siginfoPid is si_pid of a SIGCHLD siginfo (the union starts after three
// ints, aligned to a pointer).
func siginfoPid(info *unix.Siginfo) int32 {
	off := unsafe.Sizeof(uintptr(0)) * 2
	if unsafe.Sizeof(uintptr(0)) == 4 {
		off = 12
	}
	return *(*int32)(unsafe.Add(unsafe.Pointer(info), off))
}
