package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strconv"
)

// Brave Search API: GET <base>res/v1/web/search?q=…&count=… with the key
// in X-Subscription-Token; a bad key is answered 422.
func init() { registerSearch("brave", "https://api.search.brave.com/", newBrave) }

type brave struct{ c SearchConfig }

func newBrave(c SearchConfig) SearchProvider { return &brave{c: c} }

type braveAnswer struct {
	Web struct {
		Results []struct {
			Title       string `json:"title"`
			URL         string `json:"url"`
			Description string `json:"description"`
		} `json:"results"`
	} `json:"web"`
}

func (b *brave) Search(ctx context.Context, query string, count int) ([]SearchResult, error) {
	q := url.Values{"q": {query}, "count": {strconv.Itoa(count)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.c.BaseURL+"res/v1/web/search?"+q.Encode(), nil)
	if err != nil {
		return nil, fmt.Errorf("build the request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Subscription-Token", b.c.APIKey)
	resp, err := b.c.Client.Do(req)
	if err != nil {
		return nil, err
	}
	var a braveAnswer
	if err := readSearchJSON(resp, &a, braveDetail); err != nil {
		return nil, err
	}
	out := make([]SearchResult, 0, len(a.Web.Results))
	for _, r := range a.Web.Results {
		out = append(out, SearchResult{Title: r.Title, URL: r.URL, Snippet: stripTags(r.Description)})
	}
	return out, nil
}

// braveDetail reads an ErrorResponse: {"type":"ErrorResponse","error":{"code","detail",…}}.
func braveDetail(body []byte) string {
	var e struct {
		Error struct {
			Code   string `json:"code"`
			Detail string `json:"detail"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Detail == "" {
		return ""
	}
	return e.Error.Code + ": " + e.Error.Detail
}

// stripTags drops the <strong> marks Brave puts around matched words and
// decodes entities.
func stripTags(s string) string { return html.UnescapeString(reTag().ReplaceAllString(s, "")) }
