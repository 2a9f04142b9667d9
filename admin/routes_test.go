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

// TestLoginCookieSecure: the console's login cookie is Secure by the web
// chat's rule (channels.SecureCookie): over a proxy that says https, or
// with gateway.http.behindProxy; not on plain http.
func TestLoginCookieSecure(t *testing.T) {
	db, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []struct {
		name        string
		behindProxy bool
		header      [2]string
		secure      bool
	}{
		{"plain http", false, [2]string{}, false},
		{"X-Forwarded-Proto https", false, [2]string{"X-Forwarded-Proto", "https"}, true},
		{"Forwarded proto=https", false, [2]string{"Forwarded", "for=1.2.3.4;proto=https"}, true},
		{"behindProxy", true, [2]string{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			con := admin.New(admin.Options{Store: db, Live: idleLive{}, Token: func() string { return "s3cret" }, BehindProxy: c.behindProxy})
			req := httptest.NewRequest(http.MethodPost, "/admin/login", strings.NewReader("token=s3cret"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if c.header[0] != "" {
				req.Header.Set(c.header[0], c.header[1])
			}
			rec := httptest.NewRecorder()
			con.Routes()["POST /admin/login"].ServeHTTP(rec, req)
			cookies := rec.Result().Cookies()
			if rec.Code != http.StatusOK || len(cookies) != 1 {
				t.Fatalf("login = %d, cookies %v", rec.Code, cookies)
			}
			if cookies[0].Secure != c.secure {
				t.Errorf("cookie Secure = %v, want %v", cookies[0].Secure, c.secure)
			}
		})
	}
}
