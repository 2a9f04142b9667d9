package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/ids"
)

// ConversationsDir is the folder of an agent workspace that holds the
// conversation workspaces. Tools never reach it through the agent
// workspace: each conversation sees only its own.
const ConversationsDir = "conversations"

// Modes of what Herald creates in workspaces (SPEC §17).
const (
	DirMode  = 0o700
	FileMode = 0o600
)

// ConversationID is the folder name of a requester conversation's
// workspace: the session key with "agent:<id>:" dropped and every
// character other than letters, digits, '.', '_' and '-' turned into '_'
// (at most 64 of them), then '-' and the first 12 hex digits of the
// SHA-256 of the whole key, so two keys that read alike never share a
// folder. agent:main:slack:group:C1:thread:1700.1 becomes
// slack_group_C1_thread_1700.1-<hash>.
func ConversationID(rootKey string) string {
	b := []byte(ids.SessionKey(rootKey).Rest())
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	sum := sha256.Sum256([]byte(rootKey))
	return strings.TrimLeft(string(b), ".") + "-" + hex.EncodeToString(sum[:6])
}

// ConversationWorkspace is the workspace of the requester conversation
// rootKey under agentWorkspace: <agentWorkspace>/conversations/<id>.
func ConversationWorkspace(agentWorkspace, rootKey string) string {
	if agentWorkspace == "" || rootKey == "" {
		return ""
	}
	return filepath.Join(agentWorkspace, ConversationsDir, ConversationID(rootKey))
}

// EnsureWorkspace creates a conversation workspace (mode 0700, parents
// too) and makes its agent workspace's conversations folder 0700, so no
// other user of the host can list the conversations.
func EnsureWorkspace(agentWorkspace, conversation string) error {
	if conversation == "" {
		return nil
	}
	if err := os.MkdirAll(conversation, DirMode); err != nil {
		return fmt.Errorf("create conversation workspace %s: %w", conversation, err)
	}
	if agentWorkspace != "" {
		dir := filepath.Join(agentWorkspace, ConversationsDir)
		if fi, err := os.Lstat(dir); err == nil && fi.IsDir() && fi.Mode().Perm() != DirMode {
			if err := os.Chmod(dir, DirMode); err != nil {
				return fmt.Errorf("restrict %s: %w", dir, err)
			}
		}
	}
	return nil
}

// openWorkspace opens the caller's workspace as an os.Root. With create, a
// missing workspace directory is created first.
func openWorkspace(tool string, cc agent.CallContext, create bool) (*os.Root, error) {
	ws := cc.Workspace
	if ws == "" {
		return nil, fmt.Errorf("%s: %w for agent %q", tool, ErrNoWorkspace, cc.AgentID)
	}
	if create {
		if err := EnsureWorkspace(cc.AgentWorkspace, ws); err != nil {
			return nil, fmt.Errorf("%s: %w", tool, err)
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

// layer says which workspace a path is read from.
type layer int

const (
	convLayer  layer = iota // the conversation workspace (read and write)
	agentLayer              // only the agent workspace (read-only)
	// dirLayer+i is cc.ReadOnlyDirs[i] (read-only).
	dirLayer
)

// readOnlyDir returns the folder of a dirLayer layer.
func (l layer) readOnlyDir(cc agent.CallContext) (string, bool) {
	if l < dirLayer || int(l-dirLayer) >= len(cc.ReadOnlyDirs) {
		return "", false
	}
	return cc.ReadOnlyDirs[l-dirLayer], true
}

// resolve turns the model's path into a path relative to a workspace
// layer. A relative path names the conversation workspace (reads fall back
// to the agent workspace); an absolute one may name either, but never the
// conversations folder of the agent workspace.
func resolve(tool string, cc agent.CallContext, p string) (string, layer, error) {
	if filepath.IsAbs(p) && !within(cc.Workspace, p) && !within(cc.AgentWorkspace, p) {
		for i, dir := range cc.ReadOnlyDirs {
			if within(dir, p) {
				rel, err := workspacePath(tool, dir, p)
				return rel, dirLayer + layer(i), err
			}
		}
	}
	if filepath.IsAbs(p) && cc.AgentWorkspace != "" && !within(cc.Workspace, p) && within(cc.AgentWorkspace, p) {
		rel, err := workspacePath(tool, cc.AgentWorkspace, p)
		if err != nil {
			return "", agentLayer, err
		}
		if !agentReadable(rel) {
			return "", agentLayer, outsideErr(tool, p)
		}
		return rel, agentLayer, nil
	}
	rel, err := workspacePath(tool, cc.Workspace, p)
	return rel, convLayer, err
}

// within reports whether p lies lexically inside (or is) dir.
func within(dir, p string) bool {
	if dir == "" {
		return false
	}
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(p))
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}

// agentReadable reports whether rel (clean, slash-separated, relative to
// the agent workspace) may be read there: anything but the conversations
// folder, which holds every conversation's workspace.
func agentReadable(rel string) bool {
	first, _, _ := strings.Cut(rel, "/")
	return first != ConversationsDir
}

// openAgentLayer opens the agent workspace for reading rel through it. It
// refuses the conversations folder and any symbolic link on the way: the
// fallback layer holds files from before per-conversation workspaces and
// the bootstrap files, never a way into a conversation's folder.
func openAgentLayer(tool string, cc agent.CallContext, rel, shown string) (*os.Root, error) {
	if cc.AgentWorkspace == "" || filepath.Clean(cc.AgentWorkspace) == filepath.Clean(cc.Workspace) {
		return nil, fs.ErrNotExist
	}
	if !agentReadable(rel) {
		return nil, outsideErr(tool, shown)
	}
	root, err := os.OpenRoot(cc.AgentWorkspace)
	if err != nil {
		return nil, err
	}
	if rel != "." {
		parts := strings.Split(rel, "/")
		for i := range parts {
			fi, err := root.Lstat(strings.Join(parts[:i+1], "/"))
			if err != nil {
				root.Close()
				return nil, err
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				root.Close()
				return nil, fmt.Errorf("%s: %q is a symbolic link in the agent workspace; links there are not followed", tool, shown)
			}
		}
	}
	return root, nil
}

// readOnlyErr is write tools' answer for a path in the agent workspace.
func readOnlyErr(tool, p string) error {
	return fmt.Errorf("%s: path %q is in the agent workspace, which is %w: it holds the files your system prompt is built from "+
		"(AGENTS.md, SOUL.md, TOOLS.md, …) and files shared by every conversation. Write a path relative to your workspace instead, "+
		"such as \"notes/todo.md\": it goes to this conversation's own workspace", tool, p, ErrReadOnly)
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
	case IsEscape(err):
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

// IsEscape reports whether err is os.Root refusing a path that leaves the
// root. os does not export that sentinel; its text is stable since Go 1.24
// and the confinement tests fail if it ever changes.
func IsEscape(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

// join joins slash paths relative to the workspace.
func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return path.Join(dir, name)
}

// statLayered finds rel for reading: in the conversation workspace, else
// (a relative path it does not hold) in the agent workspace, read-only.
// It returns the root holding it, open, and the file's info; shown is the
// path as the model gave it, for messages.
func statLayered(tool string, cc agent.CallContext, rel string, lay layer, shown string) (*os.Root, fs.FileInfo, layer, error) {
	if dir, ok := lay.readOnlyDir(cc); ok {
		root, err := os.OpenRoot(dir)
		if err != nil {
			return nil, nil, lay, fsErr(tool, "read", shown, err)
		}
		fi, err := root.Stat(rel)
		if err != nil {
			root.Close()
			return nil, nil, lay, fsErr(tool, "read", shown, err)
		}
		return root, fi, lay, nil
	}
	if cc.Workspace == "" {
		return nil, nil, lay, fmt.Errorf("%s: %w for agent %q", tool, ErrNoWorkspace, cc.AgentID)
	}
	var convErr error
	if lay == convLayer {
		root, err := os.OpenRoot(cc.Workspace)
		if err == nil {
			fi, err := root.Stat(rel)
			if err == nil {
				return root, fi, convLayer, nil
			}
			root.Close()
			if !errors.Is(err, fs.ErrNotExist) || IsEscape(err) {
				return nil, nil, lay, fsErr(tool, "read", shown, err)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, lay, fmt.Errorf("%s: open workspace %s: %w", tool, cc.Workspace, err)
		}
		convErr = err
	}
	root, err := openAgentLayer(tool, cc, rel, shown)
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist) && lay == convLayer && rel == ".":
			return nil, nil, lay, fmt.Errorf("%s: the workspace %s does not exist yet; write a file first to create it", tool, cc.Workspace)
		case errors.Is(err, fs.ErrNotExist) && convErr != nil:
			return nil, nil, lay, fsErr(tool, "read", shown, convErr)
		case errors.Is(err, fs.ErrNotExist), IsEscape(err):
			return nil, nil, lay, fsErr(tool, "read", shown, err)
		}
		return nil, nil, lay, err
	}
	fi, err := root.Stat(rel)
	if err != nil {
		root.Close()
		if convErr != nil && errors.Is(err, fs.ErrNotExist) {
			err = convErr
		}
		return nil, nil, lay, fsErr(tool, "read", shown, err)
	}
	return root, fi, agentLayer, nil
}

// ErrNotRegular is a path that is not a regular file where one is read or
// written (a FIFO, a device, a folder).
var ErrNotRegular = errors.New("not a regular file")

// OpenRegular opens name in root with flag, never blocking on what is
// there: the open is non-blocking (a FIFO a tool swapped in after the
// caller's Stat neither hangs a read nor a write) and the opened file
// itself must be a regular file (fstat), else ErrNotRegular.
func OpenRegular(root *os.Root, name string, flag int, perm os.FileMode) (*os.File, os.FileInfo, error) {
	f, err := root.OpenFile(name, flag|syscall.O_NONBLOCK, perm)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%w (%s)", ErrNotRegular, fi.Mode().Type())
	}
	return f, fi, nil
}
