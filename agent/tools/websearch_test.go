package tools

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/tools/searchfake"
	"github.com/heraldhq/herald/config"
)

// searchTool builds web_search for provider against the fake (baseUrl
// without a trailing slash when bare).
func searchTool(t *testing.T, fake *searchfake.Server, provider, key string, bare bool, timeout time.Duration) (*WebSearch, agent.Tool) {
	t.Helper()
	base := fake.URL + "/"
	if bare {
		base = fake.URL
	}
	ws, err := NewWebSearch(config.WebSearch{Provider: provider, APIKey: config.Secret(key), BaseURL: base}, nil, timeout)
	if err != nil || ws == nil {
		t.Fatalf("NewWebSearch(%s) = %v, %v", provider, ws, err)
	}
	return ws, ws.Tool()
}

func callSearch(t *testing.T, tool agent.Tool, args string) (webSearchResult, webSearchError, error) {
	t.Helper()
	out, err := tool.Call(context.Background(), agent.CallContext{}, json.RawMessage(args))
	var res webSearchResult
	var fail webSearchError
	if err == nil {
		if jerr := json.Unmarshal([]byte(out), &res); jerr != nil {
			t.Fatalf("result %s: %v", out, jerr)
		}
		_ = json.Unmarshal([]byte(out), &fail)
	}
	return res, fail, err
}

func TestWebSearchProviders(t *testing.T) {
	fake := searchfake.New(t)
	for _, p := range []string{"brave", "tavily", "searxng"} {
		for _, bare := range []bool{false, true} {
			t.Run(p+map[bool]string{false: "/slash", true: "/bare"}[bare], func(t *testing.T) {
				_, tool := searchTool(t, fake, p, searchfake.Key, bare, time.Second)
				if tool.Spec().Name != WebSearchName || tool.Group() != agent.GroupWeb {
					t.Fatalf("spec %s group %s", tool.Spec().Name, tool.Group())
				}
				before := len(fake.Requests())
				res, fail, err := callSearch(t, tool, `{"query":"sqlite wal mode `+p+`","count":2}`)
				if err != nil || fail.Error != "" {
					t.Fatalf("search: %v %q", err, fail.Error)
				}
				if len(res.Results) != 2 || res.Results[0].URL != "https://www.sqlite.org/wal.html" ||
					res.Results[0].Title != "Write-Ahead Logging - SQLite" || !strings.Contains(res.Results[0].Snippet, "rollback journal") {
					t.Fatalf("results = %+v", res.Results)
				}
				if strings.Contains(res.Results[0].Snippet, "<strong>") || strings.Contains(res.Results[0].Snippet, "&quot;") {
					t.Errorf("snippet keeps markup: %q", res.Results[0].Snippet)
				}
				reqs := fake.Requests()[before:]
				if len(reqs) != 1 || reqs[0].API != p || reqs[0].Query != "sqlite wal mode "+p {
					t.Fatalf("requests = %+v", reqs)
				}
				if p != "searxng" && reqs[0].Count != 2 {
					t.Errorf("count sent = %d, want 2", reqs[0].Count)
				}
			})
		}
	}
}

func TestWebSearchCachesPerQuery(t *testing.T) {
	fake := searchfake.New(t)
	ws, tool := searchTool(t, fake, "brave", searchfake.Key, false, time.Second)
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	ws.now = func() time.Time { return now }
	for range 2 {
		if _, fail, err := callSearch(t, tool, `{"query":"Go generics"}`); err != nil || fail.Error != "" {
			t.Fatal(err, fail.Error)
		}
	}
	callSearch(t, tool, `{"query":"  go   GENERICS "}`) // the same words
	if n := len(fake.Requests()); n != 1 {
		t.Fatalf("%d requests for one query within the cache time, want 1", n)
	}
	callSearch(t, tool, `{"query":"Go generics","count":3}`)
	if n := len(fake.Requests()); n != 2 {
		t.Fatalf("another count: %d requests, want 2", n)
	}
	now = now.Add(SearchCacheTTL)
	callSearch(t, tool, `{"query":"Go generics"}`)
	if n := len(fake.Requests()); n != 3 {
		t.Fatalf("after %s: %d requests, want 3 (the cache expired)", SearchCacheTTL, n)
	}
}

func TestWebSearchProviderErrors(t *testing.T) {
	fake := searchfake.New(t)
	for _, c := range []struct {
		name, provider, key string
		status              int
		delay               time.Duration
		want                []string
	}{
		{"brave bad key", "brave", "wrong-key-secret", 0, 0, []string{"brave", "HTTP 422", "apiKey", "SUBSCRIPTION_TOKEN_INVALID"}},
		{"tavily bad key", "tavily", "wrong-key-secret", 0, 0, []string{"tavily", "HTTP 401", "apiKey", "invalid API key"}},
		{"brave quota", "brave", searchfake.Key, 429, 0, []string{"brave", "HTTP 429", "rate limit", "RATE_LIMITED"}},
		{"tavily quota", "tavily", searchfake.Key, 429, 0, []string{"tavily", "HTTP 429", "rate limit"}},
		{"searxng down", "searxng", "", 502, 0, []string{"searxng", "HTTP 502", "try again later"}},
		{"timeout", "tavily", searchfake.Key, 0, 2 * time.Second, []string{"tavily", "no answer within 100ms"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake.Fail(c.status)
			fake.Delay(c.delay)
			t.Cleanup(func() { fake.Fail(0); fake.Delay(0) })
			_, tool := searchTool(t, fake, c.provider, c.key, false, 100*time.Millisecond)
			_, fail, err := callSearch(t, tool, `{"query":"anything"}`)
			if err != nil {
				t.Fatalf("a provider error must be a result, got error %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(fail.Error, w) {
					t.Errorf("error %q does not say %q", fail.Error, w)
				}
			}
			if strings.Contains(fail.Error, "wrong-key-secret") || strings.Contains(fail.Error, searchfake.Key) {
				t.Errorf("error %q shows the key", fail.Error)
			}
		})
	}
}

func TestWebSearchBadArguments(t *testing.T) {
	fake := searchfake.New(t)
	_, tool := searchTool(t, fake, "searxng", "", false, time.Second)
	for args, want := range map[string]string{
		`{"query":"   "}`:          "query is empty",
		`{}`:                       `missing required field "query"`,
		`{"query":"x","count":0}`:  "count must be 1 to 20, got 0",
		`{"query":"x","count":21}`: "count must be 1 to 20, got 21",
	} {
		_, _, err := callSearch(t, tool, args)
		if !errors.Is(err, ErrBadArguments) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one saying %q", args, err, want)
		}
	}
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("%d searches sent for bad arguments", n)
	}
}

// Without tools.webSearch.provider there is no web_search tool.
func TestWebSearchAbsentWithoutProvider(t *testing.T) {
	names := func(o Options) []string {
		var ns []string
		for _, tl := range New(o) {
			ns = append(ns, tl.Spec().Name)
		}
		return ns
	}
	if slices.Contains(names(OptionsFromConfig(config.Tools{})), WebSearchName) {
		t.Error("web_search offered without a provider")
	}
	o := OptionsFromConfig(config.Tools{WebSearch: config.WebSearch{Provider: "searxng", BaseURL: "http://searx.example"}})
	if !slices.Contains(names(o), WebSearchName) {
		t.Error("web_search missing with a provider configured")
	}
	if _, err := NewWebSearch(config.WebSearch{Provider: "bing"}, nil, 0); err == nil {
		t.Error("unknown provider accepted")
	}
	// config validates the provider names registered here.
	if got := SearchProviderNames(); !slices.Equal(got, slices.Sorted(slices.Values(config.WebSearchProviders))) {
		t.Errorf("registered providers %v, config accepts %v", got, config.WebSearchProviders)
	}
}
