package providers

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/config"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
)

func TestParseSpawn(t *testing.T) {
	tests := []struct {
		in      string
		want    Spawn
		ok, err bool
	}{
		{"spawn 3 researchers on Go generics", Spawn{3, "researcher", "Go generics"}, true, false},
		{"Spawn 2 Researchers on Go generics.", Spawn{2, "Researcher", "Go generics"}, true, false},
		{"please SPAWN five analysts on SQLite WAL mode", Spawn{5, "analyst", "SQLite WAL mode"}, true, false},
		{"spawn a researcher on the history of Unix", Spawn{1, "researcher", "the history of Unix"}, true, false},
		{"spawn an editor about release notes", Spawn{1, "editor", "release notes"}, true, false},
		{"spawn ten deep diggers on Rust async", Spawn{10, "deep digger", "Rust async"}, true, false},
		{"spawn 2 summaries on go.mod", Spawn{2, "summary", "go.mod"}, true, false},
		{"spawn 20 bots on load", Spawn{20, "bot", "load"}, true, false},
		{"spawn 1 boss on x", Spawn{1, "boss", "x"}, true, false},
		{"spawn 21 bots on load", Spawn{}, true, true},
		{"spawn 0 bots on load", Spawn{}, true, true},
		{"spawn researchers on Go", Spawn{}, false, false},
		{"spawn 3 researchers", Spawn{}, false, false},
		{"respawn is not a word here", Spawn{}, false, false},
		{"hello", Spawn{}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok, err := ParseSpawn(tt.in)
			if ok != tt.ok || (err != nil) != tt.err || got != tt.want {
				t.Errorf("ParseSpawn = %+v, %v, %v; want %+v, %v, err %v", got, ok, err, tt.want, tt.ok, tt.err)
			}
		})
	}
}

var spawnSpec = agent.ToolSpec{Name: "sessions_spawn", Schema: json.RawMessage(`{"type":"object","properties":{"task":{"type":"string"},"label":{"type":"string"}},"required":["task"]}`)}

func demoComplete(t *testing.T, d agent.Provider, req agent.Request) *agent.Response {
	t.Helper()
	resp, err := d.Complete(context.Background(), req)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if resp.Usage.Input < 1 || resp.Usage.Output < 1 {
		t.Errorf("usage %+v: want non-zero input and output", resp.Usage)
	}
	return resp
}

func TestDemoSpawnRoundTrip(t *testing.T) {
	d, err := New("demo", config.Provider{API: APIDemo}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	req := agent.Request{Model: "demo", Tools: []agent.ToolSpec{spawnSpec},
		Messages: []agent.Message{{Role: agent.RoleUser, Text: "spawn 3 researchers on Go generics"}}}
	first := demoComplete(t, d, req)
	if len(first.ToolCalls) != 3 {
		t.Fatalf("got %d tool calls, want 3", len(first.ToolCalls))
	}
	ids := map[string]bool{}
	for i, tc := range first.ToolCalls {
		var args map[string]string
		if err := json.Unmarshal(tc.Args, &args); err != nil {
			t.Fatal(err)
		}
		n := string(rune('1' + i))
		want := map[string]string{"task": "researcher #" + n + ": Go generics", "label": "researcher #" + n}
		if tc.Name != "sessions_spawn" || !reflect.DeepEqual(args, want) {
			t.Errorf("call %d = %s %v, want sessions_spawn %v", i, tc.Name, args, want)
		}
		ids[tc.ID] = true
	}
	if len(ids) != 3 {
		t.Errorf("tool call ids not unique: %v", ids)
	}

	results := []agent.ToolResult{
		{CallID: first.ToolCalls[0].ID, Name: "sessions_spawn", Content: `{"status":"accepted","runId":"r1"}`},
		{CallID: first.ToolCalls[1].ID, Name: "sessions_spawn", Content: `{"status":"accepted","runId":"r2"}`},
		{CallID: first.ToolCalls[2].ID, Name: "sessions_spawn", Content: `{"status":"forbidden","error":"limit reached"}`},
	}
	req.Messages = append(req.Messages,
		agent.Message{Role: agent.RoleAssistant, Text: first.Text, ToolCalls: first.ToolCalls},
		agent.Message{Role: agent.RoleTool, ToolResults: results})
	second := demoComplete(t, d, req)
	if len(second.ToolCalls) != 0 || !strings.HasPrefix(second.Text, DemoMarker) ||
		!strings.Contains(second.Text, "2 of 3 sub-agents accepted") || !strings.Contains(second.Text, "announce") {
		t.Errorf("after spawning: %q, want the accepted count and that announces follow", second.Text)
	}
}

func TestDemoSpawnWithoutTool(t *testing.T) {
	resp := demoComplete(t, NewDemo(DemoOptions{}), agent.Request{Messages: []agent.Message{{Role: agent.RoleUser, Text: "spawn 2 researchers on X"}}})
	if len(resp.ToolCalls) != 0 || !strings.Contains(resp.Text, "sessions_spawn tool is not available") {
		t.Errorf("reply = %q with %d calls, want a refusal naming the missing tool", resp.Text, len(resp.ToolCalls))
	}
}

func TestDemoAnnounceStep(t *testing.T) {
	tests := []struct {
		name string
		msgs []agent.Message
		want string
	}{
		{
			name: "last assistant text",
			msgs: []agent.Message{
				{Role: agent.RoleUser, Text: "researcher #1: Go generics"},
				{Role: agent.RoleAssistant, Text: DemoMarker + "Finished it.\nGenerics are fine."},
				{Role: agent.RoleUser, Text: "Announce step: reply with Result: and Notes: only."},
			},
			want: "Result:\n[demo model] Finished it. Generics are fine.\n\nNotes:\n(demo model, no real research was done)",
		},
		{
			name: "only the task",
			msgs: []agent.Message{
				{Role: agent.RoleUser, Text: "researcher #2: Rust"},
				{Role: agent.RoleUser, Text: "announce step"},
			},
			want: "Result:\n[demo model] Worked on: researcher #2: Rust\n\nNotes:\n(demo model, no real research was done)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := demoComplete(t, NewDemo(DemoOptions{}), agent.Request{System: "Sub-agent context: ...", Messages: tt.msgs})
			if resp.Text != tt.want {
				t.Errorf("announce reply =\n%s\nwant\n%s", resp.Text, tt.want)
			}
		})
	}
}

func TestDemoSubagentWaits(t *testing.T) {
	var s sleeps
	d := NewDemo(DemoOptions{Sleep: s.sleep})
	req := agent.Request{System: "AGENTS.md...\n\n## Sub-agent context\nTask: ...",
		Messages: []agent.Message{{Role: agent.RoleUser, Text: "researcher #1: Go generics (wait 30s)"}}}
	resp := demoComplete(t, d, req)
	if got := s.all(); !reflect.DeepEqual(got, []time.Duration{30 * time.Second}) {
		t.Errorf("slept %v, want 30s", got)
	}
	if !strings.HasPrefix(resp.Text, DemoMarker) || !strings.Contains(resp.Text, "researcher #1: Go generics") || strings.Contains(resp.Text, "wait 30s") {
		t.Errorf("sub-agent result = %q", resp.Text)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := NewDemo(DemoOptions{}).Complete(ctx, req)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: err = %v, want context.Canceled", err)
	}
}

func TestDemoWorkspaceTools(t *testing.T) {
	tools := []agent.ToolSpec{
		{Name: "list_files", Schema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)},
		{Name: "read_file", Schema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
		{Name: "exec", Schema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)},
		{Name: "web_search", Schema: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"},"count":{"type":"integer"}},"required":["query"]}`)},
		{Name: "memory_write", Schema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"},"pin":{"type":"boolean"}},"required":["text"]}`)},
		{Name: "memory_search", Schema: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`)},
	}
	tests := []struct {
		say, tool, args string
	}{
		{"List files", "list_files", `{"path":"."}`},
		{"read AGENTS.md", "read_file", `{"path":"AGENTS.md"}`},
		{"Run ls -la", "exec", `{"command":"ls -la"}`},
		{"search sqlite wal mode", "web_search", `{"query":"sqlite wal mode"}`},
		{"Remember the release is on Friday", "memory_write", `{"text":"the release is on Friday"}`},
		{"recall release", "memory_search", `{"query":"release"}`},
	}
	for _, tt := range tests {
		t.Run(tt.say, func(t *testing.T) {
			d := NewDemo(DemoOptions{})
			req := agent.Request{Tools: tools, Messages: []agent.Message{{Role: agent.RoleUser, Text: tt.say}}}
			first := demoComplete(t, d, req)
			if len(first.ToolCalls) != 1 || first.ToolCalls[0].Name != tt.tool || string(first.ToolCalls[0].Args) != tt.args {
				t.Fatalf("calls = %+v, want one %s %s", first.ToolCalls, tt.tool, tt.args)
			}
			req.Messages = append(req.Messages,
				agent.Message{Role: agent.RoleAssistant, ToolCalls: first.ToolCalls},
				agent.Message{Role: agent.RoleTool, ToolResults: []agent.ToolResult{{CallID: first.ToolCalls[0].ID, Content: `{"output":"README.md"}`}}})
			second := demoComplete(t, d, req)
			if len(second.ToolCalls) != 0 || !strings.HasPrefix(second.Text, DemoMarker) ||
				!strings.Contains(second.Text, tt.tool) || !strings.Contains(second.Text, "README.md") {
				t.Errorf("summary = %q, want the tool name and its result", second.Text)
			}
		})
	}
}

// Every reply says it comes from the demo; the announce reply carries the
// marker on its result line so "Result:" stays first.
func TestDemoMarker(t *testing.T) {
	inputs := []string{"hello", "", "what can you do?", "spawn 99 bots on x", "list files", "read x", "run y", "spawn 2 a on b"}
	for _, in := range inputs {
		resp := demoComplete(t, NewDemo(DemoOptions{}), agent.Request{Messages: []agent.Message{{Role: agent.RoleUser, Text: in}}})
		if !strings.HasPrefix(resp.Text, DemoMarker) {
			t.Errorf("reply to %q = %q, want it to start with %q", in, resp.Text, DemoMarker)
		}
	}
	resp := demoComplete(t, NewDemo(DemoOptions{}), agent.Request{Messages: []agent.Message{{Role: agent.RoleUser, Text: "hello"}}})
	if !strings.Contains(resp.Text, "spawn 3 researchers on Go generics") {
		t.Errorf("echo reply %q does not say what the demo can do", resp.Text)
	}
}

// TestDemoHelpIsAMarkdownListOfWhatWorks: the demo's first reply renders as
// a list in the web chat (goldmark, as channels/web renders replies), and
// every suggestion is something the demo does on a fresh install (an
// empty workspace: no file to read yet).
func TestDemoHelpIsAMarkdownListOfWhatWorks(t *testing.T) {
	resp, err := NewDemo(DemoOptions{}).Complete(context.Background(), agent.Request{Messages: []agent.Message{{Role: agent.RoleUser, Text: "hello"}}})
	if err != nil {
		t.Fatal(err)
	}
	var html strings.Builder
	if err := goldmark.New(goldmark.WithExtensions(extension.GFM)).Convert([]byte(resp.Text), &html); err != nil {
		t.Fatal(err)
	}
	if strings.Count(html.String(), "<ul>") != 1 || strings.Count(html.String(), "<li>") != 8 {
		t.Errorf("the help does not render as one list of 8 items:\n%s", html.String())
	}
	if strings.Contains(resp.Text, "AGENTS.md") || strings.Contains(resp.Text, "read ") {
		t.Errorf("the help suggests reading a file a fresh workspace does not have:\n%s", resp.Text)
	}
	if !strings.Contains(resp.Text, "spawn 3 researchers on Go generics (wait 20s)") {
		t.Errorf("the help does not show the live panel's example:\n%s", resp.Text)
	}
	// The example does what it says: three spawns, each told to wait 20 s.
	spawn, err := NewDemo(DemoOptions{}).Complete(context.Background(), agent.Request{
		Messages: []agent.Message{{Role: agent.RoleUser, Text: "spawn 3 researchers on Go generics (wait 20s)"}},
		Tools:    []agent.ToolSpec{{Name: "sessions_spawn"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(spawn.ToolCalls) != 3 || !strings.Contains(string(spawn.ToolCalls[0].Args), "wait 20s") {
		t.Errorf("the example spawns %d: %+v", len(spawn.ToolCalls), spawn.ToolCalls)
	}
}

// "skills" lists the skills of the system prompt, or says how to add one;
// "search" without web_search says how to configure it.
func TestDemoSkillsAndSearchWithoutTool(t *testing.T) {
	system := "You are…\n\n# Skills\nSkills are instructions…\n- pdf: Reads PDFs. (/ws/skills/pdf/SKILL.md)\n- deploy: Ships it. (/srv/skills/deploy/SKILL.md)\n\n# Pinned memories\n- [ab12cd34, 2026-11-27] x\n"
	resp := demoComplete(t, NewDemo(DemoOptions{}), agent.Request{System: system, Messages: []agent.Message{{Role: agent.RoleUser, Text: "skills"}}})
	if !strings.Contains(resp.Text, "- pdf: Reads PDFs. (/ws/skills/pdf/SKILL.md)\n- deploy: Ships it.") || strings.Contains(resp.Text, "ab12cd34") {
		t.Errorf("skills reply = %q", resp.Text)
	}
	resp = demoComplete(t, NewDemo(DemoOptions{}), agent.Request{Messages: []agent.Message{{Role: agent.RoleUser, Text: "skills"}}})
	if !strings.Contains(resp.Text, "no skills yet") || !strings.Contains(resp.Text, "SKILL.md") {
		t.Errorf("skills reply without skills = %q", resp.Text)
	}
	resp = demoComplete(t, NewDemo(DemoOptions{}), agent.Request{Messages: []agent.Message{{Role: agent.RoleUser, Text: "search go generics"}}})
	if len(resp.ToolCalls) != 0 || !strings.Contains(resp.Text, "tools.webSearch.provider") {
		t.Errorf("search without web_search = %+v", resp)
	}
}
