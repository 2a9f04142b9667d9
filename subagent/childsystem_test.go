package subagent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

// TestChildSystemPrompt pins a child's system prompt, part by part: the
// agent's prompt, the sub-agent context block (task, label, the two
// session keys, the result note while the child may still spawn), the
// workspace's AGENTS.md and the extra context, in that order.
func TestChildSystemPrompt(t *testing.T) {
	aws := t.TempDir()
	if err := os.WriteFile(filepath.Join(aws, "AGENTS.md"), []byte("Be brief.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := &store.Run{Task: "sum the logs", Label: "logs", RequesterKey: "agent:main:web:1", ChildKey: "agent:main:subagent:x", Depth: 1}
	head := "# Sub-agent context\nYou are a sub-agent working in the background for another session. Do the task below and finish with a clear answer; it is announced back to the requester.\n"
	for _, tc := range []struct {
		name  string
		a     config.AgentSettings
		run   store.Run
		aws   string
		extra string
		want  string
	}{
		{
			name: "everything", a: config.AgentSettings{SystemPrompt: "You are Herald.", Subagents: config.Limits{MaxDepth: 2}},
			run: *run, aws: aws, extra: "## Skills\nnone",
			want: "You are Herald.\n\n" + head + "- Task: sum the logs\n- Label: logs\n- Requester session: agent:main:web:1\n- Your session: agent:main:subagent:x\n" +
				ResultNote + "\n\n## AGENTS.md\nBe brief.\n## Skills\nnone",
		},
		{
			name: "deepest, no label, nothing else", a: config.AgentSettings{Subagents: config.Limits{MaxDepth: 1}},
			run:  store.Run{Task: "t", RequesterKey: "r", ChildKey: "c", Depth: 1},
			want: head + "- Task: t\n- Requester session: r\n- Your session: c\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := childSystem(tc.a, tc.aws, &tc.run, tc.extra); got != tc.want {
				t.Errorf("childSystem =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}
