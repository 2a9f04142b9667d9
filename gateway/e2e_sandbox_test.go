//go:build linux

package gateway_test

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/agent/sandbox"
	"github.com/heraldhq/herald/store"
)

// sandboxConfig: exec allowed without approval, confined by MECH.
const sandboxConfig = `{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" } },
  security: { toolPolicy: { default: "allow", tools: { exec: "allow" } } },
  tools: { exec: { sandbox: MECH, network: NET, timeoutSeconds: 20 } },
}`

// execModel: "run: <command>" makes the model call exec with the command;
// it then answers "result: " and the tool result verbatim.
func execModel(c llmtest.Call) llmtest.Reply {
	last := c.Messages[len(c.Messages)-1]
	if len(last.ToolResults) > 0 {
		return llmtest.Reply{Text: "result: " + last.ToolResults[0].Content}
	}
	if cmd, ok := strings.CutPrefix(c.LastUser(), "run: "); ok {
		args, _ := json.Marshal(map[string]string{"command": cmd})
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "exec", Args: args}}}
	}
	return llmtest.Reply{Text: "noted"}
}

// execOutput is what one exec call printed (and its exit code), as the
// model relayed it.
type execOutput struct {
	ExitCode int    `json:"exitCode"`
	Output   string `json:"output"`
	Status   string `json:"status"` // "error" when the tool refused
	Error    string `json:"error"`
}

// runViaChat posts "run: <command>" as a new web client and returns the exec
// result the model relayed.
func runViaChat(t *testing.T, tg *testGW, command string) execOutput {
	t.Helper()
	client := fmt.Sprintf("sb%d", rand.IntN(1<<30))
	webPost(t, tg.URL, client, "run: "+command)
	text := waitText(t, tg, client, "result: ")
	var res execOutput
	if err := json.Unmarshal([]byte(strings.TrimPrefix(text, "result: ")), &res); err != nil {
		t.Fatalf("result %q: %v", text, err)
	}
	return res
}

const (
	sandboxChildEnv = "HERALD_E2E_SANDBOX_CHILD"
	e2eSecretEnv    = "HERALD_E2E_PROVIDER_KEY"
	e2eSecret       = "sk-ant-E2E-SECRET-7f3a9c"
)

// inChildWithSecret re-runs the test in a child test process whose initial
// environment holds a gateway secret (what /proc/<pid>/environ shows: a
// variable set later with os.Setenv never appears there). It reports
// whether the caller is that child and should run the test body.
func inChildWithSecret(t *testing.T) bool {
	t.Helper()
	if os.Getenv(sandboxChildEnv) != "" {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), sandboxChildEnv+"=1", e2eSecretEnv+"="+e2eSecret)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in a child process with a secret in its environment: %v\n%s", t.Name(), err, out)
	}
	t.Logf("child process:\n%s", out)
	return false
}

// workingMechanisms are the sandbox mechanisms that work here.
func workingMechanisms(t *testing.T) []string {
	r := sandbox.Probe()
	var out []string
	if r.Bwrap.OK {
		out = append(out, sandbox.Bwrap)
	} else {
		t.Logf("bwrap does not work here (%s): not tested", r.Bwrap.Detail)
	}
	if r.Landlock.OK {
		out = append(out, sandbox.Landlock)
	} else {
		t.Logf("Landlock does not work here (%s): not tested", r.Landlock.Detail)
	}
	if len(out) == 0 {
		t.Fatalf("no sandbox works on this host (%+v): scripts/bubblewrap.sh install, or a kernel with Landlock ABI 6", r)
	}
	return out
}

// TestE2ESandboxContainsAttacks: through the web chat, a model that obeys
// an injected instruction runs the attacks of issue 24 with exec; under
// each sandbox mechanism every one is contained, and a plain command still
// works in its workspace.
func TestE2ESandboxContainsAttacks(t *testing.T) {
	t.Parallel() // its gateway runs in a child process
	storeIndependent(t)
	if !inChildWithSecret(t) {
		return
	}
	if env, err := os.ReadFile("/proc/self/environ"); err != nil || !strings.Contains(string(env), e2eSecret) {
		t.Fatalf("the secret is not in this process's initial environment (%v)", err)
	}
	hup := make(chan os.Signal, 4)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	for _, mech := range workingMechanisms(t) {
		t.Run(mech, func(t *testing.T) {
			stateDir := t.TempDir()
			// The operator's config file, holding a secret, beside the state.
			cfgDir := t.TempDir()
			cfgPath := filepath.Join(cfgDir, "herald.json5")
			cfgText := strings.NewReplacer("MECH", strconv.Quote(mech), "NET", "false").Replace(sandboxConfig)
			cfgFile := "// apiKey: " + e2eSecret + "\n" + cfgText
			if err := os.WriteFile(cfgPath, []byte(cfgFile), 0o600); err != nil {
				t.Fatal(err)
			}
			tg := newTestGatewayIn(t, stateDir, cfgText, execModel)
			gw := os.Getpid()

			t.Run("parent environ", func(t *testing.T) {
				res := runViaChat(t, tg, `tr '\0' '\n' </proc/$PPID/environ; echo ppid=$PPID`)
				if strings.Contains(res.Output, e2eSecret) {
					t.Fatalf("the command read the gateway's secret: %q", res.Output)
				}
			})
			t.Run("proc environ scan", func(t *testing.T) {
				res := runViaChat(t, tg, `for f in /proc/*/environ; do tr '\0' '\n' <"$f"; done 2>/dev/null; cat /proc/`+strconv.Itoa(gw)+`/environ; echo scanned`)
				if strings.Contains(res.Output, e2eSecret) || !strings.Contains(res.Output, "scanned") {
					t.Fatalf("scan of /proc/*/environ: %q", res.Output)
				}
			})
			t.Run("config file and database", func(t *testing.T) {
				res := runViaChat(t, tg, "cat "+cfgPath+"; ls -la "+stateDir+"; head -c 64 "+filepath.Join(stateDir, "herald.db")+" | od -c | head -2")
				if _, err := os.Stat(filepath.Join(stateDir, "herald.db")); err != nil && tg.G.Store().Driver() == store.DriverSQLite {
					t.Fatalf("no herald.db in the state dir: the attack proves nothing: %v", err)
				}
				if strings.Contains(res.Output, e2eSecret) || strings.Contains(res.Output, " herald.db\n") || strings.Contains(res.Output, "S   Q   L   i   t   e") {
					t.Fatalf("read the config or the state dir: %q", res.Output)
				}
			})
			t.Run("write outside the workspace", func(t *testing.T) {
				tmpFile := fmt.Sprintf("/tmp/herald-e2e-pwned-%d", rand.IntN(1<<30))
				targets := []string{filepath.Join(stateDir, "pwned"), filepath.Join(cfgDir, "pwned"), tmpFile}
				cmd := ""
				for _, p := range targets {
					cmd += "echo pwned > " + p + "; "
				}
				runViaChat(t, tg, cmd+"echo tried")
				for _, p := range targets {
					if _, err := os.Stat(p); err == nil {
						os.Remove(p)
						t.Errorf("the command wrote %s", p)
					}
				}
			})
			t.Run("background processes end with the command", func(t *testing.T) {
				token := strconv.Itoa(rand.IntN(1 << 30))
				sleeps := []string{"sleep 1000." + token + "1", "sleep 1000." + token + "2", "sleep 1000." + token + "3"}
				fifo := "go-" + token
				opened := make(chan bool, 1)
				go func() {
					// Let the command end once every sleeper runs on the host.
					seen := waitFor(e2eWait, func() bool {
						for _, s := range sleeps {
							if len(hostProcesses(s)) == 0 {
								return false
							}
						}
						return true
					})
					var path string
					waitFor(e2eWait, func() bool { path = findFile(filepath.Join(stateDir, "workspace"), fifo); return path != "" })
					if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
						f.Close()
					}
					opened <- seen
				}()
				res := runViaChat(t, tg, "mkfifo "+fifo+"; setsid "+sleeps[0]+" >/dev/null 2>&1 & nohup "+sleeps[1]+" >/dev/null 2>&1 & "+
					"(setsid sh -c '"+sleeps[2]+" &' &) >/dev/null 2>&1; : <"+fifo+"; echo started")
				if !<-opened {
					t.Fatalf("the sleepers never ran: %+v", res)
				}
				for _, s := range sleeps {
					var left []int
					if !waitFor(10*time.Second, func() bool { left = hostProcesses(s); return len(left) == 0 }) {
						for _, pid := range left {
							syscall.Kill(pid, syscall.SIGKILL)
						}
						t.Errorf("%q (pids %v) outlived the command", s, left)
					}
				}
			})
			t.Run("edit the config and SIGHUP the gateway", func(t *testing.T) {
				runViaChat(t, tg, `sed -i 's/"allow"/"allow", tools: { exec: "allow" }/' `+cfgPath+"; kill -HUP "+strconv.Itoa(gw)+"; echo tried")
				if b, _ := os.ReadFile(cfgPath); string(b) != cfgFile {
					t.Errorf("the command edited the config file:\n%s", b)
				}
				select {
				case s := <-hup:
					t.Errorf("the gateway received %v from a command", s)
				default:
				}
			})
			t.Run("network is off", func(t *testing.T) {
				res, accepted := tryConnect(t, tg)
				if strings.Contains(res.Output, "connected") || accepted {
					t.Errorf("the command reached the host's network: %q", res.Output)
				}
			})
			t.Run("another conversation's files", func(t *testing.T) {
				token := fmt.Sprintf("s3cr3t-%d", rand.IntN(1<<30))
				if res := runViaChat(t, tg, "echo "+token+" > mine.txt && echo written"); res.Output != "written\n" {
					t.Fatalf("first conversation: %+v", res)
				}
				res := runViaChat(t, tg, "cat ../*/mine.txt; cat "+filepath.Join(stateDir, "workspace", "main", "conversations")+"/*/mine.txt; ls -R ..; echo tried")
				if strings.Contains(res.Output, token) || !strings.Contains(res.Output, "tried") {
					t.Fatalf("a second conversation read the first one's file: %q", res.Output)
				}
			})
			t.Run("agent workspace is shared read-only", func(t *testing.T) {
				shared := filepath.Join(stateDir, "workspace", "main", "TOOLS.md")
				if err := os.WriteFile(shared, []byte("use the force\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				res := runViaChat(t, tg, "cat "+shared+"; echo planted >> "+shared+"; echo tried")
				if !strings.Contains(res.Output, "use the force") {
					t.Errorf("the agent's shared file is not readable: %q", res.Output)
				}
				if b, _ := os.ReadFile(shared); string(b) != "use the force\n" {
					t.Errorf("a command wrote the agent workspace: %q", b)
				}
			})
			t.Run("plain command works in its workspace", func(t *testing.T) {
				name := fmt.Sprintf("f%d", rand.IntN(1<<30))
				res := runViaChat(t, tg, "echo hi > "+name+" && cat "+name)
				if res.ExitCode != 0 || res.Output != "hi\n" {
					t.Fatalf("got %+v", res)
				}
				if p := findFile(filepath.Join(stateDir, "workspace"), name); p == "" {
					t.Errorf("%s is not in the agent's workspace", name)
				}
			})
		})
	}
}

// TestE2ESandboxNetworkWhenAllowed: tools.exec.network: true lets a
// command reach the host's network (the check of "network is off" above
// can fail).
func TestE2ESandboxNetworkWhenAllowed(t *testing.T) {
	t.Parallel()
	storeIndependent(t)
	for _, mech := range workingMechanisms(t) {
		t.Run(mech, func(t *testing.T) {
			tg := newTestGateway(t, strings.NewReplacer("MECH", strconv.Quote(mech), "NET", "true").Replace(sandboxConfig), execModel)
			res, accepted := tryConnect(t, tg)
			if !strings.Contains(res.Output, "connected") || !accepted {
				t.Errorf("with network: true the command could not connect: %+v", res)
			}
		})
	}
}

// TestE2ESandboxUnavailableRefusesExec: on a host where no mechanism works,
// exec is refused with a result naming tools.exec.sandbox, and the turn is
// still answered.
func TestE2ESandboxUnavailableRefusesExec(t *testing.T) {
	storeIndependent(t)
	restore := sandbox.OverrideProbe(sandbox.Report{
		Bwrap:    sandbox.Status{Detail: "test: bwrap is not installed"},
		Landlock: sandbox.Status{Detail: "test: the kernel has no Landlock"},
	})
	defer restore()
	for _, mech := range []string{sandbox.Auto, sandbox.Landlock} {
		t.Run(mech, func(t *testing.T) {
			tg := newTestGateway(t, strings.NewReplacer("MECH", strconv.Quote(mech), "NET", "false").Replace(sandboxConfig), execModel)
			res := runViaChat(t, tg, "echo hi > ran.txt")
			if res.Status != "error" || !strings.Contains(res.Error, "tools.exec.sandbox") || !strings.Contains(res.Error, "test: the kernel has no Landlock") {
				t.Fatalf("want a refusal naming tools.exec.sandbox and why, got %+v", res)
			}
			if p := findFile(filepath.Join(tg.StateDir, "workspace"), "ran.txt"); p != "" {
				t.Errorf("the refused command ran: %s exists", p)
			}
		})
	}
}

// TestE2EGatewayNotDumpable: once the gateway runs, a process of the same
// user without CAP_SYS_PTRACE cannot read its /proc/<pid>/environ. With
// tools.exec.sandbox "off" the gateway warns at start.
func TestE2EGatewayNotDumpable(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	testLogger = zap.New(core)
	newTestGateway(t, strings.NewReplacer("MECH", `"off"`, "NET", "false").Replace(sandboxConfig), execModel)
	testLogger = nil
	if w := logs.FilterMessageSnippet(`tools.exec.sandbox is "off"`).FilterLevelExact(zapcore.WarnLevel).Len(); w != 1 {
		t.Errorf("%d warnings about the sandbox being off at start, want 1", w)
	}
	d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil || d != 0 {
		t.Fatalf("PR_GET_DUMPABLE = %d, %v; want 0", d, err)
	}
	// cat without any capability (setpriv empties the sets of a root test run).
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) is not installed")
	}
	environ := fmt.Sprintf("/proc/%d/environ", os.Getpid())
	out, err := exec.Command(setpriv, "--inh-caps=-all", "--bounding-set=-all", "--", "cat", environ).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Fatalf("a process of the same user read %s: %v\n%.200s", environ, err, out)
	}
}

// tryConnect has a command connect to a TCP listener of the host's
// loopback; it reports the command's result and whether the listener saw a
// connection.
func tryConnect(t *testing.T, tg *testGW) (execOutput, bool) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan bool, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err == nil
	}()
	res := runViaChat(t, tg, `perl -MIO::Socket::INET -e 'IO::Socket::INET->new(PeerAddr => "`+ln.Addr().String()+`", Timeout => 5) or die "no connection: $@\n"; print "connected\n"'`)
	ln.Close()
	return res, <-accepted
}

// hostProcesses lists the live processes whose command line is cmdline
// (words separated by spaces).
func hostProcesses(cmdline string) []int {
	want := strings.ReplaceAll(cmdline, " ", "\x00")
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

// findFile returns the path of a file named name below root, or "".
func findFile(root, name string) string {
	found := ""
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == name {
			found = p
			return filepath.SkipAll
		}
		return nil
	})
	return found
}
