package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/tools"
)

// ToolName is the tool a permission request is decided as (SPEC §26):
// security.toolPolicy.tools.acp, or the group acp.
const ToolName = "acp"

// maxFileBytes bounds one fs/read_text_file answer.
const maxFileBytes = 8 << 20

// permissionTool stands for the tool "acp" when a permission request is
// authorized: the policy sees its name and group.
type permissionTool struct{}

func (permissionTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{Name: ToolName, Description: "a permission request of an ACP coding agent"}
}
func (permissionTool) Group() string { return agent.GroupACP }
func (permissionTool) Call(context.Context, agent.CallContext, json.RawMessage) (string, error) {
	return "", errors.New("acp is not a tool a model can call")
}

// client is what Herald serves the agent: files in the workspace,
// permission decisions, and the session/update stream into the run.
type client struct {
	ws    string
	run   *runner
	terms *terminals
}

// newClient is what Herald serves the agent of spec in run r.
func newClient(spec Spec, r *runner) *client {
	c := &client{ws: spec.Workspace, run: r}
	c.terms = &terminals{spec: spec, cli: c}
	return c
}

var _ sdk.Client = (*client)(nil)

// inWorkspace returns p relative to the workspace, or an error when p is
// not an absolute path inside it. Symbolic links are checked by os.Root
// when the path is used.
func (c *client) inWorkspace(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("path %q must be absolute (the workspace is %s)", p, c.ws)
	}
	rel, err := filepath.Rel(c.ws, filepath.Clean(p))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("path %q is outside the workspace %s", p, c.ws)
	}
	return rel, nil
}

func fsError(op, p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %q: no such file in the workspace", op, p)
	case tools.IsEscape(err):
		return fmt.Errorf("%s %q: the path leaves the workspace through a symbolic link", op, p)
	}
	return fmt.Errorf("%s %q: %v", op, p, err)
}

func (c *client) ReadTextFile(_ context.Context, r sdk.ReadTextFileRequest) (sdk.ReadTextFileResponse, error) {
	rel, err := c.inWorkspace(r.Path)
	if err != nil {
		return sdk.ReadTextFileResponse{}, err
	}
	root, err := os.OpenRoot(c.ws)
	if err != nil {
		return sdk.ReadTextFileResponse{}, fsError("read", r.Path, err)
	}
	defer root.Close()
	f, _, err := tools.OpenRegular(root, rel, os.O_RDONLY, 0)
	if err != nil {
		return sdk.ReadTextFileResponse{}, fsError("read", r.Path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return sdk.ReadTextFileResponse{}, fsError("read", r.Path, err)
	}
	n := len(b)
	if n > maxFileBytes {
		return sdk.ReadTextFileResponse{}, fmt.Errorf("read %q: larger than %d MiB; read it with line and limit", r.Path, maxFileBytes>>20)
	}
	content := string(b[:n])
	if r.Line != nil || r.Limit != nil {
		lines := strings.SplitAfter(content, "\n")
		start := 0
		if r.Line != nil && *r.Line > 1 {
			start = min(*r.Line-1, len(lines))
		}
		end := len(lines)
		if r.Limit != nil && *r.Limit >= 0 {
			end = min(start+*r.Limit, end)
		}
		content = strings.Join(lines[start:end], "")
	}
	c.run.activity("📖 read " + rel)
	return sdk.ReadTextFileResponse{Content: content}, nil
}

func (c *client) WriteTextFile(_ context.Context, r sdk.WriteTextFileRequest) (sdk.WriteTextFileResponse, error) {
	rel, err := c.inWorkspace(r.Path)
	if err != nil {
		return sdk.WriteTextFileResponse{}, err
	}
	if rel == "." {
		return sdk.WriteTextFileResponse{}, fmt.Errorf("write %q: that is the workspace folder", r.Path)
	}
	root, err := os.OpenRoot(c.ws)
	if err != nil {
		return sdk.WriteTextFileResponse{}, fsError("write", r.Path, err)
	}
	defer root.Close()
	if dir := filepath.Dir(rel); dir != "." {
		if err := root.MkdirAll(dir, 0o700); err != nil {
			return sdk.WriteTextFileResponse{}, fsError("write", r.Path, err)
		}
	}
	f, _, err := tools.OpenRegular(root, rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return sdk.WriteTextFileResponse{}, fsError("write", r.Path, err)
	}
	_, err = f.WriteString(r.Content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return sdk.WriteTextFileResponse{}, fsError("write", r.Path, err)
	}
	c.run.activity("✏️ wrote " + rel)
	return sdk.WriteTextFileResponse{}, nil
}

// RequestPermission is decided like a call of the tool acp (SPEC §26):
// allowed → its allow_once option, refused → reject_once, a stop →
// cancelled.
func (c *client) RequestPermission(ctx context.Context, r sdk.RequestPermissionRequest) (sdk.RequestPermissionResponse, error) {
	return c.run.permission(ctx, r), nil
}

func (c *client) SessionUpdate(ctx context.Context, n sdk.SessionNotification) error {
	c.run.update(ctx, n.Update)
	return nil
}
