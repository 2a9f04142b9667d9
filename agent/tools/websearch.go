package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/config"
)

// WebSearchName is the web_search tool's name.
const WebSearchName = "web_search"

// Limits and defaults of web_search (SPEC §28).
const (
	DefaultSearchCount   = 5
	MaxSearchCount       = 20
	DefaultSearchTimeout = 15 * time.Second
	// SearchCacheTTL is how long the results of one query are reused.
	SearchCacheTTL = 5 * time.Minute
	// searchCacheMax bounds the cached queries.
	searchCacheMax = 256
)

// SearchResult is one hit of a web search.
type SearchResult struct {
	Title   string `json:"title"`
	URL     string `json:"url"`
	Snippet string `json:"snippet"`
}

// SearchProvider is one web search service: one file each (search_*.go),
// registered by name with registerSearch.
type SearchProvider interface {
	// Search returns at most count results for query; an answer the
	// service refused is a *SearchError.
	Search(ctx context.Context, query string, count int) ([]SearchResult, error)
}

// SearchError is a search service's refusal: its HTTP status and what it
// said (never the key).
type SearchError struct {
	Status int
	Detail string
}

func (e *SearchError) Error() string {
	what := ""
	switch {
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		what = "the service refused the API key or the request (check tools.webSearch.apiKey and baseUrl)"
	case e.Status == http.StatusUnprocessableEntity:
		what = "the service refused the request; Brave answers so to an invalid key (check tools.webSearch.apiKey)"
	case e.Status == http.StatusTooManyRequests || e.Status == 432:
		what = "rate limit or quota exceeded; try again later or with fewer searches"
	case e.Status >= 500:
		what = "the service failed; try again later"
	default:
		what = "the service refused the request"
	}
	if d := oneLine(e.Detail, 200); d != "" {
		return fmt.Sprintf("HTTP %d: %s (%s)", e.Status, what, d)
	}
	return fmt.Sprintf("HTTP %d: %s", e.Status, what)
}

// SearchConfig is what a provider is built from.
type SearchConfig struct {
	BaseURL string
	APIKey  string
	Client  *http.Client
}

var searchProviders = map[string]struct {
	defaultBase string
	new         func(SearchConfig) SearchProvider
}{}

// registerSearch adds a provider: its name in tools.webSearch.provider,
// its default API root ("" = baseUrl required) and its constructor.
func registerSearch(name, defaultBase string, fn func(SearchConfig) SearchProvider) {
	searchProviders[name] = struct {
		defaultBase string
		new         func(SearchConfig) SearchProvider
	}{defaultBase, fn}
}

// SearchProviderNames lists the registered providers.
func SearchProviderNames() []string {
	names := make([]string, 0, len(searchProviders))
	for n := range searchProviders {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// WebSearch is a configured search service with its result cache; one
// value serves every registry built from the same Options, so the cache
// outlives a turn.
type WebSearch struct {
	name    string
	p       SearchProvider
	key     string // only to scrub it from what a service says
	timeout time.Duration
	now     func() time.Time

	mu    sync.Mutex
	cache map[string]searchEntry // guarded by mu
}

type searchEntry struct {
	results []SearchResult
	at      time.Time
}

// NewWebSearch builds the search service c names; nil, nil when c names
// none. client is the gateway's own (not the agent egress guard: the
// operator chose this service); nil = a default client.
func NewWebSearch(c config.WebSearch, client *http.Client, timeout time.Duration) (*WebSearch, error) {
	if c.Provider == "" {
		return nil, nil
	}
	reg, ok := searchProviders[c.Provider]
	if !ok {
		return nil, fmt.Errorf("tools.webSearch.provider: unknown provider %q (one of %s)", c.Provider, strings.Join(SearchProviderNames(), ", "))
	}
	base := c.BaseURL
	if base == "" {
		base = reg.defaultBase
	}
	if base == "" {
		return nil, fmt.Errorf("tools.webSearch.baseUrl: provider %q needs the URL of its instance", c.Provider)
	}
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	if client == nil {
		client = &http.Client{}
	}
	if timeout <= 0 {
		timeout = DefaultSearchTimeout
	}
	return &WebSearch{
		name: c.Provider, key: c.APIKey.Value(), timeout: timeout, now: time.Now,
		p:     reg.new(SearchConfig{BaseURL: base, APIKey: c.APIKey.Value(), Client: client}),
		cache: map[string]searchEntry{},
	}, nil
}

// Provider is the configured provider's name.
func (w *WebSearch) Provider() string { return w.name }

// Search runs query through the provider, or answers from the cache.
func (w *WebSearch) Search(ctx context.Context, query string, count int) ([]SearchResult, error) {
	key := fmt.Sprintf("%d\x00%s", count, strings.ToLower(strings.Join(strings.Fields(query), " ")))
	now := w.now()
	w.mu.Lock()
	if e, ok := w.cache[key]; ok && now.Sub(e.at) < SearchCacheTTL {
		w.mu.Unlock()
		return e.results, nil
	}
	w.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	res, err := w.p.Search(ctx, query, count)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("no answer within %s; try again later", w.timeout)
		}
		return nil, err
	}
	if len(res) > count {
		res = res[:count]
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.storeLocked(key, res, now)
	return res, nil
}

// storeLocked caches res under key, dropping expired entries (and, when
// the cache is still full, the oldest) first; w.mu is held.
func (w *WebSearch) storeLocked(key string, res []SearchResult, now time.Time) {
	if len(w.cache) >= searchCacheMax {
		oldest, oldestAt := "", now
		for k, e := range w.cache {
			if now.Sub(e.at) >= SearchCacheTTL {
				delete(w.cache, k)
			} else if e.at.Before(oldestAt) {
				oldest, oldestAt = k, e.at
			}
		}
		if len(w.cache) >= searchCacheMax {
			delete(w.cache, oldest)
		}
	}
	w.cache[key] = searchEntry{results: res, at: now}
}

type webSearch struct{ w *WebSearch }

var webSearchFields = []field{
	{"query", "string", true, "what to search the web for"},
	{"count", "integer", false, fmt.Sprintf("how many results, 1 to %d (default %d)", MaxSearchCount, DefaultSearchCount)},
}

// Tool returns the web_search tool of w.
func (w *WebSearch) Tool() agent.Tool { return &webSearch{w: w} }

func (t *webSearch) Group() string { return agent.GroupWeb }

// Repeatable implements agent.Repeatable: a search has no effect to repeat
// (SPEC §25).
func (t *webSearch) Repeatable() bool { return true }

func (t *webSearch) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: WebSearchName,
		Description: "Search the web and return results as {results:[{title, url, snippet}]}. " +
			"Read a result's page with web_fetch. Cite the URLs you use. A failed search returns {error} saying why.",
		Schema: schema(webSearchFields...),
	}
}

type webSearchResult struct {
	Results []SearchResult `json:"results"`
}

type webSearchError struct {
	Error string `json:"error"`
}

func (t *webSearch) Call(ctx context.Context, _ agent.CallContext, raw json.RawMessage) (string, error) {
	a, err := decodeArgs(WebSearchName, raw, webSearchFields...)
	if err != nil {
		return "", err
	}
	q, err := a.str("query")
	if err != nil {
		return "", err
	}
	q = strings.TrimSpace(q)
	if q == "" {
		return "", fmt.Errorf("%s: %w: query is empty; give the words to search for", WebSearchName, ErrBadArguments)
	}
	n, err := a.integer("count", DefaultSearchCount)
	if err != nil {
		return "", err
	}
	if n < 1 || n > MaxSearchCount {
		return "", fmt.Errorf("%s: %w: count must be 1 to %d, got %d", WebSearchName, ErrBadArguments, MaxSearchCount, n)
	}
	res, err := t.w.Search(ctx, q, int(n))
	if err != nil {
		msg := fmt.Sprintf("%s search failed: %v", t.w.name, err)
		if t.w.key != "" {
			msg = strings.ReplaceAll(msg, t.w.key, "***")
		}
		return result(WebSearchName, webSearchError{Error: msg})
	}
	if res == nil {
		res = []SearchResult{}
	}
	return result(WebSearchName, webSearchResult{Results: res})
}

// oneLine squeezes s to one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// contentAnswer is the answer of Tavily and SearXNG alike: results with
// title, url and content (the snippet).
type contentAnswer struct {
	Results []struct {
		Title   string `json:"title"`
		URL     string `json:"url"`
		Content string `json:"content"`
	} `json:"results"`
}

// first is the first n results as SearchResults.
func (a contentAnswer) first(n int) []SearchResult {
	out := make([]SearchResult, 0, min(len(a.Results), n))
	for _, r := range a.Results[:min(len(a.Results), n)] {
		out = append(out, SearchResult{Title: r.Title, URL: r.URL, Snippet: r.Content})
	}
	return out
}

// readSearchJSON decodes a provider's 2xx JSON body into v, or turns any
// other status into a *SearchError with detail(body).
func readSearchJSON(resp *http.Response, v any, detail func([]byte) string) error {
	body, err := readCapped(resp, 4<<20)
	if err != nil {
		return fmt.Errorf("read the answer: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		d := detail(body)
		if d == "" {
			d = http.StatusText(resp.StatusCode)
		}
		return &SearchError{Status: resp.StatusCode, Detail: d}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("the answer is not the expected JSON: %w", err)
	}
	return nil
}

// readCapped reads at most max bytes of resp's body.
func readCapped(resp *http.Response, max int64) ([]byte, error) {
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, max))
}
