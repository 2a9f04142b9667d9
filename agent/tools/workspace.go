package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/heraldhq/herald/agent"
)

// openWorkspace opens the caller's workspace as an os.Root. With create, a
// missing workspace directory is created first.
func openWorkspace(tool string, cc agent.CallContext, create bool) (*os.Root, error) {
	ws := cc.Workspace
	if ws == "" {
		return nil, fmt.Errorf("%s: %w for agent %q", tool, ErrNoWorkspace, cc.AgentID)
	}
	if create {
		if err := os.MkdirAll(ws, 0o755); err != nil {
			return nil, fmt.Errorf("%s: create workspace %s: %w", tool, ws, err)
		}
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: the workspace %s does not exist yet; write a file first to create it", tool, ws)
		}
		return nil, fmt.Errorf("%s: open workspace %s: %w", tool, ws, err)
	}
	return root, nil
}

// workspacePath turns the model's path into a clean slash-separated path
// relative to the workspace. An absolute path is accepted only when it lies
// lexically inside the workspace; anything that leaves it is refused.
// Symbolic links are checked later, by os.Root, when the path is used.
func workspacePath(tool, workspace, p string) (string, error) {
	orig := p
	if p == "" {
		p = "."
	}
	if filepath.IsAbs(p) {
		ws := filepath.Clean(workspace)
		rel, err := filepath.Rel(ws, filepath.Clean(p))
		if err != nil || !filepath.IsLocal(rel) && rel != "." {
			return "", outsideErr(tool, orig)
		}
		p = rel
	}
	p = filepath.ToSlash(filepath.Clean(p))
	if p != "." && !filepath.IsLocal(p) {
		return "", outsideErr(tool, orig)
	}
	return p, nil
}

func outsideErr(tool, p string) error {
	return fmt.Errorf("%s: path %q is %w; use a path relative to the workspace, such as \"notes/todo.md\"",
		tool, p, ErrOutsideWorkspace)
}

// fsErr turns an error from an os.Root operation on path p into a message
// the model can act on.
func fsErr(tool, op, p string, err error) error {
	switch {
	case isEscape(err):
		return fmt.Errorf("%s: path %q leads %w through a symbolic link; only links that are relative and stay inside the workspace can be followed",
			tool, p, ErrOutsideWorkspace)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: %q does not exist in the workspace; use list_files to see what is there", tool, p)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s: %s %q: permission denied", tool, op, p)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%s: %q: a parent of this path is a file, not a directory", tool, p)
	case errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%s: %q is a directory; use list_files to see its contents", tool, p)
	}
	return fmt.Errorf("%s: %s %q: %w", tool, op, p, err)
}

// isEscape reports whether err is os.Root refusing a path that leaves the
// root. os does not export that sentinel; its text is stable since Go 1.24
// and the confinement tests fail if it ever changes.
func isEscape(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

// join joins slash paths relative to the workspace.
func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return path.Join(dir, name)
}
