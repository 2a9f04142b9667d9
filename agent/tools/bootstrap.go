package tools

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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
//
// What a call read is kept (bootCache) and returned again while the
// workspace directory and every file it read stat the same: a file
// written, added, removed or renamed is read at the next call.
func LoadBootstrap(workspace string, subagent bool) (string, error) {
	if workspace == "" {
		return "", nil
	}
	key := bootKey{workspace, subagent}
	if text, ok := boots.get(key); ok {
		return text, nil
	}
	at := time.Now()
	dir, err := os.Stat(workspace)
	if err != nil {
		dir = nil
	}
	text, read, dangling, err := loadBootstrap(workspace, subagent)
	if err == nil && dir != nil && !dangling {
		e := bootEntry{text: text, dir: statOf(dir), files: read}
		if e.settled(at) {
			boots.put(key, e)
		}
	}
	return text, err
}

// settled reports whether everything e was read from was last changed
// well before at, the time of the read: a file written within the
// file system's timestamp granularity of a stat could change again
// without its stat showing it, so such a read is not kept.
func (e bootEntry) settled(at time.Time) bool {
	limit := at.Add(-bootSettle).UnixNano()
	if max(e.dir.mod, e.dir.ctime) >= limit {
		return false
	}
	for _, st := range e.files {
		if max(st.mod, st.ctime) >= limit {
			return false
		}
	}
	return true
}

// loadBootstrap is LoadBootstrap without the cache; read are the stats of
// the files it read, by path; dangling says a name was a link to nothing
// (such a read is not kept).
func loadBootstrap(workspace string, subagent bool) (text string, read map[string]fileStat, dangling bool, err error) {
	bootLoads.Add(1)
	root, err := os.OpenRoot(workspace)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil, false, nil
		}
		return "", nil, false, fmt.Errorf("bootstrap: open workspace %s: %w", workspace, err)
	}
	defer root.Close()
	names := bootstrapFiles
	if subagent {
		names = subagentBootstrapFiles
	}
	var sections []string
	var errs []error
	for _, name := range names {
		text, fi, err := readBootstrapFile(root, name, DefaultBootstrapMaxBytes)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) || IsEscape(err) {
				errs = append(errs, fmt.Errorf("bootstrap: read %s in %s: %w", name, workspace, err))
			} else if _, lerr := root.Lstat(name); lerr == nil {
				// A link to nothing (yet): its target may appear
				// without the workspace directory changing.
				dangling = true
			}
			continue
		}
		if read == nil {
			read = make(map[string]fileStat)
		}
		read[filepath.Join(workspace, name)] = statOf(fi)
		if text = strings.TrimSpace(text); text != "" {
			sections = append(sections, "## "+name+"\n"+text)
		}
	}
	return strings.Join(sections, "\n\n"), read, dangling, errors.Join(errs...)
}

// fileStat is what a cached read is checked against.
// On Linux it also holds the inode and the change time, which no write
// can leave as they were (cp -p and touch -r set the mtime back, not the
// ctime).
type fileStat struct {
	mod   int64 // ns
	size  int64
	mode  fs.FileMode
	ino   uint64
	ctime int64 // ns
}

func statOf(fi fs.FileInfo) fileStat {
	ino, ctime := inodeOf(fi)
	return fileStat{mod: fi.ModTime().UnixNano(), size: fi.Size(), mode: fi.Mode(), ino: ino, ctime: ctime}
}

type bootKey struct {
	workspace string
	subagent  bool
}

type bootEntry struct {
	text  string
	dir   fileStat            // the workspace directory: names added, removed or renamed change it
	files map[string]fileStat // the files read (through symbolic links: their targets)
}

// bootCache keeps LoadBootstrap's results, one per agent workspace and
// kind (at most maxBootCache; past it the cache starts over).
type bootCache struct {
	mu sync.Mutex
	m  map[bootKey]bootEntry
}

const maxBootCache = 64

// bootSettle is how long before a read what it read must have last
// changed for the read to be kept; bootLoads counts the reads (tests).
var (
	bootSettle = 2 * time.Second
	bootLoads  atomic.Int64
)

var boots bootCache

// get returns the text kept for key while its workspace and files stat
// as they did when they were read.
func (c *bootCache) get(key bootKey) (string, bool) {
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if !ok {
		return "", false
	}
	if fi, err := os.Stat(key.workspace); err != nil || statOf(fi) != e.dir {
		return "", false
	}
	for path, st := range e.files {
		if fi, err := os.Stat(path); err != nil || statOf(fi) != st {
			return "", false
		}
	}
	return e.text, true
}

func (c *bootCache) put(key bootKey, e bootEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxBootCache {
		c.m = make(map[bootKey]bootEntry)
	}
	c.m[key] = e
}

func readBootstrapFile(root *os.Root, name string, max int64) (string, fs.FileInfo, error) {
	fi, err := root.Stat(name)
	if err != nil {
		return "", nil, err
	}
	if !fi.Mode().IsRegular() {
		return "", nil, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	f, _, err := OpenRegular(root, name, os.O_RDONLY, 0)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return "", nil, err
	}
	if int64(len(b)) > max {
		b = trimPartialRune(b[:max])
		return string(b) + fmt.Sprintf("\n[%s cut at %d of %d bytes]", name, len(b), fi.Size()), fi, nil
	}
	return string(b), fi, nil
}
