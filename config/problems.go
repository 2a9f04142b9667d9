package config

import (
	"fmt"
	"sort"
	"strings"
)

// Problem is one thing wrong with a config file.
type Problem struct {
	Path      string // key path, e.g. agents.list[1].subagents.maxDepth; "" for the file itself
	Line, Col int    // 1-based; 0 when the position is unknown (built-in default config)
	Msg       string
}

// Problems is the error Load and Validate return: every problem found, in
// file order.
type Problems struct {
	File string
	List []Problem
}

// Error prints one problem per line as <file>:<line>:<col>: <path>: <msg>.
func (p *Problems) Error() string {
	var b strings.Builder
	for i, pr := range p.List {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.File)
		if pr.Line > 0 {
			fmt.Fprintf(&b, ":%d:%d", pr.Line, pr.Col)
		}
		b.WriteString(": ")
		if pr.Path != "" {
			b.WriteString(pr.Path)
			b.WriteString(": ")
		}
		b.WriteString(pr.Msg)
	}
	return b.String()
}

// errOrNil returns p as an error, or nil when it holds no problem.
func (p *Problems) errOrNil() error {
	if p == nil || len(p.List) == 0 {
		return nil
	}
	sort.SliceStable(p.List, func(i, j int) bool {
		a, b := p.List[i], p.List[j]
		if (a.Line == 0) != (b.Line == 0) {
			return b.Line == 0
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	return p
}
