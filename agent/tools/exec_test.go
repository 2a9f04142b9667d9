//go:build unix

package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/sandbox"
)

func runExec(t *testing.T, ctx context.Context, opts Options, args map[string]any) (execResult, error) {
	t.Helper()
	cc, _ := newWorkspace(t)
	raw, _ := json.Marshal(args)
	out, err := NewExec(opts).Call(ctx, cc, raw)
	if err != nil {
		return execResult{}, err
	}
	var res execResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("exec result %s: %v", out, err)
	}
	return res, nil
}

// mechanisms are the sandbox mechanisms that work here, "off" first; a
// test of process clean-up runs under each.
func mechanisms(t *testing.T) []string {
	r := sandbox.Probe()
	out := []string{sandbox.Off}
	for _, m := range []struct {
		name string
		st   sandbox.Status
	}{{sandbox.Bwrap, r.Bwrap}, {sandbox.Landlock, r.Landlock}} {
		if m.st.OK {
			out = append(out, m.name)
		} else {
			t.Logf("sandbox %s does not work here (%s): not tested", m.name, m.st.Detail)
		}
	}
	return out
}

// sleeper returns a command word that starts a sleep recognisable on the
// host (its argument is unique), whatever pid namespace it runs in.
func sleeper() string {
	return fmt.Sprintf("sleep 1000.%06d", rand.IntN(1000000))
}

// assertGone waits (bounded) until no process runs the given sleep
// command line; a zombie counts as gone, since it has already died.
func assertGone(t *testing.T, sleep string) {
	t.Helper()
	want := strings.ReplaceAll(sleep, " ", "\x00")
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := processesRunning(want)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range pids {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("%q (pids %v) still runs after exec returned", sleep, pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processesRunning lists the live processes whose command line is cmdline
// (NUL-separated, written with \x00).
func processesRunning(cmdline string) []int {
	want := strings.ReplaceAll(cmdline, "\\x00", "\x00")
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || strings.TrimRight(string(b), "\x00") != want {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:])); len(f) > 0 && f[0] == "Z" {
				continue
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

func TestExecBasics(t *testing.T) {
	t.Setenv("HERALD_TEST_SECRET", "sk-do-not-leak")
	tests := []struct {
		name     string
		command  string
		wantCode int
		want     string
	}{
		{"stdout and stderr combined", "echo out; echo err >&2", 0, "out\nerr\n"},
		{"exit code", "echo bye; exit 3", 3, "bye\n"},
		{"secrets not in env", `echo "[$HERALD_TEST_SECRET]"`, 0, "[]\n"},
		{"stdin is empty", "cat; echo done", 0, "done\n"},
		{"runs in the workspace", "basename \"$(pwd)\"", 0, "ws\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := runExec(t, context.Background(), Options{}, map[string]any{"command": tt.command})
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tt.wantCode || res.Output != tt.want || res.TimedOut || res.Truncated {
				t.Fatalf("got %+v, want exit %d output %q", res, tt.wantCode, tt.want)
			}
		})
	}
}

// runSleeper runs command (with %s for a sleeper, and "$GO" for a FIFO
// in the workspace that opens once the sleeper runs on the host) under the
// sandbox mechanism mech, and returns the result and the sleeper.
func runSleeper(t *testing.T, mech string, opts Options, command string, args map[string]any) (execResult, string) {
	t.Helper()
	cc, _ := newWorkspace(t)
	fifo := cc.Workspace + "/go"
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sleep := sleeper()
	opened := make(chan bool, 1)
	go func() {
		// Open the FIFO (letting the command go on) once the sleeper runs;
		// on the deadline open it anyway, so the command never hangs.
		seen := waitUntil(10*time.Second, func() bool { return len(processesRunning(strings.ReplaceAll(sleep, " ", "\\x00"))) > 0 })
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		opened <- seen
	}()
	a := map[string]any{"command": strings.ReplaceAll(fmt.Sprintf(command, sleep), "$GO", "go")}
	maps.Copy(a, args)
	opts.Sandbox.Mechanism = mech
	raw, _ := json.Marshal(a)
	out, err := NewExec(opts).Call(context.Background(), cc, raw)
	if err != nil {
		t.Fatal(err)
	}
	if !<-opened {
		t.Fatalf("the sleeper %q never ran; output %s", sleep, out)
	}
	var res execResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("exec result %s: %v", out, err)
	}
	return res, sleep
}

func waitUntil(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	for _, mech := range mechanisms(t) {
		tests := []struct {
			name string
			opts Options
			cmd  string
			args map[string]any
		}{
			{"config timeout", Options{ExecTimeout: 2 * time.Second}, "%s & : <$GO; wait", nil},
			{"call lowers timeout", Options{ExecTimeout: time.Hour}, "%s & : <$GO; wait", map[string]any{"timeoutSeconds": 1}},
			{"setsid escapes the group", Options{ExecTimeout: 2 * time.Second}, "setsid %s & : <$GO; wait", nil},
		}
		for _, tt := range tests {
			if mech == sandbox.Off && strings.HasPrefix(tt.cmd, "setsid") {
				continue // unconfined: only the process group is killed
			}
			t.Run(mech+"/"+tt.name, func(t *testing.T) {
				res, sleep := runSleeper(t, mech, tt.opts, tt.cmd, tt.args)
				if !res.TimedOut || res.ExitCode == 0 {
					t.Fatalf("want timedOut and a failing exit code, got %+v", res)
				}
				if !strings.Contains(res.Output, "timeout]") {
					t.Fatalf("output does not say it was killed: %q", res.Output)
				}
				assertGone(t, sleep)
			})
		}
	}
}

func TestExecKillsLeftoverBackgroundJobs(t *testing.T) {
	for _, mech := range mechanisms(t) {
		for _, form := range []string{"%s >/dev/null 2>&1 &", "setsid %s >/dev/null 2>&1 &", "nohup %s >/dev/null 2>&1 &",
			"(setsid sh -c '%s & ' &) >/dev/null 2>&1"} {
			if mech == sandbox.Off && form != "%s >/dev/null 2>&1 &" {
				continue // unconfined: only the process group is killed
			}
			t.Run(mech+"/"+form, func(t *testing.T) {
				res, sleep := runSleeper(t, mech, Options{}, form+"\n: <$GO; echo started", nil)
				if res.TimedOut || res.ExitCode != 0 || res.Output != "started\n" {
					t.Fatalf("got %+v", res)
				}
				assertGone(t, sleep)
			})
		}
	}
}

func TestExecContextCancel(t *testing.T) {
	for _, mech := range mechanisms(t) {
		t.Run(mech, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cc, _ := newWorkspace(t)
			sleep := sleeper()
			errc := make(chan error, 1)
			command := "setsid " + sleep + " & echo started > started.txt; wait"
			if mech == sandbox.Off {
				command = strings.TrimPrefix(command, "setsid ") // unconfined: only the process group is killed
			}
			raw, _ := json.Marshal(map[string]string{"command": command})
			go func() {
				_, err := NewExec(Options{Sandbox: sandbox.Policy{Mechanism: mech}}).Call(ctx, cc, raw)
				errc <- err
			}()
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("command did not start")
				}
				if b, _ := os.ReadFile(cc.Workspace + "/started.txt"); len(b) > 0 && len(processesRunning(strings.ReplaceAll(sleep, " ", "\\x00"))) > 0 {
					break
				}
			}
			cancel()
			err := <-errc
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("want context.Canceled, got %v", err)
			}
			assertGone(t, sleep)
		})
	}
}

func TestExecOutputCap(t *testing.T) {
	res, err := runExec(t, context.Background(), Options{ExecMaxOutput: 1000},
		map[string]any{"command": "echo START; i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done; echo END"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || !strings.Contains(res.Output, "[output truncated:") {
		t.Fatalf("want truncation note, got %d bytes, truncated=%v", len(res.Output), res.Truncated)
	}
	if !strings.HasPrefix(res.Output, "START\n") || !strings.HasSuffix(res.Output, "END\n") {
		t.Fatalf("want head and tail kept, got %q…%q", res.Output[:20], res.Output[len(res.Output)-20:])
	}
	if len(res.Output) > 1100 {
		t.Fatalf("output %d bytes, cap 1000", len(res.Output))
	}
}

func TestExecBadArgs(t *testing.T) {
	for _, raw := range []string{`{}`, `{"command":"  "}`, `{"command":["ls"]}`, `{"command":"ls","timeoutSeconds":"x"}`} {
		cc, _ := newWorkspace(t)
		_, err := NewExec(Options{}).Call(context.Background(), cc, json.RawMessage(raw))
		if !errors.Is(err, ErrBadArguments) {
			t.Fatalf("%s: want ErrBadArguments, got %v", raw, err)
		}
	}
}

func TestCapBuffer(t *testing.T) {
	tests := []struct {
		writes []string
		want   string
		trunc  bool
	}{
		{[]string{"abc"}, "abc", false},
		{[]string{"abcdefgh"}, "abcdefgh", false},
		{[]string{"abcd", "efghij"}, "abcd\n[output truncated: 2 of 10 bytes omitted here]\nghij", true},
		{[]string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}, "abcd\n[output truncated: 1 of 9 bytes omitted here]\nfghi", true},
		{[]string{"abcdefghijklmnop"}, "abcd\n[output truncated: 8 of 16 bytes omitted here]\nmnop", true},
		{[]string{"abcdef", "gh", "ijk"}, "abcd\n[output truncated: 3 of 11 bytes omitted here]\nhijk", true},
		{[]string{"abcdefg", "hijkl", "m"}, "abcd\n[output truncated: 5 of 13 bytes omitted here]\njklm", true},
	}
	for _, tt := range tests {
		b := newCapBuffer(8)
		for _, w := range tt.writes {
			b.Write([]byte(w))
		}
		got, trunc := b.String()
		if got != tt.want || trunc != tt.trunc {
			t.Errorf("writes %q: got %q %v, want %q %v", tt.writes, got, trunc, tt.want, tt.trunc)
		}
	}
}

const (
	envFakeGateway   = "HERALD_TEST_EXEC_FAKE_GATEWAY" // the sandbox mechanism
	envFakeSleep     = "HERALD_TEST_EXEC_FAKE_SLEEP"
	envFakeWorkspace = "HERALD_TEST_EXEC_FAKE_WORKSPACE" // the caller's temp dir: the killed process removes nothing
)

// TestExecFakeGateway is the process TestExecDiesWithGateway kills: a
// "gateway" running one exec call that leaves background processes.
func TestExecFakeGateway(t *testing.T) {
	mech := os.Getenv(envFakeGateway)
	if mech == "" {
		t.Skip("the helper process of TestExecDiesWithGateway")
	}
	sleep := os.Getenv(envFakeSleep)
	raw, _ := json.Marshal(map[string]string{"command": "setsid " + sleep + " >/dev/null 2>&1 & nohup " + sleep + " >/dev/null 2>&1 & wait"})
	cc := agent.CallContext{AgentID: "main", Workspace: os.Getenv(envFakeWorkspace)}
	_, _ = NewExec(Options{ExecTimeout: time.Hour, Sandbox: sandbox.Policy{Mechanism: mech}}).Call(context.Background(), cc, raw)
	t.Fatal("the command ended before the gateway was killed")
}

// TestExecDiesWithGateway: a gateway killed by SIGKILL while a sandboxed
// command runs leaves none of the command's processes behind (bwrap:
// --die-with-parent and the pid namespace; Landlock: the helper's death
// signal and subreaper).
func TestExecDiesWithGateway(t *testing.T) {
	for _, mech := range mechanisms(t) {
		if mech == sandbox.Off {
			continue // unconfined: processes outside the group outlive the gateway
		}
		t.Run(mech, func(t *testing.T) {
			sleep := sleeper()
			cmd := exec.Command(os.Args[0], "-test.run=^TestExecFakeGateway$", "-test.count=1")
			cmd.Env = append(os.Environ(), envFakeGateway+"="+mech, envFakeSleep+"="+sleep, envFakeWorkspace+"="+t.TempDir())
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			want := strings.ReplaceAll(sleep, " ", "\\x00")
			if !waitUntil(20*time.Second, func() bool { return len(processesRunning(want)) == 2 }) {
				t.Fatalf("the fake gateway's sleepers did not start (running: %v)", processesRunning(want))
			}
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			assertGone(t, sleep)
		})
	}
}
