// Package searchfake runs a fake web search service for tests: one
// httptest server speaking the real JSON APIs of Brave (GET
// /res/v1/web/search, X-Subscription-Token), Tavily (POST /search, bearer
// key) and SearXNG (GET /search?format=json), answering with responses in
// the services' recorded shapes (testdata/), their error bodies included.
//
// It is for tests only: it must not be imported by production code, and it
// never reaches the network beyond its own loopback listener.
package searchfake

import (
	"embed"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

//go:embed testdata/*.json
var fixtures embed.FS

// Key is the API key the fake accepts for Brave and Tavily.
const Key = "fake-search-key-0123456789"

// Result is a hit the fake answers with instead of its recorded ones.
type Result struct {
	Title, URL, Snippet string
}

// Request is one search the fake received.
type Request struct {
	API   string // brave | tavily | searxng
	Query string
	Count int // 0 = not sent (SearXNG)
}

// Server is the fake search service.
type Server struct {
	*httptest.Server

	mu       sync.Mutex
	results  []Result      // nil = the recorded results
	status   int           // answer every search with this error status (0 = none)
	delay    time.Duration // wait before answering
	requests []Request
}

// New starts a fake search service, closed at t's cleanup.
func New(t testing.TB) *Server {
	s := &Server{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /res/v1/web/search", s.brave)
	mux.HandleFunc("POST /search", s.tavily)
	mux.HandleFunc("GET /search", s.searxng)
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// SetResults makes every service answer with rs (nil: the recorded ones).
func (s *Server) SetResults(rs ...Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.results = rs
}

// Fail makes every search answer status with the service's own error body
// for it (0: answer normally).
func (s *Server) Fail(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = status
}

// Delay makes every answer wait d (or until the client goes away).
func (s *Server) Delay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// Requests returns the searches received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// begin records r and returns the state to answer it with, after the
// configured delay; ok is false when the client went away meanwhile.
func (s *Server) begin(w http.ResponseWriter, r *http.Request, req Request) (results []Result, status int, ok bool) {
	s.mu.Lock()
	s.requests = append(s.requests, req)
	results, status, delay := s.results, s.status, s.delay
	s.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return nil, 0, false
		}
	}
	return results, status, true
}

func (s *Server) brave(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	count, _ := strconv.Atoi(q.Get("count"))
	results, status, ok := s.begin(w, r, Request{API: "brave", Query: q.Get("q"), Count: count})
	if !ok {
		return
	}
	switch {
	case r.Header.Get("X-Subscription-Token") != Key:
		fixture(w, http.StatusUnprocessableEntity, "brave_422.json") // Brave's answer to a bad token
		return
	case status == http.StatusTooManyRequests:
		fixture(w, status, "brave_429.json")
		return
	case status != 0:
		http.Error(w, http.StatusText(status), status)
		return
	}
	doc, ok := load(w, "brave.json")
	if !ok {
		return
	}
	web := doc["web"].(map[string]any)
	list := replaced(web["results"].([]any), results, func(_ int, rs Result) map[string]any {
		return map[string]any{"title": rs.Title, "url": rs.URL, "description": rs.Snippet,
			"type": "search_result", "language": "en", "family_friendly": true}
	})
	web["results"] = capped(list, count)
	doc["query"].(map[string]any)["original"] = q.Get("q")
	writeJSON(w, http.StatusOK, doc)
}

func (s *Server) tavily(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Query      string `json:"query"`
		MaxResults int    `json:"max_results"`
		APIKey     string `json:"api_key"` // the older form of the key
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"detail": map[string]any{"error": "Invalid JSON body."}})
		return
	}
	results, status, ok := s.begin(w, r, Request{API: "tavily", Query: body.Query, Count: body.MaxResults})
	if !ok {
		return
	}
	switch {
	case r.Header.Get("Authorization") != "Bearer "+Key && body.APIKey != Key:
		fixture(w, http.StatusUnauthorized, "tavily_401.json")
		return
	case status == http.StatusTooManyRequests:
		fixture(w, status, "tavily_429.json")
		return
	case status != 0:
		http.Error(w, http.StatusText(status), status)
		return
	}
	n := body.MaxResults
	if n == 0 {
		n = 5 // Tavily's default
	}
	doc, ok := load(w, "tavily.json")
	if !ok {
		return
	}
	list := replaced(doc["results"].([]any), results, func(i int, rs Result) map[string]any {
		return map[string]any{"title": rs.Title, "url": rs.URL, "content": rs.Snippet,
			"score": 0.9 - float64(i)*0.05, "raw_content": nil}
	})
	doc["results"] = capped(list, n)
	doc["query"] = body.Query
	writeJSON(w, http.StatusOK, doc)
}

func (s *Server) searxng(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	results, status, ok := s.begin(w, r, Request{API: "searxng", Query: q.Get("q")})
	if !ok {
		return
	}
	switch {
	case q.Get("format") != "json":
		http.Error(w, "403 Forbidden", http.StatusForbidden) // what an instance without the JSON format says
		return
	case status != 0:
		http.Error(w, http.StatusText(status), status)
		return
	}
	doc, ok := load(w, "searxng.json")
	if !ok {
		return
	}
	list := replaced(doc["results"].([]any), results, func(i int, rs Result) map[string]any {
		return map[string]any{"title": rs.Title, "url": rs.URL, "content": rs.Snippet,
			"engine": "duckduckgo", "engines": []string{"duckduckgo"}, "positions": []int{i + 1},
			"score": 1.0 / float64(i+1), "category": "general", "template": "default.html"}
	})
	doc["results"] = list
	doc["query"] = q.Get("q")
	writeJSON(w, http.StatusOK, doc)
}

// replaced is recorded, or results in the service's shape (row) when set.
func replaced(recorded []any, results []Result, row func(i int, r Result) map[string]any) []any {
	if results == nil {
		return recorded
	}
	out := make([]any, 0, len(results))
	for i, r := range results {
		out = append(out, row(i, r))
	}
	return out
}

func capped(list []any, n int) []any {
	if n > 0 && len(list) > n {
		return list[:n]
	}
	return list
}

// load decodes a fixture; they are embedded at build time and checked by
// the tests, so an error only shows as a 500 from the fake.
func load(w http.ResponseWriter, name string) (map[string]any, bool) {
	var doc map[string]any
	b, err := fixtures.ReadFile("testdata/" + name)
	if err == nil {
		err = json.Unmarshal(b, &doc)
	}
	if err != nil {
		http.Error(w, "searchfake: fixture "+name+": "+err.Error(), http.StatusInternalServerError)
		return nil, false
	}
	return doc, true
}

func fixture(w http.ResponseWriter, status int, name string) {
	if doc, ok := load(w, name); ok {
		writeJSON(w, status, doc)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
