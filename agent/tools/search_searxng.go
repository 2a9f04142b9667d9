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

type searxngAnswer struct {
	Results []struct {
		Title   string `json:"title"`
		URL     string `json:"url"`
		Content string `json:"content"`
	} `json:"results"`
}

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
	var a searxngAnswer
	if err := readSearchJSON(resp, &a, func(b []byte) string {
		if resp.StatusCode == http.StatusForbidden {
			return "the instance does not serve format=json; enable json under search.formats in its settings.yml"
		}
		return ""
	}); err != nil {
		return nil, err
	}
	out := make([]SearchResult, 0, min(len(a.Results), count))
	for _, r := range a.Results {
		if len(out) == count { // SearXNG has no count parameter
			break
		}
		out = append(out, SearchResult{Title: r.Title, URL: r.URL, Snippet: r.Content})
	}
	return out, nil
}
