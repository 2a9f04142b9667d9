package mcptools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/heraldhq/herald/agent"
)

// Prefix starts every MCP tool name: mcp__<server>__<tool>.
const Prefix = "mcp__"

// MaxToolName is the providers' limit on tool names (Anthropic and OpenAI).
const MaxToolName = 64

// ToolName is the name the model sees for tool of server: characters other
// than letters, digits, _ and - become _, and a name beyond 64 characters is
// cut and ends in a short hash of the server's tool name, so it stays unique.
func ToolName(server, tool string) string {
	var b strings.Builder
	b.WriteString(Prefix + server + "__")
	for _, r := range tool {
		if r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) <= MaxToolName {
		return name
	}
	sum := sha256.Sum256([]byte(tool))
	suffix := "_" + hex.EncodeToString(sum[:4])
	return name[:MaxToolName-len(suffix)] + suffix
}

// ServerOf returns the server part of an mcp__<server>__<tool> name.
func ServerOf(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok {
		return "", false
	}
	server, _, ok := strings.Cut(rest, "__")
	return server, ok && server != ""
}

// tool is one server tool as an agent.Tool.
type tool struct {
	srv  *server
	name string // mcp__<server>__<tool>
	orig string // the server's own name
	spec agent.ToolSpec
	// repeatable: the server annotates the tool readOnlyHint or
	// idempotentHint, so a call cut by a crash is made again (SPEC §25).
	repeatable bool
}

func newTool(srv *server, t *mcp.Tool) (*tool, error) {
	schema := json.RawMessage(`{"type":"object"}`)
	if t.InputSchema != nil {
		b, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("tool %q: input schema: %w", t.Name, err)
		}
		schema = b
	}
	desc := t.Description
	if desc == "" && t.Title != "" {
		desc = t.Title
	}
	name := ToolName(srv.name, t.Name)
	repeatable := t.Annotations != nil && (t.Annotations.ReadOnlyHint || t.Annotations.IdempotentHint)
	return &tool{srv: srv, name: name, orig: t.Name, spec: agent.ToolSpec{Name: name, Description: desc, Schema: schema}, repeatable: repeatable}, nil
}

// Repeatable implements agent.Repeatable: true when the server annotates
// the tool readOnlyHint or idempotentHint.
func (t *tool) Repeatable() bool { return t.repeatable }

func (t *tool) Spec() agent.ToolSpec { return t.spec }
func (t *tool) Group() string        { return agent.GroupMCP }

func (t *tool) Call(ctx context.Context, _ agent.CallContext, args json.RawMessage) (string, error) {
	s := t.srv
	sess, why := s.current()
	if sess == nil {
		return "", fmt.Errorf("MCP server %q is not available (%s); its tools come back when it is running again, so try later or do without it", s.name, why)
	}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	timeout := s.timeout()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	res, err := sess.CallTool(cctx, &mcp.CallToolParams{Name: t.orig, Arguments: args})
	took := time.Since(start)
	switch {
	case err != nil && ctx.Err() != nil:
		s.m.observe(s.name, took, true)
		return "", fmt.Errorf("%s: stopped: %w", t.name, ctx.Err())
	case err != nil && errors.Is(cctx.Err(), context.DeadlineExceeded):
		s.m.observe(s.name, took, true)
		return "", fmt.Errorf("%s: no answer from MCP server %q within %s (timeoutSeconds); the call was cancelled", t.name, s.name, timeout)
	case err != nil:
		s.m.observe(s.name, took, true)
		return "", fmt.Errorf("%s: MCP server %q failed: %s", t.name, s.name, s.redact(err.Error()))
	}
	text := capText(resultText(res), s.m.maxOutput)
	s.m.observe(s.name, took, res.IsError)
	if res.IsError {
		if text == "" {
			text = "the tool reported an error without a message"
		}
		return "", errors.New(text)
	}
	return text, nil
}

// resultText turns a tool result into text: text content joined, other
// content noted by type and size, structured content as JSON when there is
// nothing else.
func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image: %s, %d bytes]", orUnknown(c.MIMEType), len(c.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio: %s, %d bytes]", orUnknown(c.MIMEType), len(c.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource link: %s (%s), %s%s]", c.URI, c.Name, orUnknown(c.MIMEType), sizeNote(c.Size)))
		case *mcp.EmbeddedResource:
			r := c.Resource
			if r == nil {
				parts = append(parts, "[resource: empty]")
				continue
			}
			if r.Text != "" {
				parts = append(parts, fmt.Sprintf("[resource: %s, %s, %d bytes]\n%s", r.URI, orUnknown(r.MIMEType), len(r.Text), r.Text))
			} else {
				parts = append(parts, fmt.Sprintf("[resource: %s, %s, %d bytes]", r.URI, orUnknown(r.MIMEType), len(r.Blob)))
			}
		default:
			b, _ := json.Marshal(c)
			parts = append(parts, string(b))
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err == nil {
			parts = append(parts, string(b))
		}
	}
	return strings.Join(parts, "\n")
}

func orUnknown(mime string) string {
	if mime == "" {
		return "unknown type"
	}
	return mime
}

func sizeNote(size *int64) string {
	if size == nil {
		return ""
	}
	return fmt.Sprintf(", %d bytes", *size)
}

// capText keeps the first and last max/2 bytes of s, like exec's output cap.
func capText(s string, max int) string {
	if max <= 0 || len(s) <= max {
		return s
	}
	head, tail := max/2, max-max/2
	return fmt.Sprintf("%s\n[output truncated: %d of %d bytes omitted here]\n%s", s[:head], len(s)-head-tail, len(s), s[len(s)-tail:])
}
