package acp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	sdk "github.com/coder/acp-go-sdk"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent/sandbox"
)

// Errors.
var (
	// ErrCommand is wrapped when the agent's command cannot be found or
	// started.
	ErrCommand = errors.New("the ACP agent could not be started")
	// ErrHandshake is wrapped when the agent does not answer initialize
	// (or session/new, session/load) as the protocol says.
	ErrHandshake = errors.New("the ACP agent did not complete its handshake")
	// ErrExited is wrapped when the agent's process ended mid-run.
	ErrExited = errors.New("the ACP agent exited")
	// ErrLoad is wrapped when the agent does not load the session it was
	// asked to resume (session/load refused, unanswered, or the agent
	// exited): what it did before is out of its reach.
	ErrLoad = errors.New("the ACP agent could not load its session")
)

// HandshakeTimeout bounds initialize and session/new (or session/load).
var HandshakeTimeout = 30 * time.Second

// stopGrace is how long a cancelled prompt may take to answer
// "cancelled" before the process is ended anyway.
const stopGrace = 5 * time.Second

// Spec is one ACP agent process.
type Spec struct {
	Name      string   // the agent's id (for messages)
	Command   string   // its program; looked up in the gateway's PATH
	Args      []string // its arguments
	Env       []string // its whole environment (K=V); HOME is set inside the sandbox
	Network   bool     // the sandbox lets it reach the network
	ReadPaths []string // more folders it may read
	// Workspace is its working directory, the one folder it may write,
	// and the folder its file requests are confined to.
	Workspace string
	// Home, if set, is the agent's HOME: a folder of its own that outlives
	// its process, so the sessions it keeps there can be loaded by the
	// next process (a restart, /subagents send). Unset: a private /tmp.
	Home string
	// Sandbox is the mechanism and limits (tools.exec's).
	Sandbox sandbox.Policy
	Logger  *zap.Logger
}

// Resolve finds the agent's program in the gateway's PATH (or checks an
// absolute path) and returns its absolute path, or an error naming it.
func (s Spec) Resolve() (string, error) {
	p, err := exec.LookPath(s.Command)
	if err != nil {
		return "", fmt.Errorf("%w: command %q of agent %s: %v", ErrCommand, s.Command, s.Name, err)
	}
	return filepath.Abs(p)
}

// process is a started agent: its sandboxed command and the connection.
type process struct {
	cmd     *sandbox.Cmd
	conn    *sdk.ClientSideConnection
	stdin   io.WriteCloser
	stderr  *tail
	waited  chan struct{} // closed when Wait returned
	waitErr error
	stopped sync.Once
}

// start starts the agent in the sandbox and connects client to it. The
// process lives until stop (not ctx: a stop must be able to send
// session/cancel first).
func start(spec Spec, client sdk.Client, log *zap.Logger) (*process, error) {
	prog, err := spec.Resolve()
	if err != nil {
		return nil, err
	}
	ro := append([]string(nil), spec.ReadPaths...)
	ro = append(ro, filepath.Dir(prog))
	if real, err := filepath.EvalSymlinks(prog); err == nil && filepath.Dir(real) != filepath.Dir(prog) {
		// An npm bin is a link into its package folder.
		ro = append(ro, filepath.Dir(real), filepath.Dir(filepath.Dir(real)))
	}
	pol := spec.Sandbox.Confining()
	pol.Network, pol.CPUSeconds = spec.Network, -1
	pol.Setting = "tools.exec.sandbox (the sandbox of ACP agent " + spec.Name + ")"
	c, err := sandbox.Command(context.Background(), sandbox.Spec{Policy: pol, Dir: spec.Workspace, Home: spec.Home, ReadOnly: ro,
		Env: spec.Env, Argv: append([]string{prog}, spec.Args...)})
	if errors.Is(err, sandbox.ErrUnavailable) && pol.Mechanism == sandbox.Auto {
		// The sandbox's own message offers "off", which does not apply
		// to an ACP agent: say what does.
		r := sandbox.Probe()
		return nil, fmt.Errorf("%w: agent %s: %w: an ACP agent runs only in the sandbox (tools.exec.sandbox \"off\" does not unconfine it), "+
			"and neither bubblewrap (%s) nor Landlock (%s) works here; install Debian's bubblewrap package and allow user namespaces, "+
			"or run `herald doctor`", ErrCommand, spec.Name, sandbox.ErrUnavailable, r.Bwrap.Detail, r.Landlock.Detail)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCommand, err)
	}
	stdin, err := c.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCommand, err)
	}
	stdout, err := c.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCommand, err)
	}
	p := &process{cmd: c, stdin: stdin, stderr: &tail{log: log}, waited: make(chan struct{})}
	c.Stderr = p.stderr
	if err := c.Start(); err != nil {
		c.Cleanup()
		return nil, fmt.Errorf("%w: %s: %w", ErrCommand, spec.Command, err)
	}
	// The connection reads as soon as it is made, and its reader uses the
	// logger: nothing the agent writes is read before SetLogger.
	set := make(chan struct{})
	p.conn = sdk.NewClientSideConnection(client, stdin, gated{set, stdout})
	p.conn.SetLogger(protocolLogger(log, p.stderr))
	close(set)
	go func() {
		p.waitErr = c.Wait()
		c.Cleanup()
		close(p.waited)
	}()
	return p, nil
}

// exited describes how the process ended (with its last stderr lines), or
// "" while it runs.
func (p *process) exited() string {
	select {
	case <-p.waited:
	default:
		return ""
	}
	how := "exited"
	if p.waitErr != nil {
		how = p.waitErr.Error()
	}
	if t := p.stderr.String(); t != "" {
		how += "; its last output: " + t
	}
	return how
}

// stop ends the process and everything it started, and waits for it.
func (p *process) stop() {
	p.stopped.Do(func() {
		_ = p.stdin.Close()
		select {
		case <-p.waited:
			return
		case <-time.After(200 * time.Millisecond):
		}
		_ = p.cmd.Stop()
		<-p.waited // WaitDelay bounds it
	})
}

// tail keeps the last lines a process wrote to stderr (for Notes) and logs
// them.
type tail struct {
	log   *zap.Logger
	mu    sync.Mutex
	lines []string
	part  string
	proto string // the last protocol error the connection logged
}

const tailLines = 5

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.part + string(b)
	parts := strings.Split(s, "\n")
	t.part = parts[len(parts)-1]
	if len(t.part) > 4096 {
		t.part = t.part[:4096]
	}
	for _, l := range parts[:len(parts)-1] {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		t.log.Debug("acp agent stderr", zap.String("line", l))
		if len(l) > 300 {
			l = l[:300] + "…"
		}
		t.lines = append(t.lines, l)
		if len(t.lines) > tailLines {
			t.lines = t.lines[1:]
		}
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, " | ")
}

func (t *tail) setProto(s string) {
	t.mu.Lock()
	t.proto = s
	t.mu.Unlock()
}

func (t *tail) protoErr() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.proto
}

// gated reads r once set is closed.
type gated struct {
	set <-chan struct{}
	r   io.Reader
}

func (g gated) Read(b []byte) (int, error) {
	<-g.set
	return g.r.Read(b)
}
