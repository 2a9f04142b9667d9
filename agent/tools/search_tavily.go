package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// Tavily Search API: POST <base>search with a JSON body and the key as a
// bearer token; a bad key is answered 401, a spent plan 432.
func init() { registerSearch("tavily", "https://api.tavily.com/", newTavily) }

type tavily struct{ c SearchConfig }

func newTavily(c SearchConfig) SearchProvider { return &tavily{c: c} }

func (t *tavily) Search(ctx context.Context, query string, count int) ([]SearchResult, error) {
	body, err := json.Marshal(map[string]any{"query": query, "max_results": count, "search_depth": "basic"})
	if err != nil {
		return nil, fmt.Errorf("encode the request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.c.BaseURL+"search", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build the request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+t.c.APIKey)
	resp, err := t.c.Client.Do(req)
	if err != nil {
		return nil, err
	}
	var a contentAnswer
	if err := readSearchJSON(resp, &a, tavilyDetail); err != nil {
		return nil, err
	}
	return a.first(count), nil
}

// tavilyDetail reads {"detail":{"error":"…"}}.
func tavilyDetail(body []byte) string {
	var e struct {
		Detail struct {
			Error string `json:"error"`
		} `json:"detail"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	return e.Detail.Error
}
