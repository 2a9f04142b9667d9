package providers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/devtools/loopback"
)

func keyedProvider(t *testing.T, b backend, srv *llmtest.Server, opts Options, keys ...string) agent.Provider {
	t.Helper()
	var ks []config.Secret
	for _, k := range keys {
		ks = append(ks, config.Secret(k))
	}
	p, err := New("test-"+b.name, config.Provider{API: b.api, BaseURL: b.base(srv.URL), APIKeys: ks}, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

// keysOf lists the keys the fake saw, in order.
func keysOf(srv *llmtest.Server) []string {
	var out []string
	for _, c := range srv.Requests() {
		out = append(out, c.Key())
	}
	return out
}

// A key answered 429 rests for its retry-after while the next key carries
// the call at once (no wait); the rested key is skipped by later calls.
func TestKeyRateLimitedRests(t *testing.T) {
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			srv := b.fake(t, func(c llmtest.Call) llmtest.Reply {
				if c.Key() == "sk-A" {
					return llmtest.Reply{Status: http.StatusTooManyRequests, RetryAfter: "30", Message: "rate limited"}
				}
				return llmtest.Reply{Text: "ok from " + c.Key()}
			})
			core, logs := observer.New(zap.DebugLevel)
			sl := &sleeps{}
			p := keyedProvider(t, b, srv, Options{Sleep: sl.sleep, Logger: zap.New(core)}, "sk-A", "sk-B")
			for i := range 3 {
				resp, err := p.Complete(context.Background(), userReq(b.model, "hi"))
				if err != nil || resp.Text != "ok from sk-B" {
					t.Fatalf("call %d: %v %v", i, resp, err)
				}
			}
			if got := strings.Join(keysOf(srv), ","); got != "sk-A,sk-B,sk-B,sk-B" {
				t.Errorf("keys sent = %s, want sk-A once then sk-B (A rests 30 s)", got)
			}
			if d := sl.all(); len(d) != 0 {
				t.Errorf("waited %v; another key was free", d)
			}
			rested := logs.FilterMessage("API key rate limited; it rests").All()
			if len(rested) != 1 || rested[0].ContextMap()["key"] != "key 1 of 2" {
				t.Errorf("log = %+v, want one line naming key 1 of 2", rested)
			}
			for _, e := range logs.All() {
				for _, v := range e.ContextMap() {
					if s, ok := v.(string); ok && strings.Contains(s, "sk-") {
						t.Errorf("a key value in the log: %v", e.ContextMap())
					}
				}
			}
		})
	}
}

// A key refused with 401 is set aside (later calls skip it); when every key
// is refused the call fails as an auth error, naming keys by position.
func TestKeyRefusedSetAside(t *testing.T) {
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			srv := b.fake(t, func(c llmtest.Call) llmtest.Reply {
				if c.Key() != "sk-good" {
					return llmtest.Reply{Status: http.StatusUnauthorized, Message: "invalid x-api-key"}
				}
				return llmtest.Reply{Text: "ok"}
			})
			p := keyedProvider(t, b, srv, Options{Sleep: (&sleeps{}).sleep}, "sk-bad", "sk-good", "sk-bad2")
			for range 3 {
				if _, err := p.Complete(context.Background(), userReq(b.model, "hi")); err != nil {
					t.Fatal(err)
				}
			}
			// bad (set aside), good, then bad2 in turn (set aside), good, good.
			if got := strings.Join(keysOf(srv), ","); got != "sk-bad,sk-good,sk-bad2,sk-good,sk-good" {
				t.Errorf("keys sent = %s", got)
			}

			srv.RequireKey("sk-good")
			all := keyedProvider(t, b, srv, Options{Sleep: (&sleeps{}).sleep}, "sk-x", "sk-y")
			_, err := all.Complete(context.Background(), userReq(b.model, "hi"))
			var pe *agent.ProviderError
			if !errors.As(err, &pe) || !pe.Auth || pe.Retryable {
				t.Fatalf("err = %#v, want an auth error that is not retryable", err)
			}
			if !strings.Contains(err.Error(), "keys 1, 2 set aside") || strings.Contains(err.Error(), "sk-") {
				t.Errorf("err = %v", err)
			}
		})
	}
}

// What a fallback needs to know: which failures are worth another model.
func TestFailuresClassifiedForFallback(t *testing.T) {
	// A port of a loopback address of its own: no other process starts
	// listening there while the test runs.
	refused, err := loopback.Addr()
	if err != nil {
		t.Fatal(err)
	}
	refusedURL := "http://" + refused
	for _, b := range backends[:2] {
		for _, tc := range []struct {
			name      string
			reply     llmtest.Reply
			refused   bool
			retryable bool
			reason    string
		}{
			{"529", llmtest.Reply{Status: 529, Message: "Overloaded"}, false, true, "HTTP 529 overloaded"},
			{"500", llmtest.Reply{Status: 500}, false, true, "HTTP 500 server error"},
			{"429", llmtest.Reply{Status: 429, RetryAfter: "1"}, false, true, "HTTP 429 rate limited"},
			{"400", llmtest.Reply{Status: 400, Message: "bad"}, false, false, "HTTP 400"},
			{"refused", llmtest.Reply{}, true, true, "connection refused"},
		} {
			t.Run(b.name+"/"+tc.name, func(t *testing.T) {
				srv := b.fake(t, func(llmtest.Call) llmtest.Reply { return tc.reply })
				cfg := config.Provider{API: b.api, BaseURL: b.base(srv.URL), APIKey: "sk-test"}
				if tc.refused {
					cfg.BaseURL = b.base(refusedURL)
				}
				p, err := New("p", cfg, Options{Sleep: (&sleeps{}).sleep, MaxRetries: 1})
				if err != nil {
					t.Fatal(err)
				}
				_, err = p.Complete(context.Background(), userReq(b.model, "hi"))
				if got := agent.Retryable(err); got != tc.retryable {
					t.Errorf("Retryable(%v) = %v, want %v", err, got, tc.retryable)
				}
				if got := agent.FailureReason(err); !strings.HasPrefix(got, tc.reason) {
					t.Errorf("FailureReason = %q, want %q…", got, tc.reason)
				}
			})
		}
	}
}

// An error event inside a stream answered HTTP 200 (Anthropic's usual way
// of saying "overloaded" to a streaming request) is classified by its
// type: retried by the provider, then retryable for the fallback chain,
// with the reason the note names.
func TestStreamErrorEventsClassifiedForFallback(t *testing.T) {
	for _, b := range backends[:2] {
		for _, tc := range []struct {
			status    int
			retryable bool
			reason    string
		}{
			{529, true, "HTTP 529 overloaded"},
			{429, true, "HTTP 429 rate limited"},
			{500, true, "HTTP 500 server error"},
			{400, false, "HTTP 400"},
		} {
			t.Run(fmt.Sprintf("%s/%d", b.name, tc.status), func(t *testing.T) {
				if b.api == APIOpenAI && tc.status == 529 {
					tc.reason = "HTTP 500 server error" // OpenAI has no overloaded type: a server_error
				}
				srv := b.fake(t, func(llmtest.Call) llmtest.Reply { return llmtest.Reply{StreamError: tc.status, Message: "Overloaded"} })
				p, err := New("p", config.Provider{API: b.api, BaseURL: b.base(srv.URL), APIKey: "sk-test"}, Options{Sleep: (&sleeps{}).sleep, MaxRetries: 2})
				if err != nil {
					t.Fatal(err)
				}
				_, err = p.(agent.Streamer).Stream(context.Background(), userReq(b.model, "hi"), func(string) {})
				if err == nil {
					t.Fatal("stream with an error event succeeded")
				}
				if got := agent.Retryable(err); got != tc.retryable {
					t.Errorf("Retryable(%v) = %v, want %v", err, got, tc.retryable)
				}
				if got := agent.FailureReason(err); got != tc.reason {
					t.Errorf("FailureReason = %q, want %q", got, tc.reason)
				}
				want := 1
				if tc.retryable {
					want = 3 // the provider's own retries apply
				}
				if srv.Count() != want {
					t.Errorf("calls = %d, want %d", srv.Count(), want)
				}
			})
		}
	}
}

// No part of an API key reaches a log line, an error (replies, Notes) or
// the run's problem log: OpenAI's 401 quotes the key's last characters,
// a compatible server may echo it whole.
func TestKeyFragmentsNeverLogged(t *testing.T) {
	const key = "sk-proj-Secret0123456789wxyz"
	for _, b := range backends[:2] {
		for name, msg := range map[string]string{
			"masked": "Incorrect API key provided: sk-proj-****************************wxyz. You can find your API key at https://platform.openai.com/account/api-keys.",
			"whole":  "invalid key " + key + " for this model",
			"stars":  "Incorrect API key provided: ********wxyz.",
		} {
			t.Run(b.name+"/"+name, func(t *testing.T) {
				srv := b.fake(t, func(llmtest.Call) llmtest.Reply {
					return llmtest.Reply{Status: http.StatusUnauthorized, Message: msg, Code: "invalid_api_key"}
				})
				core, logs := observer.New(zap.DebugLevel)
				p := keyedProvider(t, b, srv, Options{Sleep: (&sleeps{}).sleep, Logger: zap.New(core)}, key)
				problems := &agent.ProblemLog{}
				_, err := p.Complete(agent.WithProblemLog(context.Background(), problems), userReq(b.model, "hi"))
				if err == nil {
					t.Fatal("a refused key succeeded")
				}
				seen := []string{err.Error(), problems.Summary()}
				for _, e := range logs.All() {
					seen = append(seen, e.Message)
					for k, v := range e.ContextMap() {
						seen = append(seen, fmt.Sprintf("%s=%v", k, v))
					}
				}
				for _, s := range seen {
					if strings.Contains(s, "wxyz") || strings.Contains(s, "sk-") || strings.Contains(s, "Secret") {
						t.Errorf("key fragment in %q", s)
					}
				}
				if !strings.Contains(err.Error(), "[key]") || len(logs.All()) == 0 {
					t.Errorf("err = %v, %d log lines; want the message kept with [key] in place of the key", err, len(logs.All()))
				}
			})
		}
	}
}

// A single key refused with 401 is set aside too: the next call fails at
// once as an auth error naming it by position, without sending it again.
func TestSingleKeyRefusedSetAside(t *testing.T) {
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			srv := b.fake(t, func(llmtest.Call) llmtest.Reply {
				return llmtest.Reply{Status: http.StatusUnauthorized, Message: "invalid x-api-key"}
			})
			core, logs := observer.New(zap.DebugLevel)
			p := keyedProvider(t, b, srv, Options{Sleep: (&sleeps{}).sleep, Logger: zap.New(core)}, "sk-only")
			if _, err := p.Complete(context.Background(), userReq(b.model, "hi")); !strings.Contains(fmt.Sprint(err), "invalid x-api-key") {
				t.Fatalf("first call: %v", err)
			}
			_, err := p.Complete(context.Background(), userReq(b.model, "hi"))
			var pe *agent.ProviderError
			if !errors.As(err, &pe) || !pe.Auth || srv.Count() != 1 {
				t.Fatalf("second call: %v after %d requests; want an auth error and no second request", err, srv.Count())
			}
			aside := logs.FilterMessage("API key refused; set aside until a reload").All()
			if len(aside) != 1 || aside[0].ContextMap()["key"] != "key 1 of 1" {
				t.Errorf("log = %+v, want one line naming key 1 of 1", aside)
			}
		})
	}
}
