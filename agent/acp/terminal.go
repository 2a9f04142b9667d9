package acp

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/heraldhq/herald/agent/sandbox"
)

// Terminal limits.
const (
	// maxTerminals bounds the terminals an agent has at once (not yet
	// released).
	maxTerminals = 16
	// defaultTerminalOutput and maxTerminalOutput bound the output a
	// terminal keeps (its end), unless and up to what the agent asks.
	defaultTerminalOutput = 1 << 20
	maxTerminalOutput     = 8 << 20
)

// terminals are the commands an agent runs through Herald (terminal/*,
// SPEC §26): each in a sandbox of its own like the agent's — the
// workspace and the agent's HOME writable, the agent's network, its
// environment plus the request's variables — so a terminal gives the agent nothing it could
// not do itself, and needs no permission beyond the one the agent asks
// for the call. Every terminal ends with the job (closeAll).
type terminals struct {
	spec Spec
	cli  *client

	mu     sync.Mutex
	next   int
	m      map[string]*terminal // guarded by mu
	closed bool                 // guarded by mu: the job ended, no new terminal
	wg     sync.WaitGroup       // one per running terminal's waiter
}

// terminal is one command and what it wrote.
type terminal struct {
	cmd  *sandbox.Cmd
	out  *tailBuffer
	done chan struct{} // closed when it exited; status is set then
	exit sdk.TerminalExitStatus
}

// tailBuffer keeps the last limit bytes written to it. It holds up to
// half as much again before it drops the oldest bytes, so a command that
// writes much more than limit costs one copy of at most limit bytes per
// limit/2 written, not one per write (a chatty command's 32 KiB writes
// into an 8 MiB limit moved 8 MiB each).
type tailBuffer struct {
	mu        sync.Mutex
	limit     int
	buf       []byte // its last limit bytes are the output; guarded by mu
	truncated bool   // bytes were dropped; guarded by mu
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(p) >= b.limit {
		p = p[len(p)-b.limit:]
		b.truncated = b.truncated || n > b.limit || len(b.buf) > 0
		b.buf = append(b.buf[:0], p...)
		return n, nil
	}
	if len(b.buf)+len(p) > b.limit+b.limit/2 {
		keep := b.buf[len(b.buf)-(b.limit-len(p)):]
		b.buf = append(b.buf[:0], keep...)
		b.truncated = true
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// String is the output kept (its last limit bytes, from a character
// boundary when bytes were dropped: it stays UTF-8) and whether bytes
// were dropped.
func (b *tailBuffer) String() (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out, cut := b.buf, b.truncated
	if over := len(out) - b.limit; over > 0 {
		out, cut = out[over:], true
	}
	if cut {
		for len(out) > 0 && out[0]&0xC0 == 0x80 {
			out = out[1:]
		}
	}
	return string(out), cut
}

func (ts *terminals) get(id string) (*terminal, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t, ok := ts.m[id]
	if !ok {
		return nil, sdk.NewInvalidParams(map[string]any{"terminalId": id, "reason": "no such terminal (released, or never created)"})
	}
	return t, nil
}

// create starts a terminal.
func (ts *terminals) create(r sdk.CreateTerminalRequest) (string, error) {
	dir := ts.spec.Workspace
	if r.Cwd != nil && *r.Cwd != "" {
		if _, err := ts.cli.inWorkspace(*r.Cwd); err != nil {
			return "", sdk.NewInvalidParams(map[string]any{"cwd": *r.Cwd, "reason": err.Error()})
		}
		dir = *r.Cwd
	}
	env := append([]string(nil), ts.spec.Env...)
	for _, v := range r.Env {
		env = append(env, v.Name+"="+v.Value)
	}
	argv := append([]string{r.Command}, r.Args...)
	if dir != ts.spec.Workspace {
		// The sandbox writes its working directory: keep that the
		// workspace, and start in the folder asked for inside it.
		argv = append([]string{"/bin/sh", "-c", `cd "$0" && exec "$@"`, dir}, argv...)
	}
	limit := defaultTerminalOutput
	if r.OutputByteLimit != nil && *r.OutputByteLimit > 0 {
		limit = min(*r.OutputByteLimit, maxTerminalOutput)
	}
	pol := ts.spec.Sandbox.Confining()
	pol.Network = ts.spec.Network
	pol.Setting = "tools.exec.sandbox (the terminals of ACP agent " + ts.spec.Name + ")"

	ts.mu.Lock()
	defer ts.mu.Unlock()
	switch {
	case ts.closed:
		return "", errors.New("the run is over: no new terminal")
	case len(ts.m) >= maxTerminals:
		return "", fmt.Errorf("%d terminals are open: release one first (terminal/release)", maxTerminals)
	}
	cmd, err := sandbox.Command(context.Background(), sandbox.Spec{Policy: pol, Dir: ts.spec.Workspace, Home: ts.spec.Home, ReadOnly: ts.spec.ReadPaths,
		Env: env, Argv: argv})
	if err != nil {
		return "", fmt.Errorf("terminal %q: %w", r.Command, err)
	}
	t := &terminal{cmd: cmd, out: &tailBuffer{limit: limit}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = t.out, t.out
	if err := cmd.Start(); err != nil {
		cmd.Cleanup()
		return "", fmt.Errorf("terminal %q: %w", r.Command, err)
	}
	ts.next++
	id := "term_" + strconv.Itoa(ts.next)
	if ts.m == nil {
		ts.m = map[string]*terminal{}
	}
	ts.m[id] = t
	ts.wg.Add(1)
	go func() {
		defer ts.wg.Done()
		err := cmd.Wait()
		cmd.Cleanup()
		t.exit = exitStatus(cmd.ProcessState, err)
		close(t.done)
	}()
	return id, nil
}

// exitStatus is how a terminal's command ended.
func exitStatus(st interface{ ExitCode() int }, err error) sdk.TerminalExitStatus {
	var es sdk.TerminalExitStatus
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			sig := ws.Signal().String()
			es.Signal = &sig
			return es
		}
	}
	if st != nil {
		code := st.ExitCode()
		if code >= 0 {
			es.ExitCode = &code
		}
	}
	return es
}

// kill stops a terminal's command (it stays until released).
func (t *terminal) kill() {
	select {
	case <-t.done:
	default:
		_ = t.cmd.Stop()
	}
}

// release kills a terminal's command, waits for it, and forgets it.
func (ts *terminals) release(id string) error {
	t, err := ts.get(id)
	if err != nil {
		return err
	}
	t.kill()
	<-t.done // its sandbox's WaitDelay bounds this
	ts.mu.Lock()
	delete(ts.m, id)
	ts.mu.Unlock()
	return nil
}

// closeAll ends every terminal and waits for them (the job ends).
func (ts *terminals) closeAll() {
	ts.mu.Lock()
	ts.closed = true
	open := ts.m // nobody else reads it once it is taken
	ts.m = nil
	ts.mu.Unlock()
	for _, t := range open {
		t.kill()
	}
	ts.wg.Wait()
}

func (c *client) CreateTerminal(_ context.Context, r sdk.CreateTerminalRequest) (sdk.CreateTerminalResponse, error) {
	id, err := c.terms.create(r)
	if err != nil {
		return sdk.CreateTerminalResponse{}, err
	}
	c.run.activity("🖥️ " + lastLine(strings.Join(append([]string{r.Command}, r.Args...), " ")))
	return sdk.CreateTerminalResponse{TerminalId: id}, nil
}

func (c *client) TerminalOutput(_ context.Context, r sdk.TerminalOutputRequest) (sdk.TerminalOutputResponse, error) {
	t, err := c.terms.get(r.TerminalId)
	if err != nil {
		return sdk.TerminalOutputResponse{}, err
	}
	out, cut := t.out.String()
	resp := sdk.TerminalOutputResponse{Output: out, Truncated: cut}
	select {
	case <-t.done:
		st := t.exit
		resp.ExitStatus = &st
	default:
	}
	return resp, nil
}

func (c *client) WaitForTerminalExit(ctx context.Context, r sdk.WaitForTerminalExitRequest) (sdk.WaitForTerminalExitResponse, error) {
	t, err := c.terms.get(r.TerminalId)
	if err != nil {
		return sdk.WaitForTerminalExitResponse{}, err
	}
	select {
	case <-t.done:
		return sdk.WaitForTerminalExitResponse{ExitCode: t.exit.ExitCode, Signal: t.exit.Signal}, nil
	case <-ctx.Done():
		return sdk.WaitForTerminalExitResponse{}, ctx.Err()
	}
}

func (c *client) KillTerminal(_ context.Context, r sdk.KillTerminalRequest) (sdk.KillTerminalResponse, error) {
	t, err := c.terms.get(r.TerminalId)
	if err != nil {
		return sdk.KillTerminalResponse{}, err
	}
	t.kill()
	return sdk.KillTerminalResponse{}, nil
}

func (c *client) ReleaseTerminal(_ context.Context, r sdk.ReleaseTerminalRequest) (sdk.ReleaseTerminalResponse, error) {
	return sdk.ReleaseTerminalResponse{}, c.terms.release(r.TerminalId)
}
