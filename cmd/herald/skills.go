package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/gateway"
)

// skillsList is `herald skills list [--json]`: every agent's skills and
// the SKILL.md files skipped as malformed (SPEC §28).
func skillsList(f *flags, stdout, stderr io.Writer) int {
	cfg, _, ok := loadConfig(f, stderr)
	if !ok {
		return 1
	}
	r := gateway.SkillsReport(cfg, config.ResolveStateDir(f.stateDir, nil))
	if f.json {
		if err := writeJSON(stdout, r); err != nil {
			fmt.Fprintf(stderr, "herald: %v\n", err)
			return 1
		}
		return 0
	}
	for _, a := range r.Agents {
		switch len(a.Skills) {
		case 0:
			// Say where a skill would be found: "0 skills" alone leaves a
			// newcomer guessing where to put one.
			fmt.Fprintf(stdout, "agent %s: no skills (a skill is a folder with a SKILL.md in %s)\n", a.ID, strings.Join(a.Dirs, " or "))
		case 1:
			fmt.Fprintf(stdout, "agent %s: 1 skill\n", a.ID)
		default:
			fmt.Fprintf(stdout, "agent %s: %d skills\n", a.ID, len(a.Skills))
		}
		for _, s := range a.Skills {
			fmt.Fprintf(stdout, "  %s — %s\n    %s\n", s.Name, s.Description, s.Path)
		}
	}
	for _, p := range r.Problems {
		fmt.Fprintf(stdout, "skipped %s: %s\n", p.Path, p.Error)
	}
	return 0
}
