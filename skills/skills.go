// Package skills loads skills in the Agent Skills format (SPEC §28): a
// folder with a SKILL.md whose YAML front matter gives its name and
// description, found under <agent workspace>/skills/ and skills.paths. It
// renders the system prompt's list of them and names the malformed ones
// (doctor, herald skills list).
//
// It must not import gateway, subagent, agent or any channels/<name>
// package, and it never writes a skill's folder.
package skills

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// FileName is the file that makes a folder a skill.
const FileName = "SKILL.md"

// WorkspaceDir is the skills folder inside an agent workspace.
const WorkspaceDir = "skills"

// Limits of the Agent Skills format.
const (
	MaxNameLen        = 64
	MaxDescriptionLen = 1024
	// maxFileBytes bounds the SKILL.md read for its front matter.
	maxFileBytes = 256 << 10
	// maxSkills bounds the skills loaded from one folder.
	maxSkills = 200
)

// Skill is one loaded skill.
type Skill struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Path        string `json:"path"` // the SKILL.md, absolute
}

// Problem is a SKILL.md that was skipped, and why.
type Problem struct {
	Path  string `json:"path"`
	Error string `json:"error"`
}

var nameRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`) })

// Dirs are the folders an agent's skills are found in: its workspace's
// skills/ and the paths of skills.paths (relative ones under stateDir).
func Dirs(agentWorkspace string, paths []string, stateDir string) []string {
	dirs := []string{filepath.Join(agentWorkspace, WorkspaceDir)}
	return append(dirs, Shared(paths, stateDir)...)
}

// Shared are the folders of skills.paths, absolute (relative ones under
// stateDir).
func Shared(paths []string, stateDir string) []string {
	var out []string
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			p = filepath.Join(stateDir, p)
		}
		out = append(out, filepath.Clean(p))
	}
	return out
}

// Load reads the skills of dirs: each folder in them holding a SKILL.md.
// A missing dir holds none; a malformed SKILL.md is a Problem and is
// skipped; of two skills with one name the first dir's wins.
func Load(dirs []string) ([]Skill, []Problem) {
	var list []Skill
	var probs []Problem
	seen := map[string]string{}
	for _, dir := range dirs {
		ents, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				probs = append(probs, Problem{Path: dir, Error: err.Error()})
			}
			continue
		}
		n := 0
		for _, e := range ents {
			if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			path := filepath.Join(dir, e.Name(), FileName)
			s, err := read(path)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				continue
			case err != nil:
				probs = append(probs, Problem{Path: path, Error: err.Error()})
				continue
			}
			if first, dup := seen[s.Name]; dup {
				probs = append(probs, Problem{Path: path, Error: fmt.Sprintf("skill %q is also defined by %s, which is used", s.Name, first)})
				continue
			}
			if n == maxSkills {
				probs = append(probs, Problem{Path: dir, Error: fmt.Sprintf("more than %d skills; the rest are skipped", maxSkills)})
				break
			}
			seen[s.Name] = path
			list = append(list, s)
			n++
		}
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return list, probs
}

// parsed is one SKILL.md's parse, kept while the file's modification time
// and size stay the same (Load runs every turn; a Stat is cheaper than a
// read and a YAML parse).
type parsed struct {
	mtime time.Time
	size  int64
	skill Skill
	err   error
}

// maxCached bounds the parse cache; past it the cache starts again.
const maxCached = 4096

var cache struct {
	sync.Mutex
	m map[string]parsed
}

// read parses one SKILL.md, or returns its parse from the cache when the
// file's modification time and size are those it was parsed at.
func read(path string) (Skill, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Skill{}, err
	}
	if !fi.Mode().IsRegular() {
		return Skill{}, fmt.Errorf("%s is not a regular file", FileName)
	}
	if fi.Size() > maxFileBytes {
		return Skill{}, fmt.Errorf("%s is %d bytes; at most %d are read", FileName, fi.Size(), maxFileBytes)
	}
	cache.Lock()
	c, ok := cache.m[path]
	cache.Unlock()
	if ok && c.mtime.Equal(fi.ModTime()) && c.size == fi.Size() {
		return c.skill, c.err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Skill{}, err
	}
	s, err := parse(path, b)
	cache.Lock()
	if cache.m == nil || len(cache.m) >= maxCached {
		cache.m = make(map[string]parsed)
	}
	cache.m[path] = parsed{mtime: fi.ModTime(), size: fi.Size(), skill: s, err: err}
	cache.Unlock()
	return s, err
}

// parse reads a SKILL.md's front matter.
func parse(path string, b []byte) (Skill, error) {
	fm, err := frontMatter(b)
	if err != nil {
		return Skill{}, err
	}
	var meta struct {
		Name        string `yaml:"name"`
		Description string `yaml:"description"`
	}
	if err := yaml.Unmarshal(fm, &meta); err != nil {
		return Skill{}, fmt.Errorf("front matter is not valid YAML: %v", err)
	}
	meta.Name, meta.Description = strings.TrimSpace(meta.Name), strings.Join(strings.Fields(meta.Description), " ")
	switch {
	case meta.Name == "":
		return Skill{}, errors.New("front matter has no name")
	case len(meta.Name) > MaxNameLen || !nameRe().MatchString(meta.Name):
		return Skill{}, fmt.Errorf("name %q must be lower-case letters, digits and single hyphens, at most %d characters", meta.Name, MaxNameLen)
	case meta.Description == "":
		return Skill{}, errors.New("front matter has no description")
	case len([]rune(meta.Description)) > MaxDescriptionLen:
		return Skill{}, fmt.Errorf("description is longer than %d characters", MaxDescriptionLen)
	}
	return Skill{Name: meta.Name, Description: meta.Description, Path: path}, nil
}

// frontMatter returns the YAML between a first line "---" and the next.
func frontMatter(b []byte) ([]byte, error) {
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	b = bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n"))
	rest, ok := bytes.CutPrefix(b, []byte("---\n"))
	if !ok {
		return nil, errors.New("no front matter: the file must start with a line \"---\", then name: and description:, then \"---\"")
	}
	if bytes.HasPrefix(rest, []byte("---\n")) || bytes.Equal(rest, []byte("---")) {
		return nil, errors.New("front matter is empty: give name: and description:")
	}
	i := bytes.Index(rest, []byte("\n---\n"))
	if i < 0 {
		if bytes.HasSuffix(rest, []byte("\n---")) {
			i = len(rest) - 4
		} else {
			return nil, errors.New("front matter is not closed by a line \"---\"")
		}
	}
	return rest[:i+1], nil
}

// Prompt is the system prompt's block listing skills; "" when none.
func Prompt(list []Skill) string {
	if len(list) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("# Skills\nSkills are instructions and scripts for particular tasks. When a task matches a skill's description, " +
		"read its SKILL.md with read_file first and follow it; run its scripts with exec (the skill folders are read-only).\n")
	for _, s := range list {
		fmt.Fprintf(&b, "- %s: %s (%s)\n", s.Name, s.Description, s.Path)
	}
	return b.String()
}

// AgentSkills are one agent's skills in a Report.
type AgentSkills struct {
	ID     string  `json:"id"`
	Skills []Skill `json:"skills"`
	// Dirs are the folders looked in, in order (the agent workspace's
	// skills/ first, then skills.paths).
	Dirs []string `json:"dirs"`
}

// Report is `herald skills list --json`: every agent's skills and the
// SKILL.md files skipped (each path once).
type Report struct {
	Agents   []AgentSkills `json:"agents"`
	Problems []Problem     `json:"problems"`
}

// NewReport loads the skills of each agent; dirs gives an agent's folders.
func NewReport(agentIDs []string, dirs func(agentID string) []string) Report {
	r := Report{Agents: []AgentSkills{}, Problems: []Problem{}}
	seen := map[string]bool{}
	for _, id := range agentIDs {
		ds := dirs(id)
		list, probs := Load(ds)
		if list == nil {
			list = []Skill{}
		}
		if ds == nil {
			ds = []string{}
		}
		r.Agents = append(r.Agents, AgentSkills{ID: id, Skills: list, Dirs: ds})
		for _, p := range probs {
			if !seen[p.Path] {
				seen[p.Path] = true
				r.Problems = append(r.Problems, p)
			}
		}
	}
	return r
}
