package mcptools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/mcptools"
	"github.com/heraldhq/herald/agent/mcptools/mcptest"
	"github.com/heraldhq/herald/config"
)

func TestMain(m *testing.M) {
	if os.Getenv(envGateway) != "" {
		fakeGateway()
		return
	}
	mcptest.Main(m)
}

func waitUp(t *testing.T, m *mcptools.Manager, name string) mcptools.ServerStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := m.WaitFor(ctx, name, func(s mcptools.ServerStatus) bool { return s.State == mcptools.StateUp })
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func toolOf(t *testing.T, m *mcptools.Manager, server, name string) agent.Tool {
	t.Helper()
	for _, tl := range m.Tools([]string{server}) {
		if tl.Spec().Name == name {
			return tl
		}
	}
	t.Fatalf("no tool %s among %v", name, names(m.Tools([]string{server})))
	return nil
}

func names(ts []agent.Tool) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Spec().Name)
	}
	return out
}

func call(t *testing.T, tl agent.Tool, args string) (string, error) {
	t.Helper()
	return tl.Call(context.Background(), agent.CallContext{}, json.RawMessage(args))
}

func newManager(t *testing.T, o mcptools.Options, servers map[string]config.MCPServer) *mcptools.Manager {
	m := mcptools.New(o)
	m.Apply(servers)
	t.Cleanup(m.Close)
	return m
}

// A stdio server built with the SDK: tools listed under mcp__<server>__…,
// schemas passed through, results turned into text, colliding names refused.
func TestStdioServerToolsAndResults(t *testing.T) {
	m := newManager(t, mcptools.Options{MaxOutput: 100}, map[string]config.MCPServer{"t": mcptest.StdioConfig()})
	st := waitUp(t, m, "t")
	for _, want := range []string{"mcp__t__echo", "mcp__t__image", "mcp__t__a_b"} {
		if !slices.Contains(st.Tools, want) {
			t.Errorf("tools %v lack %s", st.Tools, want)
		}
	}
	if len(st.Problems) != 1 || !strings.Contains(st.Problems[0], `"a.b" and "a_b" both become mcp__t__a_b`) {
		t.Errorf("problems = %q, want the a.b/a_b collision", st.Problems)
	}
	echo := toolOf(t, m, "t", "mcp__t__echo")
	if echo.Group() != agent.GroupMCP {
		t.Errorf("group = %q", echo.Group())
	}
	var sch map[string]any
	if err := json.Unmarshal(echo.Spec().Schema, &sch); err != nil || sch["properties"].(map[string]any)["text"].(map[string]any)["description"] != "what to echo" {
		t.Errorf("schema not passed through: %s", echo.Spec().Schema)
	}
	if out, err := call(t, echo, `{"text":"hi"}`); err != nil || out != "echo: hi" {
		t.Errorf("echo = %q, %v", out, err)
	}
	if out, err := call(t, toolOf(t, m, "t", "mcp__t__image"), `{}`); err != nil || out != "here it is\n[image: image/png, 4 bytes]" {
		t.Errorf("image = %q, %v", out, err)
	}
	if _, err := call(t, toolOf(t, m, "t", "mcp__t__fail"), `{}`); err == nil || err.Error() != "bad input: nope" {
		t.Errorf("fail = %v, want the server's error text", err)
	}
	out, err := call(t, toolOf(t, m, "t", "mcp__t__big"), `{"n":1000}`)
	if err != nil || !strings.Contains(out, "[output truncated: 900 of 1000 bytes omitted here]") || len(out) > 200 {
		t.Errorf("big = %q, %v; want cut to 100 bytes", out, err)
	}
}

func TestToolNamesFit64(t *testing.T) {
	long := strings.Repeat("very_long_tool_name_", 5)
	a, b := mcptools.ToolName("server", long+"a"), mcptools.ToolName("server", long+"b")
	if len(a) != 64 || len(b) != 64 || a == b || !strings.HasPrefix(a, "mcp__server__very_long") {
		t.Errorf("names %q (%d), %q (%d): want distinct, 64 chars", a, len(a), b, len(b))
	}
	if got := mcptools.ToolName("s", "get/file.v2"); got != "mcp__s__get_file_v2" {
		t.Errorf("ToolName = %q", got)
	}
	if s, ok := mcptools.ServerOf("mcp__my_srv__a__b"); !ok || s != "my_srv" {
		t.Errorf("ServerOf = %q, %v", s, ok)
	}
}

// A hanging tool is cut off at timeoutSeconds with a result the model can
// read, and the server stays usable.
func TestHangingToolTimesOut(t *testing.T) {
	c := mcptest.StdioConfig()
	c.TimeoutSeconds = 1
	m := newManager(t, mcptools.Options{}, map[string]config.MCPServer{"t": c})
	waitUp(t, m, "t")
	_, err := call(t, toolOf(t, m, "t", "mcp__t__hang"), `{}`)
	if err == nil || !strings.Contains(err.Error(), `no answer from MCP server "t" within 1s`) {
		t.Fatalf("hang = %v", err)
	}
	if out, err := call(t, toolOf(t, m, "t", "mcp__t__echo"), `{"text":"still"}`); err != nil || out != "echo: still" {
		t.Errorf("echo after timeout = %q, %v", out, err)
	}
}

// A server that exits mid-call gives an error result, is shown down with its
// tools absent, and comes back after the backoff.
func TestCrashedServerRestarts(t *testing.T) {
	release := make(chan struct{})
	var calls []mcptools.ServerStatus
	var mu sync.Mutex
	m := newManager(t, mcptools.Options{
		Backoff: func(int) time.Duration { <-release; return 0 },
		OnCall: func(server string, _ time.Duration, failed bool) {
			mu.Lock()
			calls = append(calls, mcptools.ServerStatus{Name: server, State: strconv.FormatBool(failed)})
			mu.Unlock()
		},
	}, map[string]config.MCPServer{"t": mcptest.StdioConfig()})
	waitUp(t, m, "t")
	_, err := call(t, toolOf(t, m, "t", "mcp__t__crash"), `{}`)
	if err == nil || !strings.Contains(err.Error(), `MCP server "t" failed`) {
		t.Fatalf("crash = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := m.WaitFor(ctx, "t", func(s mcptools.ServerStatus) bool { return s.State == mcptools.StateDown })
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.Error, "exit status 3") || len(m.Tools([]string{"t"})) != 0 {
		t.Errorf("down status %+v, tools %v: want the exit status and no tools", st, names(m.Tools([]string{"t"})))
	}
	close(release)
	st = waitUp(t, m, "t")
	if st.Failures != 1 {
		t.Errorf("failures = %d", st.Failures)
	}
	if out, err := call(t, toolOf(t, m, "t", "mcp__t__echo"), `{"text":"back"}`); err != nil || out != "echo: back" {
		t.Errorf("echo after restart = %q, %v", out, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 2 || calls[0].State != "true" || calls[1].State != "false" {
		t.Errorf("observed calls %+v, want one failed then one ok", calls)
	}
}

// notifications/tools/list_changed refreshes the tool list.
func TestToolListChanged(t *testing.T) {
	m := newManager(t, mcptools.Options{}, map[string]config.MCPServer{"t": mcptest.StdioConfig()})
	waitUp(t, m, "t")
	if _, err := call(t, toolOf(t, m, "t", "mcp__t__add_tool"), `{}`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.WaitFor(ctx, "t", func(s mcptools.ServerStatus) bool { return slices.Contains(s.Tools, "mcp__t__extra") }); err != nil {
		t.Fatal(err)
	}
	if out, err := call(t, toolOf(t, m, "t", "mcp__t__extra"), `{}`); err != nil || out != "extra!" {
		t.Errorf("extra = %q, %v", out, err)
	}
}

// Streamable HTTP with configured headers.
func TestHTTPServer(t *testing.T) {
	var mu sync.Mutex
	var auth []string
	hs := mcptest.NewHTTP(t, func(r *http.Request) { mu.Lock(); auth = append(auth, r.Header.Get("Authorization")); mu.Unlock() })
	m := newManager(t, mcptools.Options{}, map[string]config.MCPServer{
		"web": {URL: hs.URL, Headers: map[string]config.Secret{"Authorization": "Bearer s3cret"}, TimeoutSeconds: 10},
	})
	waitUp(t, m, "web")
	if out, err := call(t, toolOf(t, m, "web", "mcp__web__echo"), `{"text":"over http"}`); err != nil || out != "echo: over http" {
		t.Errorf("echo = %q, %v", out, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(auth) == 0 || auth[0] != "Bearer s3cret" {
		t.Errorf("Authorization headers seen: %q", auth)
	}
}

// Over HTTP, a hanging tool times out, and a server that never answers
// the session's DELETE at shutdown does not hold Close.
func TestHTTPServerHangs(t *testing.T) {
	hs := mcptest.NewHTTP(t, func(r *http.Request) {
		if r.Method == http.MethodDelete {
			<-r.Context().Done()
		}
	})
	m := mcptools.New(mcptools.Options{})
	m.Apply(map[string]config.MCPServer{"web": {URL: hs.URL, TimeoutSeconds: 1}})
	waitUp(t, m, "web")
	_, err := call(t, toolOf(t, m, "web", "mcp__web__hang"), `{}`)
	if err == nil || !strings.Contains(err.Error(), `no answer from MCP server "web" within 1s`) {
		t.Errorf("hang = %v", err)
	}
	closed := make(chan struct{})
	go func() { m.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close hangs on a server that does not answer DELETE")
	}
}

// A URL where nothing listens, and a command that does not exist: shown
// down with the reason (credentials in the URL hidden), retried, never
// hanging.
func TestUnreachableServersAreDown(t *testing.T) {
	m := newManager(t, mcptools.Options{Backoff: func(int) time.Duration { return time.Hour }}, map[string]config.MCPServer{
		"nohttp": {URL: "http://user:pw-secret@127.0.0.1:1/mcp?key=q-secret", TimeoutSeconds: 5},
		"nocmd":  {Command: "/nonexistent/mcp-server", TimeoutSeconds: 5},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, want := range map[string]string{"nohttp": "connect", "nocmd": "no such file"} {
		st, err := m.WaitFor(ctx, name, func(s mcptools.ServerStatus) bool { return s.State == mcptools.StateDown })
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(st.Error, want) {
			t.Errorf("%s: error %q, want it to mention %q", name, st.Error, want)
		}
		if strings.Contains(st.Error, "secret") {
			t.Errorf("%s: error %q shows the URL's credentials", name, st.Error)
		}
	}
	if ts := m.Tools([]string{"nohttp", "nocmd"}); len(ts) != 0 {
		t.Errorf("tools of down servers: %v", names(ts))
	}
}

// Apply restarts a changed server, stops a removed one, and Close leaves no
// process behind.
func TestApplyAndCloseLeaveNoProcess(t *testing.T) {
	m := mcptools.New(mcptools.Options{})
	defer m.Close()
	m.Apply(map[string]config.MCPServer{"a": mcptest.StdioConfig(), "b": mcptest.StdioConfig()})
	waitUp(t, m, "a")
	waitUp(t, m, "b")
	pidA, pidB := pidOf(t, m, "a"), pidOf(t, m, "b")
	c := mcptest.StdioConfig()
	c.TimeoutSeconds = 11
	m.Apply(map[string]config.MCPServer{"a": c})
	if alive(pidB) {
		t.Errorf("removed server b (pid %d) still runs", pidB)
	}
	if alive(pidA) {
		t.Errorf("changed server a (pid %d) still runs its old process", pidA)
	}
	waitUp(t, m, "a")
	pidA2 := pidOf(t, m, "a")
	if st := m.Status(); len(st) != 1 || st[0].Name != "a" {
		t.Errorf("status after apply: %+v", st)
	}
	m.Close()
	if alive(pidA2) {
		t.Errorf("server a (pid %d) outlived Close", pidA2)
	}
}

func pidOf(t *testing.T, m *mcptools.Manager, server string) int {
	t.Helper()
	out, err := call(t, toolOf(t, m, server, "mcp__"+server+"__pid"), `{}`)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(out)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// alive reports whether pid runs (a zombie counts as dead).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !os.IsNotExist(err)
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

const envGateway = "HERALD_MCPTEST_GATEWAY"

// fakeGateway runs a Manager with one stdio server, prints the server's pid
// and waits to be killed.
func fakeGateway() {
	m := mcptools.New(mcptools.Options{})
	c := mcptest.StdioConfig()
	c.Env[mcptest.EnvStubborn] = "1" // ignores stdin EOF: only the death signal stops it
	m.Apply(map[string]config.MCPServer{"t": c})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.WaitFor(ctx, "t", func(s mcptools.ServerStatus) bool { return s.State == mcptools.StateUp }); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	for _, tl := range m.Tools([]string{"t"}) {
		if tl.Spec().Name == "mcp__t__pid" {
			out, err := tl.Call(ctx, agent.CallContext{}, json.RawMessage(`{}`))
			if err != nil {
				fmt.Println("error:", err)
				os.Exit(1)
			}
			fmt.Println(out)
		}
	}
	time.Sleep(time.Minute) // killed by the test long before
	os.Exit(2)
}

// No server process outlives a gateway killed with SIGKILL.
func TestServerDiesWithKilledGateway(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs Linux (Pdeathsig)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envGateway+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var line string
	if _, err := fmt.Fscanln(out, &line); err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(line)
	if err != nil {
		t.Fatalf("fake gateway said %q", line)
	}
	if !alive(pid) {
		t.Fatalf("server pid %d not running", pid)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The kernel delivers the death signal as the gateway exits; the server's
	// end is observed through /proc (a bounded wait, no fixed sleep).
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("server pid %d outlived the killed gateway", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
