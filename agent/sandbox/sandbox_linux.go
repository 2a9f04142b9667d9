package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The helper's names (argv[0]) and where bwrap shows it inside the sandbox.
const (
	outerName        = "herald-sandbox"      // Landlock: subreaper that outlives the command and kills what it left
	innerName        = "herald-sandbox-exec" // limits (and Landlock), then execve of the command
	innerPathInBwrap = "/run/herald/" + innerName
)

// minLandlockABI is the oldest Landlock ABI Herald accepts: 6 (Linux 6.12)
// scopes signals and abstract Unix sockets to the sandbox, so a confined
// process cannot signal the gateway (kill -HUP) or talk to its sockets.
const minLandlockABI = 6

// What a confined process sees of the host, read-only: the system
// directories, and from /etc only what programs need to run, resolve names
// and check certificates (never all of /etc: it can hold secrets, such as
// /etc/ssl/private, /etc/shadow or the gateway's own config and env files).
var (
	systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}
	etcFiles   = []string{"/etc/resolv.conf", "/etc/hosts", "/etc/hostname", "/etc/host.conf", "/etc/gai.conf",
		"/etc/nsswitch.conf", "/etc/passwd", "/etc/group", "/etc/protocols", "/etc/services", "/etc/ld.so.cache",
		"/etc/ld.so.conf", "/etc/localtime", "/etc/timezone", "/etc/os-release", "/etc/debian_version",
		"/etc/mime.types", "/etc/ssl/openssl.cnf"}
	etcDirs = []string{"/etc/ld.so.conf.d", "/etc/alternatives", "/etc/ssl/certs", "/etc/pki/tls/certs",
		"/etc/pki/ca-trust/extracted"}
	devRead  = []string{"/dev/urandom", "/dev/random"}
	devWrite = []string{"/dev/null", "/dev/zero", "/dev/full"}
)

// helperSpec is what the helper is told (argv[1], JSON): no secrets, only
// paths, limits and the command.
type helperSpec struct {
	Mode         string   `json:"mode"` // bwrap | landlock
	Argv         []string `json:"argv"`
	Dir          string   `json:"dir"`
	Writable     []string `json:"writable,omitempty"` // Landlock: Dir and the private /tmp
	ReadOnly     []string `json:"readOnly,omitempty"`
	Network      bool     `json:"network,omitempty"`
	MemoryMB     int      `json:"memoryMB"`
	MaxProcesses int      `json:"maxProcesses"`
	FileSizeMB   int      `json:"fileSizeMB"`
	CPUSeconds   int      `json:"cpuSeconds"`
}

// bwrapPath is where the probe found bwrap; prlimitPath, util-linux's
// prlimit when it lies in a system directory (so bwrap shows it), else "".
var bwrapPath, prlimitPath string

// prlimitArgs are prlimit's options for the policy's limits, never above
// the hard limits this process has (the sandbox inherits them).
func prlimitArgs(hs helperSpec) []string {
	lim := func(opt string, res int, cur, hard uint64) string {
		var old unix.Rlimit
		if err := unix.Getrlimit(res, &old); err == nil {
			cur, hard = min(cur, old.Max), min(hard, old.Max)
		}
		return fmt.Sprintf("--%s=%d:%d", opt, cur, hard)
	}
	mb := func(n int) uint64 { return uint64(n) << 20 }
	a := []string{lim("core", unix.RLIMIT_CORE, 0, 0), lim("data", unix.RLIMIT_DATA, mb(hs.MemoryMB), mb(hs.MemoryMB)),
		lim("fsize", unix.RLIMIT_FSIZE, mb(hs.FileSizeMB), mb(hs.FileSizeMB))}
	if hs.CPUSeconds > 0 {
		a = append(a, lim("cpu", unix.RLIMIT_CPU, uint64(hs.CPUSeconds), uint64(hs.CPUSeconds)+1))
	}
	return append(a, lim("nproc", unix.RLIMIT_NPROC, uint64(hs.MaxProcesses), uint64(hs.MaxProcesses)))
}

func command(ctx context.Context, mech string, spec Spec) (*Cmd, error) {
	hs := helperSpec{Mode: mech, Argv: spec.Argv, Dir: spec.Dir, ReadOnly: spec.ReadOnly, Network: spec.Network,
		MemoryMB: spec.MemoryMB, MaxProcesses: spec.MaxProcesses, FileSizeMB: spec.FileSizeMB, CPUSeconds: spec.CPUSeconds}
	c := &Cmd{Mechanism: mech}
	switch mech {
	case Off:
		env := spec.Env
		if spec.Home != "" {
			env = setEnv(env, "HOME", spec.Home)
		}
		newCmd(ctx, c, "/bin/sh", withUmask(spec.Argv), env, spec.Dir)
	case Bwrap:
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("sandbox: find the herald binary for bwrap: %w", err)
		}
		env := setEnv(setEnv(spec.Env, "HOME", cmp.Or(spec.Home, "/tmp")), "TMPDIR", "/tmp")
		args := append([]string{"bwrap"}, bwrapArgs(spec, exe)...)
		if prlimitPath != "" {
			// util-linux's prlimit sets the limits (a C program starts in a
			// fraction of the herald binary's time); bwrap has set
			// no_new_privs and dropped the capabilities.
			args = append(append(append(args, "--", prlimitPath), prlimitArgs(hs)...), "--")
			args = append(args, withUmask(spec.Argv)...)
		} else {
			js, _ := json.Marshal(hs)
			args = append(args, "--", innerPathInBwrap, string(js))
		}
		newCmd(ctx, c, bwrapPath, args, env, spec.Dir)
	case Landlock:
		tmp, err := os.MkdirTemp("", "herald-sandbox-")
		if err != nil {
			return nil, fmt.Errorf("sandbox: private /tmp: %w", err)
		}
		c.tmp = tmp
		hs.Writable = []string{spec.Dir, tmp}
		if spec.Home != "" {
			hs.Writable = append(hs.Writable, spec.Home)
		}
		js, _ := json.Marshal(hs)
		env := setEnv(setEnv(spec.Env, "HOME", cmp.Or(spec.Home, tmp)), "TMPDIR", tmp)
		newCmd(ctx, c, "/proc/self/exe", []string{outerName, string(js)}, env, spec.Dir)
	default:
		return nil, fmt.Errorf("sandbox: unknown mechanism %q", mech)
	}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return c, nil
}

// withUmask is argv run with umask 077 (SPEC §17: what a command creates
// is 0600, folders 0700), where no herald helper runs before it to set it:
// a shell sets it and execs argv in its place (same process).
func withUmask(argv []string) []string {
	return append([]string{"/bin/sh", "-c", `umask 077 && exec "$@"`, "herald-sandbox"}, argv...)
}

func stop(c *Cmd) error {
	if c.Mechanism == Landlock {
		// The helper kills every descendant, then exits.
		return c.Process.Signal(syscall.SIGTERM)
	}
	err := syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	if err == syscall.ESRCH {
		return nil
	}
	return err
}

// bwrapArgs: new user, pid, ipc, uts, cgroup, mount (and, without network,
// net) namespaces; an empty root with the system directories and the /etc
// essentials read-only, a fresh /dev, /proc and /tmp, the workspace
// read-write, and the helper binary read-only.
func bwrapArgs(spec Spec, exe string) []string {
	a := []string{"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"}
	if !spec.Network {
		a = append(a, "--unshare-net")
	}
	a = append(a, "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "herald-sandbox")
	for _, d := range systemDirs {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if t, err := os.Readlink(d); err == nil {
				a = append(a, "--symlink", t, d)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", d, d)
		}
	}
	for _, p := range append(append([]string(nil), etcFiles...), etcDirs...) {
		a = append(a, "--ro-bind-try", p, p)
	}
	a = append(a, "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp")
	for _, p := range spec.ReadOnly {
		a = append(a, "--ro-bind-try", p, p)
	}
	if spec.Home != "" {
		a = append(a, "--bind", spec.Home, spec.Home)
	}
	return append(a, "--bind", spec.Dir, spec.Dir, "--ro-bind", exe, innerPathInBwrap, "--chdir", spec.Dir)
}

func probe() Report {
	return Report{Bwrap: probeBwrap(), Landlock: probeLandlock()}
}

func probeBwrap() Status {
	p, err := exec.LookPath("bwrap")
	if err != nil {
		if _, serr := os.Stat("/usr/bin/bwrap"); serr != nil {
			return Status{Detail: "bwrap is not installed (Debian: apt-get install bubblewrap)"}
		}
		p = "/usr/bin/bwrap"
	}
	bwrapPath = p
	for _, d := range []string{"/usr/bin", "/bin", "/usr/sbin", "/sbin"} {
		if st, err := os.Stat(d + "/prlimit"); err == nil && st.Mode()&0o111 != 0 {
			prlimitPath = d + "/prlimit"
			break
		}
	}
	if err := tryConfined(Bwrap); err != nil {
		return Status{Detail: fmt.Sprintf("%s cannot start a sandbox here: %v", p, err)}
	}
	return Status{OK: true, Detail: p + ": user, pid, ipc, uts, mount and net namespaces work"}
}

func probeLandlock() Status {
	abi := landlockABI()
	switch {
	case abi <= 0:
		return Status{Detail: fmt.Sprintf("the kernel (%s) has no Landlock enabled (Herald needs Landlock ABI %d, Linux 6.12 or later, with landlock in the lsm= boot list)", kernelRelease(), minLandlockABI)}
	case abi < minLandlockABI:
		return Status{Detail: fmt.Sprintf("the kernel (%s) has Landlock ABI %d; Herald needs ABI %d (Linux 6.12 or later) to keep a confined process from signalling the gateway", kernelRelease(), abi, minLandlockABI)}
	}
	if err := tryConfined(Landlock); err != nil {
		return Status{Detail: fmt.Sprintf("Landlock ABI %d, but a confined test command failed: %v", abi, err)}
	}
	return Status{OK: true, Detail: fmt.Sprintf("Landlock ABI %d with no_new_privs, a seccomp socket filter and resource limits (kernel %s); %s; %s",
		abi, kernelRelease(), unixSocketsNote(abi), netnsNote(canUnshareNet()))}
}

// unixSocketsNote says what keeps a Landlock-confined command from the
// host's Unix sockets.
func unixSocketsNote(abi int) string {
	if abi >= landlockUnixABI {
		return "Unix sockets outside the sandbox: refused by Landlock (pathname, ABI 9) and its scope (abstract)"
	}
	return fmt.Sprintf("Unix sockets: socket(AF_UNIX) refused by seccomp (Landlock ABI %d cannot restrict pathname sockets; ABI %d can)", abi, landlockUnixABI)
}

// netnsNote says how "no network" is enforced under Landlock.
func netnsNote(privileged bool) string {
	if privileged {
		return "no network: socket() refused by seccomp, and a network namespace of its own (the gateway has CAP_SYS_ADMIN)"
	}
	return "no network: socket() refused by seccomp (no network namespace of its own: that needs CAP_SYS_ADMIN, which the gateway lacks)"
}

// tryConfined runs a small command the way mech would confine an exec call.
func tryConfined(mech string) error {
	dir, err := os.MkdirTemp("", "herald-sandbox-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := command(ctx, mech, Spec{Policy: Policy{}.withDefaults(), Dir: dir, Env: []string{"PATH=/usr/bin:/bin"},
		Argv: []string{"/bin/sh", "-c", "echo ok >probe && cat probe"}})
	if err != nil {
		return err
	}
	defer c.Cleanup()
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err = c.Run()
	got := strings.TrimSpace(out.String())
	if err != nil || got != "ok" {
		if len(got) > 300 {
			got = got[:300] + "…"
		}
		if got == "" {
			got = "(no output)"
		}
		return fmt.Errorf("%v: %s", errText(err), got)
	}
	return nil
}

func errText(err error) string {
	if err == nil {
		return "wrong output"
	}
	return err.Error()
}

func landlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return "unknown"
	}
	return "Linux " + unix.ByteSliceToString(u.Release[:])
}
