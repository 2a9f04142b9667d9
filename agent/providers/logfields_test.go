package providers

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/config"
)

// The retrier's log lines carry the fields of the run that made the call
// (runId, sessionKey, agentId, channel), and its failures reach the run's
// problem log.
func TestRetryLogLinesNameTheRun(t *testing.T) {
	srv := llmtest.NewAnthropic(t, llmtest.Script(llmtest.Reply{Status: 500, Message: "boom"}, llmtest.Reply{Text: "ok"}))
	core, logs := observer.New(zapcore.InfoLevel)
	p, err := New("anthropic", config.Provider{API: "anthropic", BaseURL: srv.URL, APIKey: "k", Models: []config.Model{{ID: "m"}}},
		Options{Logger: zap.New(core), BackoffBase: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	problems := &agent.ProblemLog{}
	ctx := agent.WithLogFields(agent.WithProblemLog(context.Background(), problems),
		zap.String("runId", "r1"), zap.String("sessionKey", "agent:main:subagent:x"), zap.String("agentId", "main"), zap.String("channel", "web"))
	if _, err := p.Complete(ctx, agent.Request{Model: "m", Messages: []agent.Message{{Role: agent.RoleUser, Text: "hi"}}}); err != nil {
		t.Fatal(err)
	}
	lines := logs.FilterMessage("retrying model call").All()
	if len(lines) != 1 {
		t.Fatalf("%d retry lines, want 1", len(lines))
	}
	fields := lines[0].ContextMap()
	for k, want := range map[string]string{"runId": "r1", "sessionKey": "agent:main:subagent:x", "agentId": "main", "channel": "web"} {
		if fields[k] != want {
			t.Errorf("retry line field %s = %v, want %q", k, fields[k], want)
		}
	}
	if got := problems.Summary(); got != "anthropic HTTP 500: boom" {
		t.Errorf("problem log = %q", got)
	}
}
