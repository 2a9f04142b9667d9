package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/mcptools/mcptest"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/devtools/loopback"
	"github.com/heraldhq/herald/gateway"
)

func mcpListConfig(t *testing.T, listen string) string {
	remote := mcptest.NewHTTP(t, nil)
	p := filepath.Join(t.TempDir(), "h.json5")
	src := `{ gateway: { http: { listen: "` + listen + `" } },
  mcp: { servers: {
    remote: { url: "` + remote.URL + `" },
    gone: { url: "http://127.0.0.1:1/mcp", timeoutSeconds: 2 },
    off: { enabled: false, command: "nothing" },
  } } }`
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func checkMCPList(t *testing.T, out, source string) {
	t.Helper()
	// The count agrees with the tools listed under it (the test server grows
	// tools as tests need them, so the number itself is not pinned).
	listed := strings.Count(out, "\n  mcp__remote__")
	if listed < 5 {
		t.Errorf("herald mcp list lists %d tools of the remote server, want its tools:\n%s", listed, out)
	}
	for _, want := range []string{source, fmt.Sprintf("remote (http): up, %d tools", listed), "  mcp__remote__echo", "gone (http): down: connect", "off (stdio): disabled",
		`problem: tools "a.b" and "a_b" both become mcp__remote__a_b`} {
		if !strings.Contains(out, want) {
			t.Errorf("herald mcp list output lacks %q:\n%s", want, out)
		}
	}
}

// Without a running gateway, herald mcp list starts the servers itself.
func TestMCPListProbes(t *testing.T) {
	addr, err := loopback.Addr() // nothing listens there, nor will another process
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run([]string{"mcp", "list", "--config", mcpListConfig(t, addr)}, &out, &errb)
	if code != 1 {
		t.Errorf("exit %d, want 1 (a server is down); stderr: %s", code, errb.String())
	}
	checkMCPList(t, out.String(), "probed directly")

	out.Reset()
	code = run([]string{"mcp", "list", "--json", "--config", mcpListConfig(t, addr)}, &out, &errb)
	var got struct {
		Source  string `json:"source"`
		Servers []struct {
			Name  string   `json:"name"`
			State string   `json:"state"`
			Tools []string `json:"tools"`
		} `json:"servers"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || code != 1 || !strings.HasPrefix(got.Source, "probed directly") || len(got.Servers) == 0 {
		t.Errorf("mcp list --json: exit %d, %v:\n%s", code, err, out.String())
	}
}

// With a running gateway, herald mcp list shows what the gateway sees.
func TestMCPListAsksGateway(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	path := mcpListConfig(t, ln.Addr().String())
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(context.Background(), gateway.Options{Config: cfg, StateDir: t.TempDir(), Listener: ln})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var out, errb bytes.Buffer
		code := run([]string{"mcp", "list", "--config", path}, &out, &errb)
		if strings.Contains(out.String(), "remote (http): up") && strings.Contains(out.String(), "gone (http): down") {
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			checkMCPList(t, out.String(), "as the running gateway sees them")
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway never showed remote up and gone down:\n%s%s", out.String(), errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
