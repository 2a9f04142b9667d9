package tools

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// DefaultBootstrapMaxBytes caps each bootstrap file.
const DefaultBootstrapMaxBytes = 64 << 10

var (
	// bootstrapFiles are injected into a top-level session, in this order.
	bootstrapFiles = []string{"AGENTS.md", "SOUL.md", "TOOLS.md", "IDENTITY.md", "USER.md"}
	// subagentBootstrapFiles are the only ones a sub-agent sees (SPEC §5).
	subagentBootstrapFiles = []string{"AGENTS.md", "TOOLS.md"}
)

// LoadBootstrap reads the workspace's bootstrap files and returns them as
// "## <FILE>\n<content>" sections joined by blank lines, ready to append to a
// system prompt. A top-level session gets AGENTS.md, SOUL.md, TOOLS.md,
// IDENTITY.md and USER.md; a sub-agent only AGENTS.md and TOOLS.md. Missing
// and empty files are skipped; each file is cut at 64 KiB. Files are read
// through os.Root, so a symbolic link out of the workspace is not followed.
// When a present file cannot be read the error says which, and the string
// still holds the files that could be read.
func LoadBootstrap(workspace string, subagent bool) (string, error) {
	if workspace == "" {
		return "", nil
	}
	root, err := os.OpenRoot(workspace)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", fmt.Errorf("bootstrap: open workspace %s: %w", workspace, err)
	}
	defer root.Close()
	names := bootstrapFiles
	if subagent {
		names = subagentBootstrapFiles
	}
	var sections []string
	var errs []error
	for _, name := range names {
		text, err := readBootstrapFile(root, name, DefaultBootstrapMaxBytes)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) || IsEscape(err) {
				errs = append(errs, fmt.Errorf("bootstrap: read %s in %s: %w", name, workspace, err))
			}
			continue
		}
		if text = strings.TrimSpace(text); text != "" {
			sections = append(sections, "## "+name+"\n"+text)
		}
	}
	return strings.Join(sections, "\n\n"), errors.Join(errs...)
}

func readBootstrapFile(root *os.Root, name string, max int64) (string, error) {
	fi, err := root.Stat(name)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	f, _, err := OpenRegular(root, name, os.O_RDONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return "", err
	}
	if int64(len(b)) > max {
		b = trimPartialRune(b[:max])
		return string(b) + fmt.Sprintf("\n[%s cut at %d of %d bytes]", name, len(b), fi.Size()), nil
	}
	return string(b), nil
}
