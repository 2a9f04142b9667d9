package llmtest

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// SetModels sets the model ids that GET <prefix>/models lists, in the API's
// own list format (Anthropic's Models API, OpenAI's model list).
func (s *Server) SetModels(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models = append([]string(nil), ids...)
}

// RequireKey makes every request that does not carry key (x-api-key for
// Anthropic, Authorization: Bearer for OpenAI) fail with 401 in the API's
// error JSON, as the real APIs do with a wrong key.
func (s *Server) RequireKey(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.key = key
}

// intercept answers the requests that are not model calls: a wrong key and
// the model list. It reports whether it answered.
func (s *Server) intercept(w http.ResponseWriter, r *http.Request) bool {
	s.mu.Lock()
	key, models := s.key, append([]string(nil), s.models...)
	s.mu.Unlock()
	if key != "" {
		got := r.Header.Get("X-Api-Key")
		if s.api == APIOpenAI {
			got = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		}
		if got != key {
			msg := "invalid x-api-key"
			if s.api == APIOpenAI {
				msg = "Incorrect API key provided."
			}
			s.writeError(w, http.StatusUnauthorized, "", msg)
			return true
		}
	}
	if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/models") {
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	created := time.Date(2025, 5, 14, 0, 0, 0, 0, time.UTC)
	if s.api == APIAnthropic {
		data := make([]map[string]any, 0, len(models))
		for _, id := range models {
			data = append(data, map[string]any{"type": "model", "id": id, "display_name": id, "created_at": created.Format(time.RFC3339)})
		}
		first, last := "", ""
		if len(models) > 0 {
			first, last = models[0], models[len(models)-1]
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data, "has_more": false, "first_id": first, "last_id": last})
		return true
	}
	data := make([]map[string]any, 0, len(models))
	for _, id := range models {
		data = append(data, map[string]any{"id": id, "object": "model", "created": created.Unix(), "owned_by": "llmtest"})
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
	return true
}
