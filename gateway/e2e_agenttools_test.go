package gateway_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/agent/tools/searchfake"
)

// toolResultText returns the content of the newest tool result of c whose
// call was named name ("" when none).
func toolResultText(c llmtest.Call, name string) string {
	calls := map[string]string{}
	out := ""
	for _, m := range c.Messages {
		for _, tc := range m.ToolCalls {
			calls[tc.ID] = tc.Name
		}
		for _, r := range m.ToolResults {
			if calls[r.CallID] == name {
				out = r.Content
			}
		}
	}
	return out
}

// TestE2EWebSearchSubagent: a sub-agent searches the web through the
// configured provider (Brave's API on a fake; the gateway reaches it on
// loopback, which the agent egress guard would refuse to web_fetch) and
// its announce cites a result's URL.
func TestE2EWebSearchSubagent(t *testing.T) {
	t.Parallel()
	search := searchfake.New(t)
	search.SetResults(
		searchfake.Result{Title: "WAL mode, the guide", URL: "https://docs.example.org/wal-guide", Snippet: "Readers do not block writers."},
		searchfake.Result{Title: "Other", URL: "https://other.example.org/", Snippet: "…"},
	)
	cfg := strings.ReplaceAll(`{
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [{ id: "main" }] },
  tools: { webSearch: { provider: "brave", apiKey: "`+searchfake.Key+`", baseUrl: "{{search}}" } },
  channels: { web: { enabled: true } },
}`, "{{search}}", search.URL)
	tg := newTestGateway(t, cfg, func(c llmtest.Call) llmtest.Reply {
		last := c.Messages[len(c.Messages)-1]
		if strings.Contains(c.System, "Sub-agent context") {
			var found struct {
				Results []struct{ URL string } `json:"results"`
			}
			_ = json.Unmarshal([]byte(toolResultText(c, "web_search")), &found)
			switch {
			case strings.Contains(c.LastUser(), "Announce step") && len(found.Results) > 0:
				return llmtest.Reply{Text: "Result:\nSee " + found.Results[0].URL + "\n\nNotes:\n(none)"}
			case len(last.ToolResults) > 0:
				return llmtest.Reply{Text: "searched"}
			case slices.Contains(c.Tools, "web_search"):
				return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "web_search", Args: json.RawMessage(`{"query":"sqlite wal mode","count":2}`)}}}
			}
			return llmtest.Reply{Text: "Result:\nno web_search tool\n\nNotes:\n(none)"}
		}
		if len(last.ToolResults) > 0 {
			return llmtest.Reply{Text: "A searcher is on it."}
		}
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn", Args: json.RawMessage(`{"task":"find the WAL docs","label":"searcher"}`)}}}
	})
	seq := webPost(t, tg.URL, "ws1", "find the sqlite WAL docs")
	got := waitWeb(t, tg, "ws1", seq, "announce", func(s string) bool { return strings.Contains(s, "Result:") })
	if !strings.Contains(got.Text, "https://docs.example.org/wal-guide") {
		t.Errorf("announce does not cite the search result:\n%s", got.Text)
	}
	if reqs := search.Requests(); len(reqs) != 1 || reqs[0].API != "brave" || reqs[0].Query != "sqlite wal mode" || reqs[0].Count != 2 {
		t.Errorf("search requests = %+v, want one Brave search for \"sqlite wal mode\" (count 2)", reqs)
	}
}

// memoryModel is the scripted model of the memory tests: "remember <x>"
// (or "pin <x>") writes a memory, "recall <words>" searches, "delegate
// recall <words>" has a sub-agent search and announce what it found; the
// reply after a tool quotes its result.
func memoryModel(c llmtest.Call) llmtest.Reply {
	last := c.Messages[len(c.Messages)-1]
	sub := strings.Contains(c.System, "Sub-agent context")
	if sub && strings.Contains(c.LastUser(), "Announce step") {
		return llmtest.Reply{Text: "Result:\nsub-agent found: " + toolResultText(c, "memory_search") + "\n\nNotes:\n(none)"}
	}
	if len(last.ToolResults) > 0 {
		return llmtest.Reply{Text: "tool said: " + last.ToolResults[0].Content}
	}
	user := c.LastUser()
	if sub {
		task := c.System[strings.Index(c.System, "- Task: ")+len("- Task: "):]
		task, _, _ = strings.Cut(task, "\n")
		user = task
	}
	call := func(name string, args any) llmtest.Reply {
		b, _ := json.Marshal(args)
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: name, Args: b}}}
	}
	switch {
	case strings.HasPrefix(user, "remember "):
		return call("memory_write", map[string]any{"text": strings.TrimPrefix(user, "remember "), "tags": []string{"e2e"}})
	case strings.HasPrefix(user, "pin "):
		return call("memory_write", map[string]any{"text": strings.TrimPrefix(user, "pin "), "pin": true})
	case strings.HasPrefix(user, "recall "):
		return call("memory_search", map[string]any{"query": strings.TrimPrefix(user, "recall ")})
	case strings.HasPrefix(user, "delegate "):
		return call("sessions_spawn", map[string]any{"task": strings.TrimPrefix(user, "delegate "), "label": "recaller"})
	}
	return llmtest.Reply{Text: "ok"}
}

const memoryConfig = `{
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [{ id: "main" }] },
  channels: { web: { enabled: true } },
  memory: { scope: "{{scope}}" },
}`

// ask posts text as client and returns the first reply of the assistant
// after it.
func ask(t *testing.T, tg *testGW, client, text string) string {
	t.Helper()
	seq := webPost(t, tg.URL, client, text)
	return waitWeb(t, tg, client, seq, "assistant", func(string) bool { return true }).Text
}

// TestE2EMemoryScopeConversation: a memory written in conversation A is
// found by A's next turn and by A's sub-agent, not by conversation B; a
// pinned one is in A's system prompt only; /memory lists and forgets.
func TestE2EMemoryScopeConversation(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, strings.ReplaceAll(memoryConfig, "{{scope}}", "conversation"), memoryModel)
	const a, b = "mem-a", "mem-b"
	if got := ask(t, tg, a, "remember the launch code is 4711"); !strings.Contains(got, `"id":"`) {
		t.Fatalf("memory_write answered %q", got)
	}
	if got := ask(t, tg, a, "recall launch code?"); !strings.Contains(got, "the launch code is 4711") || !strings.Contains(got, `"createdAt":"`) {
		t.Errorf("A's next turn did not find its memory: %q", got)
	}
	seq := webPost(t, tg.URL, a, "delegate recall launch code")
	ann := waitWeb(t, tg, a, seq, "announce", func(s string) bool { return strings.Contains(s, "sub-agent found:") })
	if !strings.Contains(ann.Text, "the launch code is 4711") {
		t.Errorf("A's sub-agent did not find A's memory:\n%s", ann.Text)
	}
	if got := ask(t, tg, b, "recall launch code"); strings.Contains(got, "4711") || !strings.Contains(got, `"results":[]`) {
		t.Errorf("conversation B found A's memory (scope conversation): %q", got)
	}

	ask(t, tg, a, "pin the user's name is Ada")
	ask(t, tg, a, "hello again")
	ask(t, tg, b, "hello from B")
	var sysA, sysB string
	for _, c := range tg.LLM.Requests() {
		switch c.LastUser() {
		case "hello again":
			sysA = c.System
		case "hello from B":
			sysB = c.System
		}
	}
	if !strings.Contains(sysA, "# Pinned memories") || !strings.Contains(sysA, "the user's name is Ada") || strings.Contains(sysA, "4711") {
		t.Errorf("A's system prompt lacks its pinned memory (or shows an unpinned one):\n%s", sysA)
	}
	if strings.Contains(sysB, "Ada") {
		t.Errorf("B's system prompt shows A's pinned memory:\n%s", sysB)
	}

	seq = webPost(t, tg.URL, a, "/memory")
	list := waitWeb(t, tg, a, seq, "system", func(s string) bool { return strings.HasPrefix(s, "🧠 ") }).Text
	lines := strings.Split(list, "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], " · the user's name is Ada") || !strings.Contains(lines[1], " · the launch code is 4711") {
		t.Fatalf("/memory in A:\n%s", list)
	}
	id := strings.Fields(lines[1])[1]
	seq = webPost(t, tg.URL, a, "/memory forget "+id)
	waitWeb(t, tg, a, seq, "system", func(s string) bool { return s == "🧠 Forgot "+id+"." })
	if got := ask(t, tg, a, "recall launch code"); strings.Contains(got, "4711") {
		t.Errorf("a forgotten memory was found: %q", got)
	}

	// The pinned memory forgotten, the next turn's system prompt is
	// without it (the gateway keeps the pinned block between writes).
	pinID := strings.Fields(lines[0])[1]
	seq = webPost(t, tg.URL, a, "/memory forget "+pinID)
	waitWeb(t, tg, a, seq, "system", func(s string) bool { return s == "🧠 Forgot "+pinID+"." })
	ask(t, tg, a, "hello after forgetting")
	found := false
	for _, c := range tg.LLM.Requests() {
		if c.LastUser() != "hello after forgetting" {
			continue
		}
		found = true
		if strings.Contains(c.System, "Ada") {
			t.Errorf("a forgotten pinned memory is still in the system prompt:\n%s", c.System)
		}
	}
	if !found {
		t.Error("no model request for \"hello after forgetting\": the check after forgetting saw nothing")
	}
}

// TestE2EMemoryScopeAgent: with memory.scope "agent" another conversation
// of the same agent finds the memory.
func TestE2EMemoryScopeAgent(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, strings.ReplaceAll(memoryConfig, "{{scope}}", "agent"), memoryModel)
	ask(t, tg, "mem-a", "remember the launch code is 4711")
	if got := ask(t, tg, "mem-b", "recall launch code"); !strings.Contains(got, "the launch code is 4711") {
		t.Errorf("conversation B did not find A's memory with scope agent: %q", got)
	}
}

// TestE2EDemoKeywords: with the demo model (make run), "remember",
// "recall", "skills" and "search" show the new tools at work.
func TestE2EDemoKeywords(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	skill := filepath.Join(stateDir, "workspace", "main", "skills", "pdf", "SKILL.md")
	os.MkdirAll(filepath.Dir(skill), 0o755)
	os.WriteFile(skill, []byte("---\nname: pdf\ndescription: Reads PDF files.\n---\n"), 0o644)
	tg := newTestGatewayIn(t, stateDir, webE2EConfig, nil)
	const c = "demo-kw"
	if got := ask(t, tg, c, "remember the release is on Friday"); !strings.Contains(got, "memory_write returned") {
		t.Errorf("remember: %q", got)
	}
	if got := ask(t, tg, c, "recall release"); !strings.Contains(got, "the release is on Friday") {
		t.Errorf("recall: %q", got)
	}
	if got := ask(t, tg, c, "skills"); !strings.Contains(got, "- pdf: Reads PDF files. ("+skill+")") {
		t.Errorf("skills: %q", got)
	}
	if got := ask(t, tg, c, "search sqlite wal"); !strings.Contains(got, "tools.webSearch.provider") {
		t.Errorf("search without a provider: %q", got)
	}
}
