package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"sort"
	"unicode/utf8"

	"github.com/heraldhq/herald/agent"
)

// Tool names of the workspace tools.
const (
	ReadFileName  = "read_file"
	WriteFileName = "write_file"
	ListFilesName = "list_files"
)

// Defaults of the workspace tools.
const (
	DefaultReadMaxBytes   = 256 << 10
	DefaultListMaxEntries = 1000
)

// ---- read_file ----

type readFile struct {
	max int64
}

// Repeatable implements agent.Repeatable: reading has no effect to repeat.
func (t *readFile) Repeatable() bool { return true }

var readFileFields = []field{
	{"path", "string", true, "file path relative to the workspace"},
	{"offset", "integer", false, "byte offset to start reading at (default 0); use nextOffset from a truncated read to continue"},
	{"limit", "integer", false, "maximum bytes to return (default and maximum 262144)"},
}

// NewReadFile returns the read_file tool.
func NewReadFile(opts Options) agent.Tool {
	return &readFile{max: int64(opts.withDefaults().ReadMaxBytes)}
}

func (t *readFile) Group() string { return agent.GroupFiles }

func (t *readFile) Spec() agent.ToolSpec {
	fields := append([]field(nil), readFileFields...)
	fields[2].desc = fmt.Sprintf("maximum bytes to return (default and maximum %d)", t.max)
	return agent.ToolSpec{
		Name: ReadFileName,
		Description: "Read a text file from your workspace. Paths are relative to the workspace; " +
			"paths outside it are refused. Long files are returned in parts: when truncated is true, " +
			"call again with offset set to nextOffset.",
		Schema: schema(fields...),
	}
}

type readFileResult struct {
	Path       string `json:"path"`
	Content    string `json:"content"`
	Truncated  bool   `json:"truncated"`
	Size       int64  `json:"size"`
	Offset     int64  `json:"offset,omitempty"`
	NextOffset int64  `json:"nextOffset,omitempty"`
	// ReadOnly: the file is in the agent workspace (shared by every
	// conversation); writing the same path creates this conversation's own.
	ReadOnly bool `json:"readOnly,omitempty"`
}

func (t *readFile) Call(ctx context.Context, cc agent.CallContext, raw json.RawMessage) (string, error) {
	a, err := decodeArgs(ReadFileName, raw, readFileFields...)
	if err != nil {
		return "", err
	}
	p, err := a.str("path")
	if err != nil {
		return "", err
	}
	offset, err := a.integer("offset", 0)
	if err != nil {
		return "", err
	}
	limit, err := a.integer("limit", t.max)
	if err != nil {
		return "", err
	}
	if offset < 0 || limit < 0 {
		return "", fmt.Errorf("%s: %w: offset and limit must not be negative", ReadFileName, ErrBadArguments)
	}
	if limit == 0 || limit > t.max {
		limit = t.max
	}
	rel, lay, err := resolve(ReadFileName, cc, p)
	if err != nil {
		return "", err
	}
	// Stat before opening: opening a FIFO would block.
	root, fi, lay, err := statLayered(ReadFileName, cc, rel, lay, p)
	if err != nil {
		return "", err
	}
	defer root.Close()
	if fi.IsDir() {
		return "", fmt.Errorf("%s: %q is a directory; use list_files to see its contents", ReadFileName, p)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s: %q is not a regular file (%s); only regular files can be read", ReadFileName, p, fi.Mode().Type())
	}
	f, _, err := OpenRegular(root, rel, os.O_RDONLY, 0)
	if err != nil {
		return "", fsErr(ReadFileName, "read", p, err)
	}
	defer f.Close()
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			return "", fsErr(ReadFileName, "seek", p, err)
		}
	}
	buf, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return "", fsErr(ReadFileName, "read", p, err)
	}
	res := readFileResult{Path: rel, Size: fi.Size(), Offset: offset, ReadOnly: lay != convLayer}
	if int64(len(buf)) > limit {
		buf = trimPartialRune(buf[:limit])
		res.Truncated = true
		res.NextOffset = offset + int64(len(buf))
	}
	res.Content = string(buf)
	return result(ReadFileName, res)
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of b, so a
// cut never splits a character.
func trimPartialRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) && i > 0 {
				return b[:i]
			}
			break
		}
	}
	return b
}

// ---- write_file ----

type writeFile struct{}

var writeFileFields = []field{
	{"path", "string", true, "file path relative to the workspace; missing parent directories are created"},
	{"content", "string", true, "the text to write"},
	{"append", "boolean", false, "append to the file instead of replacing it (default false)"},
}

// NewWriteFile returns the write_file tool.
func NewWriteFile(Options) agent.Tool { return writeFile{} }

func (writeFile) Group() string { return agent.GroupFiles }

func (writeFile) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: WriteFileName,
		Description: "Create or replace a file in your workspace (or append to it with append=true). " +
			"Paths are relative to the workspace; parent directories are created; paths outside it are refused.",
		Schema: schema(writeFileFields...),
	}
}

type writeFileResult struct {
	Path     string `json:"path"`
	Bytes    int    `json:"bytes"`
	Appended bool   `json:"appended,omitempty"`
	Note     string `json:"note,omitempty"`
}

func (writeFile) Call(ctx context.Context, cc agent.CallContext, raw json.RawMessage) (string, error) {
	a, err := decodeArgs(WriteFileName, raw, writeFileFields...)
	if err != nil {
		return "", err
	}
	p, err := a.str("path")
	if err != nil {
		return "", err
	}
	content, err := a.str("content")
	if err != nil {
		return "", err
	}
	appendMode, err := a.boolean("append")
	if err != nil {
		return "", err
	}
	rel, lay, err := resolve(WriteFileName, cc, p)
	if err != nil {
		return "", err
	}
	if lay != convLayer {
		return "", readOnlyErr(WriteFileName, p)
	}
	if rel == "." {
		return "", fmt.Errorf("%s: %w: path %q names the workspace itself; give a file name such as \"notes.md\"", WriteFileName, ErrBadArguments, p)
	}
	root, err := openWorkspace(WriteFileName, cc, true)
	if err != nil {
		return "", err
	}
	defer root.Close()

	if dir := path.Dir(rel); dir != "." {
		if err := root.MkdirAll(dir, DirMode); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return "", fmt.Errorf("%s: %q: a parent of this path is a file, not a directory", WriteFileName, p)
			}
			return "", fsErr(WriteFileName, "create directory for", p, err)
		}
	}
	// Refuse directories and special files before opening: opening a FIFO
	// for writing would block.
	if fi, err := root.Stat(rel); err == nil {
		if fi.IsDir() {
			return "", fmt.Errorf("%s: %q is a directory; give a file path inside it", WriteFileName, p)
		}
		if !fi.Mode().IsRegular() {
			return "", fmt.Errorf("%s: %q is not a regular file (%s); only regular files can be written", WriteFileName, p, fi.Mode().Type())
		}
	} else if !errors.Is(err, fs.ErrNotExist) || IsEscape(err) {
		return "", fsErr(WriteFileName, "write", p, err)
	} else if appendMode {
		// Appending to a file of the agent workspace appends to this
		// conversation's copy of it; the shared one stays as it is.
		var shared string
		if aroot, fi, lay, err := statLayered(WriteFileName, cc, rel, convLayer, p); err == nil {
			if lay == agentLayer && fi.Mode().IsRegular() {
				b, err := aroot.ReadFile(rel)
				if err != nil {
					aroot.Close()
					return "", fsErr(WriteFileName, "read", p, err)
				}
				shared = string(b)
			}
			aroot.Close()
		}
		content = shared + content
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if appendMode {
		flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	f, _, err := OpenRegular(root, rel, flags, FileMode)
	if err != nil {
		return "", fsErr(WriteFileName, "write", p, err)
	}
	n, werr := io.WriteString(f, content)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr != nil {
		return "", fsErr(WriteFileName, "write", p, werr)
	}
	res := writeFileResult{Path: rel, Bytes: n, Appended: appendMode}
	if cc.AgentWorkspace != "" && slices.Contains(bootstrapFiles, rel) {
		res.Note = fmt.Sprintf("written to this conversation's workspace only; the %s your system prompt is built from is in the agent workspace, which tools cannot change", rel)
	}
	return result(WriteFileName, res)
}

// ---- list_files ----

type listFiles struct {
	max int
}

// Repeatable implements agent.Repeatable: listing has no effect to repeat.
func (t *listFiles) Repeatable() bool { return true }

var listFilesFields = []field{
	{"path", "string", false, `directory relative to the workspace (default ".")`},
	{"recursive", "boolean", false, "also list subdirectories (default false; .git is listed but not entered)"},
}

// NewListFiles returns the list_files tool.
func NewListFiles(opts Options) agent.Tool {
	return &listFiles{max: opts.withDefaults().ListMaxEntries}
}

func (t *listFiles) Group() string { return agent.GroupFiles }

func (t *listFiles) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: ListFilesName,
		Description: fmt.Sprintf("List the files and directories in a workspace directory (at most %d entries). "+
			"Names of a recursive listing are relative to the listed directory. type is file, dir, or "+
			"symlink for a link that cannot be followed (it leads outside the workspace or nowhere).", t.max),
		Schema: schema(listFilesFields...),
	}
}

// Entry is one line of a list_files result.
type Entry struct {
	Name string `json:"name"`
	Type string `json:"type"` // file|dir|symlink|other
	Size int64  `json:"size"`
	// ReadOnly marks an entry of the agent workspace, shared by every
	// conversation: readable, and writing its path creates this
	// conversation's own file.
	ReadOnly bool `json:"readOnly,omitempty"`
}

type listFilesResult struct {
	Path      string  `json:"path"`
	Entries   []Entry `json:"entries"`
	Truncated bool    `json:"truncated,omitempty"`
}

func (t *listFiles) Call(ctx context.Context, cc agent.CallContext, raw json.RawMessage) (string, error) {
	a, err := decodeArgs(ListFilesName, raw, listFilesFields...)
	if err != nil {
		return "", err
	}
	p, err := a.str("path")
	if err != nil {
		return "", err
	}
	recursive, err := a.boolean("recursive")
	if err != nil {
		return "", err
	}
	rel, lay, err := resolve(ListFilesName, cc, p)
	if err != nil {
		return "", err
	}
	if cc.Workspace == "" {
		return "", fmt.Errorf("%s: %w for agent %q", ListFilesName, ErrNoWorkspace, cc.AgentID)
	}
	// The conversation workspace, then the agent workspace below it
	// (read-only; its conversations folder never listed): a name in both
	// is the conversation's.
	var roots []*os.Root
	var readOnly []bool
	var firstErr error
	if lay == convLayer {
		if root, err := os.OpenRoot(cc.Workspace); err == nil {
			roots, readOnly = append(roots, root), append(readOnly, false)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%s: open workspace %s: %w", ListFilesName, cc.Workspace, err)
		}
	}
	if dir, ok := lay.readOnlyDir(cc); ok {
		if root, err := os.OpenRoot(dir); err == nil {
			roots, readOnly = append(roots, root), append(readOnly, true)
		} else {
			firstErr = fsErr(ListFilesName, "list", p, err)
		}
	} else if root, err := openAgentLayer(ListFilesName, cc, rel, p); err == nil {
		roots, readOnly = append(roots, root), append(readOnly, true)
	} else if lay == agentLayer || !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrOutsideWorkspace) {
		firstErr = err
	}
	defer func() {
		for _, r := range roots {
			r.Close()
		}
	}()
	res := listFilesResult{Path: rel, Entries: []Entry{}}
	seen := map[string]bool{}
	listed := 0
	for i, root := range roots {
		fi, err := root.Stat(rel)
		if err != nil {
			if firstErr == nil {
				firstErr = fsErr(ListFilesName, "list", p, err)
			}
			continue
		}
		if !fi.IsDir() {
			if listed == 0 {
				return "", fmt.Errorf("%s: %q is a file, not a directory; use read_file to read it", ListFilesName, p)
			}
			continue
		}
		entries, truncated, err := t.walk(ctx, root, rel, recursive, readOnly[i])
		if err != nil {
			return "", err
		}
		listed++
		res.Truncated = res.Truncated || truncated
		for _, e := range entries {
			if seen[e.Name] {
				continue
			}
			seen[e.Name] = true
			res.Entries = append(res.Entries, e)
		}
	}
	if listed == 0 {
		if firstErr == nil || rel == "." && lay == convLayer {
			return "", fmt.Errorf("%s: the workspace %s does not exist yet; write a file first to create it", ListFilesName, cc.Workspace)
		}
		return "", firstErr
	}
	if listed > 1 {
		sort.SliceStable(res.Entries, func(i, j int) bool { return res.Entries[i].Name < res.Entries[j].Name })
	}
	if len(res.Entries) > t.max {
		res.Entries, res.Truncated = res.Entries[:t.max], true
	}
	return result(ListFilesName, res)
}

// walk lists dir of root depth-first, sorted; symlinked directories are
// not entered, so the walk cannot loop. For the agent workspace
// (readOnly), entries are marked read-only and its conversations folder
// is left out.
func (t *listFiles) walk(ctx context.Context, root *os.Root, rel string, recursive, readOnly bool) ([]Entry, bool, error) {
	var entries []Entry
	truncated := false
	var walk func(dir, prefix string) error
	walk = func(dir, prefix string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := root.Open(dir)
		if err != nil {
			return fsErr(ListFilesName, "list", dir, err)
		}
		des, err := f.ReadDir(-1)
		f.Close()
		if err != nil {
			return fsErr(ListFilesName, "list", dir, err)
		}
		sort.Slice(des, func(i, j int) bool { return des[i].Name() < des[j].Name() })
		for _, de := range des {
			if readOnly && !agentReadable(join(dir, de.Name())) {
				continue
			}
			if len(entries) >= t.max {
				truncated = true
				return nil
			}
			e := entryFor(root, join(dir, de.Name()), de)
			e.Name, e.ReadOnly = join(prefix, de.Name()), readOnly
			entries = append(entries, e)
			if recursive && de.IsDir() && de.Name() != ".git" {
				if err := walk(join(dir, de.Name()), e.Name); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := walk(rel, ".")
	return entries, truncated, err
}

// entryFor describes one directory entry; a symbolic link is described by
// what it points to when that is inside the workspace.
func entryFor(root *os.Root, name string, de fs.DirEntry) Entry {
	var e Entry
	info, err := de.Info()
	if err == nil && de.Type()&fs.ModeSymlink != 0 {
		info, err = root.Stat(name)
		if err != nil {
			return Entry{Type: "symlink"}
		}
	}
	if err != nil {
		return Entry{Type: "other"}
	}
	switch {
	case info.IsDir():
		e.Type = "dir"
	case info.Mode().IsRegular():
		e.Type, e.Size = "file", info.Size()
	default:
		e.Type = "other"
	}
	return e
}
