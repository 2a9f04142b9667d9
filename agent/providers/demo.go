package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/agent"
)

// DemoMarker starts every demo reply, so no one mistakes it for a real model.
const DemoMarker = "[demo model] "

// DemoOptions tunes the demo model.
type DemoOptions struct {
	// Sleep waits d or until ctx ends. nil → a timer.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Demo is the offline scripted model (api "demo"). It never calls out and
// says in every reply that it is not a real model.
type Demo struct {
	sleep func(ctx context.Context, d time.Duration) error
}

var _ agent.Provider = (*Demo)(nil)

// NewDemo returns the demo model.
func NewDemo(o DemoOptions) *Demo {
	if o.Sleep == nil {
		o.Sleep = sleepCtx
	}
	return &Demo{sleep: o.Sleep}
}

// demoHelp is what the demo says it can do.
// It is Markdown (a list with a blank line before and after, so that the
// web chat renders it as one) and suggests only what works on a fresh
// install, where the workspace is still empty.
const demoHelp = `This is Herald's offline demo model: no real LLM is answering. Try:

- spawn 3 researchers on Go generics (wait 20s) — each works 20 s, then announces its result here (the web chat's panel shows them running)
- spawn a researcher on SQLite WAL mode
- list files
- run ls -la
- remember the release is on Friday — then recall release (and /memory)
- search sqlite wal mode (needs tools.webSearch)
- skills — the skills this agent has
- /subagents list

Configure a real provider under models.providers to get real answers.`

// Spawn is one parsed "spawn N <what> on <topic>" request.
type Spawn struct {
	N     int
	What  string // singular, e.g. "researcher"
	Topic string
}

var spawnRe = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?is)\bspawn\s+(\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten)\s+(.+?)\s+(?:on|about|for)\s+(.+)$`)
})

var numberWords = map[string]int{"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
	"six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}

// ParseSpawn reads "spawn N <what> on <topic>" (N is 1..20, a number word
// one..ten, or "a"/"an"). ok is false when text is not such a request;
// err is set when it is one but N is out of range.
func ParseSpawn(text string) (s Spawn, ok bool, err error) {
	m := spawnRe().FindStringSubmatch(strings.TrimSpace(text))
	if m == nil {
		return Spawn{}, false, nil
	}
	word := strings.ToLower(m[1])
	n, isWord := numberWords[word]
	if !isWord {
		n, err = strconv.Atoi(word)
		if err != nil {
			return Spawn{}, false, nil
		}
	}
	if n < 1 || n > 20 {
		return Spawn{}, true, fmt.Errorf("the demo spawns 1 to 20 sub-agents, not %d", n)
	}
	what := strings.Join(strings.Fields(m[2]), " ")
	if n > 1 {
		what = singular(what)
	}
	topic := strings.TrimRight(strings.TrimSpace(m[3]), ".!?")
	return Spawn{N: n, What: what, Topic: topic}, true, nil
}

// singular drops a plural "s" from the last word ("researchers" →
// "researcher", "deep analysts" → "deep analyst").
func singular(s string) string {
	words := strings.Fields(s)
	last := words[len(words)-1]
	low := strings.ToLower(last)
	switch {
	case strings.HasSuffix(low, "ies") && len(low) > 4:
		last = last[:len(last)-3] + "y"
	case strings.HasSuffix(low, "s") && !strings.HasSuffix(low, "ss") && len(low) > 3:
		last = last[:len(last)-1]
	}
	words[len(words)-1] = last
	return strings.Join(words, " ")
}

var waitRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?i)\bwait\s+(\d{1,4})\s*s\b`) })

// Complete answers from the script; see the package docs and docs/providers.md.
func (d *Demo) Complete(ctx context.Context, req agent.Request) (*agent.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	resp, err := d.answer(ctx, req)
	if err != nil {
		return nil, err
	}
	resp.Model = req.Model
	if resp.Model == "" {
		resp.Model = "demo"
	}
	resp.Usage = agent.Usage{Input: demoTokens(requestText(req)), Output: demoTokens(resp.Text + toolCallText(resp.ToolCalls))}
	if len(resp.ToolCalls) > 0 {
		resp.StopReason = "tool_use"
	} else {
		resp.StopReason = "end_turn"
	}
	return resp, nil
}

func (d *Demo) answer(ctx context.Context, req agent.Request) (*agent.Response, error) {
	msgs := req.Messages
	if len(msgs) == 0 {
		return text(demoHelp), nil
	}
	last := msgs[len(msgs)-1]
	if last.Role == agent.RoleTool {
		return text(afterTools(msgs)), nil
	}
	user := ""
	if last.Role == agent.RoleUser {
		user = strings.TrimSpace(last.Text)
	}
	low := strings.ToLower(user)

	if strings.HasPrefix(low, "announce step") {
		return &agent.Response{Text: announceReply(msgs)}, nil
	}
	if strings.Contains(strings.ToLower(req.System), "sub-agent context") && isFirstTurn(msgs) {
		if m := waitRe().FindStringSubmatch(user); m != nil {
			secs, _ := strconv.Atoi(m[1])
			if err := d.sleep(ctx, time.Duration(secs)*time.Second); err != nil {
				return nil, fmt.Errorf("demo: %w", err)
			}
		}
		return text(subagentResult(user)), nil
	}
	if s, ok, err := ParseSpawn(user); ok {
		if err != nil {
			return text(err.Error() + ". Try: spawn 3 researchers on Go generics"), nil
		}
		if !offered(req.Tools, "sessions_spawn") {
			return text("I would spawn sub-agents, but the sessions_spawn tool is not available in this session."), nil
		}
		resp := &agent.Response{Text: DemoMarker + fmt.Sprintf("Spawning %d %s on %s.", s.N, plural(s.What, s.N), s.Topic)}
		for i := 1; i <= s.N; i++ {
			args, _ := json.Marshal(map[string]string{
				"task":  fmt.Sprintf("%s #%d: %s", s.What, i, s.Topic),
				"label": fmt.Sprintf("%s #%d", s.What, i),
			})
			resp.ToolCalls = append(resp.ToolCalls, agent.ToolCall{ID: callID(msgs, i), Name: "sessions_spawn", Args: args})
		}
		return resp, nil
	}
	if strings.HasPrefix(low, "list files") {
		return toolCall(req, msgs, "list_files", "I would list files, but", []string{"path", "dir"}, "."), nil
	}
	if rest, ok := cutPrefixFold(user, "read "); ok {
		return toolCall(req, msgs, "read_file", "I would read a file, but", []string{"path", "file"}, strings.TrimSpace(rest)), nil
	}
	if rest, ok := cutPrefixFold(user, "run "); ok {
		return toolCall(req, msgs, "exec", "I would run a command, but", []string{"command", "cmd"}, strings.TrimSpace(rest)), nil
	}
	if rest, ok := cutPrefixFold(user, "search "); ok {
		if _, offered := findTool(req.Tools, "web_search"); !offered {
			return text("I would search the web, but web_search is not configured: set tools.webSearch.provider (brave or tavily with an apiKey, or searxng with the baseUrl of your instance). See docs/tools.md."), nil
		}
		return toolCall(req, msgs, "web_search", "I would search the web, but", []string{"query"}, strings.TrimSpace(rest)), nil
	}
	if rest, ok := cutPrefixFold(user, "remember "); ok {
		return toolCall(req, msgs, "memory_write", "I would remember that, but", []string{"text"}, strings.TrimSpace(rest)), nil
	}
	if rest, ok := cutPrefixFold(user, "recall "); ok {
		return toolCall(req, msgs, "memory_search", "I would search my memories, but", []string{"query"}, strings.TrimSpace(rest)), nil
	}
	if low == "skills" || strings.HasPrefix(low, "skills ") || low == "list skills" {
		return text(skillsReply(req.System)), nil
	}
	echo := oneLine(user, 200)
	if echo == "" {
		return text(demoHelp), nil
	}
	return text(fmt.Sprintf("You said: %q.\n\n%s", echo, demoHelp)), nil
}

func text(s string) *agent.Response { return &agent.Response{Text: DemoMarker + s} }

// toolCall asks for one call of tool when offered, its one argument named
// by argName.
func toolCall(req agent.Request, msgs []agent.Message, tool, refusal string, prefer []string, value string) *agent.Response {
	spec, ok := findTool(req.Tools, tool)
	if !ok {
		return text(fmt.Sprintf("%s the %s tool is not available in this session.", refusal, tool))
	}
	name := argName(spec.Schema, prefer)
	args := map[string]string{}
	if name != "" {
		args[name] = value
	}
	raw, _ := json.Marshal(args)
	return &agent.Response{
		Text:      DemoMarker + fmt.Sprintf("Calling %s.", tool),
		ToolCalls: []agent.ToolCall{{ID: callID(msgs, 1), Name: tool, Args: raw}},
	}
}

// argName picks the argument name for a tool: the first of prefer the
// schema declares, else its first required property, else prefer[0] when
// the schema declares no properties at all, else "" (send no argument).
func argName(schema json.RawMessage, prefer []string) string {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	_ = json.Unmarshal(schema, &s)
	for _, p := range prefer {
		if _, ok := s.Properties[p]; ok {
			return p
		}
	}
	if len(s.Required) > 0 {
		return s.Required[0]
	}
	if len(s.Properties) == 0 && len(prefer) > 0 {
		return prefer[0]
	}
	return ""
}

// afterTools summarises the results of the newest assistant tool calls.
func afterTools(msgs []agent.Message) string {
	results := msgs[len(msgs)-1].ToolResults
	if len(results) == 0 {
		return "The tools returned nothing."
	}
	spawns, accepted := 0, 0
	var other []string
	for _, r := range results {
		name := r.Name
		if name == "" {
			name = toolNameFor(msgs, r.CallID)
		}
		if name == "sessions_spawn" {
			spawns++
			var v struct {
				Status string `json:"status"`
			}
			if json.Unmarshal([]byte(r.Content), &v) == nil && v.Status == "accepted" {
				accepted++
			}
			continue
		}
		state := "returned"
		if r.IsError {
			state = "failed with"
		}
		other = append(other, fmt.Sprintf("%s %s:\n%s", name, state, clip(r.Content, 1500)))
	}
	var b strings.Builder
	if spawns > 0 {
		switch {
		case accepted == spawns:
			fmt.Fprintf(&b, "%d of %d sub-agents accepted. Each will announce its result in this chat when it finishes.", accepted, spawns)
		case accepted == 0:
			fmt.Fprintf(&b, "0 of %d sub-agents accepted: the spawns were refused (see the tool results for why).", spawns)
		default:
			fmt.Fprintf(&b, "%d of %d sub-agents accepted (the others were refused). The accepted ones will announce their results in this chat when they finish.", accepted, spawns)
		}
	}
	if len(other) > 0 {
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString("Here is what the tool gave me (the demo does not interpret it):\n")
		b.WriteString(strings.Join(other, "\n\n"))
	}
	return b.String()
}

func toolNameFor(msgs []agent.Message, callID string) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		for _, tc := range msgs[i].ToolCalls {
			if tc.ID == callID {
				return tc.Name
			}
		}
	}
	return ""
}

// skillsReply lists the skills the system prompt names (its # Skills
// block), or says how to add one.
func skillsReply(system string) string {
	_, block, ok := strings.Cut(system, "# Skills\n")
	var lines []string
	if ok {
		for _, l := range strings.Split(block, "\n") {
			if strings.HasPrefix(l, "- ") {
				lines = append(lines, l)
			} else if len(lines) > 0 || strings.HasPrefix(l, "#") {
				break
			}
		}
	}
	if len(lines) == 0 {
		return "I have no skills yet. A skill is a folder with a SKILL.md (front matter name: and description:) under skills/ in my workspace or in a folder of skills.paths; the next message sees it. See docs/tools.md."
	}
	return "My skills (I read a skill's SKILL.md with read_file before using it):\n\n" + strings.Join(lines, "\n")
}

// announceReply is the announce step's answer: Result and Notes only. The
// marker goes on the result line so "Result:" stays the first line.
func announceReply(msgs []agent.Message) string {
	summary := ""
	for i := len(msgs) - 2; i >= 0 && summary == ""; i-- {
		if msgs[i].Role == agent.RoleAssistant {
			summary = oneLine(strings.TrimPrefix(msgs[i].Text, DemoMarker), 300)
		}
	}
	if summary == "" {
		for _, m := range msgs {
			if m.Role == agent.RoleUser {
				summary = "Worked on: " + oneLine(m.Text, 280)
				break
			}
		}
	}
	if summary == "" {
		summary = "(nothing to report)"
	}
	return "Result:\n" + DemoMarker + summary + "\n\nNotes:\n(demo model, no real research was done)"
}

func subagentResult(task string) string {
	t := waitRe().ReplaceAllString(task, "")
	t = oneLine(strings.Trim(strings.TrimSpace(t), "()., "), 200)
	if t == "" {
		t = "the task"
	}
	return fmt.Sprintf("Finished %q. Summary: three points stood out — the topic is well documented, the trade-offs are mostly about simplicity versus flexibility, and a small experiment would settle the rest. (Made up by the demo model: nothing was looked up.)", t)
}

func isFirstTurn(msgs []agent.Message) bool {
	users := 0
	for _, m := range msgs {
		switch m.Role {
		case agent.RoleUser:
			users++
		case agent.RoleAssistant:
			return false
		}
	}
	return users == 1
}

func offered(tools []agent.ToolSpec, name string) bool {
	_, ok := findTool(tools, name)
	return ok
}

func findTool(tools []agent.ToolSpec, name string) (agent.ToolSpec, bool) {
	for _, t := range tools {
		if t.Name == name {
			return t, true
		}
	}
	return agent.ToolSpec{}, false
}

// callID is unique within a conversation: message count and position.
func callID(msgs []agent.Message, i int) string { return fmt.Sprintf("demo_%d_%d", len(msgs), i) }

func plural(what string, n int) string {
	if n == 1 {
		return what
	}
	if strings.HasSuffix(what, "y") && !strings.HasSuffix(what, "ey") {
		return what[:len(what)-1] + "ies"
	}
	return what + "s"
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return "", false
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	return clip(s, max)
}

func clip(s string, max int) string {
	r := []rune(s)
	if len(r) <= max {
		return s
	}
	return string(r[:max-1]) + "…"
}

func demoTokens(s string) int64 { return max(1, int64(len(s)/4)) }

func requestText(req agent.Request) string {
	var b strings.Builder
	b.WriteString(req.System)
	for _, m := range req.Messages {
		b.WriteString(m.Text)
		b.WriteString(toolCallText(m.ToolCalls))
		for _, r := range m.ToolResults {
			b.WriteString(r.Content)
		}
	}
	for _, t := range req.Tools {
		b.WriteString(t.Name)
		b.WriteString(t.Description)
		b.Write(t.Schema)
	}
	return b.String()
}

func toolCallText(calls []agent.ToolCall) string {
	var b strings.Builder
	for _, c := range calls {
		b.WriteString(c.Name)
		b.Write(c.Args)
	}
	return b.String()
}
