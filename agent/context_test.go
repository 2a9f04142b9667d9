package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/agent/providers"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

// limitedModel is a model behind a fake API of kind api that refuses any
// request over window tokens with that API's real context-length error.
// The main conversation gets "answer to turn N"; a summarising request
// gets a short summary. refused counts the refusals.
func limitedModel(t *testing.T, api string, window, contextWindow int) (*agent.Model, *atomic.Int64) {
	t.Helper()
	var refused atomic.Int64
	inner := func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "compact summaries") {
			return llmtest.Reply{Text: "Earlier the person sent numbered long messages and got numbered answers."}
		}
		last := c.LastUser()
		n := strings.Fields(last)
		return llmtest.Reply{Text: "answer to turn " + n[len(n)-1]}
	}
	h := llmtest.ContextLimit(window, inner)
	counting := func(c llmtest.Call) llmtest.Reply {
		r := h(c)
		if r.Status == 400 {
			refused.Add(1)
		}
		return r
	}
	var srv *llmtest.Server
	if api == llmtest.APIOpenAI {
		srv = llmtest.NewOpenAI(t, counting)
	} else {
		srv = llmtest.NewAnthropic(t, counting)
	}
	p, err := providers.New(api, config.Provider{API: api, BaseURL: srv.URL, APIKey: "k", Models: []config.Model{{ID: "m"}}}, providers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &agent.Model{Ref: api + "/m", ProviderID: api, ID: "m", Provider: p, MaxTokens: 512, ContextWindow: contextWindow}, &refused
}

// A long conversation in a model with an 8000-token window: 200 turns of
// long messages are all answered; compaction lines appear in the
// transcript, which still holds every message; no provider error reaches
// the caller. Both SDKs' providers.
func TestLongConversationStaysInTheContextWindow(t *testing.T) {
	for _, api := range []string{llmtest.APIAnthropic, llmtest.APIOpenAI} {
		t.Run(api, func(t *testing.T) {
			model, _ := limitedModel(t, api, 8000, 8000)
			path := filepath.Join(t.TempDir(), "s.jsonl")
			s, err := agent.LoadSession(context.Background(), "agent:main:web:dm:long", "id", "main", "", path, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			filler := strings.Repeat("All work and no play makes a long thread. ", 30) // ~1300 bytes
			for i := 1; i <= 200; i++ {
				res, err := s.Run(context.Background(), agent.Turn{Model: model, Tools: agent.NewRegistry(echoTool{})},
					fmt.Sprintf("%s turn %d", filler, i))
				if err != nil {
					t.Fatalf("turn %d: %v", i, err)
				}
				if want := fmt.Sprintf("answer to turn %d", i); res.Text != want {
					t.Fatalf("turn %d answered %q, want %q", i, res.Text, want)
				}
			}
			_, entries, err := store.FileTranscripts{}.ReadTranscript(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			compactions, users := 0, 0
			for _, e := range entries {
				switch {
				case e.Type == "compaction":
					compactions++
					if e.Kept <= 0 || e.TokensAfter >= e.TokensBefore || e.Content == "" {
						t.Errorf("compaction line %+v", e)
					}
				case e.Role == "user":
					users++
				}
			}
			if compactions == 0 || users != 200 {
				t.Errorf("transcript has %d compaction lines and %d user messages; want some and 200", compactions, users)
			}
			// A reload sends the compacted context, not the whole history.
			s2, err := agent.LoadSession(context.Background(), "agent:main:web:dm:long", "id", "main", "", path, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			if n := agent.EstimateRequest("", nil, s2.History); n > agent.Budget(model) || !strings.HasPrefix(s2.History[0].Text, "[Summary of the earlier conversation") {
				t.Errorf("reloaded context: %d tokens (budget %d), first message %.60q", n, agent.Budget(model), s2.History[0].Text)
			}
		})
	}
}

// A model with no known window: the history is sent whole until the
// provider refuses its length; then one compaction and one retry answer the
// turn, for both providers' error shapes.
func TestContextLengthErrorCompactsAndRetries(t *testing.T) {
	for _, api := range []string{llmtest.APIAnthropic, llmtest.APIOpenAI} {
		t.Run(api, func(t *testing.T) {
			model, refused := limitedModel(t, api, 6000, 0)
			s, err := agent.LoadSession(context.Background(), "k", "id", "main", "", filepath.Join(t.TempDir(), "s.jsonl"), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			filler := strings.Repeat("x", 2000)
			for i := 1; i <= 30; i++ {
				if _, err := s.Run(context.Background(), agent.Turn{Model: model}, fmt.Sprintf("%s turn %d", filler, i)); err != nil {
					t.Fatalf("turn %d: %v", i, err)
				}
			}
			if refused.Load() == 0 {
				t.Fatal("the provider never refused a length; the test did not reach the retry")
			}
		})
	}
}

// Both SDK providers turn the real context-length error bodies into
// agent.ErrContextLength; other 400s are not.
func TestContextLengthErrorShapes(t *testing.T) {
	for _, api := range []string{llmtest.APIAnthropic, llmtest.APIOpenAI} {
		model, _ := limitedModel(t, api, 10, 0)
		_, err := model.Provider.Complete(context.Background(), agent.Request{Model: "m", Messages: []agent.Message{{Role: agent.RoleUser, Text: "far more than ten tokens of text here"}}})
		if !errors.Is(err, agent.ErrContextLength) {
			t.Errorf("%s: error %v is not ErrContextLength", api, err)
		}
	}
	srv := llmtest.NewAnthropic(t, llmtest.Script(llmtest.Reply{Status: 400, Message: "messages: roles must alternate"}))
	p, _ := providers.New("a", config.Provider{API: "anthropic", BaseURL: srv.URL, APIKey: "k"}, providers.Options{})
	_, err := p.Complete(context.Background(), agent.Request{Model: "m", Messages: []agent.Message{{Role: agent.RoleUser, Text: "hi"}}})
	if err == nil || errors.Is(err, agent.ErrContextLength) {
		t.Errorf("a plain 400 = %v; want an error that is not ErrContextLength", err)
	}
}

// Compaction never separates a tool call from its result: every tool
// result sent follows the assistant message with its call.
func TestCompactionKeepsToolPairs(t *testing.T) {
	var bad atomic.Int64
	srv := llmtest.NewAnthropic(t, llmtest.ContextLimit(5000, func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "compact summaries") {
			return llmtest.Reply{Text: "summary"}
		}
		for i, m := range c.Messages {
			if m.Role == agent.RoleTool && (i == 0 || len(c.Messages[i-1].ToolCalls) != len(m.ToolResults)) {
				bad.Add(1)
			}
		}
		last := c.Messages[len(c.Messages)-1]
		if last.Role == agent.RoleUser {
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "echo", Args: json.RawMessage(`{"text":"` + strings.Repeat("y", 900) + `"}`)}}}
		}
		return llmtest.Reply{Text: "done"}
	}))
	p, _ := providers.New("anthropic", config.Provider{API: "anthropic", BaseURL: srv.URL, APIKey: "k"}, providers.Options{})
	model := &agent.Model{Ref: "anthropic/m", ID: "m", Provider: p, MaxTokens: 256, ContextWindow: 5000}
	s, err := agent.LoadSession(context.Background(), "k", "id", "main", "", filepath.Join(t.TempDir(), "s.jsonl"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 40; i++ {
		if _, err := s.Run(context.Background(), agent.Turn{Model: model, Tools: agent.NewRegistry(echoTool{})}, fmt.Sprintf("turn %d %s", i, strings.Repeat("z", 400))); err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
	}
	if bad.Load() > 0 {
		t.Errorf("%d requests had a tool result without its call right before it", bad.Load())
	}
}

// Compaction drops old images but keeps their references: after /compact,
// the picture of the first turn is no longer sent as image content, the
// summary names its workspace path, and the transcript (reloaded) keeps the
// file's reference on the first user line, never its bytes.
func TestCompactionDropsImagesKeepsReferences(t *testing.T) {
	srv := llmtest.NewAnthropic(t, func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "compact summaries") {
			return llmtest.Reply{Text: "The person showed a chart."}
		}
		return llmtest.Reply{Text: "ok"}
	})
	p, err := providers.New("anthropic", config.Provider{API: "anthropic", BaseURL: srv.URL, APIKey: "k", Models: []config.Model{{ID: "m"}}}, providers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	model := &agent.Model{Ref: "anthropic/m", ID: "m", Provider: p, MaxTokens: 512, Images: true}
	png := []byte("\x89PNG\r\n\x1a\n picture")
	open := func(context.Context, string) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(png)), nil }
	path := filepath.Join(t.TempDir(), "s.jsonl")
	s, err := agent.LoadSession(context.Background(), "k", "id", "main", "", path, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	file := agent.File{ID: "abc", Name: "chart.png", MIME: "image/png", Size: int64(len(png)), Path: "attachments/chart.png"}
	turn := agent.Turn{Model: model, OpenFile: open, Files: []agent.File{file}}
	if _, err := s.Run(context.Background(), turn, "see\n[file: attachments/chart.png · image/png · 17 B]"); err != nil {
		t.Fatal(err)
	}
	if c, _ := srv.Last(); len(c.Blocks()) != 1 {
		t.Fatalf("first turn sent %d blocks, want the image", len(c.Blocks()))
	}
	for i := range 3 {
		if _, err := s.Run(context.Background(), agent.Turn{Model: model, OpenFile: open}, fmt.Sprintf("turn %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Compact(context.Background(), agent.Turn{Model: model}, "", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(context.Background(), agent.Turn{Model: model, OpenFile: open}, "and now?"); err != nil {
		t.Fatal(err)
	}
	c, _ := srv.Last()
	if n := len(c.Blocks()); n != 0 {
		t.Errorf("after compaction %d image blocks are still sent", n)
	}
	if body := string(c.Body); !strings.Contains(body, "attachments/chart.png (image/png)") {
		t.Errorf("the request after compaction does not name the dropped file")
	}
	_, entries, err := store.FileTranscripts{}.ReadTranscript(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries[0].Files) == 0 || !strings.Contains(string(entries[0].Files), `"id":"abc"`) || strings.Contains(string(entries[0].Files), "picture") {
		t.Errorf("first transcript line files %s, want the reference only", entries[0].Files)
	}
}
