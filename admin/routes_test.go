package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/heraldhq/herald/admin"
	"github.com/heraldhq/herald/store"
)

// An unknown path under /admin/api/ is the console's JSON 404 naming the
// request, and still 401 without the token (no probing for paths).
func TestUnknownAPIPathIsAJSONNotFound(t *testing.T) {
	db, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c := admin.New(admin.Options{Store: db, Live: idleLive{}, Token: func() string { return "s3cret" }})
	mux := http.NewServeMux()
	for p, h := range c.Routes() {
		mux.Handle(p, h)
	}
	ts := httptest.NewServer(mux)
	defer ts.Close()
	srv := ts.URL
	get := func(path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e struct{ Error string }
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			t.Fatalf("GET %s: %d, not JSON: %v", path, resp.StatusCode, err)
		}
		return resp.StatusCode, e.Error
	}
	if code, msg := get("/admin/api/runz", "s3cret"); code != http.StatusNotFound || !strings.Contains(msg, "GET /admin/api/runz") {
		t.Errorf("unknown path = %d %q, want 404 naming it", code, msg)
	}
	if code, msg := get("/admin/api/runz", ""); code != http.StatusUnauthorized || msg != "unauthorized" {
		t.Errorf("unknown path without token = %d %q, want 401", code, msg)
	}
	if code, _ := get("/admin/api/runs", "s3cret"); code != http.StatusOK {
		t.Errorf("GET /admin/api/runs = %d, want 200", code)
	}
}
