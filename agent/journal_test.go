package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/store"
)

// countTool counts its calls; repeatable says whether it is marked safe to
// call again. onCall, if set, runs inside each call.
type countTool struct {
	name       string
	repeatable bool
	calls      atomic.Int32
	onCall     func()
}

func (c *countTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{Name: c.name, Schema: json.RawMessage(`{"type":"object"}`)}
}
func (c *countTool) Group() string    { return "" }
func (c *countTool) Repeatable() bool { return c.repeatable }
func (c *countTool) Call(context.Context, agent.CallContext, json.RawMessage) (string, error) {
	c.calls.Add(1)
	if c.onCall != nil {
		c.onCall()
	}
	return `{"did":"` + c.name + `"}`, nil
}

// cutTranscript writes the transcript a crash left: the lines of entries.
func cutTranscript(t *testing.T, path string, entries ...store.TranscriptEntry) {
	t.Helper()
	tr, err := store.FileTranscripts{}.OpenTranscript(context.Background(), path, store.TranscriptHeader{SessionKey: "k", SessionID: "id"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		e.Type = "message"
		if err := tr.Append(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	tr.Close()
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Each tool result is on disk when its call ends, before the next call of
// the same batch starts (SPEC §25): a crash later in the batch keeps it.
func TestJournalWritesEachResultWhenItsCallEnds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	first := &countTool{name: "first"}
	second := &countTool{name: "second"}
	var firstOnDisk bool
	second.onCall = func() {
		_, entries, _ := store.FileTranscripts{}.ReadTranscript(context.Background(), path)
		last := entries[len(entries)-1]
		var rs []agent.ToolResult
		_ = json.Unmarshal(last.ToolResults, &rs)
		firstOnDisk = last.Role == "tool" && len(rs) == 1 && rs[0].CallID == "a"
	}
	model, _ := newModel(t, llmtest.Script(
		llmtest.Reply{ToolCalls: []agent.ToolCall{{ID: "a", Name: "first"}, {ID: "b", Name: "second"}}},
		llmtest.Reply{Text: "done"},
	))
	s, err := agent.LoadSession(context.Background(), "k", "id", "main", "", path, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Run(context.Background(), agent.Turn{Model: model, Tools: agent.NewRegistry(first, second)}, "go"); err != nil {
		t.Fatal(err)
	}
	if !firstOnDisk {
		t.Error("the first call's result was not in the transcript when the second call of its batch ran")
	}
	// The history (what the provider gets) still holds one tool message
	// for the batch, also when read back from the transcript.
	if n := len(s.History); n != 4 || len(s.History[2].ToolResults) != 2 {
		t.Errorf("history = %+v; want user, assistant, one tool message with 2 results, assistant", s.History)
	}
	_, entries, _ := store.FileTranscripts{}.ReadTranscript(context.Background(), path)
	if msgs := agent.MessagesFromTranscript(entries); len(msgs) != 4 || len(msgs[2].ToolResults) != 2 {
		t.Errorf("history read back = %+v; want the two result lines as one tool message", msgs)
	}
}

// A turn resumed after a crash mid-batch keeps the results that were
// written, makes the unanswered calls again only when their tool is
// repeatable, and gives the others the exact interrupted result; the model
// sees one tool message in call order (SPEC §25).
func TestResumeRepeatsOnlyRepeatableCalls(t *testing.T) {
	for _, resume := range []bool{true, false} {
		name := "resumed"
		if !resume {
			name = "new turn"
		}
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.jsonl")
			read := &countTool{name: "read", repeatable: true}
			write := &countTool{name: "write"}
			fetch := &countTool{name: "fetch", repeatable: true}
			calls := []agent.ToolCall{{ID: "c1", Name: "read"}, {ID: "c2", Name: "write"}, {ID: "c3", Name: "fetch"}}
			cutTranscript(t, path,
				store.TranscriptEntry{Role: "user", Content: "do it"},
				store.TranscriptEntry{Role: "assistant", ToolCalls: mustJSON(t, calls)},
				store.TranscriptEntry{Role: "tool", ToolResults: mustJSON(t, []agent.ToolResult{{CallID: "c1", Name: "read", Content: `{"did":"read before"}`}})},
			) // killed while "write" ran
			model, srv := newModel(t, llmtest.Text("done"))
			s, err := agent.LoadSession(context.Background(), "k", "id", "main", "", path, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Run(context.Background(), agent.Turn{Model: model, Tools: agent.NewRegistry(read, write, fetch), Resume: resume}, "do it"); err != nil {
				t.Fatal(err)
			}
			wantFetch := int32(0)
			if resume {
				wantFetch = 1
			}
			if read.calls.Load() != 0 || write.calls.Load() != 0 || fetch.calls.Load() != wantFetch {
				t.Errorf("calls made on resume: read %d, write %d, fetch %d; want 0, 0, %d",
					read.calls.Load(), write.calls.Load(), fetch.calls.Load(), wantFetch)
			}
			first := srv.Requests()[0]
			var results []agent.ToolResult
			for _, m := range first.Messages {
				if m.Role == agent.RoleTool {
					results = append(results, m.ToolResults...)
				}
			}
			if len(results) != 3 || results[0].CallID != "c1" || results[1].CallID != "c2" || results[2].CallID != "c3" {
				t.Fatalf("the model saw results %+v; want c1, c2, c3 in one tool message", results)
			}
			if results[0].Content != `{"did":"read before"}` {
				t.Errorf("recorded result of c1 = %s; want the one from before the crash", results[0].Content)
			}
			if results[1].Content != agent.InterruptedResult {
				t.Errorf("result of the non-repeatable call = %s; want %s", results[1].Content, agent.InterruptedResult)
			}
			wantC3 := `{"did":"fetch"}`
			if !resume {
				wantC3 = agent.InterruptedResult
			}
			if results[2].Content != wantC3 {
				t.Errorf("result of the repeatable call = %s; want %s", results[2].Content, wantC3)
			}
		})
	}
}

// A resumed run's model calls before the crash count against its
// MaxIterations (Turn.Used).
func TestResumeCountsUsedIterations(t *testing.T) {
	model, srv := newModel(t, func(c llmtest.Call) llmtest.Reply {
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "echo", Args: json.RawMessage(`{"text":"again"}`)}}}
	})
	s := &agent.Session{Key: "k", History: []agent.Message{{Role: agent.RoleUser, Text: "loop"}}}
	_, err := s.Run(context.Background(), agent.Turn{Model: model, Tools: agent.NewRegistry(echoTool{}), MaxIterations: 5, Used: 3, Resume: true}, "loop")
	if !errors.Is(err, agent.ErrMaxIterations) {
		t.Fatalf("err = %v, want ErrMaxIterations", err)
	}
	if n := srv.Count(); n != 2 {
		t.Errorf("%d model calls after the resume, want 2 (5 less the 3 made before)", n)
	}
}

// The loop reads the Repeatable mark only: a tool still declaring the old
// ResumeSafe() method would silently stop being repeated on resume.
func TestNoToolUsesTheOldResumeSafeMark(t *testing.T) {
	old := ") Resume" + "Safe() bool" // split, so this file does not match
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), old) {
			t.Errorf("%s declares ResumeSafe(); the mark is Repeatable() (agent.Repeatable)", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
