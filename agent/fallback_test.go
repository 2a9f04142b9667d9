package agent_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/agent/providers"
	"github.com/heraldhq/herald/config"
)

const (
	primaryRef  = "anthropic/claude-sonnet-4-20250514"
	fallbackRef = "openai/gpt-4o"
)

// chainModels builds the primary (the Anthropic fake) and the fallback
// (the OpenAI fake) through the real SDKs, retries recorded, not waited.
func chainModels(t *testing.T, primary, fallback llmtest.Handler) (p, f *agent.Model, ps, fs *llmtest.Server) {
	t.Helper()
	ps, fs = llmtest.NewAnthropic(t, primary), llmtest.NewOpenAI(t, fallback)
	opts := providers.Options{Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }}
	ap, err := providers.New("anthropic", config.Provider{API: "anthropic", BaseURL: ps.URL, APIKey: "k"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	op, err := providers.New("openai", config.Provider{API: "openai", BaseURL: fs.URL + "/v1", APIKey: "k"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	p = &agent.Model{Ref: primaryRef, ProviderID: "anthropic", ID: "claude-sonnet-4-20250514", API: "anthropic", Provider: ap}
	f = &agent.Model{Ref: fallbackRef, ProviderID: "openai", ID: "gpt-4o", API: "openai", Provider: op}
	return p, f, ps, fs
}

func newSession(t *testing.T) *agent.Session {
	t.Helper()
	s, err := agent.LoadSession(context.Background(), "k", "id", "main", "", filepath.Join(t.TempDir(), "t.jsonl"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestFallbackAnswersWhenPrimaryOverloaded(t *testing.T) {
	p, f, ps, fs := chainModels(t, llmtest.Script(llmtest.Reply{Status: 529, Message: "Overloaded"}), llmtest.Text("from the fallback"))
	var answered []string
	res, err := newSession(t).Run(context.Background(), agent.Turn{Model: p, Fallbacks: []*agent.Model{f},
		OnCall: func(m *agent.Model, _ agent.Usage) { answered = append(answered, m.Ref) }}, "hi")
	if err != nil {
		t.Fatal(err)
	}
	want := "Answered by openai/gpt-4o: anthropic/claude-sonnet-4-20250514 failed (HTTP 529 overloaded)."
	if res.Text != "from the fallback" || res.Fallback != want || res.AnsweredBy != fallbackRef {
		t.Errorf("result = %+v\nwant note %q", res, want)
	}
	if ps.Count() != providers.DefaultMaxRetries+1 || fs.Count() != 1 {
		t.Errorf("calls: primary %d (want its retries: %d), fallback %d", ps.Count(), providers.DefaultMaxRetries+1, fs.Count())
	}
	if strings.Join(answered, ",") != fallbackRef {
		t.Errorf("spend counted for %v", answered)
	}
}

func TestNoFallbackForClientErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply llmtest.Reply
	}{
		{"400", llmtest.Reply{Status: 400, Message: "messages: bad"}},
		{"401", llmtest.Reply{Status: 401, Message: "invalid x-api-key"}},
		{"context length", llmtest.Reply{Status: 400, Message: "prompt is too long: 210000 tokens > 200000 maximum"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, f, _, fs := chainModels(t, llmtest.Script(tc.reply), nil)
			_, err := newSession(t).Run(context.Background(), agent.Turn{Model: p, Fallbacks: []*agent.Model{f}}, "hi")
			if err == nil || fs.Count() != 0 {
				t.Errorf("err = %v, fallback calls %d; want the error and no fallback", err, fs.Count())
			}
		})
	}
}

// Anthropic says "overloaded" to a streaming request with HTTP 200 and an
// error event; that falls back like a 529 status, with the same note.
func TestFallbackWhenStreamSaysOverloaded(t *testing.T) {
	p, f, ps, fs := chainModels(t, llmtest.Script(llmtest.Reply{StreamError: 529, Message: "Overloaded"}), llmtest.Text("from the fallback"))
	res, err := newSession(t).Run(context.Background(), agent.Turn{Model: p, Fallbacks: []*agent.Model{f}, OnText: func(string) {}}, "hi")
	if err != nil {
		t.Fatal(err)
	}
	want := "Answered by openai/gpt-4o: anthropic/claude-sonnet-4-20250514 failed (HTTP 529 overloaded)."
	if res.Text != "from the fallback" || res.Fallback != want {
		t.Errorf("text %q, note %q; want the fallback's text and %q", res.Text, res.Fallback, want)
	}
	if ps.Count() != providers.DefaultMaxRetries+1 || fs.Count() != 1 || !ps.Requests()[0].Stream {
		t.Errorf("calls: primary %d (want %d, streamed), fallback %d", ps.Count(), providers.DefaultMaxRetries+1, fs.Count())
	}
}

// A streamed reply whose first text reached the person never moves to
// another model: the person would see two answers spliced.
func TestStreamFallsBackOnlyBeforeFirstText(t *testing.T) {
	p, f, ps, fs := chainModels(t, llmtest.Script(llmtest.Reply{Text: "The first words and then the connection breaks", CutAfter: 1}), nil)
	var mu sync.Mutex
	var seen []string
	_, err := newSession(t).Run(context.Background(), agent.Turn{Model: p, Fallbacks: []*agent.Model{f},
		OnText: func(s string) { mu.Lock(); seen = append(seen, s); mu.Unlock() }}, "hi")
	if err == nil || fs.Count() != 0 || ps.Count() == 0 {
		t.Fatalf("err = %v, fallback calls %d, primary %d; want the error, no fallback", err, fs.Count(), ps.Count())
	}
	if len(seen) == 0 {
		t.Fatal("no text streamed before the cut")
	}

	// Text streamed to nobody (Turn.Shown false: a sub-agent without a
	// live view) does not keep the cut call from the fallback.
	p, f, _, fs = chainModels(t, llmtest.Script(llmtest.Reply{Text: "The first words and then the connection breaks", CutAfter: 1}),
		llmtest.Text("fallback after unseen text"))
	res, err := newSession(t).Run(context.Background(), agent.Turn{Model: p, Fallbacks: []*agent.Model{f},
		OnText: func(string) {}, Shown: func() bool { return false }}, "hi")
	if err != nil || res.Text != "fallback after unseen text" || fs.Count() != 1 {
		t.Errorf("unseen text: res = %+v, err = %v, fallback calls %d; want the fallback's answer", res, err, fs.Count())
	}

	// Failing before its first text, the same stream falls back.
	p, f, _, fs = chainModels(t, llmtest.Script(llmtest.Reply{Status: 529}), llmtest.Text("fallback streamed"))
	res, err = newSession(t).Run(context.Background(), agent.Turn{Model: p, Fallbacks: []*agent.Model{f}, OnText: func(string) {}}, "hi")
	if err != nil || res.Text != "fallback streamed" || fs.Count() != 1 || !fs.Requests()[0].Stream {
		t.Errorf("res = %+v, err = %v, fallback calls %d", res, err, fs.Count())
	}
}

// A model that failed over twice in a row cools down: the next turn asks
// the fallback first and the primary not at all.
func TestFailingModelCoolsDown(t *testing.T) {
	p, f, ps, fs := chainModels(t, llmtest.Script(llmtest.Reply{Status: 503}), nil)
	h := agent.NewHealth()
	now := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	h.Now = func() time.Time { return now }
	s := newSession(t)
	for range 2 {
		if _, err := s.Run(context.Background(), agent.Turn{Model: p, Fallbacks: []*agent.Model{f}, Health: h}, "hi"); err != nil {
			t.Fatal(err)
		}
	}
	before := ps.Count()
	if _, ok := h.CoolingDown(primaryRef); !ok {
		t.Fatalf("primary not cooling down: %+v", h.Snapshot())
	}
	res, err := s.Run(context.Background(), agent.Turn{Model: p, Fallbacks: []*agent.Model{f}, Health: h}, "hi")
	if err != nil || ps.Count() != before || res.AnsweredBy != fallbackRef {
		t.Errorf("while cooling down: res %+v err %v, primary calls %d → %d", res, err, before, ps.Count())
	}
	// The note says why the fallback answered though the primary was not called.
	want := "Answered by openai/gpt-4o: anthropic/claude-sonnet-4-20250514 cools down after failing (HTTP 503 unavailable)."
	if res.Fallback != want {
		t.Errorf("note while cooling down = %q, want %q", res.Fallback, want)
	}
	now = now.Add(agent.DefaultCooldown + time.Second)
	if _, ok := h.CoolingDown(primaryRef); ok {
		t.Error("still cooling down after the cooldown")
	}
	_ = fs
}

// The budget hook is asked before every call; its error ends the turn and
// no call is made.
func TestBeforeCallStopsTheCall(t *testing.T) {
	p, f, ps, fs := chainModels(t, nil, nil)
	stop := errors.New("💸 Budget reached")
	_, err := newSession(t).Run(context.Background(), agent.Turn{Model: p, Fallbacks: []*agent.Model{f},
		BeforeCall: func(context.Context, *agent.Model) error { return stop }}, "hi")
	if !errors.Is(err, stop) || ps.Count()+fs.Count() != 0 {
		t.Errorf("err = %v, calls %d", err, ps.Count()+fs.Count())
	}
}

// BenchmarkFallbackFromOverloaded measures how long a call takes to reach
// the fallback when the primary answers 529 with no retry-after, with the
// providers' default retries (4 retries, backoff from 1 s doubling, jitter
// [d/2, d]): real waits, so run it with -benchtime 1x.
func BenchmarkFallbackFromOverloaded(b *testing.B) {
	ps, fs := llmtest.NewAnthropic(b, llmtest.Script(llmtest.Reply{Status: 529, Message: "Overloaded"})), llmtest.NewOpenAI(b, llmtest.Text("ok"))
	ap, _ := providers.New("anthropic", config.Provider{API: "anthropic", BaseURL: ps.URL, APIKey: "k"}, providers.Options{})
	op, _ := providers.New("openai", config.Provider{API: "openai", BaseURL: fs.URL + "/v1", APIKey: "k"}, providers.Options{})
	p := &agent.Model{Ref: primaryRef, ID: "claude-sonnet-4-20250514", Provider: ap}
	f := &agent.Model{Ref: fallbackRef, ID: "gpt-4o", Provider: op}
	for b.Loop() {
		s, err := agent.LoadSession(context.Background(), "k", "id", "main", "", filepath.Join(b.TempDir(), "t.jsonl"), time.Now())
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		res, err := s.Run(context.Background(), agent.Turn{Model: p, Fallbacks: []*agent.Model{f}}, "hi")
		if err != nil || res.Fallback == "" {
			b.Fatalf("%v %+v", err, res)
		}
		b.ReportMetric(time.Since(start).Seconds(), "s/fallback")
		s.Close()
	}
}
