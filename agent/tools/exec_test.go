//go:build unix

package tools

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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

var pidLine = regexp.MustCompile(`(?m)^pid=(\d+)$`)

// assertGone waits (bounded) until pid no longer runs; a zombie counts as
// gone, since it has already died.
func assertGone(t *testing.T, output string) {
	t.Helper()
	m := pidLine.FindStringSubmatch(output)
	if m == nil {
		t.Fatalf("no pid in output %q", output)
	}
	pid, _ := strconv.Atoi(m[1])
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := syscall.Kill(pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return
		}
		if st, rerr := os.ReadFile("/proc/" + m[1] + "/stat"); rerr == nil {
			if f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:])); len(f) > 0 && f[0] == "Z" {
				return
			}
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("child process %d still runs after exec returned", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
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

func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		args map[string]any
	}{
		{"config timeout", Options{ExecTimeout: 300 * time.Millisecond}, map[string]any{"command": "sleep 30 & echo pid=$!; wait"}},
		{"call lowers timeout", Options{ExecTimeout: time.Hour}, map[string]any{"command": "sleep 30 & echo pid=$!; wait", "timeoutSeconds": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := runExec(t, context.Background(), tt.opts, tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if !res.TimedOut || res.ExitCode == 0 {
				t.Fatalf("want timedOut and a failing exit code, got %+v", res)
			}
			if !strings.Contains(res.Output, "timeout]") {
				t.Fatalf("output does not say it was killed: %q", res.Output)
			}
			assertGone(t, res.Output)
		})
	}
}

func TestExecKillsLeftoverBackgroundJobs(t *testing.T) {
	res, err := runExec(t, context.Background(), Options{}, map[string]any{"command": "sleep 30 >/dev/null 2>&1 & echo pid=$!"})
	if err != nil {
		t.Fatal(err)
	}
	if res.TimedOut || res.ExitCode != 0 {
		t.Fatalf("got %+v", res)
	}
	assertGone(t, res.Output)
}

func TestExecContextCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cc, _ := newWorkspace(t)
	errc := make(chan error, 1)
	go func() {
		_, err := NewExec(Options{}).Call(ctx, cc, json.RawMessage(`{"command":"sleep 30 & echo pid=$! > pid.txt; wait"}`))
		errc <- err
	}()
	var pidFile []byte
	for deadline := time.Now().Add(10 * time.Second); len(pidFile) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("command did not start")
		}
		pidFile, _ = os.ReadFile(cc.Workspace + "/pid.txt")
	}
	cancel()
	err := <-errc
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	assertGone(t, string(pidFile))
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
