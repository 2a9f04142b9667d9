// Package mcptest is a real MCP server for tests, built with the official Go
// SDK: run it in-process over streamable HTTP (NewHTTP) or as a stdio child
// process (the test binary itself, see Main and StdioConfig).
//
// It is for tests only: production code must not import it.
package mcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/heraldhq/herald/config"
)

// EnvServe, set in a test binary's environment, makes Main serve MCP over
// stdio instead of running tests.
const EnvServe = "HERALD_MCPTEST_SERVE"

// EnvStubborn, set with EnvServe, makes the stdio server keep running after
// its stdin closes (a badly behaved server, for process-lifetime tests).
const EnvStubborn = "HERALD_MCPTEST_STUBBORN"

// EnvDelay, set with EnvServe to a duration ("2s"), makes the stdio
// server wait that long before it answers anything (a slow start).
const EnvDelay = "HERALD_MCPTEST_DELAY"

// Main is a TestMain: it serves MCP on stdin/stdout when EnvServe is set,
// else runs the tests.
func Main(m *testing.M) {
	if os.Getenv(EnvServe) != "" {
		if d, err := time.ParseDuration(os.Getenv(EnvDelay)); err == nil {
			time.Sleep(d)
		}
		err := NewServer().Run(context.Background(), &mcp.StdioTransport{})
		if os.Getenv(EnvStubborn) != "" {
			select {} // until killed
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "mcptest:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// StdioConfig configures the test binary as a stdio MCP server (the test
// package must use Main as its TestMain).
func StdioConfig() config.MCPServer {
	return config.MCPServer{Command: os.Args[0], Env: map[string]config.Secret{EnvServe: "1"}, TimeoutSeconds: 10}
}

// NewHTTP serves a fresh server over streamable HTTP on a loopback port;
// hook, if non-nil, sees every request first (and may hold it).
func NewHTTP(t testing.TB, hook func(*http.Request)) *httptest.Server {
	srv := NewServer()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hook != nil {
			hook(r)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	return hs
}

func schema(props string) json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` + props + `}}`)
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

type args struct {
	Text string `json:"text"`
	N    int    `json:"n"`
}

func parse(req *mcp.CallToolRequest) args {
	var a args
	_ = json.Unmarshal(req.Params.Arguments, &a)
	return a
}

// NewServer returns the test server. Its tools:
//   - echo {text}: "echo: <text>"
//   - image: a text line and a 4-byte PNG
//   - fail: an isError result "bad input: nope"
//   - big {n}: n bytes of "x"
//   - hang: answers only when the call is cancelled
//   - crash: the process exits mid-call (stdio only)
//   - pid: the server's process id
//   - ppid: its parent's process id (as the server sees it)
//   - cat {text}: the file at path text, or an isError result with why not
//   - add_tool: adds tool "extra" (a tools/list_changed notification follows)
//   - "a.b" and "a_b": two names that become the same model-facing name
func NewServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "herald-mcptest", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "echo", Description: "Echo the text back.", InputSchema: schema(`"text":{"type":"string","description":"what to echo"}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text("echo: " + parse(req).Text), nil
		})
	s.AddTool(&mcp.Tool{Name: "image", Description: "Return an image.", InputSchema: schema(``)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "here it is"}, &mcp.ImageContent{Data: []byte{1, 2, 3, 4}, MIMEType: "image/png"}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "fail", Description: "Always fails.", InputSchema: schema(``)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			r := text("bad input: nope")
			r.IsError = true
			return r, nil
		})
	s.AddTool(&mcp.Tool{Name: "big", Description: "Return n bytes.", InputSchema: schema(`"n":{"type":"integer"}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(strings.Repeat("x", parse(req).N)), nil
		})
	s.AddTool(&mcp.Tool{Name: "hang", Description: "Never answers.", InputSchema: schema(``)},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
	s.AddTool(&mcp.Tool{Name: "crash", Description: "Exit mid-call.", InputSchema: schema(``)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			os.Exit(3)
			return nil, nil
		})
	s.AddTool(&mcp.Tool{Name: "pid", Description: "Process id.", InputSchema: schema(``)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(fmt.Sprint(os.Getpid())), nil
		})
	s.AddTool(&mcp.Tool{Name: "ppid", Description: "Parent process id.", InputSchema: schema(``)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(fmt.Sprint(os.Getppid())), nil
		})
	s.AddTool(&mcp.Tool{Name: "cat", Description: "Read a file.", InputSchema: schema(`"text":{"type":"string"}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			b, err := os.ReadFile(parse(req).Text)
			if err != nil {
				r := text(err.Error())
				r.IsError = true
				return r, nil
			}
			return text(string(b)), nil
		})
	s.AddTool(&mcp.Tool{Name: "add_tool", Description: "Add tool extra.", InputSchema: schema(``)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			s.AddTool(&mcp.Tool{Name: "extra", Description: "Added later.", InputSchema: schema(``)},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("extra!"), nil })
			return text("added"), nil
		})
	for _, n := range []string{"a.b", "a_b"} {
		s.AddTool(&mcp.Tool{Name: n, Description: "Name " + n, InputSchema: schema(``)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text(n), nil })
	}
	return s
}
