package mcptools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/sandbox"
	"github.com/heraldhq/herald/config"
)

// Server states shown by Status.
const (
	StateStarting = "starting"
	StateUp       = "up"
	StateDown     = "down" // failed; retried with backoff
	StateDisabled = "disabled"
)

// Defaults of a Manager.
const (
	DefaultMaxOutput = 64 << 10
	maxBackoff       = time.Minute
	stableAfter      = time.Minute // up this long resets the backoff
	terminateWait    = 2 * time.Second
	keepAlive        = 30 * time.Second
)

// envPassthrough are the variables of Herald's own environment a stdio
// server sees, besides its configured env. API keys and tokens stay out.
var envPassthrough = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
	"NODE_PATH", "NPM_CONFIG_PREFIX", "npm_config_cache", "NPM_CONFIG_REGISTRY", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"}

// Options configure a Manager; zero fields take defaults.
type Options struct {
	Logger    *zap.Logger
	MaxOutput int // bytes of a tool result kept (cut in the middle); default 64 KiB
	// HTTPClient carries streamable HTTP sessions; default: a client on a
	// clone of http.DefaultTransport. Operator-configured servers are trusted:
	// no private-address guard applies.
	HTTPClient *http.Client
	// Backoff is the wait before restart attempt n (1, 2, …); default 1s
	// doubling to 1 minute.
	Backoff func(n int) time.Duration
	// OnCall observes every tool call (metrics).
	OnCall func(server string, took time.Duration, failed bool)
	// OnState observes every state change (metrics).
	OnState func(server, state string)
	// Sandbox is the mechanism and limits for servers with sandbox: true
	// (tools.exec's; "off" there still confines these, with "auto"). The
	// network and CPU-time settings are the server's own.
	Sandbox sandbox.Policy
}

// ServerStatus is what Status reports about one server.
type ServerStatus struct {
	Name      string    `json:"name"`
	Transport string    `json:"transport"` // stdio|http
	State     string    `json:"state"`
	Error     string    `json:"error,omitempty"` // why it is down
	Problems  []string  `json:"problems,omitempty"`
	Tools     []string  `json:"tools"`    // model-facing names, sorted
	Failures  int       `json:"failures"` // times it failed to start or went down
	Since     time.Time `json:"since"`
}

// Manager runs the configured MCP servers.
type Manager struct {
	opts      Options
	log       *zap.Logger
	maxOutput int

	mu      sync.Mutex
	sandbox sandbox.Policy // for servers with sandbox: true; SetSandbox replaces it
	servers map[string]*server
	changed chan struct{} // closed and replaced on every state change
	closed  bool
}

// New returns a Manager running no servers; Apply starts them.
func New(o Options) *Manager {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.MaxOutput <= 0 {
		o.MaxOutput = DefaultMaxOutput
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	if o.Backoff == nil {
		o.Backoff = func(n int) time.Duration {
			d := time.Second << min(n-1, 6)
			return min(d, maxBackoff)
		}
	}
	return &Manager{opts: o, log: o.Logger.Named("mcp"), maxOutput: o.MaxOutput, sandbox: o.Sandbox,
		servers: map[string]*server{}, changed: make(chan struct{})}
}

// Apply makes the running servers match cfg: servers that are new start,
// servers that are gone or disabled stop, servers whose config changed
// restart, the others keep running. Reload calls it with the new config.
// It returns once the stopped servers have exited; starting ones come up in
// the background.
func (m *Manager) Apply(cfg map[string]config.MCPServer) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	var stop []*server
	for name, s := range m.servers {
		c, ok := cfg[name]
		if !ok || !reflect.DeepEqual(c, s.cfg) {
			stop = append(stop, s)
			delete(m.servers, name)
		}
	}
	var start []*server
	for name, c := range cfg {
		if _, ok := m.servers[name]; ok {
			continue
		}
		now := time.Now()
		s := &server{m: m, name: name, cfg: c, state: StateStarting, since: now, started: now, done: make(chan struct{}), refresh: make(chan struct{}, 1)}
		if !c.On() {
			s.state = StateDisabled
			close(s.done)
		}
		m.servers[name] = s
		start = append(start, s)
	}
	m.mu.Unlock()
	for _, s := range stop {
		s.stop()
	}
	for _, s := range start {
		if s.cfg.On() {
			ctx, cancel := context.WithCancel(context.Background())
			s.cancel = cancel
			go s.run(ctx)
		}
	}
	m.notify()
}

// SetSandbox replaces the sandbox policy (a reloaded tools.exec) for the
// sandboxed servers started from now on.
func (m *Manager) SetSandbox(p sandbox.Policy) {
	m.mu.Lock()
	m.sandbox = p
	m.mu.Unlock()
}

// Close stops every server and waits for them (each within a few seconds).
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	all := make([]*server, 0, len(m.servers))
	for _, s := range m.servers {
		all = append(all, s)
	}
	m.servers = map[string]*server{}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() { defer wg.Done(); s.stop() }()
	}
	wg.Wait()
	m.notify()
}

// Tools returns the tools of the named servers that are up, as agent tools.
func (m *Manager) Tools(servers []string) []agent.Tool {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []agent.Tool
	for _, name := range servers {
		s, ok := m.servers[name]
		if !ok {
			continue
		}
		s.mu.Lock()
		if s.state == StateUp {
			for _, t := range s.tools {
				out = append(out, t)
			}
		}
		s.mu.Unlock()
	}
	return out
}

// Status reports every configured server, sorted by name.
func (m *Manager) Status() []ServerStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]ServerStatus, 0, len(m.servers))
	for _, s := range m.servers {
		out = append(out, s.status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// WaitFor blocks until cond holds for the named server's status, or ctx ends.
func (m *Manager) WaitFor(ctx context.Context, name string, cond func(ServerStatus) bool) (ServerStatus, error) {
	for {
		m.mu.Lock()
		ch := m.changed
		s, ok := m.servers[name]
		var st ServerStatus
		if ok {
			st = s.status()
		}
		m.mu.Unlock()
		if ok && cond(st) {
			return st, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return st, fmt.Errorf("MCP server %q: waiting for state (now %s %s): %w", name, st.State, st.Error, ctx.Err())
		}
	}
}

// FirstAttemptBound is how long a server's first connection attempt may
// take: connecting and listing its tools, each within timeoutSeconds.
func FirstAttemptBound(c config.MCPServer) time.Duration {
	return 2 * time.Duration(max(c.TimeoutSeconds, 1)) * time.Second
}

// WaitFirstAttempts blocks until every enabled server has had its first
// connection attempt — it is up, or that attempt failed — so that turns
// started after it see the tools of every server that could come up. Each
// server is waited for at most FirstAttemptBound from its start; ctx ends
// the wait early. It returns the servers whose first attempt had not ended
// (their tools are absent until they come up).
func (m *Manager) WaitFirstAttempts(ctx context.Context) []string {
	for {
		m.mu.Lock()
		ch := m.changed
		var pending, late []string
		var next time.Duration
		now := time.Now()
		for name, s := range m.servers {
			s.mu.Lock()
			waiting := s.cfg.On() && !s.tried
			left := FirstAttemptBound(s.cfg) - now.Sub(s.started)
			s.mu.Unlock()
			switch {
			case !waiting:
			case left <= 0:
				late = append(late, name)
			default:
				pending = append(pending, name)
				if next == 0 || left < next {
					next = left
				}
			}
		}
		m.mu.Unlock()
		if len(pending) == 0 {
			sort.Strings(late)
			return late
		}
		t := time.NewTimer(next)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			sort.Strings(pending)
			return append(late, pending...)
		}
		t.Stop()
	}
}

func (m *Manager) notify() {
	m.mu.Lock()
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

func (m *Manager) observe(server string, took time.Duration, failed bool) {
	if m.opts.OnCall != nil {
		m.opts.OnCall(server, took, failed)
	}
}

// server is one configured MCP server and the goroutine that keeps it up.
type server struct {
	m       *Manager
	name    string
	cfg     config.MCPServer
	cancel  context.CancelFunc
	done    chan struct{} // closed when run returns
	refresh chan struct{} // tools/list_changed arrived (buffered, 1)

	mu       sync.Mutex
	state    string
	err      string
	problems []string
	tools    []*tool
	sess     *mcp.ClientSession
	failures int
	since    time.Time
	started  time.Time // when the server was first started
	tried    bool      // its first connection attempt ended (up, or failed)
}

func (s *server) transport() string {
	if s.cfg.URL != "" {
		return "http"
	}
	return "stdio"
}

// redact hides the credentials an HTTP server's URL may carry (user
// info, query) in msg: errors name the URL, and they reach logs, /readyz,
// GET /mcp and the model.
func (s *server) redact(msg string) string {
	if s.cfg.URL == "" {
		return msg
	}
	u, err := url.Parse(s.cfg.URL)
	if err != nil {
		return strings.ReplaceAll(msg, s.cfg.URL, "(url)")
	}
	if u.RawQuery != "" {
		msg = strings.ReplaceAll(msg, "?"+u.RawQuery, "?…")
	}
	if u.User != nil {
		// However the user info is written (as given, or "user:***").
		re := regexp.MustCompile(`//[^/@\s"]*@` + regexp.QuoteMeta(u.Host))
		msg = re.ReplaceAllString(msg, "//"+u.Host)
	}
	return msg
}

func (s *server) timeout() time.Duration {
	return time.Duration(max(s.cfg.TimeoutSeconds, 1)) * time.Second
}

func (s *server) status() ServerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := ServerStatus{Name: s.name, Transport: s.transport(), State: s.state, Error: s.err,
		Problems: slices.Clone(s.problems), Failures: s.failures, Since: s.since, Tools: []string{}}
	if s.state == StateUp {
		for _, t := range s.tools {
			st.Tools = append(st.Tools, t.name)
		}
	}
	return st
}

// current returns the live session, or nil and why there is none.
func (s *server) current() (*mcp.ClientSession, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == nil || s.state != StateUp {
		why := s.state
		if s.err != "" {
			why += ": " + s.err
		}
		return nil, why
	}
	return s.sess, ""
}

func (s *server) set(state, errMsg string, sess *mcp.ClientSession) {
	s.mu.Lock()
	s.state, s.err, s.sess, s.since = state, errMsg, sess, time.Now()
	if state == StateUp || state == StateDown {
		s.tried = true
	}
	s.mu.Unlock()
	if s.m.opts.OnState != nil {
		s.m.opts.OnState(s.name, state)
	}
	s.m.notify()
}

func (s *server) stop() {
	if s.cancel != nil {
		s.cancel()
	}
	<-s.done
}

// run connects, serves until the session ends, and restarts with backoff
// until ctx ends.
func (s *server) run(ctx context.Context) {
	defer close(s.done)
	// Linux sends the death signal when the thread that started the child
	// exits, not the process. Every start happens on this goroutine, locked
	// to its thread for good: the thread ends only after run has stopped the
	// server (an exiting locked goroutine takes its thread with it).
	runtime.LockOSThread()
	log := s.m.log.With(zap.String("server", s.name), zap.String("transport", s.transport()))
	attempt := 0
	for {
		started := time.Now()
		err := s.session(ctx, log)
		if ctx.Err() != nil {
			s.set(StateDown, "stopped", nil)
			return
		}
		if time.Since(started) >= stableAfter {
			attempt = 0
		}
		attempt++
		s.mu.Lock()
		s.failures++
		s.mu.Unlock()
		msg := s.redact(err.Error())
		s.set(StateDown, msg, nil)
		wait := s.m.opts.Backoff(attempt)
		log.Warn("MCP server down; restarting", zap.String("error", msg), zap.Duration("in", wait), zap.Int("attempt", attempt))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			s.set(StateDown, "stopped", nil)
			return
		case <-t.C:
		}
		s.set(StateStarting, "", nil)
	}
}

// session runs one client session: connect, list tools, then follow
// tools/list_changed until the session ends or ctx does.
func (s *server) session(ctx context.Context, log *zap.Logger) error {
	client := mcp.NewClient(&mcp.Implementation{Name: "herald", Version: "1"}, &mcp.ClientOptions{
		KeepAlive: keepAlive,
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case s.refresh <- struct{}{}:
			default:
			}
		},
	})
	transport, cmd, cleanup, err := s.transportFor(log)
	if err != nil {
		return err
	}
	defer cleanup()
	defer killGroup(cmd) // anything the server left behind in its group
	cctx, cancel := context.WithTimeout(ctx, s.timeout())
	sess, err := client.Connect(cctx, transport, nil)
	cancel()
	if err != nil {
		return fmt.Errorf("connect: %w", s.explain(err, cmd))
	}
	ended := make(chan error, 1)
	go func() { ended <- sess.Wait() }()
	defer func() {
		_ = sess.Close()
		<-ended
	}()
	if err := s.listTools(ctx, sess); err != nil {
		return err
	}
	s.set(StateUp, "", sess)
	log.Info("MCP server up", zap.Int("tools", len(s.status().Tools)))
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-ended:
			ended <- err // for the deferred wait
			if err == nil {
				err = errors.New("the server closed the connection")
			}
			return fmt.Errorf("connection lost: %w", s.explain(err, cmd))
		case <-s.refresh:
			if err := s.listTools(ctx, sess); err != nil {
				log.Warn("MCP tool list refresh failed; keeping the old list", zap.Error(err))
				continue
			}
			s.m.notify()
			log.Info("MCP tool list changed", zap.Int("tools", len(s.status().Tools)))
		}
	}
}

// explain adds a stdio server's exit status to err.
func (s *server) explain(err error, cmd *exec.Cmd) error {
	if cmd != nil && cmd.ProcessState != nil {
		return fmt.Errorf("%w (process %s)", err, cmd.ProcessState)
	}
	return err
}

func (s *server) listTools(ctx context.Context, sess *mcp.ClientSession) error {
	lctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	var list []*mcp.Tool
	for t, err := range sess.Tools(lctx, nil) {
		if err != nil {
			return fmt.Errorf("tools/list: %w", err)
		}
		list = append(list, t)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	var tools []*tool
	var problems []string
	byName := map[string]string{}
	for _, t := range list {
		nt, err := newTool(s, t)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if other, dup := byName[nt.name]; dup {
			problems = append(problems, fmt.Sprintf("tools %q and %q both become %s; %q is left out (rename one on the server)", other, t.Name, nt.name, t.Name))
			continue
		}
		byName[nt.name] = t.Name
		tools = append(tools, nt)
	}
	s.mu.Lock()
	same := slices.Equal(s.problems, problems)
	s.tools, s.problems = tools, problems
	s.mu.Unlock()
	if !same {
		for _, p := range problems {
			s.m.log.Warn("MCP tool refused", zap.String("server", s.name), zap.String("problem", p))
		}
	}
	return nil
}

func (s *server) transportFor(log *zap.Logger) (mcp.Transport, *exec.Cmd, func(), error) {
	if s.cfg.URL != "" {
		hc := *s.m.opts.HTTPClient
		hc.Transport = headerTransport{base: transportOf(hc.Transport), headers: s.cfg.Headers}
		return &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: &hc, MaxRetries: 2}, nil, func() {}, nil
	}
	if s.cfg.Sandbox {
		return s.sandboxed(log)
	}
	cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
	if s.cfg.Cwd != "" {
		cmd.Dir = config.ExpandHome(s.cfg.Cwd)
	}
	cmd.Env = s.environ()
	cmd.Stderr = &lineLogger{log: log}
	cmd.WaitDelay = terminateWait
	startAlone(cmd)
	return &mcp.CommandTransport{Command: cmd, TerminateDuration: terminateWait}, cmd, func() {}, nil
}

// sandboxed confines a stdio server (SPEC §17): it may write only its cwd
// (default: a private folder removed when it stops) and read the system
// directories and its program's folder.
func (s *server) sandboxed(log *zap.Logger) (mcp.Transport, *exec.Cmd, func(), error) {
	s.m.mu.Lock()
	p := s.m.sandbox.Confining()
	s.m.mu.Unlock()
	p.Network, p.CPUSeconds = s.cfg.Network, -1
	p.Setting = "mcp.servers." + s.name + ".sandbox (with tools.exec.sandbox)"
	cleanup := func() {}
	dir := config.ExpandHome(s.cfg.Cwd)
	if dir == "" {
		d, err := os.MkdirTemp("", "herald-mcp-"+s.name+"-")
		if err != nil {
			return nil, nil, nil, fmt.Errorf("sandbox folder: %w", err)
		}
		dir, cleanup = d, func() { _ = os.RemoveAll(d) }
	}
	env := s.environ()
	var ro []string
	if prog, err := exec.LookPath(s.cfg.Command); err == nil {
		if abs, err := filepath.Abs(prog); err == nil {
			if real, err := filepath.EvalSymlinks(abs); err == nil && !underSystemDirs(real) {
				ro = append(ro, filepath.Dir(real))
			}
			if !underSystemDirs(abs) {
				ro = append(ro, filepath.Dir(abs))
			}
		}
	}
	c, err := sandbox.Command(context.Background(), sandbox.Spec{Policy: p, Dir: dir, ReadOnly: ro, Env: env,
		Argv: append([]string{s.cfg.Command}, s.cfg.Args...)})
	if err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	c.Stderr = &lineLogger{log: log}
	c.WaitDelay = terminateWait
	return &mcp.CommandTransport{Command: c.Cmd, TerminateDuration: terminateWait}, c.Cmd,
		func() { c.Cleanup(); cleanup() }, nil
}

// underSystemDirs reports whether p lies in a directory every sandbox shows.
func underSystemDirs(p string) bool {
	for _, d := range []string{"/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/"} {
		if strings.HasPrefix(p, d) {
			return true
		}
	}
	return false
}

func (s *server) environ() []string {
	env := make([]string, 0, len(envPassthrough)+len(s.cfg.Env))
	for _, k := range envPassthrough {
		if v, ok := os.LookupEnv(k); ok {
			if _, own := s.cfg.Env[k]; !own {
				env = append(env, k+"="+v)
			}
		}
	}
	keys := make([]string, 0, len(s.cfg.Env))
	for k := range s.cfg.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+s.cfg.Env[k].Value())
	}
	return env
}

// headerTransport adds the configured headers to every request, and bounds
// the DELETE that ends a session (the SDK sends it without a deadline, so a
// server that never answers would hold shutdown).
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]config.Secret
}

// deleteWait bounds the session's closing DELETE.
const deleteWait = 3 * time.Second

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodDelete {
		r = r.Clone(r.Context())
		for k, v := range t.headers {
			r.Header.Set(k, v.Value())
		}
		return t.base.RoundTrip(r)
	}
	ctx, cancel := context.WithTimeout(r.Context(), deleteWait)
	defer cancel()
	r = r.Clone(ctx)
	for k, v := range t.headers {
		r.Header.Set(k, v.Value())
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	// Nobody reads a DELETE's body: drain a little and close it here.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	resp.Body = http.NoBody
	return resp, nil
}

func transportOf(rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		return http.DefaultTransport
	}
	return rt
}

// lineLogger logs a stdio server's stderr line by line (each line capped).
type lineLogger struct {
	log *zap.Logger
	buf []byte
}

const maxLogLine = 2000

func (l *lineLogger) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			if len(l.buf) > maxLogLine {
				l.emit(l.buf)
				l.buf = l.buf[:0]
			}
			return len(p), nil
		}
		l.emit(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
}

func (l *lineLogger) emit(line []byte) {
	line = bytes.TrimRight(line, "\r")
	if len(line) == 0 {
		return
	}
	if len(line) > maxLogLine {
		line = line[:maxLogLine]
	}
	l.log.Info("MCP server stderr", zap.ByteString("line", line))
}
