package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/heraldhq/herald/agent/mcptools"
	"github.com/heraldhq/herald/agent/tools"
	"github.com/heraldhq/herald/config"
)

// mcpList prints every configured MCP server with its state and tools. It
// asks the running gateway (GET /mcp on gateway.http.listen); when none
// answers there, it starts each server itself, lists its tools and stops it.
// It exits 1 when an enabled server is down.
func mcpList(f *flags, stdout, stderr io.Writer) int {
	cfg, _, ok := loadConfig(f, stderr)
	if !ok {
		return 1
	}
	if len(cfg.MCP.Servers) == 0 {
		fmt.Fprintln(stdout, "no MCP servers configured (mcp.servers)")
		return 0
	}
	list, source, err := mcpFromGateway(cfg)
	if err != nil {
		source = "probed directly (no gateway answered at " + cfg.Gateway.HTTP.Listen + ")"
		list = mcpProbe(cfg)
	}
	code := 0
	for _, s := range list {
		if s.State != mcptools.StateUp && s.State != mcptools.StateDisabled {
			code = 1
		}
	}
	if f.json {
		if list == nil {
			list = []mcptools.ServerStatus{}
		}
		if err := writeJSON(stdout, map[string]any{"source": source, "servers": list}); err != nil {
			fmt.Fprintf(stderr, "herald: %v\n", err)
			return 1
		}
		return code
	}
	fmt.Fprintf(stdout, "MCP servers, %s:\n", source)
	for _, s := range list {
		line := fmt.Sprintf("%s (%s): %s", s.Name, s.Transport, s.State)
		switch s.State {
		case mcptools.StateUp:
			line += fmt.Sprintf(", %d tools", len(s.Tools))
		case mcptools.StateDisabled:
		default:
			if s.Error != "" {
				line += ": " + s.Error
			}
		}
		if s.Failures > 0 {
			line += fmt.Sprintf(" (failures: %d)", s.Failures)
		}
		fmt.Fprintln(stdout, line)
		for _, t := range s.Tools {
			fmt.Fprintln(stdout, "  "+t)
		}
		for _, p := range s.Problems {
			fmt.Fprintln(stdout, "  problem: "+p)
		}
	}
	return code
}

func mcpFromGateway(cfg *config.Config) ([]mcptools.ServerStatus, string, error) {
	base, err := gatewayURL(cfg)
	if err != nil {
		return nil, "", err
	}
	url := base + "/mcp"
	client := &http.Client{Timeout: 3 * time.Second}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, "", err
	}
	// /mcp follows the web API's guard (SPEC §17): the token when set.
	if tok := strings.TrimSpace(cfg.Channels.Web.Token.Value()); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var body struct {
		Servers []mcptools.ServerStatus `json:"servers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, "", fmt.Errorf("GET %s: %w", url, err)
	}
	return body.Servers, "as the running gateway sees them", nil
}

// mcpProbe starts every enabled server, waits until each is up or has
// failed once (within its timeoutSeconds and a little more), and stops them.
func mcpProbe(cfg *config.Config) []mcptools.ServerStatus {
	m := mcptools.New(mcptools.Options{Backoff: func(int) time.Duration { return time.Hour },
		Sandbox: tools.ExecSandbox(cfg.Tools.Exec)})
	defer m.Close()
	m.Apply(cfg.MCP.Servers)
	for name, s := range cfg.MCP.Servers {
		if !s.On() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(s.TimeoutSeconds+5)*time.Second)
		_, _ = m.WaitFor(ctx, name, func(st mcptools.ServerStatus) bool {
			return st.State == mcptools.StateUp || st.State == mcptools.StateDown
		})
		cancel()
	}
	list := m.Status()
	for i := range list {
		if list[i].State == mcptools.StateStarting {
			list[i].State, list[i].Error = mcptools.StateDown, "no answer within timeoutSeconds"
		}
		list[i].Error = strings.TrimSpace(list[i].Error)
	}
	return list
}
