// Package providers implements agent.Provider for each configured model API:
// "anthropic" (the Anthropic Messages API through anthropic-sdk-go),
// "openai" and "openai-compatible" (Chat Completions through openai-go, the
// latter for Ollama, vLLM, llama.cpp server and OpenRouter), and "demo", an
// offline scripted model for trying Herald without an API key.
//
// It owns the mapping between the neutral agent.Request/Response and each
// wire format, thinking levels, usage mapping, and retries (429 and 5xx with
// backoff honouring Retry-After). It must not run the model loop, call
// tools, or know sessions: it answers one Request at a time.
package providers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/config"
)

// API names accepted in models.providers.<id>.api.
const (
	APIAnthropic        = "anthropic"
	APIOpenAI           = "openai"
	APIOpenAICompatible = "openai-compatible"
	APIDemo             = "demo"
)

// Defaults used when Options leaves a field zero.
const (
	DefaultMaxRetries    = 4
	DefaultBackoffBase   = time.Second
	DefaultMaxBackoff    = 30 * time.Second
	DefaultMaxRetryAfter = 2 * time.Minute
	// DefaultAnthropicMaxTokens is max_tokens when neither the request nor
	// the model config sets one (the Messages API requires it).
	DefaultAnthropicMaxTokens = 4096
)

// ErrUnknownAPI is returned by New for an api value it does not know.
var ErrUnknownAPI = errors.New("unknown provider api")

// Options tunes a provider. The zero value is usable.
type Options struct {
	Logger     *zap.Logger  // nil → zap.NewNop()
	HTTPClient *http.Client // nil → a pool of its own (transportFor); calls are bounded by ctx
	// MaxRetries is how often a 429, 5xx or connection failure is retried:
	// 0 → DefaultMaxRetries, negative → never.
	MaxRetries int
	// BackoffBase is the first backoff (doubled per retry, with jitter) when
	// the server sends no Retry-After. 0 → DefaultBackoffBase.
	BackoffBase time.Duration
	// MaxBackoff caps the computed backoff. 0 → DefaultMaxBackoff.
	MaxBackoff time.Duration
	// MaxRetryAfter is the longest Retry-After honoured; a server asking
	// for more ends the call with its error. 0 → DefaultMaxRetryAfter.
	MaxRetryAfter time.Duration
	// Sleep waits d or until ctx ends (returning ctx.Err()). nil → a timer.
	// Tests replace it to record delays without waiting. The demo model's
	// "wait Ns" uses it too.
	Sleep func(ctx context.Context, d time.Duration) error
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = DefaultMaxRetries
	} else if o.MaxRetries < 0 {
		o.MaxRetries = 0
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = DefaultBackoffBase
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.MaxRetryAfter <= 0 {
		o.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if o.Sleep == nil {
		o.Sleep = sleepCtx
	}
	return o
}

// New returns the provider configured as models.providers.<id>.
func New(id string, p config.Provider, opts Options) (agent.Provider, error) {
	if opts.HTTPClient == nil {
		// Each provider has its own pool, bounded by its maxConnections.
		opts.HTTPClient = &http.Client{Transport: transportFor(p.MaxConnections)}
	}
	opts = opts.withDefaults()
	log := opts.Logger.Named("provider").With(zap.String("provider", id), zap.String("api", p.API))
	switch p.API {
	case APIAnthropic:
		return newAnthropic(id, p, opts, log)
	case APIOpenAI, APIOpenAICompatible:
		return newOpenAI(id, p, opts, log)
	case APIDemo:
		return NewDemo(DemoOptions{Sleep: opts.Sleep}), nil
	}
	return nil, fmt.Errorf("provider %q: %w %q (want anthropic, openai, openai-compatible or demo)", id, ErrUnknownAPI, p.API)
}

// modelConfig finds the configured model, if any.
func modelConfig(p config.Provider, model string) config.Model {
	for _, m := range p.Models {
		if m.ID == model {
			return m
		}
	}
	return config.Model{}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// failure is one failed attempt, classified.
type failure struct {
	status     int    // HTTP status; 0 = no response (connection failure)
	message    string // the provider's own error message
	retryAfter string // the Retry-After header
	retryMS    string // the retry-after-ms header
	transport  bool   // no response: the connection failed
	// contextLength: the request was over the model's context window.
	contextLength bool
}

func (f failure) retryable() bool {
	return f.transport || f.status == http.StatusTooManyRequests || f.status >= 500
}

// streamErrorStatus maps the error type (or OpenAI code) of an error event
// sent inside a stream that was answered HTTP 200 to the status the same
// failure has as a plain answer; 0 = not a type it knows.
func streamErrorStatus(typ string) int {
	switch strings.ToLower(strings.TrimSpace(typ)) {
	case "overloaded_error", "overloaded":
		return 529 // Anthropic's "overloaded"
	case "rate_limit_error", "rate_limit_exceeded", "requests", "tokens":
		return http.StatusTooManyRequests
	case "api_error", "server_error", "internal_error":
		return http.StatusInternalServerError
	case "service_unavailable", "engine_overloaded":
		return http.StatusServiceUnavailable
	case "timeout_error", "timeout":
		return http.StatusGatewayTimeout
	case "invalid_request_error":
		return http.StatusBadRequest
	case "authentication_error", "invalid_api_key":
		return http.StatusUnauthorized
	case "permission_error":
		return http.StatusForbidden
	case "not_found_error", "model_not_found":
		return http.StatusNotFound
	case "request_too_large":
		return http.StatusRequestEntityTooLarge
	case "billing_error":
		return http.StatusPaymentRequired
	}
	return 0
}

// notAnswered classifies an error that carries no HTTP response: a
// connection failure is worth retrying, a client-side refusal is not.
func notAnswered(err error) failure {
	var ue *url.Error
	var ne net.Error
	transport := errors.As(err, &ue) || errors.As(err, &ne) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
	return failure{message: err.Error(), transport: transport}
}

// retrier runs attempts of one call with backoff, turning between the
// provider's keys (SPEC §20).
type retrier struct {
	provider string
	opts     Options
	log      *zap.Logger
	keys     *keyPool // nil or empty: the client's own credentials
}

// do runs attempt until it succeeds, fails for good, retries run out, or
// ctx ends. attempt gets the API key to send ("" = the client's own);
// classify turns an attempt's error into a failure. With several keys, a
// key answered 429 rests and the next key is tried at once; a key refused
// with 401/403 is set aside and the next one tried; when every key is set
// aside the call fails (an auth failure: no fallback model is tried).
//
// do stays on the stack while an attempt waits for its answer, so its
// frame is kept small: picking a key and handling a failure are calls of
// their own (docs/performance.md, memory per model call in flight).
func (r *retrier) do(ctx context.Context, attempt func(ctx context.Context, key string) (*agent.Response, error), classify func(error) failure) (*agent.Response, error) {
	for n := 0; ; n++ {
		ki, key, err := r.pick(ctx)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		resp, err := attempt(ctx, key)
		if err == nil {
			r.answered(ctx, n, start, resp)
			return resp, nil
		}
		again := false
		if n, again, err = r.failed(ctx, n, ki, err, classify); !again {
			return nil, err
		}
	}
}

// logger is the retrier's logger with the run's fields, when a run makes
// the call.
func (r *retrier) logger(ctx context.Context) *zap.Logger {
	if f := agent.LogFields(ctx); len(f) > 0 {
		return r.log.With(f...)
	}
	return r.log
}

// pick chooses the key of the next attempt, waiting for a rested one when
// every key rests.
func (r *retrier) pick(ctx context.Context) (ki int, key string, err error) {
	ki, key, wait, ok := r.keys.pick()
	if !ok {
		return 0, "", &agent.ProviderError{Provider: r.provider, StatusCode: http.StatusUnauthorized, Auth: true,
			Message: fmt.Sprintf("every API key was refused (keys %s set aside until a reload)", r.keys.asideList())}
	}
	if wait > 0 {
		if wait > r.opts.MaxRetryAfter {
			return 0, "", &agent.ProviderError{Provider: r.provider, StatusCode: http.StatusTooManyRequests, Retryable: true,
				Message: fmt.Sprintf("every API key is rate limited for %s more", wait.Round(time.Second))}
		}
		r.logger(ctx).Info("every API key rests; waiting for the first", zap.String("key", r.keys.name(ki)), zap.Duration("wait", wait))
		if err := r.opts.Sleep(ctx, wait); err != nil {
			return 0, "", fmt.Errorf("%s: waiting for a rested API key: %w", r.provider, err)
		}
	}
	return ki, key, nil
}

// answered logs an attempt that succeeded.
func (r *retrier) answered(ctx context.Context, n int, start time.Time, resp *agent.Response) {
	if !r.log.Core().Enabled(zap.DebugLevel) {
		return
	}
	r.logger(ctx).Debug("model call done", zap.Int("attempt", n+1), zap.Duration("latency", time.Since(start)),
		zap.Int64("inputTokens", resp.Usage.Input), zap.Int64("outputTokens", resp.Usage.Output))
}

// failed handles attempt n's error err, made with key ki: again reports
// whether to make another attempt (after the wait it needed) and n is the
// attempt count to go on from; else err is the call's error.
func (r *retrier) failed(ctx context.Context, n, ki int, err error, classify func(error) failure) (_ int, again bool, _ error) {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return n, false, fmt.Errorf("%s: model call: %w", r.provider, ctxErr)
	}
	log := r.logger(ctx)
	f := classify(err)
	f.message = redactKeys(f.message, r.keys.values())
	perr := &agent.ProviderError{Provider: r.provider, StatusCode: f.status, Message: f.message, ContextLength: f.contextLength,
		Retryable: f.retryable(), Auth: f.status == http.StatusUnauthorized || f.status == http.StatusForbidden,
		ConnectionFailed: f.transport}
	agent.NoteProblem(ctx, problemText(r.provider, f))
	if r.keys.count() > 0 {
		switch {
		case perr.Auth:
			// Set aside even when it is the only key: every later call
			// fails at once as an auth error instead of re-sending a
			// refused key (SPEC §20), until a reload.
			r.keys.setAside(ki)
			log.Warn("API key refused; set aside until a reload", zap.String("key", r.keys.name(ki)), zap.Int("status", f.status), zap.String("message", f.message))
			if r.keys.anyLeft() {
				return n - 1, true, nil // another key: not a retry of the call
			}
			if r.keys.several() {
				perr.Message = fmt.Sprintf("every API key was refused (keys %s set aside until a reload): %s", r.keys.asideList(), f.message)
			}
			return n, false, perr
		case f.status == http.StatusTooManyRequests && r.keys.several():
			rest, found := parseRetryAfter(f.retryMS, f.retryAfter, time.Now())
			if !found {
				rest = DefaultKeyRest
			}
			r.keys.restKey(ki, rest)
			log.Info("API key rate limited; it rests", zap.String("key", r.keys.name(ki)), zap.Duration("rest", rest))
			if n >= r.opts.MaxRetries {
				log.Warn("model call failed after retries", zap.Int("attempts", n+1), zap.Int("status", f.status), zap.String("message", f.message))
				return n, false, perr
			}
			return n, true, nil // the next key now, or the first to wake
		}
	}
	if !f.retryable() {
		log.Warn("model call failed", zap.Int("status", f.status), zap.String("message", f.message))
		return n, false, perr
	}
	if n >= r.opts.MaxRetries {
		log.Warn("model call failed after retries", zap.Int("attempts", n+1), zap.Int("status", f.status), zap.String("message", f.message))
		return n, false, perr
	}
	delay, ok := r.delay(n, f)
	if !ok {
		log.Warn("model call rate limited beyond the longest wait", zap.Int("status", f.status),
			zap.String("retryAfter", f.retryAfter), zap.Duration("maxRetryAfter", r.opts.MaxRetryAfter))
		perr.Message = fmt.Sprintf("%s (server asked to retry after %s, more than the %s Herald waits)", f.message, delay, r.opts.MaxRetryAfter)
		return n, false, perr
	}
	log.Info("retrying model call", zap.Int("attempt", n+1), zap.Int("status", f.status),
		zap.String("message", f.message), zap.Duration("delay", delay))
	if err := r.opts.Sleep(ctx, delay); err != nil {
		return n, false, fmt.Errorf("%s: waiting to retry model call: %w", r.provider, err)
	}
	return n, true, nil
}

// problemText names one failed attempt for a run's Notes.
func problemText(provider string, f failure) string {
	msg := strings.TrimSpace(f.message)
	if len(msg) > 120 {
		msg = msg[:120] + "…"
	}
	if f.status > 0 {
		return fmt.Sprintf("%s HTTP %d: %s", provider, f.status, msg)
	}
	return fmt.Sprintf("%s: %s", provider, msg)
}

// delay returns how long to wait before retry n+1; ok is false when the
// server asked for more than MaxRetryAfter.
func (r *retrier) delay(n int, f failure) (time.Duration, bool) {
	if d, found := parseRetryAfter(f.retryMS, f.retryAfter, time.Now()); found {
		return d, d <= r.opts.MaxRetryAfter
	}
	d := r.opts.BackoffBase << min(n, 20)
	if d <= 0 || d > r.opts.MaxBackoff {
		d = r.opts.MaxBackoff
	}
	// Jitter: somewhere in [d/2, d].
	if half := int64(d / 2); half > 0 {
		d = time.Duration(half + rand.Int64N(half+1))
	}
	return d, true
}

// parseRetryAfter reads retry-after-ms (milliseconds) or Retry-After
// (seconds or an HTTP date).
func parseRetryAfter(ms, header string, now time.Time) (time.Duration, bool) {
	if v, err := strconv.ParseFloat(strings.TrimSpace(ms), 64); err == nil && v >= 0 {
		return time.Duration(v * float64(time.Millisecond)), true
	}
	header = strings.TrimSpace(header)
	if header == "" {
		return 0, false
	}
	if v, err := strconv.ParseFloat(header, 64); err == nil && v >= 0 {
		return time.Duration(v * float64(time.Second)), true
	}
	if t, err := http.ParseTime(header); err == nil {
		return max(0, t.Sub(now)), true
	}
	return 0, false
}

// thinkingBudget is Anthropic's budget_tokens for a thinking level (0 = off).
func thinkingBudget(level string) int64 {
	switch level {
	case agent.ThinkingLow:
		return 1024
	case agent.ThinkingMedium:
		return 4096
	case agent.ThinkingHigh:
		return 16384
	}
	return 0
}

// contextLengthMessage recognises the context-length refusals of Anthropic
// ("prompt is too long: 210000 tokens > 200000 maximum"), OpenAI ("This
// model's maximum context length is 8192 tokens…", code
// context_length_exceeded) and OpenAI-compatible servers (vLLM, llama.cpp).
func contextLengthMessage(status int, msg string) bool {
	if status != http.StatusBadRequest && status != http.StatusRequestEntityTooLarge {
		return false
	}
	m := strings.ToLower(msg)
	for _, s := range []string{"prompt is too long", "maximum context length", "context_length_exceeded",
		"context window", "exceeds the available context size", "too many tokens", "input is too long"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}
