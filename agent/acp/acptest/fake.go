// Package acptest is a fake ACP coding agent for tests: a program built on
// the agent side of github.com/coder/acp-go-sdk that a test binary runs as
// itself (Main, under an environment variable) so the real client, the
// sandbox and the gateway drive it exactly as they drive Codex or Claude
// Code.
//
// It must not be imported by production code.
package acptest

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	sdk "github.com/coder/acp-go-sdk"
)

// EnvMode is the variable that turns a test binary into the fake agent
// (put it in runtime.env); its value is the mode:
//
//	work       plan, a message, a tool call asking permission to write
//	           hello.txt; writes it when allowed; ends end_turn with usage
//	slow       writes prompted-slow.txt in its cwd, says a message, then
//	           waits for session/cancel (writes cancelled.txt in its cwd
//	           when it comes) and answers cancelled
//	slow-noload  slow (prompted-slow-noload.txt), by an agent that does
//	           not advertise loadSession
//	slow-lost  slow (prompted-slow-lost.txt), by an agent that advertises
//	           loadSession but has lost every session (session/load:
//	           resource not found)
//	hold-new   holds session/new (after writing held-new.txt in the
//	           session's cwd) until it is killed; once held-new.txt exists
//	           it opens its session and answers "Started over: <prompt>"
//	exit-init  exits during initialize, after a line on stderr
//	garbage    answers initialize with a line that is not JSON-RPC, then nothing
//	silent     reads its input and never answers
//	outside    asks to read /etc/hostname and a ../ path; reports what it got,
//	           whether it can read the ../ path itself, and its variables
//	terminal   runs terminals: a command writing a file and printing
//	           its cwd and a variable, one in a folder outside the
//	           workspace, one it kills; reports what each gave
//	nousage    like work without permission, and reports no usage
//	costly     like nousage, but reports usage and its session's cost:
//	           its text, then usage_update with the running total ($0.02, then $0.05
//	           after the first prompt; +$0.03 each prompt after it)
//	kept       like nousage, but its session's running cost survives
//	           session/load (kept in cost-total.txt in its cwd, not
//	           replayed): $0.05 after its first prompt, +$0.03 each
//	           prompt after it, in this process or a later one
//	spender    reports its session's running cost $0.02, then $0.05 during
//	           its prompt, then waits for session/cancel (up to 30 s; then
//	           it says "Spent it all." and ends end_turn) and answers
//	           cancelled
//	euro       like costly with its cost in EUR
//	tokens     like nousage, but reports usage (no cost)
//	chatty     ChattyUpdates session/updates at once: per step a message
//	           chunk and a tool call that starts and completes (3 each)
//	auth       refuses session/new: authentication required
//	envauth    offers the env_var login "fake-key" (FAKE_KEY) and refuses
//	           session/new until it was used with FAKE_KEY set; then
//	           like tokens
//	live       a message and a tool call in progress, then waits for go.txt
//	           in its cwd; then the call completes and a final message in
//	           two chunks (a test watches it live)
const EnvMode = "HERALD_ACPFAKE"

// ChattyUpdates is how many session/updates mode chatty sends.
const ChattyUpdates = 3000

// Main runs the fake agent when EnvMode is set and returns false
// otherwise; call it first in TestMain:
//
//	if acptest.Main() { return }
func Main() bool {
	mode := os.Getenv(EnvMode)
	if mode == "" {
		return false
	}
	switch mode {
	case "exit-init":
		// Wait for initialize, then die.
		buf := make([]byte, 1)
		_, _ = os.Stdin.Read(buf)
		fmt.Fprintln(os.Stderr, "fatal: not logged in (run `fake login`)")
		os.Exit(3)
	case "garbage":
		buf := make([]byte, 1)
		_, _ = os.Stdin.Read(buf)
		fmt.Println("this is not JSON-RPC {")
		select {}
	case "silent":
		buf := make([]byte, 4096)
		for {
			if _, err := os.Stdin.Read(buf); err != nil {
				os.Exit(0)
			}
		}
	}
	a := &fake{mode: mode, cancel: make(chan struct{})}
	// The connection reads (and runs handlers, which use a.conn) as soon
	// as it is made: nothing is read until a.conn is set. Without this a
	// loaded machine ran session/prompt with a nil a.conn.
	set := make(chan struct{})
	a.conn = sdk.NewAgentSideConnection(a, os.Stdout, readAfter{set, os.Stdin})
	close(set)
	<-a.conn.Done()
	os.Exit(0)
	return true
}

// readAfter reads r once set is closed.
type readAfter struct {
	set <-chan struct{}
	r   io.Reader
}

func (g readAfter) Read(b []byte) (int, error) {
	<-g.set
	return g.r.Read(b)
}

type fake struct {
	mode   string
	conn   *sdk.AgentSideConnection
	cwd    string
	n      int
	loaded bool    // session/load came: the next prompt finishes at once
	authed bool    // envauth: authenticate with fake-key came, FAKE_KEY set
	kept   float64 // kept: the session's running cost
	cancel chan struct{}
	once   sync.Once // closes cancel
}

var _ sdk.Agent = (*fake)(nil)
var _ sdk.AgentLoader = (*fake)(nil)

func (a *fake) Initialize(context.Context, sdk.InitializeRequest) (sdk.InitializeResponse, error) {
	title := "Fake ACP agent"
	methods := []sdk.AuthMethod{}
	if a.mode == "envauth" {
		methods = append(methods, sdk.AuthMethod{Agent: &sdk.AuthMethodAgent{Id: "login", Name: "Log in"}},
			sdk.AuthMethod{EnvVar: &sdk.AuthMethodEnvVarInline{Id: "fake-key", Name: "Use FAKE_KEY", Vars: []sdk.AuthEnvVar{{Name: "FAKE_KEY"}}}})
	}
	return sdk.InitializeResponse{ProtocolVersion: sdk.ProtocolVersionNumber,
		AgentInfo:         &sdk.Implementation{Name: "acpfake", Title: &title, Version: "0.1.0"},
		AgentCapabilities: sdk.AgentCapabilities{LoadSession: a.mode != "slow-noload"}, AuthMethods: methods}, nil
}

func (a *fake) Authenticate(_ context.Context, r sdk.AuthenticateRequest) (sdk.AuthenticateResponse, error) {
	if r.MethodId != "fake-key" || os.Getenv("FAKE_KEY") == "" {
		return sdk.AuthenticateResponse{}, sdk.NewInvalidParams(map[string]any{"methodId": r.MethodId})
	}
	a.authed = true
	return sdk.AuthenticateResponse{}, nil
}

func (a *fake) NewSession(ctx context.Context, r sdk.NewSessionRequest) (sdk.NewSessionResponse, error) {
	if a.mode == "auth" || a.mode == "envauth" && !a.authed {
		return sdk.NewSessionResponse{}, sdk.NewAuthRequired(map[string]any{"hint": "run fake login"})
	}
	if held := filepath.Join(r.Cwd, "held-new.txt"); a.mode == "hold-new" {
		if _, err := os.Stat(held); err != nil {
			// The first process: hold session/new until it is killed.
			_ = os.WriteFile(held, []byte("held"), 0o600)
			<-ctx.Done()
			return sdk.NewSessionResponse{}, ctx.Err()
		}
	}
	a.cwd = r.Cwd
	return sdk.NewSessionResponse{SessionId: "fake-session-1"}, nil
}

func (a *fake) LoadSession(ctx context.Context, r sdk.LoadSessionRequest) (sdk.LoadSessionResponse, error) {
	if a.mode == "slow-lost" {
		return sdk.LoadSessionResponse{}, &sdk.RequestError{Code: -32002, Message: "Resource not found: " + string(r.SessionId)}
	}
	a.cwd, a.loaded = r.Cwd, true
	if a.mode == "kept" {
		b, _ := os.ReadFile(filepath.Join(r.Cwd, "cost-total.txt"))
		_, _ = fmt.Sscanf(string(b), "%g", &a.kept)
	}
	// Replay: the client must not write it to its transcript again.
	a.say(ctx, r.SessionId, "(replayed history)")
	_ = os.WriteFile(filepath.Join(r.Cwd, "loaded.txt"), []byte(string(r.SessionId)), 0o600)
	return sdk.LoadSessionResponse{}, nil
}

func (a *fake) Cancel(_ context.Context, r sdk.CancelNotification) error {
	a.once.Do(func() { close(a.cancel) })
	_ = os.WriteFile(filepath.Join(a.cwd, "cancelled.txt"), []byte(string(r.SessionId)), 0o600)
	return nil
}

// cost sends the session's running cost.
func (a *fake) cost(ctx context.Context, sid sdk.SessionId, total float64, currency string) {
	_ = a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: sid, Update: sdk.SessionUpdate{UsageUpdate: &sdk.SessionUsageUpdate{
		SessionUpdate: "usage_update", Used: 1500, Size: 200000, Cost: &sdk.Cost{Amount: total, Currency: currency}}}})
}

func (a *fake) say(ctx context.Context, sid sdk.SessionId, text string) {
	_ = a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: sid, Update: sdk.UpdateAgentMessageText(text)})
}

func (a *fake) Prompt(ctx context.Context, p sdk.PromptRequest) (sdk.PromptResponse, error) {
	a.n++
	sid := p.SessionId
	var prompt strings.Builder
	for _, b := range p.Prompt {
		if b.Text != nil {
			prompt.WriteString(b.Text.Text)
		}
	}
	usage := &sdk.Usage{InputTokens: 1200, OutputTokens: 300, TotalTokens: 1500}
	if a.mode == "costly" || a.mode == "euro" {
		cur := map[bool]string{true: "EUR", false: "USD"}[a.mode == "euro"]
		if a.n == 1 {
			// Its text first: a cost past a budget makes the client send
			// session/cancel, which cancels ctx here, and an update sent
			// after that is dropped.
			a.say(ctx, sid, "Done, and it cost something.")
			a.cost(ctx, sid, 0.02, cur)
			a.cost(ctx, sid, 0.05, cur)
			return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn, Usage: usage}, nil
		}
		a.cost(ctx, sid, 0.05+0.03*float64(a.n-1), cur)
	}
	if a.mode == "spender" {
		a.cost(ctx, sid, 0.02, "USD")
		a.say(ctx, sid, "Spending. ")
		a.cost(ctx, sid, 0.05, "USD")
		select {
		case <-a.cancel:
			a.say(ctx, sid, "Cancelled.")
			return sdk.PromptResponse{StopReason: sdk.StopReasonCancelled, Usage: usage}, nil
		case <-time.After(30 * time.Second):
			a.say(ctx, sid, "Spent it all.")
			return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn, Usage: usage}, nil
		}
	}
	if a.mode == "kept" {
		a.kept += map[bool]float64{true: 0.05, false: 0.03}[a.kept == 0]
		_ = os.WriteFile(filepath.Join(a.cwd, "cost-total.txt"), []byte(fmt.Sprint(a.kept)), 0o600)
		a.cost(ctx, sid, a.kept, "USD")
		a.say(ctx, sid, fmt.Sprintf("Running total $%.2f.", a.kept))
		return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn, Usage: usage}, nil
	}
	if a.loaded {
		a.say(ctx, sid, "Resumed and finished.")
		return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn, Usage: usage}, nil
	}
	if a.mode == "hold-new" {
		a.say(ctx, sid, "Started over: "+prompt.String())
		return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn, Usage: usage}, nil
	}
	if a.n > 1 {
		a.say(ctx, sid, "Got: "+prompt.String())
		return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn, Usage: usage}, nil
	}
	switch a.mode {
	case "slow", "slow-noload", "slow-lost":
		_ = os.WriteFile(filepath.Join(a.cwd, "prompted-"+a.mode+".txt"), []byte(sid), 0o600)
		a.say(ctx, sid, "Starting a long job.")
		select {
		case <-ctx.Done():
			return sdk.PromptResponse{StopReason: sdk.StopReasonCancelled}, nil
		case <-time.After(time.Minute):
			return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn}, nil
		}
	case "outside":
		var got []string
		for _, path := range []string{"/etc/hostname", filepath.Join(a.cwd, "..", "secret.txt")} {
			r, err := a.conn.ReadTextFile(ctx, sdk.ReadTextFileRequest{SessionId: sid, Path: path})
			if err != nil {
				got = append(got, "refused "+path+": "+err.Error())
			} else {
				got = append(got, "READ "+path+": "+r.Content)
			}
		}
		// What the sandbox lets it do by itself: read next to its
		// workspace, and which variables it has.
		if b, err := os.ReadFile(filepath.Join(a.cwd, "..", "secret.txt")); err == nil {
			got = append(got, "DIRECT READ: "+string(b))
		} else {
			got = append(got, "direct read failed")
		}
		var names []string
		for _, kv := range os.Environ() {
			k, _, _ := strings.Cut(kv, "=")
			names = append(names, k)
		}
		sort.Strings(names)
		got = append(got, "env: "+strings.Join(names, ","))
		a.say(ctx, sid, strings.Join(got, "\n"))
		return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn, Usage: usage}, nil
	case "terminal":
		a.say(ctx, sid, a.terminals(ctx, sid))
		return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn, Usage: usage}, nil
	case "live":
		a.say(ctx, sid, "Reading the code.")
		_ = a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: sid, Update: sdk.StartToolCall("call_1", "Read main.go",
			sdk.WithStartKind(sdk.ToolKindRead), sdk.WithStartStatus(sdk.ToolCallStatusInProgress))})
		for {
			if _, err := os.Stat(filepath.Join(a.cwd, "go.txt")); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return sdk.PromptResponse{StopReason: sdk.StopReasonCancelled}, nil
			case <-time.After(20 * time.Millisecond):
			}
		}
		_ = a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: sid, Update: sdk.UpdateToolCall("call_1",
			sdk.WithUpdateStatus(sdk.ToolCallStatusCompleted))})
		a.say(ctx, sid, "All done: ")
		a.say(ctx, sid, "main.go is fine.")
		return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn, Usage: usage}, nil
	case "nousage":
		a.say(ctx, sid, "Done without counting.")
		return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn}, nil
	case "chatty":
		for i := range ChattyUpdates / 3 {
			id := sdk.ToolCallId(fmt.Sprintf("call_%d", i))
			a.say(ctx, sid, fmt.Sprintf("step %d. ", i))
			_ = a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: sid, Update: sdk.StartToolCall(id, "Read file.go",
				sdk.WithStartKind(sdk.ToolKindRead), sdk.WithStartStatus(sdk.ToolCallStatusInProgress))})
			_ = a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: sid, Update: sdk.UpdateToolCall(id,
				sdk.WithUpdateStatus(sdk.ToolCallStatusCompleted))})
		}
		a.say(ctx, sid, "Done chatting.")
		return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn, Usage: usage}, nil
	case "tokens", "envauth":
		a.say(ctx, sid, "Done, counting tokens only.")
		return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn, Usage: usage}, nil
	}
	_ = a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: sid, Update: sdk.UpdatePlan(
		sdk.PlanEntry{Content: "write hello.txt", Priority: sdk.PlanEntryPriorityHigh, Status: sdk.PlanEntryStatusPending})})
	a.say(ctx, sid, "I will write hello.txt.")
	path := filepath.Join(a.cwd, "hello.txt")
	_ = a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: sid, Update: sdk.StartToolCall("call_1", "Write hello.txt",
		sdk.WithStartKind(sdk.ToolKindEdit), sdk.WithStartStatus(sdk.ToolCallStatusPending),
		sdk.WithStartRawInput(map[string]any{"path": path, "content": "hello from acpfake"}))})
	title, kind := "Write hello.txt", sdk.ToolKindEdit
	resp, err := a.conn.RequestPermission(ctx, sdk.RequestPermissionRequest{SessionId: sid,
		ToolCall: sdk.ToolCallUpdate{ToolCallId: "call_1", Title: &title, Kind: &kind, RawInput: map[string]any{"path": path}},
		Options: []sdk.PermissionOption{
			{Kind: sdk.PermissionOptionKindAllowOnce, Name: "Allow", OptionId: "allow"},
			{Kind: sdk.PermissionOptionKindRejectOnce, Name: "Reject", OptionId: "reject"},
		}})
	switch {
	case err != nil || resp.Outcome.Cancelled != nil:
		return sdk.PromptResponse{StopReason: sdk.StopReasonCancelled}, nil
	case resp.Outcome.Selected != nil && resp.Outcome.Selected.OptionId == "allow":
		if _, err := a.conn.WriteTextFile(ctx, sdk.WriteTextFileRequest{SessionId: sid, Path: path, Content: "hello from acpfake"}); err != nil {
			return sdk.PromptResponse{}, err
		}
		_ = a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: sid, Update: sdk.UpdateToolCall("call_1",
			sdk.WithUpdateStatus(sdk.ToolCallStatusCompleted))})
		a.say(ctx, sid, "Wrote hello.txt ")
		a.say(ctx, sid, "with a greeting.")
	default:
		_ = a.conn.SessionUpdate(ctx, sdk.SessionNotification{SessionId: sid, Update: sdk.UpdateToolCall("call_1",
			sdk.WithUpdateStatus(sdk.ToolCallStatusFailed))})
		a.say(ctx, sid, "Permission denied; nothing written.")
	}
	return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn, Usage: usage}, nil
}

func (a *fake) CloseSession(context.Context, sdk.CloseSessionRequest) (sdk.CloseSessionResponse, error) {
	return sdk.CloseSessionResponse{}, nil
}
func (a *fake) ListSessions(context.Context, sdk.ListSessionsRequest) (sdk.ListSessionsResponse, error) {
	return sdk.ListSessionsResponse{}, nil
}
func (a *fake) ResumeSession(context.Context, sdk.ResumeSessionRequest) (sdk.ResumeSessionResponse, error) {
	return sdk.ResumeSessionResponse{}, nil
}
func (a *fake) SetSessionConfigOption(context.Context, sdk.SetSessionConfigOptionRequest) (sdk.SetSessionConfigOptionResponse, error) {
	return sdk.SetSessionConfigOptionResponse{}, nil
}
func (a *fake) SetSessionMode(context.Context, sdk.SetSessionModeRequest) (sdk.SetSessionModeResponse, error) {
	return sdk.SetSessionModeResponse{}, nil
}

// terminals runs mode terminal's commands and says what each gave.
func (a *fake) terminals(ctx context.Context, sid sdk.SessionId) string {
	var got []string
	sub := filepath.Join(a.cwd, "sub")
	_ = os.Mkdir(sub, 0o700)
	t, err := a.conn.CreateTerminal(ctx, sdk.CreateTerminalRequest{SessionId: sid, Command: "/bin/sh", Cwd: &sub,
		Args: []string{"-c", "echo made > ../made.txt; echo \"cwd=$(pwd) foo=$FOO\"; echo kept > $HOME/kept.txt; exit 3"},
		Env:  []sdk.EnvVariable{{Name: "FOO", Value: "bar"}}})
	if err != nil {
		return "create: " + err.Error()
	}
	w, err := a.conn.WaitForTerminalExit(ctx, sdk.WaitForTerminalExitRequest{SessionId: sid, TerminalId: t.TerminalId})
	if err != nil || w.ExitCode == nil {
		return fmt.Sprintf("wait: %+v %v", w, err)
	}
	out, err := a.conn.TerminalOutput(ctx, sdk.TerminalOutputRequest{SessionId: sid, TerminalId: t.TerminalId})
	got = append(got, fmt.Sprintf("exit %d, output %q, truncated %v, err %v", *w.ExitCode, out.Output, out.Truncated, err))
	_, err = a.conn.ReleaseTerminal(ctx, sdk.ReleaseTerminalRequest{SessionId: sid, TerminalId: t.TerminalId})
	_, err2 := a.conn.TerminalOutput(ctx, sdk.TerminalOutputRequest{SessionId: sid, TerminalId: t.TerminalId})
	got = append(got, fmt.Sprintf("released: %v; output after: %v", err, err2 != nil))

	outside := filepath.Dir(a.cwd)
	_, err = a.conn.CreateTerminal(ctx, sdk.CreateTerminalRequest{SessionId: sid, Command: "ls", Cwd: &outside})
	got = append(got, fmt.Sprintf("outside: %v", err))

	t, err = a.conn.CreateTerminal(ctx, sdk.CreateTerminalRequest{SessionId: sid, Command: "sleep", Args: []string{"60"}})
	if err != nil {
		return strings.Join(append(got, "sleep: "+err.Error()), "\n")
	}
	_, err = a.conn.KillTerminal(ctx, sdk.KillTerminalRequest{SessionId: sid, TerminalId: t.TerminalId})
	w, err2 = a.conn.WaitForTerminalExit(ctx, sdk.WaitForTerminalExitRequest{SessionId: sid, TerminalId: t.TerminalId})
	killed := "?"
	if w.Signal != nil {
		killed = "signal " + *w.Signal
	} else if w.ExitCode != nil {
		killed = fmt.Sprintf("exit %d", *w.ExitCode)
	}
	got = append(got, fmt.Sprintf("killed: %v, %s, %v", err, killed, err2))
	// Left running on purpose: the job's end must end it.
	_, err = a.conn.CreateTerminal(ctx, sdk.CreateTerminalRequest{SessionId: sid, Command: "sleep", Args: []string{"61"}})
	got = append(got, fmt.Sprintf("left running: %v", err))
	return strings.Join(got, "\n")
}
