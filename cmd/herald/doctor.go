package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/heraldhq/herald/agent/acp"
	"github.com/heraldhq/herald/agent/mcptools"
	"github.com/heraldhq/herald/agent/sandbox"
	"github.com/heraldhq/herald/agent/tools"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/gateway"
	"github.com/heraldhq/herald/subagent"
)

// doctor is `herald doctor`: one line per check (config, state dir, the
// HTTP listener, each provider, each enabled channel against its real
// endpoint, each MCP server), with what to fix under a line that is not ok.
// Exit status 1 when a check failed.
func doctor(f *flags, stdout io.Writer) int {
	var checks []channels.Check
	cfg, path, err := config.Open(f.config, nil)
	where := cmpPath(path)
	if err != nil {
		printCheck(stdout, channels.Check{Name: "config", Status: channels.CheckFail,
			Detail: where + ":\n" + indent(err.Error()),
			Fix:    "edit the file; `herald config validate` lists the same problems"})
		return 1
	}
	checks = append(checks, channels.Check{Name: "config", Status: channels.CheckOK, Detail: where + " is valid"})
	stateDir := config.ResolveStateDir(f.stateDir, nil)
	checks = append(checks, checkListener(cfg, stateDir))
	ctx := context.Background()
	checks = append(checks, gateway.Doctor(ctx, cfg, stateDir)...)
	checks = append(checks, checkSandbox(cfg)...)
	checks = append(checks, checkMCP(cfg)...)
	checks = append(checks, checkACP(cfg)...)
	code := 0
	for _, c := range checks {
		printCheck(stdout, c)
		if c.Status == channels.CheckFail {
			code = 1
		}
	}
	return code
}

func cmpPath(path string) string {
	if path == "" {
		return "(built-in default config)"
	}
	return path
}

func indent(s string) string {
	return "      " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n      ")
}

func printCheck(w io.Writer, c channels.Check) {
	fmt.Fprintf(w, "%-4s  %-28s %s\n", c.Status, c.Name, strings.TrimSpace(c.Detail))
	if c.Fix != "" && c.Status != channels.CheckOK {
		fmt.Fprintf(w, "      fix: %s\n", c.Fix)
	}
}

// checkListener: with the state dir's gateway running, its /healthz must
// answer; without one, gateway.http.listen must be free to listen on.
func checkListener(cfg *config.Config, stateDir string) channels.Check {
	addr := cfg.Gateway.HTTP.Listen
	c := channels.Check{Name: "http listen " + addr}
	if pid, err := readPID(stateDir); err == nil {
		base, err := gatewayURL(cfg)
		var resp *http.Response
		if err == nil {
			client := &http.Client{Timeout: 5 * time.Second}
			resp, err = client.Get(base + "/healthz")
		}
		if err != nil {
			c.Status, c.Detail = channels.CheckFail, fmt.Sprintf("the gateway (pid %d) does not answer /healthz: %v", pid, err)
			c.Fix = "see the gateway's log; was gateway.http.listen changed without a restart?"
			return c
		}
		resp.Body.Close()
		c.Status, c.Detail = channels.CheckOK, fmt.Sprintf("the running gateway (pid %d) answers /healthz: %s", pid, resp.Status)
		return c
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		c.Status, c.Detail = channels.CheckFail, err.Error()
		c.Fix = "another program listens there: stop it or change gateway.http.listen"
		return c
	}
	ln.Close()
	c.Status, c.Detail = channels.CheckOK, "free (no gateway running for this state dir)"
	return c
}

// checkSandbox says which sandbox mechanism works here and why the others
// do not, and what exec does with tools.exec.sandbox as configured.
func checkSandbox(cfg *config.Config) []channels.Check {
	r := sandbox.Probe()
	mech := func(name string, st sandbox.Status, fix string) channels.Check {
		c := channels.Check{Name: "sandbox " + name, Status: channels.CheckOK, Detail: st.Detail}
		if !st.OK {
			c.Status, c.Fix = channels.CheckWarn, fix
		}
		return c
	}
	out := []channels.Check{
		mech(sandbox.Bwrap, r.Bwrap, "install bubblewrap (Debian: apt-get install bubblewrap) and allow unprivileged user namespaces (a systemd unit: RestrictNamespaces= must allow user, pid, net, mnt, ipc, uts)"),
		mech(sandbox.Landlock, r.Landlock, "run a kernel with Landlock ABI 6 or later (Linux 6.12+, landlock in the lsm= boot parameter)"),
	}
	p := tools.ExecSandbox(cfg.Tools.Exec)
	c := channels.Check{Name: "exec sandbox"}
	switch got, err := r.Pick(p.Mechanism, p.Setting); {
	case err != nil:
		c.Status, c.Detail = channels.CheckFail, "exec is refused: "+err.Error()
		c.Fix = "make bwrap or Landlock work (see above), or set tools.exec.sandbox to \"off\" to run commands unconfined"
	case got == sandbox.Off:
		c.Status, c.Detail = channels.CheckWarn, "tools.exec.sandbox is \"off\": commands run unconfined, with the gateway's files, processes, secrets and network in reach"
		c.Fix = "set tools.exec.sandbox to \"auto\""
	default:
		net := "no network"
		if p.Network {
			net = "network allowed (tools.exec.network)"
		}
		c.Status, c.Detail = channels.CheckOK, fmt.Sprintf("%s (tools.exec.sandbox %q), %s", got, p.Mechanism, net)
	}
	return append(out, c)
}

// checkMCP starts each enabled MCP server briefly (as `herald mcp list`
// does without a gateway) and reports its tools.
func checkMCP(cfg *config.Config) []channels.Check {
	if len(cfg.MCP.Servers) == 0 {
		return nil
	}
	var out []channels.Check
	for _, s := range mcpProbe(cfg) {
		c := channels.Check{Name: "mcp " + s.Name}
		switch s.State {
		case mcptools.StateUp:
			c.Status, c.Detail = channels.CheckOK, fmt.Sprintf("%s, %d tools", s.Transport, len(s.Tools))
		case mcptools.StateDisabled:
			continue
		default:
			c.Status, c.Detail = channels.CheckFail, s.State
			if s.Error != "" {
				c.Detail += ": " + s.Error
			}
			c.Fix = "check mcp.servers." + s.Name + " (command, args, url, env); `herald mcp list` shows the details"
		}
		out = append(out, c)
	}
	return out
}

// checkACP starts each ACP agent (SPEC §26) in the sandbox, in a scratch
// folder, runs initialize and session/new, and reports its name, version
// and capabilities, or what is missing.
func checkACP(cfg *config.Config) []channels.Check {
	var out []channels.Check
	for _, id := range cfg.ACPAgents() {
		out = append(out, checkACPAgent(cfg, id))
	}
	return out
}

func checkACPAgent(cfg *config.Config, id string) channels.Check {
	c := channels.Check{Name: "acp " + id}
	key := fmt.Sprintf("agents.list[%d].runtime", slices.IndexFunc(cfg.Agents.List, func(a config.Agent) bool { return a.ID == id }))
	ws, err := os.MkdirTemp("", "herald-doctor-acp-")
	if err != nil {
		c.Status, c.Detail = channels.CheckFail, err.Error()
		return c
	}
	defer os.RemoveAll(ws)
	spec, _ := subagent.ACPSpec(cfg, id, ws, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	info, err := acp.Probe(ctx, spec)
	switch {
	case errors.Is(err, acp.ErrCommand):
		c.Status, c.Detail = channels.CheckFail, err.Error()
		c.Fix = "install the agent (e.g. npm install -g @zed-industries/codex-acp) or fix " + key + ".command"
	case err != nil && info.Name != "":
		c.Status, c.Detail = channels.CheckFail, info.String()+": "+err.Error()
		c.Fix = "log the agent in, or give it its API key in " + key + ".env"
	case err != nil:
		c.Status, c.Detail = channels.CheckFail, err.Error()
		c.Fix = "run " + key + ".command by hand: it must speak ACP on stdin/stdout (Codex: codex-acp, Claude Code: claude-agent-acp, Gemini: gemini --experimental-acp)"
	default:
		c.Status, c.Detail = channels.CheckOK, info.String()
	}
	return c
}
