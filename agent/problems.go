package agent

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"go.uber.org/zap"
)

// ProblemLog collects what went wrong during a run that did not end it by
// itself — provider errors that were retried — so a run that then times
// out can say why in its Notes ("3 × anthropic HTTP 500") instead of only
// "timed out".
type ProblemLog struct {
	mu     sync.Mutex
	order  []string
	counts map[string]int
}

type problemKey struct{}

// WithProblemLog returns ctx carrying p; NoteProblem under it adds to p.
func WithProblemLog(ctx context.Context, p *ProblemLog) context.Context {
	return context.WithValue(ctx, problemKey{}, p)
}

// NoteProblem records msg in the ProblemLog of ctx, if any.
func NoteProblem(ctx context.Context, msg string) {
	p, _ := ctx.Value(problemKey{}).(*ProblemLog)
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.counts == nil {
		p.counts = map[string]int{}
	}
	if p.counts[msg] == 0 {
		p.order = append(p.order, msg)
	}
	p.counts[msg]++
}

// Summary lists the problems in first-seen order, repeats counted:
// "3 × anthropic HTTP 500: Internal Server Error; anthropic HTTP 529: Overloaded".
// It is "" when nothing was noted.
func (p *ProblemLog) Summary() string {
	if p == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	parts := make([]string, 0, len(p.order))
	for _, m := range p.order {
		if n := p.counts[m]; n > 1 {
			parts = append(parts, fmt.Sprintf("%d × %s", n, m))
		} else {
			parts = append(parts, m)
		}
	}
	return strings.Join(parts, "; ")
}

type logFieldsKey struct{}

// WithLogFields returns ctx carrying fields that code deep in a call (the
// provider retrier) adds to its log lines, so every line about a run names
// the run (runId, sessionKey, agentId, channel).
func WithLogFields(ctx context.Context, fields ...zap.Field) context.Context {
	prev, _ := ctx.Value(logFieldsKey{}).([]zap.Field)
	return context.WithValue(ctx, logFieldsKey{}, append(append([]zap.Field(nil), prev...), fields...))
}

// LogFields returns the fields WithLogFields put in ctx.
func LogFields(ctx context.Context) []zap.Field {
	f, _ := ctx.Value(logFieldsKey{}).([]zap.Field)
	return f
}
