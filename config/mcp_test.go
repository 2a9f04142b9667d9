package config

import (
	"slices"
	"testing"
)

func TestMCPConfig(t *testing.T) {
	src := `{
  mcp: { servers: {
    fs:   { command: "npx", args: ["-y", "@modelcontextprotocol/server-filesystem", "/srv"], env: { TOKEN: "${FS_TOKEN}" } },
    docs: { url: "https://mcp.example.com/mcp", headers: { Authorization: "Bearer ${DOCS_TOKEN}" }, timeoutSeconds: 5 },
    off:  { enabled: false, command: "x", env: { K: "${UNSET_BUT_DISABLED}" } },
  } },
  agents: { list: [{ id: "main" }, { id: "docsonly", mcpServers: ["docs", "off"] }, { id: "none", mcpServers: [] }] },
}`
	cfg, err := Parse("m.json5", []byte(src), mapEnv(map[string]string{"FS_TOKEN": "t1", "DOCS_TOKEN": "t2"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	fs, docs := cfg.MCP.Servers["fs"], cfg.MCP.Servers["docs"]
	if fs.Env["TOKEN"].Value() != "t1" || docs.Headers["Authorization"].Value() != "Bearer t2" {
		t.Errorf("${VAR} not expanded: env %v headers %v", fs.Env["TOKEN"].Value(), docs.Headers["Authorization"].Value())
	}
	if fs.TimeoutSeconds != DefaultMCPTimeoutSeconds || docs.TimeoutSeconds != 5 {
		t.Errorf("timeoutSeconds = %d, %d; want %d, 5", fs.TimeoutSeconds, docs.TimeoutSeconds, DefaultMCPTimeoutSeconds)
	}
	for agent, want := range map[string][]string{"main": {"docs", "fs"}, "docsonly": {"docs"}, "none": nil} {
		if got := cfg.AgentMCPServers(agent); !slices.Equal(got, want) {
			t.Errorf("AgentMCPServers(%s) = %v, want %v", agent, got, want)
		}
	}
}
