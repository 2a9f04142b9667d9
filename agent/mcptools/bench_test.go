package mcptools_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/mcptools"
	"github.com/heraldhq/herald/agent/mcptools/mcptest"
	"github.com/heraldhq/herald/config"
)

// BenchmarkCall measures one echo tool call, stdio and streamable HTTP
// (docs/mcp.md).
func BenchmarkCall(b *testing.B) {
	for _, tc := range []struct {
		name string
		cfg  func() config.MCPServer
	}{
		{"stdio", mcptest.StdioConfig},
		{"http", func() config.MCPServer { return config.MCPServer{URL: mcptest.NewHTTP(b, nil).URL, TimeoutSeconds: 10} }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m := mcptools.New(mcptools.Options{})
			defer m.Close()
			m.Apply(map[string]config.MCPServer{"t": tc.cfg()})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := m.WaitFor(ctx, "t", func(s mcptools.ServerStatus) bool { return s.State == mcptools.StateUp }); err != nil {
				b.Fatal(err)
			}
			var echo agent.Tool
			for _, tl := range m.Tools([]string{"t"}) {
				if tl.Spec().Name == "mcp__t__echo" {
					echo = tl
				}
			}
			args := json.RawMessage(`{"text":"hi"}`)
			for b.Loop() {
				if _, err := echo.Call(context.Background(), agent.CallContext{}, args); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
