package tools

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/sandbox"
)

// ExecName is the exec tool's name.
const ExecName = "exec"

// Defaults of the exec tool.
const (
	DefaultExecTimeout   = 60 * time.Second
	DefaultExecMaxOutput = 64 << 10
)

// drainWait bounds how long exec waits for output after the shell exited and
// its process group was killed (a process that left the group may still hold
// the pipe).
const drainWait = 2 * time.Second

// execEnvPassthrough are the variables of Herald's own environment a command
// sees. Everything else (API keys, tokens) stays out of reach of the model.
var execEnvPassthrough = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"}

type execTool struct {
	sandbox sandbox.Policy
	timeout time.Duration
	max     int
	env     []string
	log     *zap.Logger
}

var execFields = []field{
	{"command", "string", true, "shell command, run with sh -c in the workspace directory"},
	{"timeoutSeconds", "integer", false, "stop the command after this many seconds (may only lower the configured limit)"},
}

// NewExec returns the exec tool.
func NewExec(opts Options) agent.Tool {
	o := opts.withDefaults()
	return &execTool{sandbox: o.Sandbox, timeout: o.ExecTimeout, max: o.ExecMaxOutput, env: o.ExecEnv, log: o.Logger.Named("exec")}
}

func (t *execTool) Group() string { return agent.GroupExec }

func (t *execTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: ExecName,
		Description: fmt.Sprintf("Run a shell command (sh -c) in your workspace directory and return its exit code "+
			"and combined stdout and stderr. The command is killed, with everything it started, after %d seconds "+
			"(timedOut is then true); background processes end when the command does. Output beyond %d bytes is "+
			"cut in the middle (truncated is then true). stdin is empty; the environment holds only PATH, HOME, "+
			"locale and similar basics.%s",
			int(t.timeout/time.Second), t.max, t.sandboxNote()),
		Schema: schema(execFields...),
	}
}

// sandboxNote tells the model what the sandbox allows.
func (t *execTool) sandboxNote() string {
	if t.sandbox.Mechanism == sandbox.Off {
		return ""
	}
	net := "no network access"
	if t.sandbox.Network {
		net = "network access"
	}
	return " It runs in a sandbox: the workspace is writable, the agent's shared files (the agent workspace " +
		"outside conversations/) and system directories are read-only, $TMPDIR is a private temporary directory, " +
		"nothing else of the host is visible, " + net + "."
}

type execResult struct {
	ExitCode  int    `json:"exitCode"`
	Output    string `json:"output"`
	TimedOut  bool   `json:"timedOut"`
	Truncated bool   `json:"truncated,omitempty"`
}

func (t *execTool) Call(ctx context.Context, cc agent.CallContext, raw json.RawMessage) (string, error) {
	a, err := decodeArgs(ExecName, raw, execFields...)
	if err != nil {
		return "", err
	}
	command, err := a.str("command")
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(command) == "" {
		return "", fmt.Errorf("%s: %w: command is empty; give a shell command such as \"ls -la\"", ExecName, ErrBadArguments)
	}
	secs, err := a.integer("timeoutSeconds", 0)
	if err != nil {
		return "", err
	}
	timeout := t.timeout
	if secs > 0 && time.Duration(secs)*time.Second < timeout {
		timeout = time.Duration(secs) * time.Second
	}
	if cc.Workspace == "" {
		return "", fmt.Errorf("%s: %w for agent %q", ExecName, ErrNoWorkspace, cc.AgentID)
	}
	if err := os.MkdirAll(cc.Workspace, 0o700); err != nil {
		return "", fmt.Errorf("%s: create workspace %s: %w", ExecName, cc.Workspace, err)
	}

	shared := append(sharedEntries(cc.AgentWorkspace, cc.Workspace), cc.ReadOnlyDirs...)
	res, err := t.run(ctx, cc.Workspace, shared, command, timeout)
	if err != nil {
		return "", err
	}
	return result(ExecName, res)
}

// maxSharedEntries bounds how many entries of the agent workspace a
// sandboxed command is shown.
const maxSharedEntries = 256

// sharedEntries are what a sandboxed command may read of the agent
// workspace besides its own conversation workspace: the agent's own files
// and folders (bootstrap files, files from before per-conversation
// workspaces), never the conversations folder (other conversations) and
// never a symbolic link (it could point anywhere on the host).
func sharedEntries(agentWS, dir string) []string {
	if agentWS == "" || filepath.Clean(agentWS) == filepath.Clean(dir) {
		return nil
	}
	ents, err := os.ReadDir(agentWS)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.Name() == ConversationsDir || e.Type()&(fs.ModeSymlink|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeDevice) != 0 {
			continue
		}
		if len(out) == maxSharedEntries {
			break
		}
		out = append(out, filepath.Join(agentWS, e.Name()))
	}
	return out
}

func (t *execTool) run(ctx context.Context, dir string, shared []string, command string, timeout time.Duration) (execResult, error) {
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	cmd, err := sandbox.Command(runCtx, sandbox.Spec{Policy: t.sandbox, Dir: dir, ReadOnly: shared, Env: t.environ(dir),
		Argv: []string{"/bin/sh", "-c", command}})
	if err != nil {
		return execResult{}, fmt.Errorf("%s: refused: %w", ExecName, err)
	}
	defer cmd.Cleanup()
	// The command writes into a pipe we own (an *os.File, so os/exec starts
	// no copy goroutine): Wait returns when the shell (or the sandbox's
	// helper) exits, after which the whole process group is killed and the
	// pipe drained. Inside a sandbox every process the command started has
	// ended by then, whatever session or group it moved to.
	pr, pw, err := os.Pipe()
	if err != nil {
		return execResult{}, fmt.Errorf("%s: create output pipe: %w", ExecName, err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw

	out := newCapBuffer(t.max)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		buf := make([]byte, 32<<10)
		for {
			n, err := pr.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()

	start := time.Now()
	startErr := cmd.Start()
	pw.Close()
	var waitErr error
	if startErr == nil {
		waitErr = cmd.Wait()
		// Leftover background processes (cmd &) die with the group.
		_ = killProcessGroup(cmd.Cmd)
	}
	select {
	case <-drained:
	case <-time.After(drainWait):
	}
	pr.Close()
	<-drained
	if startErr != nil {
		return execResult{}, fmt.Errorf("%s: start sh: %w", ExecName, startErr)
	}
	if cmd.ProcessState == nil { // Wait failed before the process ended
		return execResult{}, fmt.Errorf("%s: wait: %w", ExecName, waitErr)
	}

	res := execResult{ExitCode: cmd.ProcessState.ExitCode()}
	res.Output, res.Truncated = out.String()
	parentDone := ctx.Err() != nil
	res.TimedOut = errors.Is(runCtx.Err(), context.DeadlineExceeded) && !parentDone
	t.log.Debug("exec finished",
		zap.String("dir", dir),
		zap.String("sandbox", cmd.Mechanism),
		zap.Int("commandBytes", len(command)),
		zap.Int("exitCode", res.ExitCode),
		zap.Bool("timedOut", res.TimedOut),
		zap.Duration("took", time.Since(start)))
	if parentDone {
		return execResult{}, fmt.Errorf("%s: command stopped: %w", ExecName, ctx.Err())
	}
	if res.TimedOut {
		res.Output += fmt.Sprintf("\n[killed after %s timeout]", timeout)
	} else if note := t.limitNote(res); note != "" {
		res.Output += "\n" + note
	}
	var ee *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &ee) && runCtx.Err() == nil {
		return execResult{}, fmt.Errorf("%s: wait: %w", ExecName, waitErr)
	}
	return res, nil
}

// The signals of the CPU-time and file-size limits (the same number on
// Linux and the BSDs).
const sigXCPU, sigXFSZ = 24, 25

// limitNote names the sandbox limit a command likely ran into, so the
// model can tell a limit from a bug in its command.
func (t *execTool) limitNote(res execResult) string {
	if t.sandbox.Mechanism == sandbox.Off {
		return ""
	}
	p := t.sandbox
	out := res.Output
	switch {
	case res.ExitCode == 128+sigXCPU:
		return fmt.Sprintf("[stopped: CPU time limit reached (tools.exec.cpuSeconds = %d)]", cmp.Or(p.CPUSeconds, sandbox.DefaultCPUSeconds))
	case res.ExitCode == 128+sigXFSZ || strings.Contains(out, "File too large"):
		return fmt.Sprintf("[file size limit reached (tools.exec.fileSizeMB = %d)]", cmp.Or(p.FileSizeMB, sandbox.DefaultFileSizeMB))
	case res.ExitCode != 0 && (strings.Contains(out, "Cannot allocate memory") || strings.Contains(out, "out of memory") || strings.Contains(out, "MemoryError")):
		return fmt.Sprintf("[memory limit per process reached? (tools.exec.memoryMB = %d)]", cmp.Or(p.MemoryMB, sandbox.DefaultMemoryMB))
	case res.ExitCode != 0 && strings.Contains(out, "fork") && (strings.Contains(out, "Resource temporarily unavailable") || strings.Contains(out, "retry")):
		return fmt.Sprintf("[process limit reached? (tools.exec.maxProcesses = %d)]", cmp.Or(p.MaxProcesses, sandbox.DefaultMaxProcesses))
	}
	return ""
}

func (t *execTool) environ(dir string) []string {
	env := make([]string, 0, len(execEnvPassthrough)+len(t.env)+2)
	for _, k := range execEnvPassthrough {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	if _, ok := os.LookupEnv("PATH"); !ok {
		env = append(env, "PATH=/usr/local/bin:/usr/bin:/bin")
	}
	env = append(env, "PWD="+dir, "TERM=dumb")
	return append(env, t.env...)
}

// capBuffer keeps the first and last max/2 bytes written to it and counts
// the rest.
type capBuffer struct {
	mu    sync.Mutex
	max   int
	head  []byte
	tail  []byte // ring of up to max-max/2 bytes
	pos   int    // next write position in tail once it is full
	total int64
}

func newCapBuffer(max int) *capBuffer { return &capBuffer{max: max} }

func (b *capBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	b.total += int64(n)
	headMax := b.max / 2
	if room := headMax - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	tailMax := b.max - headMax
	if tailMax == 0 {
		return n, nil
	}
	if len(p) >= tailMax {
		b.tail = append(b.tail[:0], p[len(p)-tailMax:]...)
		b.pos = 0
		return n, nil
	}
	if room := tailMax - len(b.tail); room > 0 {
		k := min(room, len(p))
		b.tail = append(b.tail, p[:k]...)
		p = p[k:]
	}
	for len(p) > 0 { // the ring is full: overwrite the oldest bytes
		k := copy(b.tail[b.pos:], p)
		p = p[k:]
		b.pos = (b.pos + k) % tailMax
	}
	return n, nil
}

// String returns the kept output and whether some was dropped.
func (b *capBuffer) String() (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tail := append(append([]byte(nil), b.tail[b.pos:]...), b.tail[:b.pos]...)
	kept := int64(len(b.head) + len(tail))
	if kept == b.total {
		return string(b.head) + string(tail), false
	}
	return fmt.Sprintf("%s\n[output truncated: %d of %d bytes omitted here]\n%s",
		b.head, b.total-kept, b.total, tail), true
}
