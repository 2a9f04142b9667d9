package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Mechanisms (the values of tools.exec.sandbox).
const (
	Auto     = "auto"     // bwrap when it works here, else Landlock, else refuse
	Bwrap    = "bwrap"    // bubblewrap: namespaces and a minimal file system view
	Landlock = "landlock" // Landlock, no_new_privs and limits in a re-executed helper
	Off      = "off"      // unconfined
)

// Mechanisms lists the valid values of a Policy's Mechanism.
var Mechanisms = []string{Auto, Bwrap, Landlock, Off}

// Defaults of a Policy's limits.
const (
	DefaultMemoryMB     = 1024 // data segment (heap) of each process
	DefaultMaxProcesses = 256  // processes and threads of the sandbox's user
	DefaultFileSizeMB   = 1024 // largest file a process may write
	DefaultCPUSeconds   = 300  // CPU time of each process
)

// Policy is how confined processes run; zero fields take the defaults.
type Policy struct {
	Mechanism    string // auto (default) | bwrap | landlock | off
	Network      bool   // false: no network at all (bwrap: a private network namespace; Landlock: no socket(), seccomp)
	MemoryMB     int    // RLIMIT_DATA of each process
	MaxProcesses int    // RLIMIT_NPROC
	FileSizeMB   int    // RLIMIT_FSIZE
	CPUSeconds   int    // RLIMIT_CPU of each process; < 0: no CPU limit (long-running MCP servers)
	// Setting is the config key that chose the mechanism, named when a
	// confined process cannot be started (default tools.exec.sandbox).
	Setting string
}

// Confining returns p for a process that must always run confined (an
// ACP agent, its terminals, a stdio MCP server): "off", which unconfines
// only exec commands, and an unset mechanism both become auto.
func (p Policy) Confining() Policy {
	if p.Mechanism == "" || p.Mechanism == Off {
		p.Mechanism = Auto
	}
	return p
}

func (p Policy) withDefaults() Policy {
	if p.Mechanism == "" {
		p.Mechanism = Auto
	}
	if p.MemoryMB <= 0 {
		p.MemoryMB = DefaultMemoryMB
	}
	if p.MaxProcesses <= 0 {
		p.MaxProcesses = DefaultMaxProcesses
	}
	if p.FileSizeMB <= 0 {
		p.FileSizeMB = DefaultFileSizeMB
	}
	if p.CPUSeconds == 0 {
		p.CPUSeconds = DefaultCPUSeconds
	}
	if p.Setting == "" {
		p.Setting = "tools.exec.sandbox"
	}
	return p
}

// Spec is one process to confine.
type Spec struct {
	Policy
	// Dir is the working directory, the one place the process may write
	// besides a private /tmp (the workspace).
	Dir string
	// ReadOnly are further paths the process may read (for instance an MCP
	// server's program outside the system directories).
	ReadOnly []string
	// Home, if set, is a folder the process may write that outlives it,
	// made its HOME (an ACP agent keeps its sessions there, so it can load
	// one after a restart). It must exist.
	Home string
	// Env is the process's whole environment: it must already be scrubbed of
	// secrets. HOME (unless Home is set) and TMPDIR are set to the private
	// /tmp.
	Env []string
	// Argv is the program and its arguments; a program without a slash is
	// looked up in Env's PATH.
	Argv []string
}

// Errors.
var (
	// ErrUnavailable is wrapped when no mechanism the policy allows works
	// on this host.
	ErrUnavailable = errors.New("no sandbox works on this host")
)

// Status is what the probe found out about one mechanism on this host.
type Status struct {
	OK     bool
	Detail string // what works, or why it does not
}

// Report is the probe's finding for every mechanism.
type Report struct {
	Bwrap, Landlock Status
}

// Pick returns the mechanism a policy asking for mech uses here, or an error
// naming setting and saying why none is usable.
func (r Report) Pick(mech, setting string) (string, error) {
	switch mech {
	case Off:
		return Off, nil
	case Bwrap:
		if r.Bwrap.OK {
			return Bwrap, nil
		}
		return "", fmt.Errorf("%w: %s is %q but bubblewrap does not work here (%s); install Debian's bubblewrap package, allow user namespaces, or set %s to \"auto\" or \"landlock\"",
			ErrUnavailable, setting, mech, r.Bwrap.Detail, setting)
	case Landlock:
		if r.Landlock.OK {
			return Landlock, nil
		}
		return "", fmt.Errorf("%w: %s is %q but Landlock does not work here (%s); set %s to \"auto\" or \"bwrap\"",
			ErrUnavailable, setting, mech, r.Landlock.Detail, setting)
	default:
		if r.Bwrap.OK {
			return Bwrap, nil
		}
		if r.Landlock.OK {
			return Landlock, nil
		}
		return "", fmt.Errorf("%w: %s is %q but neither bubblewrap (%s) nor Landlock (%s) works here; "+
			"install Debian's bubblewrap package (and allow user namespaces), or run `herald doctor`; "+
			"%s: \"off\" runs commands unconfined, with access to everything the gateway can reach",
			ErrUnavailable, setting, mech, r.Bwrap.Detail, r.Landlock.Detail, setting)
	}
}

var (
	probeOnce sync.Once
	probed    Report
	probeMu   sync.Mutex
	override  *Report
)

// Probe reports which mechanisms work on this host. The first call runs
// each one once (a confined `true`); later calls return that finding.
func Probe() Report {
	probeMu.Lock()
	o := override
	probeMu.Unlock()
	if o != nil {
		return *o
	}
	probeOnce.Do(func() { probed = probe() })
	return probed
}

// OverrideProbe makes Probe return r until the returned function is called
// (tests: a host where no mechanism works).
func OverrideProbe(r Report) (restore func()) {
	probeMu.Lock()
	defer probeMu.Unlock()
	prev := override
	override = &r
	return func() {
		probeMu.Lock()
		override = prev
		probeMu.Unlock()
	}
}

// Cmd is a confined process ready to start: the embedded exec.Cmd's
// Stdin, Stdout and Stderr may be set; Path, Args, Env, Dir and SysProcAttr
// belong to the sandbox.
type Cmd struct {
	*exec.Cmd
	Mechanism string // bwrap | landlock | off
	tmp       string // the private /tmp of a Landlock process, removed by Cleanup
}

// Command returns spec's process confined by the mechanism its policy picks
// here. Without a usable mechanism the error wraps ErrUnavailable and names
// the setting. When ctx ends, the process is stopped with everything it
// started (Stop). The caller starts it, waits for it, and calls Cleanup.
func Command(ctx context.Context, spec Spec) (*Cmd, error) {
	spec.Policy = spec.Policy.withDefaults()
	if len(spec.Argv) == 0 {
		return nil, errors.New("sandbox: no program to run")
	}
	if spec.Dir == "" {
		return nil, errors.New("sandbox: no working directory")
	}
	// Paths are bound and ruled by name from elsewhere (bwrap, the helper
	// in its working directory): make them absolute.
	abs := func(p string) (string, error) {
		a, err := filepath.Abs(p)
		if err != nil {
			return "", fmt.Errorf("sandbox: %s: %w", p, err)
		}
		return a, nil
	}
	var err error
	if spec.Dir, err = abs(spec.Dir); err != nil {
		return nil, err
	}
	ro := make([]string, 0, len(spec.ReadOnly))
	for _, p := range spec.ReadOnly {
		a, err := abs(p)
		if err != nil {
			return nil, err
		}
		ro = append(ro, a)
	}
	spec.ReadOnly = ro
	if spec.Home != "" {
		if spec.Home, err = abs(spec.Home); err != nil {
			return nil, err
		}
	}
	mech, err := Probe().Pick(spec.Mechanism, spec.Setting)
	if err != nil {
		return nil, err
	}
	return command(ctx, mech, spec)
}

// stopWait bounds how long Wait waits after Stop before it kills the
// process (and closes its pipes).
const stopWait = 3 * time.Second

func newCmd(ctx context.Context, c *Cmd, path string, argv, env []string, dir string) {
	c.Cmd = exec.CommandContext(ctx, path)
	c.Args, c.Env, c.Dir = argv, env, dir
	c.Cmd.Cancel = c.Stop
	c.WaitDelay = stopWait
}

// Stop asks the process to end with everything it started: a Landlock
// helper is told to clean up (it kills every descendant, then exits); the
// others are killed with their process group. Use it as exec.Cmd.Cancel.
func (c *Cmd) Stop() error {
	if c.Process == nil {
		return nil
	}
	return stop(c)
}

// Cleanup removes what Command created for the process (its private /tmp
// under Landlock). Call it after Wait.
func (c *Cmd) Cleanup() {
	if c.tmp != "" {
		_ = os.RemoveAll(c.tmp)
	}
}

// lookPath finds prog in the PATH of env, as the confined process would.
func lookPath(prog string, env []string) string {
	if strings.Contains(prog, "/") {
		return prog
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range strings.Split(path, ":") {
		if d == "" {
			continue
		}
		p := d + "/" + prog
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return prog
}

// setEnv returns env with k=v replacing any earlier value of k.
func setEnv(env []string, k, v string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, k+"=") {
			out = append(out, kv)
		}
	}
	return append(out, k+"="+v)
}
