// Package harness runs a real `herald gateway` process for the dev tools
// that measure and break it from outside (the load and chaos commands and
// their tests): it builds the binary, starts and kills the process, drives
// the web chat API (SPEC §9) and reads the process's RSS, CPU and open files
// from /proc. It never reaches beyond loopback.
package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/heraldhq/herald/devtools/loopback"
)

// BuildHerald builds ./cmd/herald of the module the working directory is in
// into dir and returns the binary's path. It is built as it is shipped
// (make build, releases, the Docker image): static, CGO_ENABLED=0, with the
// goolm tag (pure-Go Olm for Matrix encryption), so what
// the load, chaos and crash tests start and time is that binary (no ld.so,
// libcap's psx through syscall.AllThreadsSyscall). The tests' own -race
// build is unaffected: this is a separate go build.
func BuildHerald(ctx context.Context, dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out, err := exec.CommandContext(ctx, goBin, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the herald module: run from the repository")
	}
	bin := filepath.Join(dir, "herald")
	cmd := exec.CommandContext(ctx, goBin, "build", "-tags", "goolm", "-o", bin, "./cmd/herald")
	cmd.Dir = filepath.Dir(mod)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/herald: %v\n%s", err, b)
	}
	return bin, nil
}

// built is the binary BuildOnce built, in a temp dir of its own.
var built struct {
	once      sync.Once
	dir, path string
	err       error
}

// BuildOnce is BuildHerald once per process: go build links an 80 MB
// binary, seconds of CPU each time, so a test package's tests share one.
// The binary is in a temp dir of its own that RemoveBuilt deletes (a
// TestMain calls it after m.Run).
func BuildOnce(ctx context.Context) (string, error) {
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "herald-bin-"); built.err == nil {
			built.path, built.err = BuildHerald(ctx, built.dir)
		}
	})
	return built.path, built.err
}

// RemoveBuilt deletes what BuildOnce built.
func RemoveBuilt() {
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago, of a loopback address of its own where the system has one
// (loopback.Addr): a gateway a test kills and starts again keeps its port.
func FreeAddr() (string, error) { return loopback.Addr() }

// Gateway is one running `herald gateway` child process.
type Gateway struct {
	Base string // http://<listen>
	Log  string // the file its stdout and stderr go to

	cmd    *exec.Cmd
	exited chan struct{}
	err    error // cmd.Wait's result, set before exited closes
}

// StartGateway starts bin as `herald gateway` with the config and state dir
// given, its output appended to logPath. base is the web listener's URL.
func StartGateway(bin, cfgPath, stateDir, logPath, base string, extraArgs ...string) (*Gateway, error) {
	return StartGatewayEnv(nil, bin, cfgPath, stateDir, logPath, base, extraArgs...)
}

// StartGatewayEnv is StartGateway with env added to the process's
// environment (Model.Env for a TLS model).
func StartGatewayEnv(env []string, bin, cfgPath, stateDir, logPath, base string, extraArgs ...string) (*Gateway, error) {
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	args := append([]string{"gateway", "--config", cfgPath, "--state-dir", stateDir, "--log-format", "json"}, extraArgs...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(append(os.Environ(), "HOME="+filepath.Dir(stateDir)), env...)
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	g := &Gateway{Base: base, Log: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		g.err = cmd.Wait()
		out.Close()
		close(g.exited)
	}()
	return g, nil
}

// Pid is the process id.
func (g *Gateway) Pid() int { return g.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (g *Gateway) Exited() <-chan struct{} { return g.exited }

// ExitCode is the exit code once Exited is closed (-1 when killed by a signal).
func (g *Gateway) ExitCode() int { return g.cmd.ProcessState.ExitCode() }

// Kill sends SIGKILL and waits up to 30 s for the process to be gone.
func (g *Gateway) Kill() error { return g.signal(syscall.SIGKILL, 30*time.Second) }

// Term sends SIGTERM and waits up to wait for the process to exit.
func (g *Gateway) Term(wait time.Duration) error { return g.signal(syscall.SIGTERM, wait) }

func (g *Gateway) signal(sig syscall.Signal, wait time.Duration) error {
	select {
	case <-g.exited:
		return nil
	default:
	}
	if err := g.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-g.exited:
		return nil
	case <-t.C:
		_ = g.cmd.Process.Kill()
		return fmt.Errorf("gateway pid %d did not exit within %s of %s", g.Pid(), wait, sig)
	}
}

// Tail returns the last n lines of the gateway's log.
func (g *Gateway) Tail(n int) string {
	b, _ := os.ReadFile(g.Log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// WaitReady polls /readyz until it answers 200, the process exits or ctx ends.
func (g *Gateway) WaitReady(ctx context.Context) error {
	c := &http.Client{Timeout: 2 * time.Second}
	// 1 ms: start → ready is itself tens of milliseconds.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		resp, err := c.Get(g.Base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-g.exited:
			return fmt.Errorf("gateway exited before it was ready (%v); log:\n%s", g.err, g.Tail(20))
		case <-ctx.Done():
			return fmt.Errorf("gateway not ready: %w (last: %s)", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// Message is one entry of a web conversation (SPEC §9).
type Message struct {
	Seq   int64     `json:"seq"`
	Role  string    `json:"role"`
	Text  string    `json:"text"`
	RunID string    `json:"runId"`
	At    time.Time `json:"at"`
}

// Web drives the web chat API of a gateway.
type Web struct {
	Base string
	HTTP *http.Client
}

// NewWeb returns a client for the web API at base with a connection pool
// sized for conns concurrent conversations.
func NewWeb(base string, conns int) *Web {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = max(conns, 2)
	tr.MaxIdleConns = max(conns, 2)
	return &Web{Base: base, HTTP: &http.Client{Transport: tr}}
}

// ErrBusy is returned by Post when the gateway answered 429.
var ErrBusy = errors.New("gateway busy (429)")

// Post sends one user message and returns the seq the gateway stored it as.
// Only a 202 means the message was acknowledged.
func (w *Web) Post(ctx context.Context, client, text string) (int64, error) {
	body, _ := json.Marshal(map[string]string{"client": client, "text": text})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.Base+"/api/messages", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.HTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode == http.StatusTooManyRequests {
		return 0, ErrBusy
	}
	if resp.StatusCode != http.StatusAccepted {
		return 0, fmt.Errorf("POST /api/messages: %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	var out struct {
		Seq int64 `json:"seq"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return 0, fmt.Errorf("POST /api/messages: %w", err)
	}
	return out.Seq, nil
}

// Messages returns a conversation's entries after seq.
func (w *Web) Messages(ctx context.Context, client string, after int64) ([]Message, error) {
	u := fmt.Sprintf("%s/api/messages?client=%s&after=%d", w.Base, url.QueryEscape(client), after)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := w.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/messages: %s", resp.Status)
	}
	var body struct {
		Messages []Message `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("GET /api/messages: %w", err)
	}
	return body.Messages, nil
}

// Events follows GET /api/events for one conversation and calls fn with
// each entry, stamped with the time it arrived, until ctx ends or the
// stream breaks; a "delta" event (the reply so far) comes as a Message
// with Role "delta". ready is closed once the stream is open.
func (w *Web) Events(ctx context.Context, client string, ready chan<- struct{}, fn func(Message, time.Time)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.Base+"/api/events?client="+url.QueryEscape(client), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := w.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /api/events: %s", resp.Status)
	}
	if ready != nil {
		close(ready)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	name := "" // the event's name; "" for stored messages
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			name = ""
			continue
		}
		if n, ok := strings.CutPrefix(line, "event:"); ok {
			name = strings.TrimSpace(n)
			continue
		}
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		var m Message
		if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &m); err != nil {
			continue
		}
		switch {
		case name == "delta":
			m.Role = "delta" // the reply written so far, in Text
		case name != "" || m.Seq == 0:
			continue
		}
		fn(m, time.Now())
	}
	if ctx.Err() != nil {
		return nil
	}
	return sc.Err()
}

// Proc is a sample of a process's resource use, from /proc (Linux only).
type Proc struct {
	RSS     int64         // resident set size, bytes
	RSSAnon int64         // … of it the process's own memory (heap, stacks)
	RSSFile int64         // … of it pages of mapped files (the binary)
	CPU     time.Duration // user + system time so far
	FDs     int           // open file descriptors
}

// ReadProc samples pid.
func ReadProc(pid int) (Proc, error) {
	var p Proc
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return p, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch name {
		case "VmRSS":
			p.RSS = kb << 10
		case "RssAnon":
			p.RSSAnon = kb << 10
		case "RssFile":
			p.RSSFile = kb << 10
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return p, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	if i := bytes.LastIndexByte(stat, ')'); i > 0 {
		f := strings.Fields(string(stat[i+1:]))
		if len(f) > 12 {
			ut, _ := strconv.ParseInt(f[11], 10, 64)
			st, _ := strconv.ParseInt(f[12], 10, 64)
			p.CPU = time.Duration(ut+st) * time.Second / clockTicks
		}
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		p.FDs = len(ents)
	}
	return p, nil
}

// clockTicks is USER_HZ, which is 100 on every Linux Go supports.
const clockTicks = 100

// ThreadCPU is the CPU time pid's live threads have used, from
// /proc/<pid>/task/*/schedstat: nanosecond precision, where Proc.CPU counts
// in 10 ms ticks (threads that exited are not counted; Go's rarely exit).
func ThreadCPU(pid int) (time.Duration, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // the thread exited
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			sum += time.Duration(ns)
		}
	}
	return sum, nil
}
