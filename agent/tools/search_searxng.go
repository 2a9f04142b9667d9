package tools

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// SearXNG (self-hosted, no key): GET <base>search?q=…&format=json; an
// instance without the JSON format enabled answers 403.
func init() { registerSearch("searxng", "", newSearXNG) }

type searxng struct{ c SearchConfig }

func newSearXNG(c SearchConfig) SearchProvider { return &searxng{c: c} }

func (s *searxng) Search(ctx context.Context, query string, count int) ([]SearchResult, error) {
	q := url.Values{"q": {query}, "format": {"json"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.c.BaseURL+"search?"+q.Encode(), nil)
	if err != nil {
		return nil, fmt.Errorf("build the request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.c.Client.Do(req)
	if err != nil {
		return nil, err
	}
	var a contentAnswer
	if err := readSearchJSON(resp, &a, func(b []byte) string {
		if resp.StatusCode == http.StatusForbidden {
			return "the instance does not serve format=json; enable json under search.formats in its settings.yml"
		}
		return ""
	}); err != nil {
		return nil, err
	}
	return a.first(count), nil // SearXNG has no count parameter
}
