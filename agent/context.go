package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/store"
)

// Context budget (SPEC §12): before each model call the history is fitted
// into the model's context window less its output tokens and a reserve.
// Long tool results are trimmed first (in what is sent only); if that is not
// enough, the older turns are summarised by the model and the summary
// replaces them — in memory and, through a "compaction" transcript line, on
// every reload — while the transcript keeps every message.

// knownWindows are the context windows of model families, by id prefix
// (longest prefix wins), used when a model sets no contextWindow.
var knownWindows = []struct {
	prefix string
	tokens int
}{
	{"claude-", 200_000},
	{"gpt-4o", 128_000}, {"gpt-4-turbo", 128_000}, {"gpt-4.1", 1_047_576}, {"gpt-4", 8_192},
	{"gpt-5", 400_000}, {"gpt-3.5-turbo", 16_385},
	{"o1", 200_000}, {"o3", 200_000}, {"o4", 200_000},
	{"llama3", 128_000}, {"llama-3", 128_000}, {"qwen", 32_768}, {"mistral", 32_768}, {"gemma", 8_192},
	{"demo", 200_000},
}

// KnownContextWindow returns the context window of a well-known model id
// (any "vendor/" prefix ignored), 0 when unknown.
func KnownContextWindow(modelID string) int {
	id := strings.ToLower(modelID)
	if i := strings.LastIndex(id, "/"); i >= 0 {
		id = id[i+1:]
	}
	best, tokens := 0, 0
	for _, w := range knownWindows {
		if strings.HasPrefix(id, w.prefix) && len(w.prefix) > best {
			best, tokens = len(w.prefix), w.tokens
		}
	}
	return tokens
}

// defaultOutputTokens is assumed for a model that sets no maxTokens.
const defaultOutputTokens = 4096

// Budget is the input tokens a request to m may use: its context window less
// its output tokens and a reserve (2%, at least 256). 0 = unlimited.
func Budget(m *Model) int {
	if m == nil || m.ContextWindow <= 0 {
		return 0
	}
	out := m.MaxTokens
	if out <= 0 {
		out = defaultOutputTokens
	}
	b := m.ContextWindow - min(out, m.ContextWindow/2) - max(256, m.ContextWindow/50)
	return max(b, m.ContextWindow/4)
}

// EstimateTokens errs on the safe side: three bytes a token (real
// tokenizers average about four for English), plus a little per message.
// It takes bytes as they are (a tool's schema, a call's arguments): a
// string(b) conversion here copied them, each estimate of each call.
func EstimateTokens[T ~string | ~[]byte](s T) int { return (len(s) + 2) / 3 }

func estimateMessage(m Message) int {
	n := 4 + EstimateTokens(m.Text)
	for _, c := range m.ToolCalls {
		n += 8 + EstimateTokens(c.Name) + EstimateTokens(c.Args)
	}
	for _, r := range m.ToolResults {
		n += 8 + EstimateTokens(r.Content)
	}
	// An image costs about what a 1000×1000 picture does on Anthropic
	// (width×height/750); a PDF about its size in text.
	for _, f := range m.Files {
		switch {
		case strings.HasPrefix(f.MIME, "image/"):
			n += 1600
		case f.MIME == "application/pdf":
			n += int(min(f.Size/3, 200_000))
		}
	}
	return n
}

// fileRef names a file for the model: attachments/report.pdf (application/pdf).
func fileRef(f File) string {
	p := f.Path
	if p == "" {
		p = f.Name
	}
	return p + " (" + f.MIME + ")"
}

// EstimateRequest estimates the input tokens of a request.
func EstimateRequest(system string, tools []ToolSpec, msgs []Message) int {
	n := EstimateTokens(system)
	for _, t := range tools {
		n += 8 + EstimateTokens(t.Name) + EstimateTokens(t.Description) + EstimateTokens(t.Schema)
	}
	for _, m := range msgs {
		n += estimateMessage(m)
	}
	return n
}

// trimResults returns msgs with tool results longer than maxBytes cut to
// that (oldest first, until est fits budget); msgs itself is not changed.
func trimResults(msgs []Message, fixed, budget, maxBytes int) []Message {
	total := fixed
	for _, m := range msgs {
		total += estimateMessage(m)
	}
	if total <= budget {
		return msgs
	}
	out := make([]Message, len(msgs))
	copy(out, msgs)
	for i := range out {
		if total <= budget {
			break
		}
		if len(out[i].ToolResults) == 0 {
			continue
		}
		results := make([]ToolResult, len(out[i].ToolResults))
		copy(results, out[i].ToolResults)
		for j, r := range results {
			if len(r.Content) <= maxBytes {
				continue
			}
			cut := strings.ToValidUTF8(r.Content[:maxBytes], "")
			results[j].Content = fmt.Sprintf("%s\n…[trimmed: %d of %d bytes not shown to save context]", cut, len(r.Content)-len(cut), len(r.Content))
			total -= EstimateTokens(r.Content) - EstimateTokens(results[j].Content)
		}
		out[i].ToolResults = results
	}
	return out
}

// summaryPrefix starts the first message sent after a compaction.
const summaryPrefix = "[Summary of the earlier conversation (compacted to fit the context window)]\n"

// withSummary puts summary in front of the first kept message, a user
// message, so roles still alternate.
// The files of the summarised messages lose their content (images are
// not sent again) but keep their references, listed after the summary.
func withSummary(summary string, dropped, kept []Message) []Message {
	var refs []string
	for _, m := range dropped {
		for _, f := range m.Files {
			refs = append(refs, fileRef(f))
		}
	}
	if len(refs) > 0 {
		summary += "\n[Files of the summarised messages, still in the workspace: " + strings.Join(refs, ", ") + "]"
	}
	out := make([]Message, len(kept))
	copy(out, kept)
	if len(out) == 0 || out[0].Role != RoleUser {
		return append([]Message{{Role: RoleUser, Text: summaryPrefix + summary}}, out...)
	}
	out[0].Text = summaryPrefix + summary + "\n\n[The conversation goes on]\n" + out[0].Text
	return out
}

// contextFromTranscript rebuilds what is sent to the model: the messages,
// with each compaction line's summary replacing the messages before its
// kept ones.
func contextFromTranscript(entries []store.TranscriptEntry) []Message {
	var msgs []Message
	for i, e := range entries {
		if e.Type == "compaction" {
			kept := min(max(e.Kept, 0), len(msgs))
			msgs = withSummary(e.Content, msgs[:len(msgs)-kept], msgs[len(msgs)-kept:])
			continue
		}
		if e.Type == "message" {
			for _, m := range MessagesFromTranscript(entries[i : i+1]) {
				msgs = appendMessage(msgs, m)
			}
		}
	}
	return msgs
}

// ErrNothingToCompact: the history is one turn; nothing older to summarise.
var ErrNothingToCompact = errors.New("nothing to compact: the conversation is a single turn")

// cutPoint returns the index of the first kept message: the earliest user
// message from which the rest fits in keep tokens, but never later than the
// last user message, so the current turn stays whole and a tool call is
// never separated from its result. 0 means nothing can be cut.
func cutPoint(msgs []Message, keep int) int {
	last := -1
	for i := len(msgs) - 1; i > 0; i-- {
		if msgs[i].Role == RoleUser {
			last = i
			break
		}
	}
	if last < 0 {
		return 0
	}
	cut, size := last, 0
	for i := len(msgs) - 1; i >= last; i-- {
		size += estimateMessage(msgs[i])
	}
	for i := last - 1; i > 0; i-- {
		size += estimateMessage(msgs[i])
		if size > keep {
			break
		}
		if msgs[i].Role == RoleUser {
			cut = i
		}
	}
	return cut
}

// render writes msgs as plain text for the summariser, tool output cut.
func render(msgs []Message, maxBytes int) string {
	var b strings.Builder
	clip := func(s string, n int) string {
		if len(s) <= n {
			return s
		}
		return strings.ToValidUTF8(s[:n], "") + "…"
	}
	for _, m := range msgs {
		switch m.Role {
		case RoleUser:
			fmt.Fprintf(&b, "User: %s\n", m.Text)
		case RoleAssistant:
			if m.Text != "" {
				fmt.Fprintf(&b, "Assistant: %s\n", m.Text)
			}
			for _, c := range m.ToolCalls {
				fmt.Fprintf(&b, "Assistant called %s %s\n", c.Name, clip(string(c.Args), 300))
			}
		case RoleTool:
			for _, r := range m.ToolResults {
				fmt.Fprintf(&b, "Result of %s: %s\n", r.Name, clip(r.Content, 600))
			}
		}
	}
	s := b.String()
	if len(s) > maxBytes {
		// Keep the start (it holds the previous summary) and the end.
		head := maxBytes / 3
		s = strings.ToValidUTF8(s[:head], "") + "\n…[middle left out]…\n" + strings.ToValidUTF8(s[len(s)-(maxBytes-head):], "")
	}
	return s
}

const compactInstruction = `Summarise the conversation below so it can go on without it. Keep what
matters for the rest of the conversation: the person's goals and
preferences, decisions made, facts and figures found, files and names
mentioned, sub-agents started (with their run ids) and what is still open.
Write plain prose and short lists, at most about %d words. Do not answer the
conversation; only summarise it.`

// Compaction is the outcome of one compaction.
type Compaction struct {
	Before, After int // estimated tokens of what is sent, before and after
	Usage         Usage
}

// Compact summarises the session's older turns with t's model, keeping the
// latest turns that fit in keep tokens (0: only the last turn); focus, if
// set, tells the summariser what to keep above all (/compact focus). The summary is
// written as a compaction line; the transcript keeps every message.
func (s *Session) Compact(ctx context.Context, t Turn, focus string, keep int) (Compaction, error) {
	return s.compact(ctx, t, focus, keep, Budget(t.Model))
}

// compact is Compact within budget tokens (0 = unknown).
func (s *Session) compact(ctx context.Context, t Turn, focus string, keep, budget int) (Compaction, error) {
	var c Compaction
	if t.Tools == nil {
		t.Tools = NewRegistry()
	}
	specs := t.Tools.Specs()
	c.Before = EstimateRequest(t.System, specs, s.History)
	cut := cutPoint(s.History, max(keep, 0))
	if cut == 0 {
		c.After = c.Before
		return c, ErrNothingToCompact
	}
	words := 400
	maxRender := 60_000
	if budget > 0 {
		words = min(words, budget/8)
		maxRender = min(maxRender, budget*3/2) // about half the budget, in bytes
	}
	prompt := fmt.Sprintf(compactInstruction, words)
	if f := strings.TrimSpace(focus); f != "" {
		prompt += "\nAbove all, keep: " + f
	}
	summarise := func(maxRender int) (*Response, error) {
		if t.BeforeCall != nil {
			if err := t.BeforeCall(ctx, t.Model); err != nil {
				return nil, err
			}
		}
		return t.Model.Provider.Complete(ctx, Request{
			Model: t.Model.ID, System: "You write faithful, compact summaries of conversations.",
			Messages:  []Message{{Role: RoleUser, Text: prompt + "\n\n<conversation>\n" + render(s.History[:cut], maxRender) + "</conversation>"}},
			MaxTokens: max(256, min(words*2, 2048)),
		})
	}
	resp, err := summarise(maxRender)
	if errors.Is(err, ErrContextLength) && ctx.Err() == nil {
		resp, err = summarise(maxRender / 3) // the summariser's own request was too long
	}
	if err != nil {
		return c, fmt.Errorf("compact the conversation: %w", err)
	}
	c.Usage = resp.Usage
	if t.OnUsage != nil {
		t.OnUsage(resp.Usage)
	}
	if t.OnCall != nil {
		t.OnCall(t.Model, resp.Usage)
	}
	summary := strings.TrimSpace(resp.Text)
	if summary == "" {
		return c, errors.New("compact the conversation: the model returned an empty summary")
	}
	kept := len(s.History) - cut
	s.History = withSummary(summary, s.History[:cut], s.History[cut:])
	c.After = EstimateRequest(t.System, specs, s.History)
	if s.Transcript != nil {
		u := resp.Usage
		e := store.TranscriptEntry{Type: "compaction", Role: "system", Content: summary, Kept: kept,
			TokensBefore: c.Before, TokensAfter: c.After, Model: t.Model.Ref, Timestamp: t.clock().Now().UTC()}
		e.Usage, _ = json.Marshal(u)
		if err := s.writeLine(ctx, e); err != nil {
			return c, fmt.Errorf("write transcript of %s: %w", s.Key, err)
		}
	}
	t.logger().Info("conversation compacted", zap.String("sessionKey", s.Key), zap.Int("tokensBefore", c.Before),
		zap.Int("tokensAfter", c.After), zap.Int("messagesSummarised", cut), zap.Int("messagesKept", kept))
	return c, nil
}

// fit returns the messages to send for the next model call: the history,
// with long tool results trimmed, compacted first when that is not enough
// (or when force is set, after the provider refused the length).
func (s *Session) fit(ctx context.Context, t *Turn, force bool) ([]Message, Usage, error) {
	budget := Budget(t.Model)
	var spent Usage
	if budget == 0 && !force {
		return s.History, spent, nil
	}
	specs := t.Tools.Specs()
	fixed := EstimateRequest(t.System, specs, nil)
	if budget == 0 {
		budget = EstimateRequest(t.System, specs, s.History) * 2 / 3
	}
	maxResult := max(budget*3/4, 2048) // a quarter of the budget, in bytes
	if force {
		maxResult /= 2
	}
	msgs := trimResults(s.History, fixed, budget, maxResult)
	if !force && EstimateRequest(t.System, specs, msgs) <= budget {
		return msgs, spent, nil
	}
	keep := budget / 3
	if force {
		keep = budget / 5
	}
	c, err := s.compact(ctx, *t, "", keep, budget)
	spent = c.Usage
	if err != nil && !errors.Is(err, ErrNothingToCompact) {
		return nil, spent, err
	}
	return trimResults(s.History, fixed, budget, maxResult), spent, nil
}

func (t *Turn) clock() Clock {
	if t.Clock == nil {
		return SystemClock{}
	}
	return t.Clock
}

func (t *Turn) logger() *zap.Logger {
	if t.Logger == nil {
		return zap.NewNop()
	}
	return t.Logger
}
