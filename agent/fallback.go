package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// ErrCallTimeout is a model call that got no answer within its provider's
// deadline (models.providers.<id>.timeoutSeconds) while the turn itself
// still had time: a fallback model may answer instead.
var ErrCallTimeout = errors.New("no answer from the model")

// Retryable reports whether a model call's error is worth another model
// (SPEC §20): a 429, a 5xx (529 overloaded included), a failed connection
// or a call deadline, after the provider's own retries. A context-length
// error, a 400, and an auth failure on every key are not.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var pe *ProviderError
	if errors.As(err, &pe) {
		return pe.Retryable && !pe.ContextLength && !pe.Auth
	}
	return errors.Is(err, ErrCallTimeout)
}

// FailureReason names why a model call failed, briefly: "HTTP 529
// overloaded", "connection refused", "timed out".
func FailureReason(err error) string {
	var pe *ProviderError
	if errors.As(err, &pe) {
		switch {
		case pe.StatusCode > 0 && pe.StatusCode != http.StatusOK:
			if s := statusWord(pe.StatusCode); s != "" {
				return fmt.Sprintf("HTTP %d %s", pe.StatusCode, s)
			}
			return fmt.Sprintf("HTTP %d", pe.StatusCode)
		case pe.ConnectionFailed && strings.Contains(strings.ToLower(pe.Message), "refused"):
			return "connection refused"
		case pe.ConnectionFailed:
			return "connection failed"
		}
		return pe.Message
	}
	if errors.Is(err, ErrCallTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

func statusWord(code int) string {
	switch code {
	case http.StatusTooManyRequests:
		return "rate limited"
	case http.StatusInternalServerError:
		return "server error"
	case http.StatusBadGateway:
		return "bad gateway"
	case http.StatusServiceUnavailable:
		return "unavailable"
	case http.StatusGatewayTimeout:
		return "gateway timeout"
	case 529:
		return "overloaded"
	case http.StatusUnauthorized:
		return "unauthorized"
	case http.StatusForbidden:
		return "forbidden"
	}
	if code >= 500 {
		return "server error"
	}
	return ""
}

// Cooldown defaults: a model whose calls failed over this many times in a
// row is tried last for this long (SPEC §20).
const (
	DefaultCooldownAfter = 2
	DefaultCooldown      = 5 * time.Minute
)

// Health remembers which models keep failing. A model whose calls failed
// (after their retries, with a retryable error) CooldownAfter times in a
// row cools down: for Cooldown it is tried after the other models of a
// chain, not first. A success ends it. It is shared by every turn and run
// of the process and survives reloads (Catalog keeps it).
type Health struct {
	CooldownAfter int
	Cooldown      time.Duration
	Now           func() time.Time

	mu     sync.Mutex
	models map[string]*modelHealth // by ref; guarded by mu
}

type modelHealth struct {
	fails  int
	until  time.Time
	reason string
	total  int64 // failed calls since start
}

// NewHealth returns a Health with the defaults.
func NewHealth() *Health {
	return &Health{CooldownAfter: DefaultCooldownAfter, Cooldown: DefaultCooldown, Now: time.Now, models: map[string]*modelHealth{}}
}

// Failed records a failed call of ref.
func (h *Health) Failed(ref, reason string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.models[ref]
	if m == nil {
		m = &modelHealth{}
		h.models[ref] = m
	}
	m.fails++
	m.total++
	m.reason = reason
	if m.fails >= h.CooldownAfter {
		m.until = h.Now().Add(h.Cooldown)
	}
}

// Succeeded records an answer from ref: it is healthy again.
func (h *Health) Succeeded(ref string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if m := h.models[ref]; m != nil {
		m.fails, m.until = 0, time.Time{}
	}
}

// CoolingDown reports whether ref cools down now, and until when.
func (h *Health) CoolingDown(ref string) (time.Time, bool) {
	if h == nil {
		return time.Time{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.models[ref]
	if m == nil || !m.until.After(h.Now()) {
		return time.Time{}, false
	}
	return m.until, true
}

// ModelHealth is one model's state for /status and metrics.
type ModelHealth struct {
	Ref         string
	Failures    int // in a row
	TotalFailed int64
	Until       time.Time // cooling down until; zero when not
	Reason      string    // of the last failure
}

// Snapshot lists every model that failed since start, by ref.
func (h *Health) Snapshot() []ModelHealth {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.Now()
	out := make([]ModelHealth, 0, len(h.models))
	for ref, m := range h.models {
		mh := ModelHealth{Ref: ref, Failures: m.fails, TotalFailed: m.total, Reason: m.reason}
		if m.until.After(now) {
			mh.Until = m.until
		}
		out = append(out, mh)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref < out[j].Ref })
	return out
}

// whyNotFirst says why answered, not the chain's first model, answered a
// call, in chain order: "<ref> failed (<reason>)" for a model that failed
// in this call (failedNow), "<ref> cools down after failing (<reason>)"
// for one ahead of it in the chain that was not tried because it cools
// down. Empty when the chain's first model answered without a failure.
func (h *Health) whyNotFirst(chain []*Model, answered string, failedNow map[string]string) []string {
	var why []string
	ahead := true
	for _, m := range chain {
		if m.Ref == answered {
			ahead = false
			continue
		}
		if r, ok := failedNow[m.Ref]; ok {
			why = append(why, fmt.Sprintf("%s failed (%s)", m.Ref, r))
			continue
		}
		if !ahead {
			continue
		}
		if r, ok := h.coolingReason(m.Ref); ok {
			why = append(why, fmt.Sprintf("%s cools down after failing (%s)", m.Ref, r))
		}
	}
	return why
}

// coolingReason reports whether ref cools down now and the reason of its
// last failure.
func (h *Health) coolingReason(ref string) (string, bool) {
	if h == nil {
		return "", false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.models[ref]
	if m == nil || !m.until.After(h.Now()) {
		return "", false
	}
	return m.reason, true
}

// order puts the models that cool down after the others, keeping the
// chain's order within each group.
func (h *Health) order(models []*Model) []*Model {
	if h == nil || len(models) < 2 {
		return models
	}
	var warm, cold []*Model
	for _, m := range models {
		if _, c := h.CoolingDown(m.Ref); c {
			cold = append(cold, m)
		} else {
			warm = append(warm, m)
		}
	}
	return append(warm, cold...)
}

// Chain resolves a model setting's refs (primary first) to models; refs
// that are not configured are returned in missing.
func (c *Catalog) Chain(refs []string) (models []*Model, missing []string) {
	for _, r := range refs {
		if m, ok := c.Lookup(r); ok {
			models = append(models, m)
		} else {
			missing = append(missing, r)
		}
	}
	return models, missing
}

// FallbackNote is the line a run's Notes and /status show when a fallback
// model answered: "Answered by <ref>: <ref> failed (HTTP 529 overloaded)."
func FallbackNote(answeredBy string, failures []string) string {
	if len(failures) == 0 {
		return ""
	}
	return fmt.Sprintf("Answered by %s: %s.", answeredBy, strings.Join(failures, ", "))
}
