package subagent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/subagent/subagenttest"
)

// snapshotConfig: agent main with system prompt %[2]q and allowedTools
// [%[3]s] on a fake Anthropic API at %[1]s.
const snapshotConfig = `{
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "%[1]s", apiKey: "k", models: [{ id: "claude-test" }] } } },
  agents: { defaults: { model: "anthropic/claude-test" }, list: [{ id: "main", systemPrompt: %[2]q, allowedTools: [%[3]s] }] },
}`

// TestReloadMidRunKeepsTheRunsSnapshot: a reload (SetConfig) while a
// sub-agent run waits on its first model call does not reach that run — its
// second call, after a tool call, still has the old system prompt and tool
// set — while the next run uses the new ones.
func TestReloadMidRunKeepsTheRunsSnapshot(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	type seen struct {
		system string
		tools  []string
	}
	var mu sync.Mutex
	calls := map[string][]seen{} // task → the child's model calls
	llm := llmtest.NewAnthropic(t, func(c llmtest.Call) llmtest.Reply {
		last := c.LastUser()
		if strings.Contains(last, "Announce step") {
			return llmtest.Reply{Text: "Result:\ndone\n\nNotes:\n(none)"}
		}
		task := taskOf(c)
		mu.Lock()
		calls[task] = append(calls[task], seen{system: c.System, tools: slices.Sorted(slices.Values(c.Tools))})
		n := len(calls[task])
		mu.Unlock()
		if task == "slow" && n == 1 {
			entered <- struct{}{}
			select {
			case <-release:
			case <-time.After(20 * time.Second):
			}
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "list_files", Args: []byte(`{}`)}}}
		}
		return llmtest.Reply{Text: "worked on " + task}
	})
	p := subagenttest.New(t, fmt.Sprintf(snapshotConfig, llm.URL, "You are agent A.", `"list_files", "read_file"`), nil)
	m := New(Deps{Config: p.Config, Store: p.Store, Catalog: p.Catalog, Tools: p.Tools, Workspace: p.WorkspaceOf,
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	subagenttest.StopAtCleanup(t, m)
	cc := caller("1")
	cc.Tools = []string{"list_files", "read_file", "write_file", "sessions_spawn"}

	slow := m.Spawn(context.Background(), cc, SpawnParams{Task: "slow"})
	if slow.Status != "accepted" {
		t.Fatalf("spawn = %+v", slow)
	}
	<-entered
	next, err := config.Parse("next.json5", []byte(fmt.Sprintf(snapshotConfig, llm.URL, "You are agent B.", `"list_files", "read_file", "write_file"`)),
		func(string) (string, bool) { return "", false })
	if err == nil {
		err = next.Validate()
	}
	if err != nil {
		t.Fatal(err)
	}
	m.SetConfig(next)
	once.Do(func() { close(release) })
	if r := subagenttest.WaitDone(t, p.Store, slow.RunID); r.Outcome != "success" {
		t.Fatalf("slow run ended %s (%s)", r.Outcome, r.Note)
	}
	after := m.Spawn(context.Background(), cc, SpawnParams{Task: "after"})
	if r := subagenttest.WaitDone(t, p.Store, after.RunID); r.Outcome != "success" {
		t.Fatalf("next run ended %s (%s)", r.Outcome, r.Note)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(calls["slow"]) != 2 || len(calls["after"]) != 1 {
		t.Fatalf("model calls: %d of the slow run, %d of the next; want 2 and 1", len(calls["slow"]), len(calls["after"]))
	}
	for i, c := range calls["slow"] {
		if !strings.HasPrefix(c.system, "You are agent A.") || !slices.Equal(c.tools, []string{"list_files", "read_file"}) {
			t.Errorf("slow run, call %d: tools %v, system %.20q; want agent A's (the run's own snapshot)", i+1, c.tools, c.system)
		}
	}
	if c := calls["after"][0]; !strings.HasPrefix(c.system, "You are agent B.") || !slices.Equal(c.tools, []string{"list_files", "read_file", "write_file"}) {
		t.Errorf("next run: tools %v, system %.20q; want agent B's", c.tools, c.system)
	}
}
